"""`chapline serve --workers N`: N server processes on one listening socket,
supervised (SPECIFICATION.md, "Several processes on one database").

The parent binds the socket, then forks N workers; each runs its own
coordinator on the shared database and accepts connections from the shared
socket (the kernel hands each connection to one of them). The parent then
only supervises:

- A worker that dies is started again, after a delay that doubles while
  workers keep dying young (`Backoff`), each death logged on standard error.
- SIGHUP replaces the workers one at a time: a new one is started, and only
  once it accepts connections is an old one asked to stop (it finishes what
  it was given), so calls keep being served throughout.
- SIGINT or SIGTERM (a Ctrl-C reaches only the parent: workers run in a
  process group of their own) sends one SIGTERM to each worker, which stops
  as a single server does; the parent exits once all have.

A worker never outlives the parent: on Linux the kernel sends it SIGTERM when
the parent dies (PR_SET_PDEATHSIG), and everywhere a thread waits on a pipe
only the parent holds open, which reads end-of-file once it has died, even
before the worker could ask the kernel (the race prctl alone leaves). A
SIGKILLed server thus leaves no process holding its port or its database.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from coordinator.server.metrics import forget_process

__all__ = ["Backoff", "Serve", "run_workers"]

# Runs one server in a worker: called with `ready`, which the server calls
# once it accepts connections, and the worker's slot (0 to N-1: one worker
# per slot, a replacement taking the slot of the worker it replaces);
# returns the worker's exit status.
Serve = Callable[[Callable[[], None], int], int]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_STOP = (signal.SIGINT, signal.SIGTERM)
_HANDLED = (*_STOP, signal.SIGHUP, signal.SIGCHLD)


@dataclass(frozen=True)
class Backoff:
    """How long the parent waits before starting a worker in place of one
    that died: `first` seconds, doubled for each worker in a row that died
    less than `settled` seconds after it started, up to `cap`."""

    first: float = 0.1
    cap: float = 10.0
    settled: float = 10.0

    def delay(self, streak: int) -> float:
        """The wait after the `streak`-th young death in a row (1 for the first)."""
        return min(self.cap, self.first * 2.0 ** min(max(streak - 1, 0), 64))


def run_workers(
    count: int,
    serve: Serve,
    *,
    backoff: Backoff = Backoff(),
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Fork `count` processes running `serve`, keep `count` of them running
    until SIGINT or SIGTERM, then stop them and wait for all of them.

    Returns 0 when every worker exited 0 after that stop, 1 otherwise."""
    return _Supervisor(count, serve, backoff, clock, _stderr).run()


@dataclass
class _Worker:
    pid: int
    slot: int
    generation: int  # SIGHUP replaces the workers of older generations
    started: float
    ready_fd: int | None  # read end of the pipe it writes one byte to once serving
    ready: bool = False
    retiring: bool = False  # asked to stop, by a reload


