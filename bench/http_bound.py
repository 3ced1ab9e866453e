"""`chapline serve` against the bound its HTTP stack sets: the same POSTs
answered by the same stack with a fixed JSON body.

    .venv/bin/python -m bench.http_bound [--clients 16] [--calls 200] [--reps 5] [--db file|memory]

Starts two servers on free loopback ports, one process each:

- `chapline serve --workers 1` (bench/served.py) on a SQLite file in the
  temp dir (`--db memory`: SQLite's `:memory:`, no disk);
- the HTTP bound: uvicorn with its httptools protocol (the one `chapline
  serve`'s own protocol extends) on the default event loop (uvloop when
  installed, as for serve), serving a Starlette app whose one route reads
  the request's body and answers a fixed task.create result. No JSON is
  parsed and no coordinator runs: what is left is the cost of the HTTP
  stack, which no coordinator behind it can beat.

Then `--clients` client processes, started before the clock, send `--calls`
task.create calls each to one workspace over a keep-alive connection of
their own (bench/serve_table.py's client loop), first once untimed to warm
both servers, then `--reps` timed rounds alternating between them. Any
answer that is not a result fails the run. Prints calls/s (median
[min–max]), the p99 of the calls' round trips, and chapline's calls/s as a
share of the bound's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.serve_table import client, join
from bench.served import start_serve, start_server

WORKSPACE = "wsp_bound"
# The shape and length (96 bytes) of chapline's answer to a task.create.
FIXED = b'{"jsonrpc":"2.0","id":1,"result":{"task_id":"tsk_01JFB0UND00000000000000000","state":"created"}}'


def _bound_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def chap(request: Request) -> Response:
        await request.body()  # read, as any server of the calls must
        return Response(FIXED, media_type="application/json")

    return Starlette(routes=[Route("/chap", chap, methods=["POST"])])


def _serve_bound() -> int:
    """The bound's server process: prints its URL, as `chapline serve` does
    its start-up line, then serves until SIGTERM."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_bound_app(), http="httptools", log_level="warning", access_log=False, lifespan="off")
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/chap", flush=True)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _start_bound() -> tuple[subprocess.Popen[str], int]:
    return start_server([sys.executable, "-m", "bench.http_bound", "--bound-server"], "the bound's server")


def _round(pool: Any, port: int, clients: int, calls: int) -> dict[str, float]:
    jobs = [(port, [WORKSPACE], calls) for _ in range(clients)]
    began = time.perf_counter()
    answers = pool.map(client, jobs, chunksize=1)
    elapsed = time.perf_counter() - began
    ok, refused, other, dropped = (sum(a[i] for a in answers) for i in range(4))
    if ok != clients * calls:
        raise SystemExit(f"port {port}: {ok} results of {clients * calls} calls "
                         f"({refused} -32901, {other} other errors, {dropped} dropped)")
    times = sorted(t for a in answers for t in a[4])
    return {"calls_per_s": clients * calls / elapsed, "p99_ms": 1000 * times[int(0.99 * (len(times) - 1))]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.http_bound", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--calls", type=int, default=200, help="task.create calls per client and round")
    ap.add_argument("--reps", type=int, default=5, help="timed rounds per server")
    ap.add_argument("--db", choices=["file", "memory"], default="file",
                    help="chapline serve's database: a SQLite file in the temp dir, or ':memory:'")
    ap.add_argument("--bound-server", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.bound_server:
        return _serve_bound()
    tmp = tempfile.mkdtemp(prefix="chapline-bench-bound-")
    db = os.path.join(tmp, "chap.db") if args.db == "file" else ":memory:"
    seats: list[tuple[str, Callable[[], tuple[subprocess.Popen[str], int]]]] = [
        (f"chapline serve --workers 1 ({'SQLite file' if args.db == 'file' else 'SQLite :memory:'})",
         lambda: start_serve(db, "--workers", "1")),
        ("HTTP bound (uvicorn + Starlette, fixed answer)", _start_bound),
    ]  # fmt: skip
    servers: list[tuple[str, subprocess.Popen[str], int]] = []
    try:
        for name, start in seats:
            server, port = start()
            servers.append((name, server, port))
            join(port, [WORKSPACE])
        print(f"{args.clients} clients x {args.calls} task.create calls, {args.reps} rounds per server; "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start", flush=True)
        samples: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in servers}
        with multiprocessing.Pool(args.clients) as pool:
            for _, _, port in servers:
                _round(pool, port, args.clients, args.calls)  # warm-up, untimed
            for rep in range(args.reps):
                for name, _, port in servers if rep % 2 == 0 else servers[::-1]:
                    samples[name].append(_round(pool, port, args.clients, args.calls))
        print("| server | calls/s median [min–max] | p99 ms (median) |")
        print("|---|---|---|")
        medians = []
        for name, runs in samples.items():
            rates = [r["calls_per_s"] for r in runs]
            medians.append(statistics.median(rates))
            print(f"| {name} | {medians[-1]:,.0f} [{min(rates):,.0f}–{max(rates):,.0f}] "
                  f"| {statistics.median(r['p99_ms'] for r in runs):.1f} |")
        print(f"chapline serve / HTTP bound: {medians[0] / medians[1]:.2f} "
              f"(chapline at {100 * medians[0] / medians[1]:.0f}% of the bound)")
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    finally:
        for _, server, _ in servers:
            server.terminate()
            server.wait(timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
