"""Several coordinator processes on one database (PostgreSQL, and one SQLite
file): concurrent writers to a shared workspace and to their own, writers
killed with SIGKILL at random moments, and `chapline serve --workers N`.

What must hold every time: every call answered with a result is in the log
exactly once, every chain verifies, and a call that could not be applied is
answered with an error, never an exception."""

from __future__ import annotations

import collections
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from servers import Serve
from support import ALICE, BOT, eventually
from test_projections import fold, tables

from coordinator import Coordinator
from coordinator.projections import AnalyticsProjection
from storage.target import open_store

ROOT = Path(__file__).resolve().parent.parent
SHARED = "wsp_shared"
_spawn = multiprocessing.get_context("spawn")


@pytest.fixture(params=["postgres", "sqlite"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database the processes share: a PostgreSQL URI, or a SQLite file."""
    if request.param == "sqlite":
        return str(tmp_path / "shared.db")
    server = request.getfixturevalue("pg_server")
    return server.uri(server.new_database())


def _call(workspace: str, rid: str, method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method,
            "params": {"workspace": workspace, **params}}


def _task(workspace: str, rid: str) -> dict[str, Any]:
    return _call(workspace, rid, "task.create", **{"from": ALICE}, assignee=BOT, kind="k",
                 input={"rid": rid})


def _set_up(target: str, workspaces: list[str]) -> None:
    coord = Coordinator(open_store(target))
    for ws in workspaces:
        for envelope in (
            _call(ws, "c", "workspace.create"),
            _call(ws, "a", "participant.join", **{"from": ALICE}, type="human", role="admin"),
            _call(ws, "b", "participant.join", **{"from": BOT}, type="agent", role="drafter"),
        ):
            assert "result" in coord.dispatch(envelope)
    coord.close()


def _check(target: str, workspaces: list[str], acknowledged: list[str], refused: list[str]) -> None:
    """Each acknowledged call once in its log, no refused one, chains verify."""
    coord = Coordinator(open_store(target))
    try:
        logged: collections.Counter[str] = collections.Counter()
        for ws in workspaces:
            verdict = coord.dispatch(_call(ws, "v", "audit.verify_chain"))["result"]
            assert verdict["status"] == "verified", (ws, verdict)
            for entry in coord.store.read_entries(ws):
                call = entry.get("envelope") or {}
                if call.get("method") == "task.create":
                    logged[call["id"]] += 1
        assert [rid for rid, n in logged.items() if n > 1] == []
        assert [rid for rid in acknowledged if rid not in logged] == []
        assert [rid for rid in refused if rid in logged] == []
    finally:
        coord.close()


# -- processes with their own coordinator --------------------------------------


def _writer(target: str, index: int, calls: int, go: Any, out: Any) -> None:
    """One process: its own coordinator, `calls` task.create calls alternating
    between the shared workspace and its own; reports each answer."""
    coord = Coordinator(open_store(target, watch=True))
    go.wait()
    answers = []
    for k in range(calls):
        ws = SHARED if k % 2 == 0 else f"wsp_own{index}"
        rid = f"p{index}-{k}"
        try:
            response = coord.dispatch(_task(ws, rid))
        except BaseException as exc:  # noqa: BLE001 (dispatch must not raise: reported)
            response = {"raised": repr(exc)}
        answers.append((rid, response))
    coord.close()
    out.put(answers)


def test_processes_writing_concurrently_lose_nothing(target: str) -> None:
    n, calls = 4, 40
    workspaces = [SHARED] + [f"wsp_own{i}" for i in range(n)]
    _set_up(target, workspaces)
    go, out = _spawn.Event(), _spawn.Queue()
    procs = [_spawn.Process(target=_writer, args=(target, i, calls, go, out)) for i in range(n)]
    for p in procs:
        p.start()
    go.set()
    answers = [a for _ in procs for a in out.get(timeout=300)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len(answers) == n * calls
    assert [a for a in answers if "raised" in a[1]] == []
    # A writer that loses the race waits for the workspace's write turn: no
    # call is refused (-32901), every one is acknowledged.
    assert [(rid, r) for rid, r in answers if "result" not in r] == []
    _check(target, workspaces, [rid for rid, _ in answers], [])


def _endless_writer(target: str, index: int, out: Any) -> None:
    """Writes until killed; sends each acknowledged call's id as it is answered."""
    coord = Coordinator(open_store(target, watch=True))
    k = 0
    while True:
        ws = SHARED if k % 2 == 0 else f"wsp_own{index}"
        rid = f"k{index}-{k}"
        if "result" in coord.dispatch(_task(ws, rid)):
            out.send(rid)
        k += 1


def test_sigkill_at_random_moments_loses_nothing_acknowledged(target: str) -> None:
    rounds, n = 3, 2
    workspaces = [SHARED] + [f"wsp_own{r * n + i}" for r in range(rounds) for i in range(n)]
    _set_up(target, workspaces)
    acknowledged: list[str] = []
    rng = random.Random()
    for r in range(rounds):
        pipes, procs = [], []
        for i in range(n):
            receive, send = _spawn.Pipe(duplex=False)
            p = _spawn.Process(target=_endless_writer, args=(target, r * n + i, send))
            p.start()
            send.close()
            pipes.append(receive)
            procs.append(p)
        for receive in pipes:  # every writer is writing
            acknowledged.append(receive.recv())
        for _ in range(rng.randrange(1, 12)):  # a random number of calls more: then each is mid-call
            receive = rng.choice(pipes)
            assert receive.poll(60), "a writer stopped answering"
            acknowledged.append(receive.recv())
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
        for p in procs:
            p.join(timeout=60)
        for receive in pipes:
            while True:
                try:
                    acknowledged.append(receive.recv())
                except EOFError:
                    break
    assert len(acknowledged) > rounds * n
    _check(target, workspaces, acknowledged, [])
    # the database takes writes as before
    coord = Coordinator(open_store(target))
    assert "result" in coord.dispatch(_task(SHARED, "after"))
    coord.close()


# -- chapline serve --workers N -------------------------------------------------


def test_serve_with_several_workers_on_one_database(target: str) -> None:
    """Every worker also feeds one analytics projection, in the database
    itself: each entry is counted once, whichever worker wrote it."""
    workers, clients, calls = 4, 8, 20
    workspaces = [SHARED] + [f"wsp_own{i}" for i in range(clients)]
    _set_up(target, workspaces)
    server = Serve(target, "--workers", str(workers), "--projection", f"analytics={target}")
    try:
        assert f"{workers} workers" in server.line, server.line
        url = server.url
        answers: list[tuple[str, dict[str, Any]]] = []
        lock = threading.Lock()

        def client(i: int) -> None:
            with httpx.Client(timeout=120) as http:
                for k in range(calls):
                    ws = SHARED if k % 2 == 0 else f"wsp_own{i}"
                    rid = f"h{i}-{k}"
                    body = http.post(url, json=_task(ws, rid)).json()
                    with lock:
                        answers.append((rid, body))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        pids = _children(server.proc.pid)
        assert len(pids) == workers, pids
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert len(answers) == clients * calls
    assert [(rid, r) for rid, r in answers if "result" not in r] == []  # no -32901: writers wait their turn
    _check(target, workspaces, [rid for rid, _ in answers], [])
    with Coordinator(open_store(target)) as coord:
        expected: dict[str, list[Any]] = {}
        for ws in workspaces:
            for table, rows in fold(coord.snapshot(ws)).items():
                expected[table] = sorted([*expected.get(table, []), *rows], key=repr)
        projection = AnalyticsProjection(target)
        try:
            assert tables(projection.connection) == expected
        finally:
            projection.close()


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2:].split()
            if int(fields[1]) == pid and fields[0] not in (b"Z", b"X"):
                out.append(int(entry))
    return out


@pytest.mark.parametrize("args, named", [
    (["--db", ":memory:", "--workers", "2"], "--workers"),
    (["--workers", "0"], "--workers"),
    (["--workers", "2", "--projection", "analytics=:memory:"], "--projection"),
])
def test_bad_serve_arguments_exit_2(args: list[str], named: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--port", "0", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert named in result.stderr and "Traceback" not in result.stderr




# -- change notification ----------------------------------------------------------


def test_a_coordinator_sees_another_writers_change_before_its_next_call(target: str) -> None:
    """With `watch`, what another process wrote is reloaded before the next
    call, so reads are fresh and writes start from the new state."""
    _set_up(target, [SHARED])
    watching = Coordinator(open_store(target, watch=True))
    blind = Coordinator(open_store(target))
    other = Coordinator(open_store(target))
    try:
        def count(coord: Coordinator) -> int:
            return coord.dispatch(_call(SHARED, "d", "workspace.describe"))["result"]["audit_count"]

        before = count(watching)
        assert count(blind) == before
        assert "result" in other.dispatch(_task(SHARED, "x1"))
        # PostgreSQL delivers notifications asynchronously
        eventually(lambda: count(watching) == before + 1, "notice of the change")
        assert count(blind) == before  # without watch: stale until its next write conflicts
        # a write from the refreshed state goes through at once, chained on x1
        assert "result" in watching.dispatch(_task(SHARED, "x2"))
        verdict = watching.dispatch(_call(SHARED, "v", "audit.verify_chain"))["result"]
        assert verdict["status"] == "verified" and verdict["entries_total"] == before + 2
    finally:
        for coord in (watching, blind, other):
            coord.close()


def test_a_batch_asks_what_changed_once_and_starts_from_the_fresh_state(target: str) -> None:
    """A watching coordinator's batch (a server's group commit) asks the
    store what others changed once, as it opens, not before each of its
    calls; its calls chain on what another process wrote before it opened."""
    _set_up(target, [SHARED])
    store = open_store(target, watch=True)
    asked = 0
    ask = store.changed

    def counted() -> Any:
        nonlocal asked
        asked += 1
        return ask()

    store.changed = counted  # type: ignore[method-assign]
    watching = Coordinator(store)
    other = Coordinator(open_store(target))
    try:
        before = watching.dispatch(_call(SHARED, "d", "workspace.describe"))["result"]["audit_count"]
        assert "result" in other.dispatch(_task(SHARED, "x1"))
        asked = 0
        with watching.batch():
            answers = [watching.dispatch(_task(SHARED, f"b{k}")) for k in range(3)]
        assert asked == 1
        assert all("result" in a for a in answers), answers
        verdict = watching.dispatch(_call(SHARED, "v", "audit.verify_chain"))["result"]
        assert verdict["status"] == "verified" and verdict["entries_total"] == before + 4
    finally:
        watching.close()
        other.close()