class _Supervisor:
    def __init__(
        self,
        count: int,
        serve: Serve,
        backoff: Backoff,
        clock: Callable[[], float],
        log: Callable[[str], None],
    ) -> None:
        self._count = count
        self._serve = serve
        self._backoff = backoff
        self._clock = clock
        self._log = log
        self._workers: dict[int, _Worker] = {}
        self._signals: list[int] = []
        self._generation = 0
        self._reloading = False
        self._stopping = False
        self._status = 0
        self._streak = 0  # workers in a row that died young
        self._due = 0.0  # no worker starts before then (the clock's time)
        self._selector = selectors.DefaultSelector()
        # Only the parent keeps the write end open: the workers' end reads
        # end-of-file once the parent is gone, however it went.
        self._alive_r, self._alive_w = os.pipe()
        self._wake_r, self._wake_w = os.pipe()

    def run(self) -> int:
        wake_r, wake_w = self._wake_r, self._wake_w
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        self._selector.register(wake_r, selectors.EVENT_READ)
        # The handlers only note the signal; the wakeup fd ends the wait in
        # select() at once, and the loop acts on it.
        previous_wakeup = signal.set_wakeup_fd(wake_w)
        previous = {sig: signal.signal(sig, self._note) for sig in _HANDLED}
        try:
            for slot in range(self._count):
                self._start(slot)
            while True:
                self._act_on_signals()
                self._reap()
                if self._stopping and not self._workers:
                    return self._status
                timeout = None if self._stopping else self._reconcile()
                for key, _ in self._selector.select(timeout):
                    if key.fd == wake_r:
                        _drain(wake_r)
                    else:
                        self._read_ready(key.fd)
        finally:
            signal.set_wakeup_fd(previous_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for worker in self._workers.values():
                self._close_ready(worker)
            self._selector.close()
            for fd in (wake_r, wake_w, self._alive_r, self._alive_w):
                os.close(fd)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)

    def _act_on_signals(self) -> None:
        while self._signals:
            sig = self._signals.pop(0)
            if sig in _STOP and not self._stopping:
                self._stopping = True
                for worker in self._workers.values():
                    if not worker.retiring:
                        _kill(worker.pid, signal.SIGTERM)
            elif sig == signal.SIGHUP and not self._stopping:
                self._generation += 1
                self._reloading = True
                self._log(f"chapline: SIGHUP: replacing the {self._count} workers one at a time")

    def _start(self, slot: int) -> None:
        ready_r, ready_w = os.pipe()
        # Blocked across the fork: neither side may see a signal before it
        # has the handlers it needs.
        signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
        try:
            try:
                pid = os.fork()
            except OSError as exc:  # out of processes or memory: retried as a death is
                os.close(ready_r)
                os.close(ready_w)
                self._streak += 1
                delay = self._backoff.delay(self._streak)
                self._due = self._clock() + delay
                self._log(f"chapline: cannot start a worker: {exc}; trying again in {delay:g} s")
                return
            if pid == 0:
                others = [w.ready_fd for w in self._workers.values() if w.ready_fd is not None]
                parents = [self._alive_w, self._wake_r, self._wake_w, ready_r]
                _worker(self._serve, slot, self._alive_r, ready_w, [*parents, *others])
            os.close(ready_w)
            os.set_blocking(ready_r, False)
            self._workers[pid] = _Worker(pid, slot, self._generation, self._clock(), ready_r)
            self._selector.register(ready_r, selectors.EVENT_READ)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED)

    def _read_ready(self, fd: int) -> None:
        for worker in self._workers.values():
            if worker.ready_fd == fd:
                # One byte once serving; end-of-file alone if it died first
                # (the reaping says so).
                worker.ready = _drain(fd)
                self._close_ready(worker)
                return

    def _close_ready(self, worker: _Worker) -> None:
        if worker.ready_fd is not None:
            self._selector.unregister(worker.ready_fd)
            os.close(worker.ready_fd)
            worker.ready_fd = None

    def _reap(self) -> None:
        while True:
            try:
                pid, raw = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = self._workers.pop(pid, None)
            if worker is None:
                continue
            self._close_ready(worker)
            forget_process(pid)  # its share of the live gauges goes with it
            code = os.waitstatus_to_exitcode(raw)
            if self._stopping or worker.retiring:
                if code != 0:
                    self._status = 1
                    self._log(f"chapline: worker {pid} {_ended(code)} while stopping")
                continue
            now = self._clock()
            young = now - worker.started < self._backoff.settled
            self._streak = self._streak + 1 if young else 1
            delay = self._backoff.delay(self._streak)
            self._due = now + delay
            self._log(f"chapline: worker {pid} {_ended(code)}; starting another in {delay:g} s")

    def _reconcile(self) -> float | None:
        """Start or retire what the state asks for; how long to wait (None:
        until a signal or a worker's readiness) before looking again."""
        serving = [w for w in self._workers.values() if not w.retiring]
        stale = sorted((w for w in serving if w.generation < self._generation), key=lambda w: w.started)
        starting = [w for w in serving if not w.ready]
        retiring = len(serving) < len(self._workers)
        if len(serving) > self._count and stale and not starting:
            # The reload's new worker serves: the old one of its slot may go.
            fresh = {w.slot for w in serving if w.generation == self._generation}
            old = next((w for w in stale if w.slot in fresh), stale[0])
            old.retiring = True
            _kill(old.pid, signal.SIGTERM)
            self._log(f"chapline: worker {old.pid} stopping, replaced")
            return 0.0
        if self._reloading and not stale and not retiring and not starting:
            self._reloading = False
            self._log("chapline: SIGHUP: every worker replaced")
        wanted = len(serving) < self._count or (
            bool(stale) and not starting and not retiring and len(serving) == self._count
        )
        if not wanted:
            return None
        wait = self._due - self._clock()
        if wait > 0:
            return wait
        # A slot no worker holds (one died), else the oldest stale worker's
        # (a reload: the new worker takes it over once it serves).
        held = {w.slot for w in serving}
        free = [slot for slot in range(self._count) if slot not in held]
        self._start(free[0] if free else stale[0].slot)
        return 0.0


def _worker(serve: Serve, slot: int, alive: int, ready_w: int, inherited: list[int]) -> None:
    """The forked child: becomes a worker, runs `serve`, never returns."""
    code = 1
    try:
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        # Asked to stop before `serve` has its own handlers (still opening
        # the store, catching a projection up): a clean exit, not the default
        # action's death by signal.
        for sig in _STOP:
            signal.signal(sig, _stop_before_serving)
        for fd in inherited:
            os.close(fd)
        _die_with_parent(alive)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED)
        code = serve(_ready_once(ready_w), slot)
    except SystemExit as asked:
        code = asked.code if isinstance(asked.code, int) else 0
    except BaseException as exc:  # noqa: BLE001 (reported, then the worker exits)
        if _STOP_ASKED:
            # The early stop's SystemExit, wrapped by the code it interrupted
            # (a library building its models while imported): a clean stop.
            code = 0
        else:
            print(f"chapline: a worker failed: {exc}", file=sys.stderr, flush=True)
    finally:
        os._exit(code)


def _die_with_parent(alive: int) -> None:
    """Stop (as SIGTERM asks: gracefully) once the parent is gone."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)

    def watch() -> None:
        while os.read(alive, 1):
            pass  # the parent never writes: only end-of-file comes
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="chapline-parent", daemon=True).start()


def _ready_once(fd: int) -> Callable[[], None]:
    def ready() -> None:
        nonlocal fd
        if _STOP_ASKED:
            # Asked to stop while starting, and the code that stop's
            # SystemExit interrupted carried on (a library catching what it
            # raised): ask again, now that the server stops on SIGTERM.
            os.kill(os.getpid(), signal.SIGTERM)
        if fd >= 0:
            try:
                os.write(fd, b"r")
            except BrokenPipeError:
                pass  # the parent is gone: the worker is stopping already
            os.close(fd)
            fd = -1

    return ready


# Set in a worker asked to stop before it serves (`_stop_before_serving`).
_STOP_ASKED = False


def _stop_before_serving(signum: int, frame: FrameType | None) -> None:
    global _STOP_ASKED
    _STOP_ASKED = True
    raise SystemExit(0)


def _drain(fd: int) -> bool:
    """Read what `fd` holds without blocking; whether there was anything."""
    got = False
    while True:
        try:
            data = os.read(fd, 512)
        except BlockingIOError:
            return got
        if not data:
            return got
        got = True


def _ended(code: int) -> str:
    # A negative code is the signal that ended the worker.
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
