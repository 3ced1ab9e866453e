"""`chapline serve --workers N` supervised (SPECIFICATION.md, "Several
processes on one database"): workers never outlive a SIGKILLed parent (its
port takes a new server at once), a worker that dies is replaced while the
server keeps answering, a worker failing at start is retried with a growing
delay, and SIGHUP replaces every worker without a failed call.

Real processes on loopback; every wait is bounded and waits for a positive
signal (a process gone, a line logged, a call answered)."""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from servers import ROOT, env
from support import ALICE, BOT, eventually

from coordinator import Coordinator, RemoteCoordinator
from coordinator.client import Retry
from coordinator.engine.idempotent_calls import IDEMPOTENCY_FIELD
from coordinator.server.affinity import Affinity, Elsewhere, slot_of, slots_directory
from coordinator.server.workers import Backoff
from storage.target import open_store

WORKERS = 3


class Supervised:
    """`python -m coordinator serve --workers N ...`, its standard error read
    as it comes (`lines`)."""

    def __init__(
        self, db: str, *options: str, port: int = 0, workers: int = WORKERS, tmp: Path | None = None
    ) -> None:
        """`tmp`: the server's temporary directory (where its workers' slot
        sockets are, `slots`)."""
        environ = env() if tmp is None else {**env(), "TMPDIR": str(tmp)}
        self.tmp = tmp
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator", "serve", "--db", db, "--port", str(port),
             "--workers", str(workers), *options],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.line = self.proc.stdout.readline()
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(self.proc.stderr,), daemon=True)
        self._reader.start()
        if "serving CHAP on http://127.0.0.1:" not in self.line:
            self.kill()
            pytest.fail(f"serve did not start: {self.line!r} {self.log()}")
        self.port = int(self.line.split("http://127.0.0.1:")[1].split("/")[0])
        self.url = f"http://127.0.0.1:{self.port}/chap"

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def log(self) -> str:
        return "\n".join(self.lines)

    def workers(self) -> list[int]:
        return children(self.proc.pid)

    def slots(self) -> dict[int, int]:
        """Slot -> the pid of the worker that took it. A worker binds its
        socket as `K.PID` and renames it `K` once it serves; the kernel keeps
        listing it under the name it was bound with (/proc/net/unix), which
        is then gone from the directory."""
        directory = self.slot_directory()
        if directory is None:
            return {}
        live = self.workers()
        held = {}
        for bound in _unix_listeners(directory):
            slot, pid = (int(part) for part in bound.name.split("."))
            if not bound.exists() and pid in live and (directory / str(slot)).exists():
                held[slot] = pid
        return held

    def slot_directory(self) -> Path | None:
        assert self.tmp is not None
        found = list(self.tmp.glob("chapline-slots-*"))
        return found[0] if found else None

    def stop(self) -> int:
        """SIGTERM, then the exit code once it and its workers are done."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self._abort_hung()
        self._reader.join(timeout=60)
        return code

    def _abort_hung(self) -> NoReturn:
        """SIGABRT the server and its workers, which print their threads'
        stacks (faulthandler, `servers.env`), and fail with what they said."""
        hung = [*self.workers(), self.proc.pid]
        for pid in hung:
            os.kill(pid, signal.SIGABRT)
        self.proc.wait(timeout=60)
        self._reader.join(timeout=60)
        pytest.fail(f"serve (pid {self.proc.pid}) and its workers {hung[:-1]} did not stop "
                    f"within 120 s of SIGTERM; what they said:\n{self.log()}")

    def __enter__(self) -> Supervised:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """Stopped; unless the block failed already, cleanly (exit 0)."""
        code = self.stop()
        if kind is None:
            assert code == 0, self.log()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=60)
        self._reader.join(timeout=60)


def children(pid: int) -> list[int]:
    """The live (not zombie) processes whose parent is `pid`."""
    return [p for p in _live() if _stat(p)[1] == pid]


def _live() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and _stat(int(e))[0] not in ("", "Z", "X")]


def _stat(pid: int) -> tuple[str, int]:
    """A process's state letter and parent pid; ("", 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return "", 0
    fields = stat[stat.rindex(b")") + 2:].split()
    return fields[0].decode(), int(fields[1])


def _kill_left(pids: list[int]) -> None:
    """After a failure: no worker of the test's outlives it."""
    for pid in pids:
        if not gone([pid]):
            os.kill(pid, signal.SIGKILL)


