"""Calls per second through `chapline serve`, from several client processes.

    python -m bench.serve_load [--clients 8] [--cycles 300] [--db PATH]

Starts `chapline serve` on a free loopback port writing a temporary SQLite
file (or PATH), joins a human and an agent, then has each client process run
`--cycles` rounds of task.create + task.update over its own keep-alive
connection, and prints calls/s. The server groups the calls waiting on its
worker into one commit (group commit), which is what this figure shows; the
clients share the machine's cores with the server, so it is a floor.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import tempfile
import time
from typing import Any

from bench.served import start_serve

WORKSPACE = "wsp_serve_load"


def _call(conn: http.client.HTTPConnection, method: str, **params: Any) -> dict[str, Any]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    conn.request("POST", "/chap", body, {"Content-Type": "application/json"})
    response = json.loads(conn.getresponse().read())
    if "result" not in response:
        raise RuntimeError(f"{method} answered {response}")
    return response["result"]


def _client(args: tuple[int, int, int]) -> int:
    port, client, cycles = args
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for i in range(cycles):
        task = _call(conn, "task.create", workspace=WORKSPACE, **{"from": "human:lead"},
                     assignee="agent:worker", kind="k", input={"client": client, "i": i})
        _call(conn, "task.update", workspace=WORKSPACE, **{"from": "agent:worker"},
              task_id=task["task_id"], state="in_progress")
    conn.close()
    return 2 * cycles


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.serve_load", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=300, help="create+update rounds per client")
    ap.add_argument("--db", help="SQLite file to write (default: a temporary one)")
    args = ap.parse_args(argv)
    db = args.db or os.path.join(tempfile.mkdtemp(prefix="chapline-serve-"), "chap.db")
    server, port = start_serve(db)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        _call(conn, "participant.join", workspace=WORKSPACE, **{"from": "human:lead"}, type="human")
        _call(conn, "participant.join", workspace=WORKSPACE, **{"from": "agent:worker"}, type="agent")
        start = time.perf_counter()
        with multiprocessing.Pool(args.clients) as pool:
            calls = sum(pool.map(_client, [(port, c, args.cycles) for c in range(args.clients)]))
        elapsed = time.perf_counter() - start
        chain = _call(conn, "audit.verify_chain", workspace=WORKSPACE)
        print(f"{calls:,} calls from {args.clients} client processes in {elapsed:.2f} s: "
              f"{calls / elapsed:,.0f} calls/s over HTTP, durable in {db} "
              f"(chain {chain['status']}, {chain['entries_total']:,} entries)")
    finally:
        server.terminate()
        server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
