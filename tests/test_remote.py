"""RemoteCoordinator against a real `chapline serve` (SQLite and PostgreSQL,
1 and 3 workers): the same answers as an embedded coordinator, retries that
never run a call twice (eight threads on one workspace, answers lost on the
way back, the server restarted mid-run), and waiting for a person's decision
across a restart. SPECIFICATION.md, "RemoteCoordinator", "Waiting for people"."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from client import Client, env, refused
from hypothesis import given
from hypothesis import strategies as st
from servers import Serve
from servers import env as child_env
from support import eventually, make
from test_differential import CORE, id_map

from coordinator import AsyncRemoteCoordinator, Coordinator, Decision, RemoteCoordinator, reviewed
from coordinator.client import Retry
from coordinator.errors import RemoteRefused, RemoteUnavailable, WaitTimedOut
from storage import SqliteStore

KEY = "x-chapline-idempotency-key"
ALICE, BOT = "human:alice", "agent:bot"
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
DEADLINE = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """`chapline serve` on one port, which a restart keeps: clients keep their URL."""

    def __init__(self, db: str, workers: int) -> None:
        self.db = db
        self.options = ("--port", str(free_port()), *(("--workers", str(workers)) if workers > 1 else ()))
        self.serve = Serve(db, *self.options)
        self.base = self.serve.base

    def restart(self, sig: int = signal.SIGTERM) -> None:
        """Stop (SIGKILL: a crash, calls in flight) and start again."""
        if sig == signal.SIGTERM:
            self.stop()
        else:
            self.serve.stop(sig)
        self.serve = Serve(self.db, *self.options)

    def stop(self) -> None:
        code, err = self.serve.stop()
        assert code == 0, err


@pytest.fixture(params=[("sqlite", 1), ("sqlite", 3), ("postgres", 1), ("postgres", 3)],
                ids=["sqlite-1", "sqlite-3", "postgres-1", "postgres-3"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    kind, workers = request.param
    if kind == "sqlite":
        db = str(tmp_path / "remote.db")
    else:
        pg = request.getfixturevalue("pg_server")
        db = pg.uri(pg.new_database())
    running = Server(db, workers)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def one(tmp_path: Path) -> Iterator[Server]:
    """One worker on SQLite: the waiting tests."""
    running = Server(str(tmp_path / "remote.db"), 1)
    try:
        yield running
    finally:
        running.stop()


def normal(value: Any) -> Any:
    """`value` with what the clock and the chain decide made equal, and the
    idempotency key the remote client adds to each envelope taken out."""
    if isinstance(value, str) and TIME.match(value):
        return "<time>"
    if isinstance(value, dict):
        drop = {"prev_hash", "chain_head", "evidence_head", KEY}
        return {k: normal(v) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value


# -- the same answers as embedded ---------------------------------------------


def test_core_workload_answers_as_embedded(server: Server) -> None:
    from test_differential import mapped

    with RemoteCoordinator(server.base) as remote:
        ours, theirs = Client(remote), Client(make())
        answers = [(ours.run(step), theirs.run(step)) for step in CORE]
        mapping = id_map(ours, theirs)
        for step, (x, y) in zip(CORE, answers, strict=True):
            assert normal(mapped(x, mapping)) == normal(y), step
        w = ours.names["$W"]
        remote_log = Client(remote, w).log()
        embedded_log = Client(theirs.target, theirs.names["$W"]).log()
        assert normal(mapped(remote_log, mapping)) == normal(embedded_log)
        assert all(KEY in e.get("envelope", e.get("request", {})) for e in Client(remote, w).log())


def test_read_views_match_the_embedded_coordinator_on_the_same_store(tmp_path: Path) -> None:
    db = tmp_path / "views.db"
    served = Server(str(db), 1)
    try:
        with RemoteCoordinator(served.base) as remote:
            c = Client(remote, "wsp_v")
            c.setup()
            t = c.new_task()
            views = remote.workspaces
            assert "wsp_v" in views and "wsp_nope" not in views and list(views) == ["wsp_v"]
            member = views["wsp_v"].members[ALICE]
            assert member.role == "admin"
            assert views["wsp_v"].tasks[t].state == "created"
            with pytest.raises(KeyError):
                views["wsp_nope"]
            state = remote.get_workspace("wsp_v")
            assert remote.get_workspace("wsp_nope") is None
    finally:
        served.stop()
    with Coordinator(SqliteStore(db)) as embedded:
        assert state == embedded.get_workspace("wsp_v")
        assert embedded.workspaces["wsp_v"].members[ALICE] == member


def test_the_async_twin_answers_as_the_sync_client(one: Server) -> None:
    async def run() -> list[dict[str, Any]]:
        async with AsyncRemoteCoordinator(one.base) as remote:
            out = [await remote.dispatch(env("workspace.create", {"workspace": "wsp_a"}))]
            out.append(await remote.dispatch(env("workspace.create", {"workspace": "wsp_a"})))
            out.append(await remote.snapshot("wsp_a"))
            return out

    created, again, snapshot = asyncio.run(run())
    assert created["result"]["workspace"] == "wsp_a"
    refused(again, -32602)
    assert snapshot["id"] == "wsp_a"


# -- retries, exactly once ----------------------------------------------------


class LosingTransport(httpx.HTTPTransport):
    """Every third answer is lost after the server has run the call: the
    client sees a dropped connection, as when a network fails on the way back."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        with self.lock:
            self.n += 1
            lose = request.method == "POST" and self.n % 3 == 0
        if lose:
            response.read()
            response.close()
            raise httpx.ReadError("the answer was lost", request=request)
        return response