def gone(pids: list[int]) -> bool:
    """Every one of `pids` has exited (a zombie nobody reaped counts as gone)."""
    return all(_stat(p)[0] in ("", "Z", "X") for p in pids)


def _call(workspace: str, rid: str, method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {"workspace": workspace, **params}}


def _task(workspace: str, rid: str) -> dict[str, Any]:
    return _call(workspace, rid, "task.create", **{"from": ALICE}, assignee=BOT, kind="k", input={"rid": rid})


def set_up(db: str, workspaces: list[str]) -> None:
    with Coordinator(open_store(db)) as coord:
        for ws in workspaces:
            for envelope in (
                _call(ws, "c", "workspace.create"),
                _call(ws, "a", "participant.join", **{"from": ALICE}, type="human", role="admin"),
                _call(ws, "b", "participant.join", **{"from": BOT}, type="agent", role="drafter"),
            ):
                assert "result" in coord.dispatch(envelope)


def logged_tasks(db: str, workspaces: list[str]) -> collections.Counter[str]:
    """How often each task.create call's id is in the logs; every chain verifies."""
    logged: collections.Counter[str] = collections.Counter()
    with Coordinator(open_store(db)) as coord:
        for ws in workspaces:
            verdict = coord.dispatch(_call(ws, "v", "audit.verify_chain"))["result"]
            assert verdict["status"] == "verified", (ws, verdict)
            for entry in coord.store.read_entries(ws):
                call = entry.get("envelope") or {}
                if call.get("method") == "task.create":
                    logged[call["id"]] += 1
    return logged


class Load:
    """One thread per entry of `workspaces`, each calling task.create on that
    workspace until `finish()`; a call is acknowledged when answered with a result.
    `fresh`: a new connection for every call (`Connection: close`)."""

    def __init__(self, url: str, workspaces: list[str], fresh: bool = False) -> None:
        self.acknowledged: list[str] = []
        # (call id, "transport", "lost" or "answer", what)
        self.failed: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._headers = {"Connection": "close"} if fresh else {}
        self._threads = [
            threading.Thread(target=self._client, args=(url, ws, i)) for i, ws in enumerate(workspaces)
        ]
        for t in self._threads:
            t.start()

    def _client(self, url: str, ws: str, index: int) -> None:
        with httpx.Client(timeout=60, headers=self._headers) as http:
            k = 0
            while not self._done.is_set():
                rid = f"c{index}-{k}"
                k += 1
                try:
                    reply = http.post(url, json=_task(ws, rid))
                    body = reply.json()
                except httpx.HTTPError as exc:
                    with self._lock:
                        self.failed.append((rid, "transport", repr(exc)))
                    continue
                with self._lock:
                    if "result" in body:
                        self.acknowledged.append(rid)
                    elif reply.status_code == 502 and (body.get("error", {}).get("data") or {}).get("applied") == "unknown":
                        # Passed to the workspace's worker, which died before answering.
                        self.failed.append((rid, "lost", repr(body)))
                    else:
                        self.failed.append((rid, "answer", repr(body)))

    def count(self) -> int:
        with self._lock:
            return len(self.acknowledged)

    def finish(self) -> None:
        self._done.set()
        for t in self._threads:
            t.join(timeout=120)


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "w.db")
    server = request.getfixturevalue("pg_server")
    return server.uri(server.new_database())


# -- the delay between restarts -----------------------------------------------


def test_backoff_doubles_from_first_up_to_its_cap() -> None:
    backoff = Backoff(first=0.1, cap=10.0)
    delays = [backoff.delay(n) for n in range(1, 12)]
    assert delays[:4] == [0.1, 0.2, 0.4, 0.8]
    assert all(later == min(10.0, 2 * earlier) for earlier, later in itertools.pairwise(delays))
    assert delays[-1] == 10.0
    assert backoff.delay(10_000) == 10.0  # a very long crash loop stays at the cap


# -- tied to the parent ---------------------------------------------------------


