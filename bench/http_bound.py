"""`chapline serve` against the bound its HTTP stack sets: the same POSTs
answered by the same stack with a fixed JSON body, and by the same stack
committing each body durably before it answers.

    .venv/bin/python -m bench.http_bound [--clients 16] [--calls 200] [--reps 5] [--db file|memory]

Starts three servers on free loopback ports, one process each:

- `chapline serve --workers 1` (bench/served.py) on a SQLite file in the
  temp dir (`--db memory`: SQLite's `:memory:`, no disk);
- the HTTP bound: uvicorn with its httptools protocol (the one `chapline
  serve`'s own protocol extends) on the default event loop (uvloop when
  installed, as for serve), serving a Starlette app whose one route reads
  the request's body and answers a fixed task.create result. No JSON is
  parsed and no coordinator runs: what is left is the cost of the HTTP
  stack, which no coordinator behind it can beat;
- the durable bound: the same app, whose route hands the body to one
  writer thread and answers once it is committed. The thread takes every
  body queued since its last commit, inserts them into a SQLite file in
  the temp dir in one transaction (WAL, synchronous=FULL, as chapline
  commits) and wakes the event loop once for the group: chapline's group
  commit with no coordinator, no JSON and one row per call. With
  `--db memory` it commits to `:memory:` too, as chapline does.

Then `--clients` client processes, started before the clock, send `--calls`
task.create calls each to one workspace over a keep-alive connection of
their own (bench/serve_table.py's client loop), first once untimed to warm
each server, then `--reps` timed rounds taking the servers in turn. Any
answer that is not a result fails the run. Prints calls/s (median
[min–max]), the p99 of the calls' round trips, each server's CPU time per
call over its timed rounds (its event loop's thread, and its other threads)
and the whole machine's (bench/server_cpu.py), and chapline's calls/s as a share of each bound's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.serve_table import client, join
from bench.served import start_serve, start_server
from bench.server_cpu import CpuTime, cpu_time, machine_busy

WORKSPACE = "wsp_bound"
# The shape and length (96 bytes) of chapline's answer to a task.create.
FIXED = b'{"jsonrpc":"2.0","id":1,"result":{"task_id":"tsk_01JFB0UND00000000000000000","state":"created"}}'


class GroupCommit:
    """One writer thread that commits every body queued since its last
    commit in one SQLite transaction, then wakes each waiting event loop
    once to release the group's callers."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        if path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("CREATE TABLE IF NOT EXISTS calls (seq INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        self._queue: list[tuple[bytes, asyncio.Future[None]]] = []
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="durable-bound", daemon=True)
        self._thread.start()

    async def commit(self, body: bytes) -> None:
        done = asyncio.get_running_loop().create_future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the durable bound's writer is closed")
            self._queue.append((body, done))
            self._ready.notify()
        await done

    def close(self) -> None:
        """Commit what is queued, then stop the thread and close the file."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._thread.join()
        self._db.close()

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                group, self._queue = self._queue, []
            if not group:
                return  # closed, and nothing left to commit
            failed: BaseException | None = None
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany("INSERT INTO calls (body) VALUES (?)", [(body,) for body, _ in group])
                self._db.execute("COMMIT")
            except BaseException as exc:  # the callers' answers say so, and the run fails
                failed = exc
                with contextlib.suppress(sqlite3.Error):
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
            by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
            for _, done in group:
                by_loop.setdefault(done.get_loop(), []).append(done)
            for loop, futures in by_loop.items():
                with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                    loop.call_soon_threadsafe(_release, futures, failed)


def _release(group: list[asyncio.Future[None]], failed: BaseException | None) -> None:
    for done in group:
        if done.done():
            continue
        if failed is None:
            done.set_result(None)
        else:
            done.set_exception(failed)


def _bound_app(durable: str | None = None) -> Any:
    """The bound's app; with `durable` (a SQLite path), each body is
    committed there before the answer."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    writer = GroupCommit(durable) if durable is not None else None

    async def chap(request: Request) -> Response:
        body = await request.body()  # read, as any server of the calls must
        if writer is not None:
            await writer.commit(body)
        return Response(FIXED, media_type="application/json")

    return Starlette(routes=[Route("/chap", chap, methods=["POST"])])