def _hammer(base: str, workspace: str, threads: int, calls: int,
            transport: Callable[[], httpx.BaseTransport | None],
            during: Callable[[list[str]], None] | None = None) -> list[str]:
    """`threads` clients each creating `calls` tasks; the rids acknowledged."""
    acknowledged: list[str] = []
    failures: list[Any] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        with RemoteCoordinator(base, retry=Retry(attempts=40, max_backoff=1.0), transport=transport()) as remote:
            for k in range(calls):
                rid = f"c{i}-{k}"
                answer = remote.dispatch(env("task.create", {"workspace": workspace, "from": ALICE,
                                                             "assignee": BOT, "kind": "k", "input": {"rid": rid}}))
                with lock:
                    (acknowledged if "result" in answer else failures).append(rid if "result" in answer else answer)

    workers = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    if during is not None:
        during(acknowledged)
    for w in workers:
        w.join()
    assert failures == []
    return acknowledged


def _once_each(base: str, workspace: str, acknowledged: list[str]) -> None:
    with RemoteCoordinator(base) as remote:
        log = Client(remote, workspace).log(filter={"method": "task.create"})
    rids = [e["envelope"]["params"]["input"]["rid"] for e in log]
    assert sorted(rids) == sorted(acknowledged)
    assert len(set(rids)) == len(rids)


def _set_up(base: str, workspace: str) -> None:
    with RemoteCoordinator(base) as remote:
        Client(remote, workspace).setup(members=(ALICE, BOT))


def test_eight_threads_with_lost_answers_each_call_acknowledged_once(server: Server) -> None:
    _set_up(server.base, "wsp_h")
    acknowledged = _hammer(server.base, "wsp_h", 8, 12, LosingTransport)
    assert len(acknowledged) == 8 * 12
    _once_each(server.base, "wsp_h", acknowledged)


def test_a_server_restarted_mid_run_loses_and_doubles_no_call(server: Server) -> None:
    _set_up(server.base, "wsp_r")

    def restart(acknowledged: list[str]) -> None:
        eventually(lambda: len(acknowledged) >= 16, "calls before the restart")
        server.restart()

    acknowledged = _hammer(server.base, "wsp_r", 8, 10, lambda: None, restart)
    assert len(acknowledged) == 8 * 10
    _once_each(server.base, "wsp_r", acknowledged)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_server_killed_mid_run_loses_and_doubles_no_call(kind: str, request: pytest.FixtureRequest,
                                                          tmp_path: Path) -> None:
    """One worker killed with SIGKILL while calls are in flight, then started
    again: a call written before the kill whose answer never left is
    answered from the log when the client sends it again."""
    if kind == "sqlite":
        db = str(tmp_path / "killed.db")
    else:
        pg = request.getfixturevalue("pg_server")
        db = pg.uri(pg.new_database())
    served = Server(db, 1)
    try:
        _set_up(served.base, "wsp_k")

        def crash(acknowledged: list[str]) -> None:
            eventually(lambda: len(acknowledged) >= 16, "calls before the crash")
            served.restart(signal.SIGKILL)

        acknowledged = _hammer(served.base, "wsp_k", 8, 10, lambda: None, crash)
        assert len(acknowledged) == 8 * 10
        _once_each(served.base, "wsp_k", acknowledged)
    finally:
        served.stop()


