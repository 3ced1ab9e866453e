"""A soak of `chapline serve --auth` under hostile clients, beside an idle baseline.

    python -m bench.soak [--seconds 20] [--streams 2000] [--readers 4] [--oversized 3]
                         [--slow-headers 5000] [--inputs 100] [--input-bytes 1000000]

Starts `chapline serve --auth` on a free loopback port writing a temporary
SQLite file (on /dev/shm where writable: the figures are the server's, not
the disk's), fills one workspace with `--inputs` tasks whose inputs are
`--input-bytes` long (the log holds as much again), then measures a writer
(task.create over one keep-alive connection: writes/s and p99 latency) for
`--seconds`, twice: alone (the baseline), and while, all at once,

- `--streams` clients open GET /chap/events and never read from it;
- `--readers` clients read the whole workspace again and again (the desk's
  snapshot, then audit.read page after page), slowly (64 kB every 50 ms);
- `--oversized` clients without a token post bodies that declare 150 MB and
  send them as fast as the server takes them, again a second after each refusal;
- `--slow-headers` clients send a request's headers a few bytes every
  second, reconnecting whenever the server closes them.

The attackers come from many loopback addresses (127.0.1.x for streams,
127.0.2.x for slow headers, 100 connections each), as many clients would,
and run in a process of their own; the writer in another. The server's
resident memory (RSS) is sampled throughout. Prints one line per phase and
the ratio of writes/s. Raises this process's limit on open files as far as
it needs (and the hard limit allows).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from bench.served import start_serve
from coordinator.server.auth import TokenStore
from coordinator.server.desk.events import MAX_STREAMS_PER_PRINCIPAL
from coordinator.server.scopes import Grant

WORKSPACE = "wsp_soak"
LEAD = "human:lead"
PER_ADDRESS = 100
DECLARED = 150 * 1024 * 1024


def _call(conn: http.client.HTTPConnection, token: str, method: str, **params: Any) -> dict[str, Any]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    conn.request("POST", "/chap", body, {"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    response = json.loads(conn.getresponse().read())
    if "result" not in response:
        raise RuntimeError(f"{method} answered {response}")
    result: dict[str, Any] = response["result"]
    return result


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# -- the writer (a process of its own) -------------------------------------------


def _writer(port: int, token: str, seconds: float, out: Any) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    latencies = []
    end = time.perf_counter() + seconds
    while (start := time.perf_counter()) < end:
        _call(conn, token, "task.create", workspace=WORKSPACE, assignee=LEAD, kind="soak",
              input={"n": len(latencies)}, **{"from": LEAD})
        latencies.append(time.perf_counter() - start)
    conn.close()
    out.send(latencies)


def _measure(port: int, token: str, seconds: float) -> tuple[float, float]:
    """(writes/s, p99 in ms) of one writer process over `seconds`."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_writer, args=(port, token, seconds, there))
    proc.start()
    latencies = sorted(here.recv())
    proc.join()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else float("nan")
    return len(latencies) / seconds, p99 * 1000


# -- the attackers (one asyncio process) -----------------------------------------


async def _open(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0), limit=1 << 20)


def _source(base: str, n: int) -> str:
    return f"{base}.{n // PER_ADDRESS + 1}"


