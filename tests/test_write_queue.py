"""Writers queue instead of failing (SPECIFICATION.md, "Write-ahead
persistence", and the store contract's `write_turn`): many processes writing
one workspace on PostgreSQL and on one SQLite file, each with its own
coordinator and no change notification, so that most of their writes lose the
compare-and-swap first. Each lost race waits for the workspace's write turn
in the database and runs again inside it.

What must hold: every call is acknowledged, each exactly once in the log, the
chain verifies; a writer killed while it holds the turn takes the lock with
it; a turn held past the store's wait is answered -32901 naming the wait."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from client import refused
from servers import Serve
from support import eventually
from test_multiprocess import SHARED, _check, _set_up, _task

from coordinator import Coordinator
from storage import StoreChange, WriteTurnTimeoutError
from storage.target import open_store

ROOT = Path(__file__).resolve().parent.parent
_spawn = multiprocessing.get_context("spawn")


@pytest.fixture(params=["postgres", "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database the processes share: a PostgreSQL URI, or a SQLite file."""
    if request.param == "sqlite":
        return str(tmp_path / "shared.db")
    server = request.getfixturevalue("pg_server")
    return server.uri(server.new_database())


def _writer(target: str, index: int, calls: int, ready: Any, go: Any, out: Any) -> None:
    """One process, its own coordinator (no `watch`: it learns of the others'
    writes only by losing to them), `calls` task.create on the shared
    workspace; reports each answer."""
    coord = Coordinator(open_store(target))
    ready.put(index)
    go.wait()
    answers = []
    for k in range(calls):
        rid = f"q{index}-{k}"
        try:
            response = coord.dispatch(_task(SHARED, rid))
        except BaseException as exc:  # noqa: BLE001 (dispatch must not raise: reported)
            response = {"raised": repr(exc)}
        answers.append((rid, response))
    coord.close()
    out.put(answers)


class _Writers:
    """`n` writer processes, started and loaded, waiting for `go()`."""

    def __init__(self, target: str, n: int, calls: int) -> None:
        self.ready, self.go_event, self.out = _spawn.Queue(), _spawn.Event(), _spawn.Queue()
        self.procs = [
            _spawn.Process(target=_writer, args=(target, i, calls, self.ready, self.go_event, self.out))
            for i in range(n)
        ]
        for p in self.procs:
            p.start()
        for _ in self.procs:
            self.ready.get(timeout=300)

    def go(self) -> None:
        self.go_event.set()

    def answers(self) -> list[tuple[str, dict[str, Any]]]:
        answers = [a for _ in self.procs for a in self.out.get(timeout=900)]
        for p in self.procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        return answers

    def kill(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join()


def _all_acknowledged(target: str, answers: list[tuple[str, dict[str, Any]]], expected: int) -> None:
    assert len(answers) == expected
    assert [(rid, r) for rid, r in answers if "result" not in r] == []
    _check(target, [SHARED], [rid for rid, _ in answers], [])
    with Coordinator(open_store(target)) as coord:
        created = [
            e for e in coord.store.read_entries(SHARED)
            if (e.get("envelope") or {}).get("method") == "task.create"
        ]
    assert len(created) == expected


@pytest.mark.parametrize("n, calls", [(4, 100), (16, 100)], ids=["4x100", "16x100"])
def test_free_writers_on_one_workspace_are_all_acknowledged(database: str, n: int, calls: int) -> None:
    _set_up(database, [SHARED])
    writers = _Writers(database, n, calls)
    try:
        writers.go()
        answers = writers.answers()
    finally:
        writers.kill()
    _all_acknowledged(database, answers, n * calls)


def _holder(target: str, held: Any, release: Any) -> None:
    """Takes the shared workspace's write turn and keeps it until told (or killed)."""
    store = open_store(target)
    with store.write_turn(SHARED):
        held.send("holding")
        release.recv()
    store.close()


class _Holder:
    """A process holding the shared workspace's write turn."""

    def __init__(self, target: str) -> None:
        held, self._held_send = _spawn.Pipe(duplex=False)
        self._release, release_send = _spawn.Pipe(duplex=False)
        self.proc = _spawn.Process(target=_holder, args=(target, self._held_send, self._release))
        self.proc.start()
        self._release_send = release_send
        assert held.poll(120), "the holder did not take the turn"
        assert held.recv() == "holding"

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=60)