def test_signed_calls_are_resent_verbatim_and_answered_from_the_replay_index(one: Server) -> None:
    from coordinator import public_jwk

    seed = bytes([7]) * 32
    with RemoteCoordinator(one.base) as plain, RemoteCoordinator(
        one.base, key=(seed, "k1"), transport=LosingTransport(), retry=Retry(attempts=5, backoff=0.01)
    ) as signed:
        c = Client(plain, "wsp_s")
        c.setup(members=(ALICE,))
        c.ok("participant.join", BOT, type="agent", jwks={"keys": [public_jwk(seed, "k1")]})
        for k in range(6):
            answer = signed.dispatch(env("task.create", {"workspace": "wsp_s", "from": BOT, "assignee": BOT,
                                                         "kind": "k", "input": {"rid": f"s{k}"}}, id=f"s{k}"))
            assert "result" in answer, answer
        entries = c.log(filter={"method": "task.create"})
    assert [e["envelope"]["params"]["input"]["rid"] for e in entries] == [f"s{k}" for k in range(6)]
    assert all("sig" in e["envelope"] and KEY not in e["envelope"] for e in entries)


def test_an_unreachable_server_raises_remote_unavailable_after_the_attempts() -> None:
    pauses: list[float] = []
    remote = RemoteCoordinator(f"http://127.0.0.1:{free_port()}", retry=Retry(attempts=4, backoff=0.1),
                               sleep=pauses.append, jitter=lambda: 1.0)
    with pytest.raises(RemoteUnavailable) as raised:
        remote.dispatch(env("workspace.create", {}))
    assert raised.value.attempts == 4 and "ConnectError" in raised.value.reason
    assert pauses == [0.1, 0.2, 0.4]
    remote.close()


@given(st.integers(1, 40), st.floats(0, 1, exclude_max=True))
def test_backoff_doubles_up_to_its_ceiling_with_jitter(failures: int, jitter: float) -> None:
    retry = Retry(attempts=50, backoff=0.05, max_backoff=2.0)
    ceiling = min(2.0, 0.05 * 2 ** (failures - 1))
    assert ceiling / 2 <= retry.pause(failures, jitter) <= ceiling


def test_a_bearer_token_is_sent_and_a_missing_one_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "auth.db"
    made = subprocess.run(
        [sys.executable, "-m", "coordinator", "token", "create", "--db", str(db), "--as", ALICE,
         "--all-workspaces", "--max-role", "admin", "--may-create"],
        capture_output=True, text=True, env=child_env(), timeout=120, check=True,
    )
    served = Server(str(db), 1)
    served.serve.stop()
    served.serve = Serve(str(db), *served.options, "--auth")
    try:
        with RemoteCoordinator(served.base, token=made.stdout.strip()) as remote, \
                RemoteCoordinator(served.base) as anonymous:
            assert "result" in remote.dispatch(env("workspace.create", {"workspace": "wsp_t", "from": ALICE}))
            refused(anonymous.dispatch(env("workspace.describe", {"workspace": "wsp_t"})), -32902)
    finally:
        served.stop()


# -- waiting for people -------------------------------------------------------


def _review(remote: RemoteCoordinator, workspace: str) -> str:
    c = Client(remote, workspace)
    c.setup(members=(ALICE, BOT))
    task = c.new_task(review_required=True)
    c.ok("review.request", BOT, task_id=task, to=[ALICE], artefact={"text": "draft"})
    return task


DECISIONS = {
    "approve": ({"method": "decide.approve"}, Decision("", "approve", "completed", ALICE, {"text": "draft"})),
    "override": (
        {"method": "decide.override", "rationale": "clearer",
         "diff": [{"op": "replace", "path": "/text", "value": "better"}]},
        Decision("", "override", "completed", ALICE, {"text": "better"}, "clearer"),
    ),
    "reject": ({"method": "decide.reject", "comment": "off topic"},
               Decision("", "reject", "declined", ALICE, None, "off topic")),
    "reject-revise": ({"method": "decide.reject", "comment": "again", "request_revision": True},
                      Decision("", "reject", "in_progress", ALICE, None, "again", True)),
    "abstain": ({"method": "abstain.declare", "reason": "not my field"},
                Decision("", "abstain", "abstained", ALICE, None, "not my field")),
}