def test_workers_of_a_sigkilled_server_exit_and_its_port_serves_again(tmp_path: Path) -> None:
    db = str(tmp_path / "w.db")
    set_up(db, ["wsp_a"])
    server = Supervised(db)
    pids: list[int] = []
    try:
        pids = eventually(lambda: len(server.workers()) == WORKERS and server.workers(), "workers")
        with httpx.Client(timeout=60) as http:
            assert "result" in http.post(server.url, json=_task("wsp_a", "before")).json()
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=60)
        eventually(lambda: gone(pids), "exit of every worker of the killed server", timeout=45)
    finally:
        server.kill()
        _kill_left(pids)
    # The port is free at once: a new server listens on it and serves.
    again = Supervised(db, port=server.port)
    try:
        assert f":{server.port}/chap" in again.line
        with httpx.Client(timeout=60) as http:
            assert "result" in http.post(again.url, json=_task("wsp_a", "after")).json()
    finally:
        assert again.stop() == 0, again.log()
    assert logged_tasks(db, ["wsp_a"]) == {"before": 1, "after": 1}


def test_workers_of_a_server_sigkilled_as_they_start_exit_too(tmp_path: Path) -> None:
    """Killed at once after the start-up line: the workers are still
    importing, opening the database, perhaps not yet past their prctl."""
    db = str(tmp_path / "w.db")
    server = Supervised(db)
    pids: list[int] = []
    try:
        pids = eventually(lambda: server.workers(), "a worker forked")
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=60)
        pids = sorted({*pids, *children(server.proc.pid)})
        eventually(lambda: gone(pids), "exit of every worker of the killed server", timeout=45)
    finally:
        server.kill()
        _kill_left(pids)
    with Supervised(db, port=server.port) as again, httpx.Client(timeout=60) as http:
        assert "result" in http.post(again.url, json=_call("wsp_s", "c", "workspace.create")).json()


# -- workers that come back -----------------------------------------------------


def test_a_worker_killed_mid_load_is_replaced_and_no_acknowledged_call_is_lost(target: str) -> None:
    """16 clients on ONE workspace, so the workers race for it throughout:
    a write that loses waits for the workspace's write turn, and no call is
    refused (-32901) before, during or after the kill."""
    workspaces = ["wsp_k"]
    set_up(target, workspaces)
    server = Supervised(target)
    load = None
    try:
        first = eventually(lambda: len(server.workers()) == WORKERS and server.workers(), "workers")
        load = Load(server.url, workspaces * 16)
        eventually(lambda: load.count() >= 30, "calls answered")
        victim = first[0]
        os.kill(victim, signal.SIGKILL)
        eventually(lambda: f"worker {victim} was killed by SIGKILL; starting another in" in server.log(),
                   "the death logged")
        replaced = eventually(
            lambda: len(w := server.workers()) == WORKERS and victim not in w and w, "a replacement"
        )
        assert set(first) - {victim} <= set(replaced)  # the others kept running
        after = load.count()
        eventually(lambda: load.count() >= after + 30, "calls answered after the replacement")
        load.finish()
    finally:
        if load is not None:
            load.finish()
        code = server.stop()
    assert code == 0, server.log()
    # Only calls in flight on the killed worker may have failed: as a broken
    # connection, or (passed to it by another worker) answered 502; every
    # other answer was a result.
    assert [f for f in load.failed if f[1] not in ("transport", "lost")] == []
    logged = logged_tasks(target, workspaces)
    assert [rid for rid in load.acknowledged if logged[rid] != 1] == []
    assert [rid for rid, n in logged.items() if n > 1] == []


# -- affinity: one workspace, one worker -------------------------------------------


def _store_races(base: str) -> tuple[float, float]:
    """(store conflicts, waits for a write turn) the workers counted, from /metrics."""
    reply = httpx.get(base + "/metrics", timeout=30)
    assert reply.status_code == 200, reply.text
    counted = {sample.name: sample.value for family in text_string_to_metric_families(reply.text)
               for sample in family.samples}
    return counted["chapline_store_conflicts_total"], counted["chapline_lock_wait_seconds_count"]


def test_with_affinity_a_workspace_is_written_by_its_own_worker_alone(target: str, tmp_path: Path) -> None:
    """16 clients on one workspace over 3 workers: whichever worker takes a
    connection passes the call to the worker of the workspace's slot, so no
    write ever starts from a state another process moved past: the workers
    count no store conflict and no wait for the write turn (without
    affinity they race for it: bench/README.md)."""
    set_up(target, ["wsp_one"])
    server = Supervised(target, tmp=tmp_path)
    load = None
    try:
        eventually(lambda: len(server.slots()) == WORKERS, "every worker serving its slot")
        load = Load(server.url, ["wsp_one"] * 16)
        eventually(lambda: load.count() >= 400, "calls answered")
        load.finish()
        races = _store_races(server.url.removesuffix("/chap"))
    finally:
        if load is not None:
            load.finish()
        code = server.stop()
    assert code == 0, server.log()
    assert load.failed == []
    assert races == (0, 0)
    logged = logged_tasks(target, ["wsp_one"])
    assert sorted(logged) == sorted(load.acknowledged) and set(logged.values()) == {1}


