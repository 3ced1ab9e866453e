"""`chapline serve` over HTTP under 16 clients: calls/s, p99 latency and
refusals by workers, workspaces, store and affinity, beside the reference's
HTTP server.

    .venv/bin/python -m bench.serve_table [--workers 1,2,4] [--workspaces 1,64]
        [--stores sqlite,postgres] [--clients 16] [--calls 100] [--chap PATH]

For each store (a SQLite file in the temp dir; a database on a PostgreSQL
server of its own, tests/pgserver.py, fsync on), each worker count and each
number of workspaces, starts `chapline serve --workers N` (with affinity,
and for N > 1 again with `--no-affinity`), joins a human and an agent to
every workspace, then has `--clients` client processes each send `--calls`
task.create calls over a keep-alive connection of their own, client c
taking the workspaces c, c + clients, c + 2 clients, ... in turn (with one
workspace, all of them on it). Counts the answers: results, -32901 ("another
writer changed the workspace") and anything else, and the calls whose
connection was dropped unanswered; times each answered call (p99). calls/s
counts every call sent.

`--chap PATH` names a fetched CHAP repository (BrightbeamAI/chap; nothing
of it is in this project): its Python reference server,
`reference/python/server.py` (chap-coordinator 0.3.3 in memory behind the
standard library's threading HTTP server, one process), runs the same
rounds as a row of its own.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.served import start_serve

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

LEAD, AGENT = "human:lead", "agent:worker"


def post(conn: http.client.HTTPConnection, method: str, **params: Any) -> dict[str, Any]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    conn.request("POST", "/chap", body, {"Content-Type": "application/json"})
    answer: dict[str, Any] = json.loads(conn.getresponse().read())
    return answer


def client(args: tuple[int, list[str], int]) -> tuple[int, int, int, int, list[float]]:
    """(results, -32901 answers, other answers, connections dropped, each
    answered call's seconds)."""
    port, workspaces, calls = args
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    ok = refused = other = dropped = 0
    times = []
    for i in range(calls):
        start = time.perf_counter()
        try:
            answer = post(conn, "task.create", workspace=workspaces[i % len(workspaces)], **{"from": LEAD},
                           assignee=AGENT, kind="k", input={"i": i})
        except (ConnectionError, http.client.HTTPException):
            # The reference's server answers HTTP/1.0 (a connection per
            # call) with a listen backlog of 5: 16 clients overflow it.
            dropped += 1
            conn.close()
            continue
        times.append(time.perf_counter() - start)
        if "result" in answer:
            ok += 1
        elif answer.get("error", {}).get("code") == -32901:
            refused += 1
        else:
            other += 1
    conn.close()
    return ok, refused, other, dropped, times


def _chapline(db: str, workers: int, affinity: bool) -> tuple[subprocess.Popen[str], int]:
    return start_serve(db, "--workers", str(workers), *([] if affinity else ["--no-affinity"]))


def _reference(chap: Path) -> tuple[subprocess.Popen[str], int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, str(chap / "reference" / "python" / "server.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, port
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError("the reference server did not start") from None
            time.sleep(0.05)


def join(port: int, workspaces: list[str]) -> None:
    """The lead and the agent joined to every workspace, once the server
    answers: the workers take a moment to serve once the parent is up."""
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            for ws in workspaces:
                for who, kind in ((LEAD, "human"), (AGENT, "agent")):
                    answer = post(conn, "participant.join", workspace=ws, **{"from": who}, type=kind)
                    assert "result" in answer, answer
            conn.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _round(start: Any, count: int, clients: int, calls: int) -> dict[str, Any]:
    """One round on the server `start()` starts, with `count` workspaces."""
    server, port = start()
    workspaces = [f"wsp_b{w}" for w in range(count)]
    try:
        join(port, workspaces)
        time.sleep(1.0)  # every worker serving its slot
        jobs = [(port, workspaces[c::clients] or [workspaces[c % count]], calls) for c in range(clients)]
        began = time.perf_counter()
        with multiprocessing.Pool(clients) as pool:
            answers = pool.map(client, jobs)
        elapsed = time.perf_counter() - began
    finally:
        server.terminate()
        server.wait(timeout=120)
    times = sorted(t for a in answers for t in a[4])
    return {
        "calls": clients * calls,
        "results": sum(a[0] for a in answers),
        "refused": sum(a[1] for a in answers),
        "other": sum(a[2] for a in answers),
        "dropped": sum(a[3] for a in answers),
        "calls_per_s": clients * calls / elapsed,
        "p99_ms": 1000 * times[min(len(times) - 1, int(0.99 * len(times)))],
    }


def _row(store: str, workers: Any, count: int, affinity: str, r: dict[str, Any]) -> str:
    return (f"| {store} | {workers} | {count} | {affinity} | {r['calls_per_s']:,.0f} | {r['p99_ms']:.1f} "
            f"| {r['refused']:,} | {r['other']:,} | {r['dropped']:,} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.serve_table", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,4", help="worker counts (default 1,2,4)")
    ap.add_argument("--workspaces", default="1,64", help="workspace counts (default 1,64)")
    ap.add_argument("--stores", default="sqlite,postgres")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--calls", type=int, default=100, help="task.create calls per client")
    ap.add_argument("--chap", type=Path, help="a fetched CHAP repository: its reference server as a row")
    args = ap.parse_args(argv)
    counts = [int(n) for n in args.workers.split(",")]
    spreads = [int(n) for n in args.workspaces.split(",")]
    stores = args.stores.split(",")
    if args.chap is not None and not (args.chap / "reference" / "python" / "server.py").is_file():
        ap.error(f"--chap {args.chap}: no reference/python/server.py there (a checkout of BrightbeamAI/chap?)")
    tmp = tempfile.mkdtemp(prefix="chapline-bench-serve-")
    pg = None
    try:
        if "postgres" in stores:
            from pgserver import PgServer

            pg = PgServer()
            pg.start(durable=True)
        print(f"{args.clients} clients x {args.calls} task.create calls each; load average "
              f"{os.getloadavg()[0]:.1f} at the start")
        print("| store | workers | workspaces | affinity | calls/s | p99 ms | -32901 | other errors | dropped |")
        print("|---|---|---|---|---|---|---|---|---|")
        if args.chap is not None:
            for count in spreads:
                r = _round(lambda: _reference(args.chap), count, args.clients, args.calls)
                print(_row("reference server (memory)", 1, count, "-", r), flush=True)
        for store in stores:
            for count in spreads:
                for n in counts:
                    for affinity in ([True] if n == 1 else [True, False]):
                        if store == "postgres":
                            assert pg is not None
                            db = pg.uri(pg.new_database())
                        else:
                            db = os.path.join(tmp, f"{n}-{count}-{affinity}.db")
                        r = _round(lambda db=db, n=n, affinity=affinity: _chapline(db, n, affinity),
                                   count, args.clients, args.calls)
                        label = "-" if n == 1 else ("on" if affinity else "off")
                        print(_row(store, n, count, label, r), flush=True)
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
    finally:
        if pg is not None:
            pg.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