@pytest.mark.parametrize("kind", list(DECISIONS))
def test_wait_for_decision_returns_another_clients_decision(one: Server, kind: str) -> None:
    params, expected = DECISIONS[kind]
    with RemoteCoordinator(one.base) as agent, RemoteCoordinator(one.base) as person:
        task = _review(agent, "wsp_w")
        got: list[Decision] = []
        waiter = threading.Thread(target=lambda: got.append(agent.wait_for_decision("wsp_w", task, DEADLINE)))
        waiter.start()
        call = {k: v for k, v in params.items() if k != "method"}
        Client(person, "wsp_w").ok(params["method"], ALICE, task_id=task, **call)
        waiter.join()
    assert got == [Decision(task, *[getattr(expected, f) for f in Decision.__struct_fields__[1:]])]
    assert got[0].approved is (kind in ("approve", "override"))


def test_wait_for_decision_returns_an_escalation_naming_the_task_it_went_to(one: Server) -> None:
    """A reviewer who escalates hands the review to a new task: the agent is
    told so at once (not left waiting for a decision that will not come on
    this task) and may wait for the new task's."""
    with RemoteCoordinator(one.base) as agent, RemoteCoordinator(one.base) as person:
        task = _review(agent, "wsp_e")
        got: list[Decision] = []
        waiter = threading.Thread(target=lambda: got.append(agent.wait_for_decision("wsp_e", task, DEADLINE)))
        waiter.start()
        raised = Client(person, "wsp_e").ok("escalate.raise", ALICE, original_task_id=task,
                                            new_task={"assignee": BOT})
        waiter.join()
        new = raised["new_task_id"]
        assert got == [Decision(task, "escalate", "escalated", ALICE, escalated_to=new)]
        assert not got[0].approved
        Client(agent, "wsp_e").ok("review.request", BOT, task_id=new, to=[ALICE], artefact={"text": "again"})
        Client(person, "wsp_e").ok("decide.approve", ALICE, task_id=new)
        assert agent.wait_for_decision("wsp_e", new, DEADLINE) == Decision(
            new, "approve", "completed", ALICE, {"text": "again"})


def test_the_async_twin_waits_for_a_decision(one: Server) -> None:
    with RemoteCoordinator(one.base) as agent:
        task = _review(agent, "wsp_aw")

    async def run() -> Decision:
        async with AsyncRemoteCoordinator(one.base) as remote:
            waiting = asyncio.create_task(remote.wait_for_decision("wsp_aw", task, DEADLINE))
            decided = await remote.dispatch(env("decide.reject", {"workspace": "wsp_aw", "from": ALICE,
                                                                  "task_id": task, "comment": "no"}))
            assert "result" in decided
            return await waiting

    decision = asyncio.run(run())
    assert (decision.kind, decision.reason, decision.approved) == ("reject", "no", False)