def _unix_listeners(directory: Path) -> list[Path]:
    """The names Unix sockets in `directory` were bound with, once per
    socket (/proc/net/unix; a connection waiting to be accepted is listed
    under its listener's name too)."""
    with open("/proc/net/unix") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return [Path(row[-1]) for row in rows if len(row) == 8 and Path(row[-1]).parent == directory]


def _waiting_at(directory: Path, pid: int) -> bool:
    """Whether a connection waits to be accepted on the slot socket worker `pid` bound."""
    return sum(1 for name in _unix_listeners(directory) if name.name.endswith(f".{pid}")) > 1


def test_a_call_waiting_for_a_worker_that_dies_unread_is_answered_where_it_arrived(
    tmp_path: Path,
) -> None:
    """The worker of the call's workspace is stopped (SIGSTOP), so the call
    another worker passes on waits in its socket's backlog; that worker is
    then killed. It never read the call (the kernel resets the connection),
    so the worker the call arrived at answers it; resent with the same
    idempotency key it is answered as the first was: applied once. (A worker
    that dies after reading a call is answered for as 502, applied unknown:
    `test_a_call_passed_to_a_worker_that_stopped_before_reading_it_is_answered_here`.)"""
    db = str(tmp_path / "w.db")
    set_up(db, ["wsp_d"])
    server = Supervised(db, tmp=tmp_path)
    owner = None
    envelope = {**_task("wsp_d", "lost"), IDEMPOTENCY_FIELD: "key-lost"}
    try:
        slots = eventually(lambda: len(held := server.slots()) == WORKERS and held, "every worker serving its slot")
        owner = slots[slot_of("wsp_d", WORKERS)]
        os.kill(owner, signal.SIGSTOP)
        with httpx.Client(timeout=60) as http, ThreadPoolExecutor(1) as pool:
            # The stopped worker accepts nothing: another takes the connection.
            pending = pool.submit(http.post, server.url, json=envelope)
            directory = server.slot_directory()
            assert directory is not None
            eventually(lambda: _waiting_at(directory, owner), "the call waiting at its worker's socket")
            os.kill(owner, signal.SIGKILL)
            first = pending.result(timeout=60)
        assert first.status_code == 200 and "result" in first.json(), first.text
        with httpx.Client(timeout=60) as http:
            again = http.post(server.url, json=envelope)
        assert again.status_code == 200 and again.json()["result"] == first.json()["result"], again.text
    finally:
        code = server.stop()
    assert code == 0, server.log()
    assert logged_tasks(db, ["wsp_d"]) == {"lost": 1}


def test_a_temporary_directory_too_long_for_a_socket_gives_way_to_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket's path holds 107 bytes: under a TMPDIR that long the slots'
    directory is made in /tmp instead, and a worker's socket binds there."""
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    with socket.socket(socket.AF_UNIX) as probe, pytest.raises(OSError):
        probe.bind(str(deep / "0.4194304"))  # what the directory would have held
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with slots_directory(4) as path:
        assert path is not None and Path(path).parent == Path("/tmp")
        worker = Affinity(path, 3, 4)
        worker.listen().close()
        worker.publish()
        assert (Path(path) / "3").exists()
    assert not Path(path).exists()


def test_a_call_that_came_over_a_slot_socket_is_answered_there(tmp_path: Path) -> None:
    """A call a worker was passed (over its slot's socket) is never passed
    on again, even when it names another slot's workspace: that slot's
    worker is stopped here, so a call passed on would wait for it."""
    db = str(tmp_path / "w.db")
    set_up(db, ["wsp_s"])
    server = Supervised(db, tmp=tmp_path)
    owner = None
    try:
        slots = eventually(lambda: len(held := server.slots()) == WORKERS and held, "every worker serving its slot")
        owner_slot = slot_of("wsp_s", WORKERS)
        owner = slots[owner_slot]
        other = (owner_slot + 1) % WORKERS
        directory = server.slot_directory()
        assert directory is not None
        os.kill(owner, signal.SIGSTOP)
        transport = httpx.HTTPTransport(uds=str(directory / str(other)))
        with httpx.Client(transport=transport, timeout=20) as http:
            answer = http.post(f"http://127.0.0.1:{server.port}/chap", json=_task("wsp_s", "direct")).json()
        assert "result" in answer, answer
    finally:
        if owner is not None:
            os.kill(owner, signal.SIGCONT)
        code = server.stop()
    assert code == 0, server.log()
    assert logged_tasks(db, ["wsp_s"]) == {"direct": 1}


