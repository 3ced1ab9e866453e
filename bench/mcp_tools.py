"""How much of a model's context `chapline mcp`'s tool list takes, for a
core+review workspace: tools and bytes of `tools/list` as the official MCP
SDK client receives it (its result encoded as JSON), per kind of session.

    .venv/bin/python -m bench.mcp_tools [--tree DIR]

Each session is a stdio server (`python -m coordinator mcp --db FILE ...`)
on a SQLite file holding `wsp_s` (core/1.0 + review/1.0) with
`human:alice` (admin) and `agent:drafter` joined. `--tree DIR` runs the
server from another source tree instead (for example the code before
sessions were bound: `git archive 2164598^ | tar -x -C DIR`), where only
the unbound session exists.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from coordinator import Coordinator
from storage import SqliteStore

WS = "wsp_s"
SESSIONS = {
    "unbound (default)": (),
    "unbound, --allow-unbound-humans": ("--allow-unbound-humans",),
    "agent:drafter, --as and --workspace": ("--as", "agent:drafter", "--workspace", WS),
    "human:alice, --as and --workspace": ("--as", "human:alice", "--workspace", WS),
}


def _workspace(db: Path) -> None:
    with Coordinator(store=SqliteStore(db)) as coord:
        for method, params in (
            ("workspace.create", {"profiles": ["core/1.0", "review/1.0"]}),
            ("participant.join", {"from": "human:alice", "type": "human", "role": "admin"}),
            ("participant.join", {"from": "agent:drafter", "type": "agent"}),
        ):
            answer = coord.dispatch({"jsonrpc": "2.0", "id": 1, "method": method,
                                     "params": {"workspace": WS, **params}})
            if "result" not in answer:
                raise SystemExit(f"{method}: {answer}")


async def _listed(db: Path, options: tuple[str, ...], tree: str | None) -> tuple[int, int]:
    # The SDK starts the server with a minimal environment, and `-m` puts the
    # working directory first on the path: both name the tree to run.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **({"PYTHONPATH": tree} if tree else {})}
    server = StdioServerParameters(command=sys.executable, args=["-m", "coordinator", "mcp", "--db", str(db),
                                                                 *options], env=env, cwd=tree)
    async with Client(server, mode="legacy") as client:
        listed: Any = await client.list_tools()
        return len(listed.tools), len(listed.model_dump_json(by_alias=True, exclude_none=True))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_tools", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", help="run the MCP server from this source tree (the unbound session only)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "tools.db"
        _workspace(db)
        sessions = {"unbound": ()} if args.tree else SESSIONS
        print("| session | tools | tools/list bytes |\n|---|---|---|")
        for name, options in sessions.items():
            tools, size = asyncio.run(_listed(db, options, args.tree))
            print(f"| {name} | {tools} | {size:,} |")


if __name__ == "__main__":
    main()
