"""`chapline serve --workers N`: N server processes on one listening socket.

The parent binds the socket, then forks N workers; each runs its own
coordinator on the shared database and accepts connections from the shared
socket (the kernel hands each connection to one of them). Workers run in a
process group of their own, so a Ctrl-C on the terminal reaches only the
parent, which passes one SIGTERM to each worker: each then stops as a single
server does (finishes its calls in flight and its queue, closes its store).
If a worker dies, the parent stops the others and exits 1.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

from coordinator.server.metrics import forget_process

__all__ = ["run_workers"]


def run_workers(count: int, serve: Callable[[], int]) -> int:
    """Fork `count` processes running `serve()`; wait for all of them.

    Returns 0 when every worker exited 0 after a stop that SIGINT or SIGTERM
    asked for, 1 otherwise."""
    pids: list[int] = []
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            for pid in pids:
                _signal(pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        signals = set(previous)
        for _ in range(count):
            if stopping:
                break
            # Blocked across the fork: neither side may see a signal before
            # it has the handlers it needs.
            signal.pthread_sigmask(signal.SIG_BLOCK, signals)
            pid = os.fork()
            if pid == 0:  # the worker
                os.setpgid(0, 0)
                # Asked to stop before `serve` has its own handlers (still
                # opening the store, catching a projection up): a clean exit,
                # not the default action's death by signal.
                for sig in signals:
                    signal.signal(sig, _stop_before_serving)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)
                code = 1
                try:
                    code = serve()
                except SystemExit as asked:
                    code = asked.code if isinstance(asked.code, int) else 0
                except BaseException as exc:  # noqa: BLE001 (reported, then the worker exits)
                    print(f"chapline: a worker failed: {exc}", file=sys.stderr, flush=True)
                finally:
                    os._exit(code)
            pids.append(pid)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)
        status = 0
        alive = set(pids)
        while alive:
            pid, raw = os.wait()
            if pid not in alive:
                continue
            alive.discard(pid)
            forget_process(pid)  # its share of the live gauges goes with it
            code = os.waitstatus_to_exitcode(raw)
            if code != 0 or not stopping:
                status = 1
                # A negative code is the signal that ended the worker.
                print(
                    f"chapline: worker {pid} exited ({code})"
                    + ("" if stopping else "; stopping the others"),
                    file=sys.stderr,
                    flush=True,
                )
                if not stopping:
                    stop(signal.SIGTERM, None)
        return status
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_before_serving(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