def test_remote_clients_lose_and_double_no_call_while_each_worker_is_killed_in_turn(tmp_path: Path) -> None:
    """8 RemoteCoordinator clients on one workspace while each of the three
    first workers is SIGKILLed in turn (after 15, 30 and 45 of the 120 calls
    are acknowledged), the workspace's own among them: a
    call lost with its connection or answered 502 is sent again with its
    idempotency key, so each is acknowledged, and written, exactly once."""
    db = str(tmp_path / "w.db")
    set_up(db, ["wsp_r"])
    server = Supervised(db, tmp=tmp_path)
    acknowledged: list[str] = []
    failures: list[Any] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        with RemoteCoordinator(server.url.removesuffix("/chap"), retry=Retry(attempts=40, max_backoff=1.0)) as remote:
            for k in range(15):
                answer = remote.dispatch(_task("wsp_r", f"c{i}-{k}"))
                with lock:
                    (acknowledged if "result" in answer else failures).append(answer.get("id", answer))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    try:
        first = eventually(lambda: len(server.slots()) == WORKERS and server.workers(), "every worker serving its slot")
        for t in threads:
            t.start()
        for n, victim in enumerate(first, 1):
            eventually(lambda n=n: len(acknowledged) >= 15 * n, "calls answered before the kill")
            os.kill(victim, signal.SIGKILL)
        for t in threads:
            t.join(timeout=300)
    finally:
        code = server.stop()
    assert code == 0, server.log()
    assert failures == []
    assert len(acknowledged) == 8 * 15
    logged = logged_tasks(db, ["wsp_r"])
    assert sorted(logged) == sorted(acknowledged) and set(logged.values()) == {1}


def test_a_worker_failing_at_start_is_retried_with_a_growing_delay(tmp_path: Path) -> None:
    """The database's directory renamed away: a new worker cannot open the
    database and exits 1, again and again; the running ones keep their open
    files. Renamed back, the next attempt serves."""
    home = tmp_path / "data"
    home.mkdir()
    db = str(home / "w.db")
    set_up(db, ["wsp_f"])
    server = Supervised(db)
    try:
        first = eventually(lambda: len(server.workers()) == WORKERS and server.workers(), "workers")
        home.rename(tmp_path / "away")
        os.kill(first[0], signal.SIGKILL)
        retries = "exited with status 1; starting another in "
        failures = eventually(
            lambda: len(f := [line for line in server.lines if retries in line]) >= 4 and f,
            "four failed starts", timeout=60,
        )
        assert "cannot open the database" in server.log()
        (tmp_path / "away").rename(home)
        eventually(lambda: len(w := server.workers()) == WORKERS and first[0] not in w, "a worker serving again",
                   timeout=60)
        with httpx.Client(timeout=60) as http:
            assert "result" in http.post(server.url, json=_task("wsp_f", "back")).json()
    finally:
        code = server.stop()
    assert code == 0, server.log()
    # Each failed start doubles the wait before the next (up to the cap); a
    # death logged otherwise (a worker stopped while starting) also counts,
    # so a logged delay may be more than twice the one logged before it.
    delays = [float(line.split(retries)[1].split(" s")[0]) for line in failures]
    doublings = [later / earlier for earlier, later in itertools.pairwise(delays)]
    assert all(d >= 2 or later == Backoff().cap for d, later in zip(doublings, delays[1:], strict=True)), delays
    assert logged_tasks(db, ["wsp_f"]) == {"back": 1}


# -- a stop while a worker starts ----------------------------------------------------

# A supervisor (`run_workers`) of one worker whose start-up never ends but
# for the stop, which the code around it interrupts in the way `how` names; once started,
# the worker serves until SIGTERM. It prints "starting" when the stop may
# come.
_STARTING = """
import signal, sys, threading, time
from coordinator.server.workers import run_workers

def serve(ready, slot):
    try:
        print("starting", flush=True)
        while True:
            time.sleep(0.05)
    except BaseException as exc:
        if {how!r} == "wrapped":
            raise RuntimeError("a library's own error") from exc
        # "swallowed": the library carries on
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ready()
    while not stop.wait(0.05):
        pass
    print("stopped", flush=True)
    return 0

sys.exit(run_workers(1, serve))
"""