class SeenPaths(httpx.HTTPTransport):
    """Notes the path of every request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return super().handle_request(request)


def test_wait_for_decision_is_woken_by_the_event_stream(one: Server) -> None:
    """The decision is made once the waiter follows the stream (it opened it
    and read the snapshot after): it returns within 2 s, well before the 5 s
    re-read of a quiet stream, so the event woke it."""
    seen = SeenPaths()
    with RemoteCoordinator(one.base, transport=seen) as agent, RemoteCoordinator(one.base) as person:
        task = _review(agent, "wsp_e")
        got: list[Decision] = []
        waiter = threading.Thread(target=lambda: got.append(agent.wait_for_decision("wsp_e", task, DEADLINE)))
        waiter.start()
        eventually(lambda: seen.paths[-2:] == ["/chap/events", "/desk/api/snapshot"], "the waiter following")
        Client(person, "wsp_e").ok("decide.approve", ALICE, task_id=task)
        waiter.join(2.0)
        assert not waiter.is_alive(), "the decision's event did not wake the waiter"
    assert got[0].kind == "approve"


def test_wait_for_decision_returns_after_the_server_restarts_while_it_waits(one: Server) -> None:
    with RemoteCoordinator(one.base) as agent:
        task = _review(agent, "wsp_x")
        got: list[Decision] = []
        waiter = threading.Thread(target=lambda: got.append(agent.wait_for_decision("wsp_x", task, DEADLINE)))
        waiter.start()
        one.restart()
        with RemoteCoordinator(one.base) as person:
            Client(person, "wsp_x").ok("decide.approve", ALICE, task_id=task)
        waiter.join()
    assert got[0].kind == "approve" and got[0].output == {"text": "draft"}


def test_wait_for_decision_gives_up_after_its_timeout(one: Server) -> None:
    with RemoteCoordinator(one.base) as agent:
        task = _review(agent, "wsp_y")
        with pytest.raises(WaitTimedOut) as raised:
            agent.wait_for_decision("wsp_y", task, 0.3)
    assert raised.value.subject == task


def test_wait_for_whisper_answer(one: Server) -> None:
    with RemoteCoordinator(one.base) as agent, RemoteCoordinator(one.base) as person:
        c = Client(agent, "wsp_q")
        c.setup(members=(ALICE, BOT), profiles=["core/1.0", "review/1.0", "whisper/1.0"])
        task = c.new_task()
        asked = c.ok("whisper.ask", BOT, task_id=task, to=ALICE, question="which?", options=[{"id": "a"}, {"id": "b"}],
                     deadline_ms=600_000, default_if_lapsed="a")
        got: list[Any] = []
        waiter = threading.Thread(
            target=lambda: got.append(agent.wait_for_whisper_answer("wsp_q", asked["whisper_id"], DEADLINE)))
        waiter.start()
        Client(person, "wsp_q").ok("whisper.answer", ALICE, whisper_id=asked["whisper_id"], answer_option="b")
        waiter.join()
    assert (got[0].state, got[0].answered_by, got[0].option) == ("answered", ALICE, "b")


def test_reviewed_turns_an_agent_function_into_draft_review_wait(one: Server) -> None:
    with RemoteCoordinator(one.base) as setup_client:
        Client(setup_client, "wsp_z").setup(members=(ALICE, BOT))

    def decide() -> None:
        with RemoteCoordinator(one.base) as person:
            waiting = eventually(
                lambda: [t for t, v in person.snapshot("wsp_z")["tasks"].items() if v["state"] == "review_requested"],
                "a review to decide")
            Client(person, "wsp_z").ok("decide.approve", ALICE, task_id=waiting[0])

    reviewer = threading.Thread(target=decide)
    reviewer.start()
    with RemoteCoordinator(one.base) as remote:
        @reviewed(remote, "wsp_z", agent=BOT, reviewer=ALICE, timeout=DEADLINE)
        def draft(topic: str) -> dict[str, str]:
            return {"text": f"about {topic}"}

        decision = draft("tides")
    reviewer.join()
    assert decision.approved and decision.output == {"text": "about tides"}


# -- the framework bridges, on the server ----------------------------------------


@pytest.mark.parametrize("name", ["langgraph", "pydantic-ai", "ag2", "google-adk", "llama-index"])
def test_each_bridge_runs_its_human_in_the_loop_story_on_the_server(one: Server, name: str) -> None:
    """test_compat's bridge cycle (opened twice, approve, reject, override),
    with a RemoteCoordinator in place of the embedded coordinator: the same
    states, reviewers and override, read back through `workspaces`."""
    from test_compat import ALICE as REVIEWER
    from test_compat import BRIDGES, _cycle

    ws = f"wsp_{name.replace('-', '_')}"
    with RemoteCoordinator(one.base) as remote:
        seen: list[tuple[str, str, list[str]]] = []
        tasks = _cycle(remote, name, ws, seen)
        assert seen == [("review_requested", "any_one_approves", [REVIEWER])] * 3
        view = remote.workspaces[ws]
        assert list(view.tasks) == list(tasks.values())
        assert view.tasks[tasks["approve"]].state == "completed"
        assert view.tasks[tasks["reject"]].state == "declined"
        assert view.tasks[tasks["override"]].state == "completed"
        (override,) = view.overrides.values()
        assert override.task_id == tasks["override"] and override.result == BRIDGES[name][2]


def test_a_read_the_server_refuses_is_remote_refused_with_its_words(tmp_path: Path) -> None:
    db = tmp_path / "auth.db"
    served = Server(str(db), 1)
    served.serve.stop()
    served.serve = Serve(str(db), *served.options, "--auth")
    try:
        with RemoteCoordinator(served.base) as anonymous:
            with pytest.raises(RemoteRefused) as raised:
                anonymous.snapshot("wsp_any")
            assert raised.value.status == 401 and raised.value.message
            with pytest.raises(RemoteRefused):
                anonymous.wait_for_decision("wsp_any", "tsk_any", DEADLINE)
    finally:
        served.stop()