def _lock_waits(uri: str) -> int:
    """Sessions of the database waiting for a lock (PostgreSQL)."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
    return 0 if row is None else int(row[0])


def test_a_writer_killed_holding_the_turn_takes_the_lock_with_it(database: str) -> None:
    """The others are waiting for the turn when its holder dies by SIGKILL:
    the database drops the lock with the session (PostgreSQL) or the file
    lock with the process (SQLite), and every call goes through."""
    _set_up(database, [SHARED])
    writers = _Writers(database, 3, 20)
    holder = _Holder(database)
    try:
        writers.go()
        if database.startswith("postgresql://"):  # the writers are queued behind it
            eventually(lambda: _lock_waits(database) >= 3, "writers waiting for the turn")
        holder.kill()
        answers = writers.answers()
    finally:
        holder.kill()
        writers.kill()
    _all_acknowledged(database, answers, 60)


def test_a_turn_held_past_the_wait_is_answered_32901_naming_it(database: str) -> None:
    """A writer stopped (SIGSTOP) while it holds the turn: a call waits the
    store's wait, then is answered -32901 naming it, and nothing of it is
    recorded; once that writer is gone, calls go through again."""
    _set_up(database, [SHARED])
    coord = Coordinator(open_store(database, wait=0.5))
    holder = _Holder(database)
    try:
        holder.signal(signal.SIGSTOP)
        error = refused(coord.dispatch(_task(SHARED, "late")), -32901)
        assert "0.5 s deadline" in error["message"], error
        assert error["data"] == {"workspace": SHARED, "deadline": 0.5}
    finally:
        holder.kill()
    try:
        assert "result" in coord.dispatch(_task(SHARED, "after"))
    finally:
        coord.close()
    _check(database, [SHARED], ["after"], ["late"])


def test_a_turn_keeps_other_writers_out_for_at_most_their_wait(database: str) -> None:
    """In one process, two handles: while one holds the turn, the other's
    write and turn each raise WriteTurnTimeoutError (workspace, wait) and
    write nothing; after it, the other writes."""
    _set_up(database, [SHARED])
    holding = open_store(database)
    other = open_store(database, wait=0.2)
    try:
        (held,) = other.load_held(SHARED)
        with holding.write_turn(SHARED):
            with pytest.raises(WriteTurnTimeoutError) as timed_out:
                other.apply(StoreChange(SHARED, held.version, held.version, "t", held.meta))
            assert (timed_out.value.workspace, timed_out.value.wait) == (SHARED, 0.2)
            with pytest.raises(WriteTurnTimeoutError), other.write_turn(SHARED):
                pass
        assert other.load_held(SHARED)[0].updated_at == held.updated_at
        other.apply(StoreChange(SHARED, held.version, held.version, "t", held.meta))
        assert other.load_held(SHARED)[0].updated_at == "t"
    finally:
        other.close()
        holding.close()


def test_serve_write_wait_bounds_the_wait(database: str) -> None:
    """`serve --write-wait`: the same answer over HTTP, 503."""
    _set_up(database, [SHARED])
    with Serve(database, "--write-wait", "0.5") as server:
        holder = _Holder(database)
        try:
            holder.signal(signal.SIGSTOP)
            reply = httpx.post(server.url, json=_task(SHARED, "late"), timeout=60)
            assert reply.status_code == 503
            error = refused(reply.json(), -32901)
            assert "0.5 s deadline" in error["message"], error
        finally:
            holder.kill()


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan"])
def test_a_write_wait_that_is_not_a_positive_number_exits_2(value: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--port", "0", "--write-wait", value],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert "--write-wait" in result.stderr and "Traceback" not in result.stderr