@pytest.mark.parametrize("how", ["swallowed", "wrapped"])
def test_a_stop_that_reaches_a_worker_still_starting_stops_it_cleanly(tmp_path: Path, how: str) -> None:
    """SIGTERM while the worker starts raises SystemExit in whatever code it
    is running: code that catches it and carries on still has the worker
    stop once it serves; code that wraps it in an error of its own still
    has the worker exit 0. Either way the supervisor exits 0, at once."""
    proc = subprocess.Popen([sys.executable, "-c", _STARTING.format(how=how)], cwd=ROOT, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "starting\n"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            for pid in children(proc.pid):
                os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()
    assert (proc.returncode, err) == (0, "")
    assert out == ("stopped\n" if how == "swallowed" else "")


# -- SIGHUP -------------------------------------------------------------------------


@pytest.mark.parametrize("fresh", [True, False], ids=["new connection per call", "keep-alive"])
def test_sighup_replaces_every_worker_under_load_without_a_failed_call(tmp_path: Path, fresh: bool) -> None:
    """Clients on a new connection for each call, or each on its keep-alive
    connection (the old worker's answers say `Connection: close` once it
    stops, so the next call goes to a new connection)."""
    db = str(tmp_path / "w.db")
    workspaces = [f"wsp_h{i}" for i in range(6)]
    set_up(db, workspaces)
    server = Supervised(db)
    load = None
    try:
        first = eventually(lambda: len(server.workers()) == WORKERS and server.workers(), "workers")
        load = Load(server.url, workspaces, fresh=fresh)
        eventually(lambda: load.count() >= 30, "calls answered")
        os.kill(server.proc.pid, signal.SIGHUP)
        eventually(lambda: "every worker replaced" in server.log(), "the reload's end", timeout=90)
        now = server.workers()
        assert len(now) == WORKERS and set(now).isdisjoint(first), (first, now)
        after = load.count()
        eventually(lambda: load.count() >= after + 30, "calls answered after the reload")
        load.finish()
    finally:
        if load is not None:
            load.finish()
        code = server.stop()
    assert code == 0, server.log()
    assert load.failed == []
    assert gone(first)
    logged = logged_tasks(db, workspaces)
    assert sorted(logged) == sorted(load.acknowledged)
    assert set(logged.values()) == {1}


@pytest.mark.parametrize(
    ("worker", "passed_on"),
    [
        ("stops with the call still in its backlog", False),
        ("accepts the call and stops before reading it", False),
        ("reads the call and stops without answering", True),
        ("answers", True),
    ],
)
def test_a_call_passed_to_a_worker_that_stopped_before_reading_it_is_answered_here(
    tmp_path: Path, worker: str, passed_on: bool
) -> None:
    """`forward` tells the two by the kernel's answer: a worker that stopped
    before reading the whole request (a reload closing its slot's socket with
    a call in its backlog) resets the connection, so the call was not
    applied and is answered where it arrived (None); one that read it may
    have applied it: 502, applied unknown."""
    sender = Affinity(str(tmp_path), 0, 2)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(sender.path(1))
    listener.listen(8)
    body = b'{"jsonrpc": "2.0", "id": "c1", "method": "workspace.describe", "params": {"workspace": "w"}}'

    def the_other_worker() -> None:
        if worker.startswith("stops"):
            # once the call's connection waits in the backlog
            eventually(lambda: _unix_listeners(tmp_path).count(Path(sender.path(1))) > 1, "the connection")
            listener.close()
            return
        conn, _ = listener.accept()
        with conn:
            if worker.startswith("accepts"):
                return
            received = b""
            while not received.endswith(body):
                received += conn.recv(65536)
            if worker == "answers":
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}")

    async def forward() -> Any:
        call = Elsewhere(1, "w", "c1")
        pending = asyncio.ensure_future(sender.forward(call, b"/chap", [(b"host", b"x")], body))
        # The other worker acts on its own thread, while the loop runs `forward`.
        await asyncio.to_thread(the_other_worker)
        return await pending

    try:
        answer = asyncio.run(forward())
    finally:
        listener.close()
    if not passed_on:
        assert answer is None
    elif worker == "answers":
        assert (answer.status, answer.body) == (200, b"{}")
    else:
        assert answer.status == 502 and b'"applied":"unknown"' in answer.body