def _serve_bound(durable: str | None = None) -> int:
    """A bound's server process: prints its URL, as `chapline serve` does
    its start-up line, then serves until SIGTERM."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = _bound_app(durable)
    config = uvicorn.Config(app, http="httptools", log_level="warning", access_log=False, lifespan="off")
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/chap", flush=True)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _start_bound() -> tuple[subprocess.Popen[str], int]:
    return start_server([sys.executable, "-m", "bench.http_bound", "--bound-server"], "the bound's server")


def _start_durable(db: str) -> tuple[subprocess.Popen[str], int]:
    argv = [sys.executable, "-m", "bench.http_bound", "--durable-server", db]
    return start_server(argv, "the durable bound's server")


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
                    help="the database of chapline serve and of the durable bound: "
                         "SQLite files in the temp dir, or ':memory:'")
    ap.add_argument("--bound-server", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--durable-server", metavar="DB", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.bound_server:
        return _serve_bound()
    if args.durable_server:
        return _serve_bound(args.durable_server)
    tmp = tempfile.mkdtemp(prefix="chapline-bench-bound-")
    db, durable = (
        (os.path.join(tmp, "chap.db"), os.path.join(tmp, "bound.db")) if args.db == "file" else (":memory:", ":memory:")
    )
    seats: list[tuple[str, Callable[[], tuple[subprocess.Popen[str], int]]]] = [
        (f"chapline serve --workers 1 ({'SQLite file' if args.db == 'file' else 'SQLite :memory:'})",
         lambda: start_serve(db, "--workers", "1")),
        ("HTTP bound (uvicorn + Starlette, fixed answer)", _start_bound),
        (f"durable bound (the same, each body committed first, {'SQLite file' if args.db == 'file' else 'SQLite :memory:'})",
         lambda: _start_durable(durable)),
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
        used = {name: CpuTime(0.0, 0.0) for name, _, _ in servers}
        busy = dict.fromkeys(used, 0.0)
        with multiprocessing.Pool(args.clients) as pool:
            for _, _, port in servers:
                _round(pool, port, args.clients, args.calls)  # warm-up, untimed
            for rep in range(args.reps):
                for name, server, port in servers if rep % 2 == 0 else servers[::-1]:
                    before, machine = cpu_time(server.pid), machine_busy()
                    samples[name].append(_round(pool, port, args.clients, args.calls))
                    used[name] += cpu_time(server.pid) - before
                    busy[name] += machine_busy() - machine
        print("| server | calls/s median [min–max] | p99 ms (median) |")
        print("|---|---|---|")
        medians = []
        for name, runs in samples.items():
            rates = [r["calls_per_s"] for r in runs]
            medians.append(statistics.median(rates))
            print(f"| {name} | {medians[-1]:,.0f} [{min(rates):,.0f}–{max(rates):,.0f}] "
                  f"| {statistics.median(r['p99_ms'] for r in runs):.1f} |")
        calls = args.reps * args.clients * args.calls
        print()
        print("| server | CPU per call, µs: the server | its main thread (the event loop) "
              "| its other threads | the whole machine (clients and kernel too) |")
        print("|---|---|---|---|---|")
        for name, spent in used.items():
            print(f"| {name} | {1e6 * (spent.main + spent.other) / calls:.0f} "
                  f"| {1e6 * spent.main / calls:.0f} | {1e6 * spent.other / calls:.0f} "
                  f"| {1e6 * busy[name] / calls:.0f} |")
        print(f"({os.cpu_count()} cores: at most {os.cpu_count()} s of CPU per second)")
        print()
        print(f"chapline serve / HTTP bound: {medians[0] / medians[1]:.2f} "
              f"(chapline at {100 * medians[0] / medians[1]:.0f}% of the bound)")
        print(f"chapline serve / durable bound: {medians[0] / medians[2]:.2f} "
              f"(chapline at {100 * medians[0] / medians[2]:.0f}% of the durable bound; "
              f"the durable bound at {100 * medians[2] / medians[1]:.0f}% of the HTTP bound)")
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    finally:
        for _, server, _ in servers:
            server.terminate()
            server.wait(timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