async def _stalled_stream(port: int, tokens: list[str], n: int, opened: list[int]) -> None:
    token = tokens[n // MAX_STREAMS_PER_PRINCIPAL]
    while True:  # until open; then held, never read again (cancelled at the end)
        try:
            reader, writer = await _open(port, _source("127.0.1", n))
            writer.write(f"GET /chap/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                         f"Accept: text/event-stream\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
        except (OSError, asyncio.IncompleteReadError):
            await asyncio.sleep(1)
            continue
        if head.startswith(b"HTTP/1.1 200"):
            opened[0] += 1
            await asyncio.Event().wait()
        writer.close()
        await asyncio.sleep(1)  # refused (a cap on streams, say): again


async def _slowly(port: int, request: bytes, keep: bool) -> bytes:
    """The body of the answer to `request`, read 64 kB every 50 ms (kept only if `keep`)."""
    reader, writer = await _open(port, "127.0.3.1")
    try:
        writer.write(request)
        data = bytearray()
        while chunk := await reader.read(65536):
            if keep:
                data += chunk
            await asyncio.sleep(0.05)
        return bytes(data).split(b"\r\n\r\n", 1)[-1]
    finally:
        writer.close()


async def _slow_reader(port: int, token: str, counts: list[int]) -> None:
    auth = f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n"
    while True:
        try:
            await _slowly(port, f"GET /desk/api/snapshot?workspace={WORKSPACE} HTTP/1.1\r\n{auth}\r\n".encode(),
                          keep=False)
            counts[0] += 1
            seq = 0
            while True:  # the whole log through audit.read, page by page
                body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "audit.read", "params": {
                    "workspace": WORKSPACE, "from": LEAD, "range": {"from_seq": seq}}}).encode()
                answer = await _slowly(port, (
                    f"POST /chap HTTP/1.1\r\n{auth}Content-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode() + body, keep=True)
                page = json.loads(answer)["result"]
                if not page["entries"] or page["next_seq"] <= seq:
                    break
                seq = page["next_seq"]
            counts[1] += 1
        except (OSError, KeyError, ValueError):
            await asyncio.sleep(0.5)  # refused or cut: try again


async def _oversized(port: int, counts: list[int]) -> None:
    chunk = b" " * 65536
    while True:
        try:
            reader, writer = await _open(port, "127.0.4.1")
        except OSError:
            await asyncio.sleep(0.1)
            continue
        try:
            writer.write(f"POST /a2a HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {DECLARED}\r\n\r\n".encode())
            for _ in range(DECLARED // len(chunk)):
                writer.write(chunk)
                await writer.drain()
        except OSError:
            counts[2] += 1  # the server answered and closed: refused
        finally:
            writer.close()
        await asyncio.sleep(1)  # and post again


async def _slow_header(port: int, n: int, counts: list[int]) -> None:
    head = f"POST /chap HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode()
    while True:
        try:
            reader, writer = await _open(port, _source("127.0.2", n))
            writer.write(head)
            while not reader.at_eof():
                await asyncio.sleep(1)
                writer.write(b"a")
                await writer.drain()
            writer.close()
        except OSError:
            await asyncio.sleep(1)
        counts[3] += 1  # closed by the server: again


async def _attack(
    port: int, token: str, watchers: list[str], args: argparse.Namespace, ready: Any, stop: Any
) -> None:
    opened = [0]
    counts = [0, 0, 0, 0]
    # The streams first, as long-lived clients would have them open already.
    tasks = [asyncio.create_task(_stalled_stream(port, watchers, n, opened)) for n in range(args.streams)]
    deadline = time.monotonic() + 60
    while opened[0] < args.streams and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    tasks += [asyncio.create_task(_slow_reader(port, token, counts)) for _ in range(args.readers)]
    tasks += [asyncio.create_task(_oversized(port, counts)) for _ in range(args.oversized)]
    tasks += [asyncio.create_task(_slow_header(port, n, counts)) for n in range(args.slow_headers)]
    await asyncio.sleep(5)  # every attacker connected once
    ready.send(opened[0])
    await asyncio.get_running_loop().run_in_executor(None, stop.recv)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    ready.send({"streams_open": opened[0], "snapshots_read": counts[0], "logs_read": counts[1],
                "oversized_refused": counts[2], "slow_headers_closed": counts[3]})


def _attacker(
    port: int, token: str, watchers: list[str], args: argparse.Namespace, ready: Any, stop: Any
) -> None:
    _raise_fd_limit(args.streams + args.slow_headers + args.readers + args.oversized + 512)
    asyncio.run(_attack(port, token, watchers, args, ready, stop))


def _raise_fd_limit(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return max(wanted, soft)


# -- the run -------------------------------------------------------------------


def _token(db: str) -> str:
    """A token for LEAD that may create the soak's workspace and run it."""
    command = [sys.executable, "-m", "coordinator", "token", "create", "--db", db, "--as", LEAD]
    scoped = subprocess.run([*command, "--workspace", WORKSPACE, "--max-role", "admin", "--may-create"],
                            capture_output=True, text=True)
    if scoped.returncode != 0:
        raise RuntimeError(f"chapline token create failed: {scoped.stderr}")
    return scoped.stdout.strip()


def _watchers(db: str, port: int, streams: int) -> list[str]:
    """Tokens of as many members (observers of the workspace) as it takes to
    hold `streams` open within the cap per principal, as that many
    different clients would."""
    store = TokenStore(db)
    tokens = [store.create(f"human:watcher-{n}", Grant.of([WORKSPACE], "observer"))[0]
              for n in range(-(-streams // MAX_STREAMS_PER_PRINCIPAL))]
    store.close()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for n, token in enumerate(tokens):
        _call(conn, token, "participant.join", workspace=WORKSPACE, type="human", role="observer",
              **{"from": f"human:watcher-{n}"})
    conn.close()
    return tokens


def _fill(port: int, token: str, inputs: int, size: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    _call(conn, token, "workspace.create", workspace=WORKSPACE, **{"from": LEAD})
    _call(conn, token, "participant.join", workspace=WORKSPACE, type="human", **{"from": LEAD})
    pad = "x" * size
    for n in range(inputs):
        _call(conn, token, "task.create", workspace=WORKSPACE, assignee=LEAD, kind="big",
              input={"n": n, "pad": pad}, **{"from": LEAD})
    conn.close()


def _sampled(pid: int, seconds: float, work: Any) -> tuple[Any, float]:
    """`work()`'s value, and the server's peak RSS (MB) while it ran."""
    peak = [_rss_mb(pid)]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.25):
            peak[0] = max(peak[0], _rss_mb(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        value = work()
    finally:
        done.set()
        sampler.join()
    return value, peak[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20, help="length of each measured phase")
    ap.add_argument("--streams", type=int, default=2000, help="stalled event streams")
    ap.add_argument("--readers", type=int, default=4, help="slow whole-workspace readers")
    ap.add_argument("--oversized", type=int, default=3, help="oversized unauthenticated posts at a time")
    ap.add_argument("--slow-headers", type=int, default=5000, help="slow-header connections")
    ap.add_argument("--inputs", type=int, default=100, help="large tasks in the workspace")
    ap.add_argument("--input-bytes", type=int, default=1_000_000, help="size of each large task's input")
    ap.add_argument("--db", help="SQLite file to write (default: a temporary one, in /dev/shm if writable)")
    args = ap.parse_args(argv)
    _raise_fd_limit(1024)
    # On tmpfs where there is one: the figure is the server's, not the disk's fsync.
    tmp = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    db = args.db or os.path.join(tempfile.mkdtemp(prefix="chapline-soak-", dir=tmp), "chap.db")
    token = _token(db)
    server, port = start_serve(db, "--auth")
    try:
        _fill(port, token, args.inputs, args.input_bytes)
        watchers = _watchers(db, port, args.streams)
        (idle_rate, idle_p99), idle_rss = _sampled(server.pid, args.seconds,
                                                   lambda: _measure(port, token, args.seconds))
        print(f"idle baseline: {idle_rate:,.0f} writes/s, p99 {idle_p99:.1f} ms, server RSS {idle_rss:.0f} MB",
              flush=True)
        ctx = multiprocessing.get_context("spawn")
        ready_here, ready_there = ctx.Pipe(duplex=False)
        stop_here, stop_there = ctx.Pipe(duplex=False)
        attacker = ctx.Process(target=_attacker, args=(port, token, watchers, args, ready_there, stop_here))
        attacker.start()
        opened = ready_here.recv()
        (rate, p99), rss = _sampled(server.pid, args.seconds, lambda: _measure(port, token, args.seconds))
        stop_there.send(None)
        report = ready_here.recv()
        attacker.join(timeout=60)
        after = _rss_mb(server.pid)
        print(f"under attack ({opened:,} of {args.streams:,} streams open, {args.readers} slow readers, "
              f"{args.oversized} oversized posts, {args.slow_headers:,} slow-header clients): "
              f"{rate:,.0f} writes/s, p99 {p99:.1f} ms, server RSS peak {rss:.0f} MB, "
              f"{after:.0f} MB after", flush=True)
        print(f"writes/s under attack / idle: {rate / idle_rate:.2f}; attackers: {json.dumps(report)}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if not args.db:
            shutil.rmtree(os.path.dirname(db), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
