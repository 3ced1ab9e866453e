"""Free writers on one workspace: refusals before and after the write turn.

    .venv/bin/python -m bench.write_queue [--processes 4,16] [--calls N] [--json PATH]

N processes, each with its own Coordinator on one database and no change
notification (so they learn of each other's writes only by losing a race),
send `task.create` calls to ONE workspace, on PostgreSQL (a throwaway server
from tests/pgserver.py with fsync on) and on a SQLite file, in two modes:

- before: the store's `write_turn` is the protocol's default, which takes
  no turn: a call whose write loses the race is reloaded and run once more,
  unprotected, and a second loss is answered -32901 (chapline before the
  write turn);
- after: the store's own `write_turn`: the re-run waits for the workspace's
  write turn in the database and commits inside it.

Per cell: calls/s over the run, calls answered -32901, store writes refused
by the compare-and-swap, and write turns taken. Not a test: the figures
depend on the machine's load; the refusal counts are the point.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench.workload import AGENT, HUMAN  # noqa: E402

_spawn = multiprocessing.get_context("spawn")
WORKSPACE = "wsp_shared"


def _store(target: str, turns: bool, counts: dict[str, int]) -> Any:
    """The store `target` names, counting its writes, conflicts and turns;
    without `turns`, one whose `write_turn` takes none (the protocol's)."""
    from storage import Store, StoreConflictError
    from storage.postgres import PostgresStore
    from storage.sqlite import SqliteStore
    from storage.target import is_postgres

    base: type[Any] = PostgresStore if is_postgres(target) else SqliteStore

    class Counted(base):  # type: ignore[misc, valid-type]
        def apply(self, change: Any) -> None:
            counts["writes"] += 1
            try:
                super().apply(change)
            except StoreConflictError:
                counts["conflicts"] += 1
                raise

        def write_turn(self, workspace: str) -> Any:
            counts["turns"] += 1
            return super().write_turn(workspace) if turns else Store.write_turn(self, workspace)

    return Counted(target)


def _writer(target: str, turns: bool, index: int, calls: int, ready: Any, go: Any, out: Any) -> None:
    from coordinator import Coordinator

    counts = {"writes": 0, "conflicts": 0, "turns": 0}
    coord = Coordinator(_store(target, turns, counts))
    ready.put(index)
    go.wait()
    start = time.time()
    refused = 0
    for k in range(calls):
        response = coord.dispatch({
            "jsonrpc": "2.0", "id": f"{index}-{k}", "method": "task.create",
            "params": {"workspace": WORKSPACE, "from": HUMAN, "assignee": AGENT,
                       "kind": "k", "input": {"k": k}},
        })
        refused += "error" in response
    end = time.time()
    coord.close()
    out.put({**counts, "calls": calls, "refused": refused, "start": start, "end": end})


def _set_up(target: str) -> None:
    from coordinator import Coordinator
    from storage.target import open_store

    coord = Coordinator(open_store(target))
    for env in (
        {"jsonrpc": "2.0", "id": 1, "method": "workspace.create", "params": {"workspace": WORKSPACE}},
        {"jsonrpc": "2.0", "id": 2, "method": "participant.join",
         "params": {"workspace": WORKSPACE, "from": HUMAN, "type": "human", "role": "admin"}},
        {"jsonrpc": "2.0", "id": 3, "method": "participant.join",
         "params": {"workspace": WORKSPACE, "from": AGENT, "type": "agent"}},
    ):
        assert "result" in coord.dispatch(env)
    coord.close()


def _cell(target: str, turns: bool, n: int, calls: int) -> dict[str, Any]:
    _set_up(target)
    ready, go, out = _spawn.Queue(), _spawn.Event(), _spawn.Queue()
    procs = [
        _spawn.Process(target=_writer, args=(target, turns, i, calls, ready, go, out))
        for i in range(n)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=600)
    go.set()
    results = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    total = sum(r["calls"] for r in results)
    return {
        "calls": total,
        "calls_per_s": total / span,
        "refused": sum(r["refused"] for r in results),
        "writes": sum(r["writes"] for r in results),
        "conflicts": sum(r["conflicts"] for r in results),
        "turns": sum(r["turns"] for r in results),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.write_queue", description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="4,16", help="process counts (default 4,16)")
    parser.add_argument("--calls", type=int, default=100, help="calls per process (default 100)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)

    from pgserver import PgServer

    server = PgServer()
    tmp = tempfile.mkdtemp(prefix="chapline-bench-queue-")
    figures: dict[str, Any] = {}
    try:
        server.start(durable=True)
        print("| database | processes | mode | calls/s | calls answered -32901 | CAS conflicts / writes | turns |")
        print("|---|---|---|---|---|---|---|")
        for kind in ("postgres", "sqlite"):
            for n in [int(x) for x in args.processes.split(",")]:
                for turns in (False, True):
                    target = (server.uri(server.new_database()) if kind == "postgres"
                              else os.path.join(tmp, f"q-{n}-{turns}.db"))
                    cell = _cell(target, turns, n, args.calls)
                    mode = "after (write turn)" if turns else "before (no turn)"
                    figures[f"{kind}, {n} proc, {mode}"] = cell
                    print(f"| {kind} | {n} | {mode} | {cell['calls_per_s']:.0f} | "
                          f"{cell['refused']} of {cell['calls']} "
                          f"({100 * cell['refused'] / cell['calls']:.1f}%) | "
                          f"{cell['conflicts']} / {cell['writes']} | {cell['turns']} |", flush=True)
    finally:
        server.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
