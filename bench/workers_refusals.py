"""How many calls `chapline serve --workers N` refuses with -32901 on one workspace.

    .venv/bin/python -m bench.workers_refusals [--workers 1,2,4] [--clients 16] [--calls 50]
                                               [--stores sqlite,postgres]

For each store (a SQLite file in the temp dir; a database on a PostgreSQL
server of its own, tests/pgserver.py, fsync on) and each worker count, starts
`chapline serve --workers N`, has `--clients` client processes each send
`--calls` task.create calls over a keep-alive connection of their own, all to
ONE workspace, then the same with each client on a workspace of its own, and
counts the answers: results, -32901 ("another writer changed the workspace;
retry") and anything else. Workers on one workspace race for its
compare-and-swap (SPECIFICATION.md, "Several processes on one database");
these are the refusals that routing a workspace's calls to one worker
(affinity), or writers queueing in the store, are to bring to zero.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

LEAD, AGENT = "human:lead", "agent:worker"


def _post(conn: http.client.HTTPConnection, method: str, **params: Any) -> dict[str, Any]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    conn.request("POST", "/chap", body, {"Content-Type": "application/json"})
    answer: dict[str, Any] = json.loads(conn.getresponse().read())
    return answer


def _client(args: tuple[int, str, int]) -> tuple[int, int, int]:
    """(results, -32901 answers, other answers) of `calls` task.create calls."""
    port, workspace, calls = args
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    ok = refused = other = 0
    for i in range(calls):
        answer = _post(conn, "task.create", workspace=workspace, **{"from": LEAD}, assignee=AGENT,
                       kind="k", input={"i": i})
        if "result" in answer:
            ok += 1
        elif answer.get("error", {}).get("code") == -32901:
            refused += 1
        else:
            other += 1
    conn.close()
    return ok, refused, other


def _serve(db: str, workers: int) -> tuple[subprocess.Popen[str], int]:
    server = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--port", "0", "--db", db, "--workers", str(workers)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    line = server.stdout.readline() if server.stdout else ""
    found = re.search(r"http://127\.0\.0\.1:(\d+)/chap", line)
    if not found:
        server.kill()
        raise RuntimeError(f"chapline serve did not start: {line!r}")
    return server, int(found.group(1))


def _round(db: str, workers: int, workspaces: list[str], clients: int, calls: int) -> dict[str, Any]:
    server, port = _serve(db, workers)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for ws in workspaces:
            for who, kind in ((LEAD, "human"), (AGENT, "agent")):
                assert "result" in _post(conn, "participant.join", workspace=ws, **{"from": who}, type=kind)
        conn.close()
        jobs = [(port, workspaces[c % len(workspaces)], calls) for c in range(clients)]
        start = time.perf_counter()
        with multiprocessing.Pool(clients) as pool:
            answers = pool.map(_client, jobs)
        elapsed = time.perf_counter() - start
    finally:
        server.terminate()
        server.wait(timeout=120)
    ok, refused, other = (sum(a[i] for a in answers) for i in range(3))
    return {"calls": clients * calls, "results": ok, "refused": refused, "other": other,
            "calls_per_s": clients * calls / elapsed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.workers_refusals", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,4", help="worker counts (default 1,2,4)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--calls", type=int, default=50, help="task.create calls per client")
    ap.add_argument("--stores", default="sqlite,postgres")
    args = ap.parse_args(argv)
    counts = [int(n) for n in args.workers.split(",")]
    stores = args.stores.split(",")
    tmp = tempfile.mkdtemp(prefix="chapline-bench-workers-")
    pg = None
    try:
        if "postgres" in stores:
            from pgserver import PgServer

            pg = PgServer()
            pg.start(durable=True)
        print("| store | workers | workspaces | calls | -32901 | other errors | refused % | calls/s |")
        print("|---|---|---|---|---|---|---|---|")
        for store in stores:
            for shared in (True, False):
                for n in counts:
                    if store == "postgres":
                        assert pg is not None
                        db = pg.uri(pg.new_database())
                    else:
                        db = os.path.join(tmp, f"{n}-{shared}.db")
                    workspaces = ["wsp_one"] if shared else [f"wsp_own{c}" for c in range(args.clients)]
                    r = _round(db, n, workspaces, args.clients, args.calls)
                    print(f"| {store} | {n} | {'one' if shared else 'one per client'} | {r['calls']:,} "
                          f"| {r['refused']:,} | {r['other']:,} | {100 * r['refused'] / r['calls']:.1f} "
                          f"| {r['calls_per_s']:,.0f} |", flush=True)
    finally:
        if pg is not None:
            pg.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
