"""CHAP over HTTP, tested over real sockets on 127.0.0.1.

Part one has one test per behaviour of the official conformance harness
(wf-01..03, cm-01..12, rv-01..11), each on a fresh workspace of one server
that runs `create_app` on a Coordinator over SqliteStore with the default
profiles of `chapline serve`. Part two covers the transport's own edges.
Part three runs `chapline serve` as a subprocess: start-up line, clean stop on
SIGTERM/SIGINT with every acknowledged write in the file, and start-up errors.
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import rfc8785
from client import Client, Http, now, refused
from pgserver import PgServer
from servers import ROOT, LiveServer, Serve

from coordinator import Coordinator
from coordinator.cli import ALL_PROFILES, DEFAULT_PROFILES
from coordinator.profiles import REGISTRY
from coordinator.server import MAX_BODY_BYTES, DispatcherClosed, SerialDispatcher, create_app
from storage import MemoryStore, PostgresStore, SqliteStore

ALICE = "human:alice@example.org"
BOT = "agent:test-bot"
DRAFTER = "agent:reviewer-test-bot"
GHOST = "human:ghost@example.org"
BYSTANDER = "human:bystander@example.org"
NEVER_JOINED = "agent:never-joined"
COORD = "service:coordinator@example.org"


# -- a server in this process -------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Coordinator]]:
    db = tmp_path_factory.mktemp("http") / "chap.db"
    coord = Coordinator(store=SqliteStore(db), default_profiles=DEFAULT_PROFILES)
    server = LiveServer(create_app(coord))
    try:
        yield server.url, coord
    finally:
        server.stop()
        coord.close()


@pytest.fixture(scope="module")
def http(served: tuple[str, Coordinator]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served[0], timeout=60) as client:
        yield client


def harness(http: httpx.Client, workspace: str) -> Client:
    """Calls on one workspace, shaped like the harness's: a call with a sender
    also carries `to` (the coordinator) and `ts`."""
    return Client(Http(http), workspace, to=COORD, ts=now, prefix="t-")


# Steps the harness repeats.


def join(c: Client, who: str, kind: str, role: str) -> Any:
    return c.ok("participant.join", frm=who, type=kind, role=role)


def task_in_progress(c: Client, assignee: str = DRAFTER) -> str:
    task = c.ok("task.create", frm=ALICE, to=assignee, kind="review_test", assignee=assignee, input={"test": True})
    c.ok("task.update", frm=assignee, to=ALICE, task_id=task["task_id"], state="in_progress")
    task_id: str = task["task_id"]
    return task_id


def request_review(c: Client, task_id: str, artefact: Any, **params: Any) -> Any:
    return c.ok("review.request", frm=DRAFTER, to=[ALICE], task_id=task_id, artefact=artefact, **params)


def digest(value: Any) -> str:
    """`sha256:` + hex of SHA-256 over the JCS form (rfc8785 is the oracle)."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


@pytest.fixture
def ws(http: httpx.Client) -> Client:
    """A fresh workspace, created in production mode as the harness does first."""
    chap = harness(http, f"wsp_http_{uuid.uuid4().hex[:12]}")
    chap.ok("workspace.create", mode="production")
    return chap


@pytest.fixture
def review_ws(ws: Client) -> Client:
    """The cast of the harness's review part: alice reviews, the drafter drafts."""
    join(ws, ALICE, "human", "reviewer")
    join(ws, DRAFTER, "agent", "drafter")
    return ws


# -- part one: the 26 harness behaviours ---------------------------------------


def test_wf01_malformed_json_is_a_parse_error(http: httpx.Client) -> None:
    reply = http.post("/chap", content=b"{ not json", headers={"Content-Type": "application/json"})
    assert reply.status_code == 400
    body = reply.json()
    refused(body, -32700)
    assert body["id"] is None


def test_wf02_body_without_jsonrpc_is_an_invalid_request(http: httpx.Client) -> None:
    reply = http.post("/chap", json={"no_jsonrpc_field": "here"})
    assert reply.status_code == 400
    refused(reply.json(), -32600)


def test_wf03_unknown_method(ws: Client) -> None:
    ws.fail(-32601, "does.not.exist")


def test_cm01_join_admits_a_human(ws: Client) -> None:
    result = join(ws, ALICE, "human", "reviewer")
    assert result
    assert result.get("joined", True) is True


def test_cm02_join_admits_an_agent(ws: Client) -> None:
    assert join(ws, BOT, "agent", "drafter")


def test_cm03_describe_lists_members_and_the_default_profiles(ws: Client) -> None:
    join(ws, ALICE, "human", "reviewer")
    join(ws, BOT, "agent", "drafter")
    result = ws.ok("workspace.describe", frm=ALICE)
    assert {m["uri"] for m in result["members"]} >= {ALICE, BOT}
    assert result["profiles"] == list(DEFAULT_PROFILES)


@pytest.fixture
def core_ws(ws: Client) -> Client:
    join(ws, ALICE, "human", "reviewer")
    join(ws, BOT, "agent", "drafter")
    return ws


def _create(ws: Client) -> dict[str, Any]:
    return ws.ok("task.create", frm=ALICE, to=BOT, kind="test_task", assignee=BOT, input={"test": True})


def test_cm04_task_create_assigns_to_a_member(core_ws: Client) -> None:
    result = _create(core_ws)
    assert result["task_id"]
    assert result["state"] == "created"


def test_cm05_task_create_refuses_a_non_member_assignee(core_ws: Client) -> None:
    core_ws.fail(
        -32602, "task.create", frm=ALICE, to=NEVER_JOINED, kind="test_task", assignee=NEVER_JOINED, input={}
    )


def test_cm06_task_update_to_in_progress(core_ws: Client) -> None:
    task_id = _create(core_ws)["task_id"]
    result = core_ws.ok("task.update", frm=BOT, to=ALICE, task_id=task_id, state="in_progress")
    assert result["state"] == "in_progress"


def test_cm07_task_update_refuses_an_illegal_transition(core_ws: Client) -> None:
    task_id = _create(core_ws)["task_id"]
    core_ws.ok("task.update", frm=BOT, to=ALICE, task_id=task_id, state="in_progress")
    core_ws.fail(-32602, "task.update", frm=BOT, to=ALICE, task_id=task_id, state="created")


def _completed(ws: Client) -> str:
    task_id = _create(ws)["task_id"]
    ws.ok("task.update", frm=BOT, to=ALICE, task_id=task_id, state="in_progress")
    result = ws.ok("task.complete", frm=BOT, to=ALICE, task_id=task_id, output={"result": "done"})
    assert result["state"] == "completed"
    return task_id


def _methods_of(ws: Client, **params: Any) -> list[str]:
    entries = ws.ok("audit.read", frm=ALICE, **params)["entries"]
    return [e["envelope"]["method"] for e in entries]


def test_cm08_task_complete_finishes_the_task(core_ws: Client) -> None:
    task_id = _completed(core_ws)
    # The entries naming the task: its update and its completion, both accepted.
    assert _methods_of(core_ws, filter={"task_id": task_id}) == [
        "task.update",
        "task.complete",
    ]
    assert _methods_of(core_ws, filter={"method": "task.create"}) == ["task.create"]
    # Completed is terminal: it cannot be moved back to work.
    error = core_ws.fail(-32602, "task.update", frm=BOT, to=ALICE, task_id=task_id, state="in_progress")
    assert "completed" in error["message"]


def test_cm08_on_a_workspace_that_the_first_join_created(http: httpx.Client) -> None:
    # Harness versions that skip workspace.create get the server's default
    # profiles and mode; under modes/1.0 the default trial mode would make
    # task.complete open a review instead.
    chap = harness(http, f"wsp_http_{uuid.uuid4().hex[:12]}")
    join(chap, ALICE, "human", "reviewer")
    join(chap, BOT, "agent", "drafter")
    assert chap.ok("workspace.describe", frm=ALICE)["profiles"] == ["core/1.0", "review/1.0"]
    _completed(chap)


def test_cm09_task_complete_on_a_terminal_task_fails(core_ws: Client) -> None:
    task_id = _completed(core_ws)
    before = core_ws.ok("workspace.describe", frm=ALICE)["audit_count"]
    error = core_ws.fail(-32602, "task.complete", frm=BOT, to=ALICE, task_id=task_id, output={"result": "again"})
    assert error["message"] == "Cannot complete task in state: completed"
    # A -32602 is never recorded.
    assert core_ws.ok("workspace.describe", frm=ALICE)["audit_count"] == before


def test_cm10_audit_read_returns_entries_in_order(core_ws: Client) -> None:
    _completed(core_ws)
    entries = core_ws.ok("audit.read", frm=ALICE, range={"from_seq": 0})["entries"]
    assert [e["seq"] for e in entries] == list(range(6))
    assert [e["envelope"]["method"] for e in entries] == [
        "workspace.create",
        "participant.join",
        "participant.join",
        "task.create",
        "task.update",
        "task.complete",
    ]


def test_cm11_audit_read_filters_by_method(core_ws: Client) -> None:
    _completed(core_ws)
    _create(core_ws)
    entries = core_ws.ok("audit.read", frm=ALICE, filter={"method": "task.create"})["entries"]
    assert len(entries) == 2
    assert {e["envelope"]["method"] for e in entries} == {"task.create"}


def test_cm12_leave_removes_the_member(core_ws: Client) -> None:
    assert core_ws.ok("participant.leave", frm=BOT)
    # The harness describes with nothing but the workspace id.
    members = core_ws.ok("workspace.describe")["members"]
    assert BOT not in {m["uri"] for m in members}
    assert ALICE in {m["uri"] for m in members}


ORIGINAL = {"subject": "test", "body": "original body", "severity": "high"}


def test_rv01_review_request_enters_review_requested(review_ws: Client) -> None:
    task_id = task_in_progress(review_ws)
    result = request_review(review_ws, task_id, ORIGINAL, rule="any_one_approves")
    assert result["state"] == "review_requested"


def _override(ws: Client) -> tuple[str, Any]:
    task_id = task_in_progress(ws)
    request_review(ws, task_id, ORIGINAL, rule="any_one_approves")
    result = ws.ok(
        "decide.override",
        frm=ALICE,
        task_id=task_id,
        based_on_artefact=ORIGINAL,
        diff=[
            {"op": "replace", "path": "/body", "value": "softened body"},
            {"op": "replace", "path": "/severity", "value": "low"},
        ],
        rationale="Tone too strong; severity overstated.",
        tags=["tone-softened", "severity-downgraded"],
        policy_refs=["test-policy-v1"],
    )
    return task_id, result


def test_rv02_override_applies_the_patch(review_ws: Client) -> None:
    _, result = _override(review_ws)
    assert result["state"] == "completed"
    assert result["override_artefact_id"]
    assert result["applied"] == {"subject": "test", "body": "softened body", "severity": "low"}


def test_rv03_override_entry_keeps_the_structured_decision(review_ws: Client) -> None:
    task_id, _ = _override(review_ws)
    # The harness reads with nothing but the workspace id and the filter.
    entries = review_ws.ok("audit.read", filter={"method": "decide.override", "task_id": task_id})[
        "entries"
    ]
    assert len(entries) == 1
    params = entries[0]["envelope"]["params"]
    assert isinstance(params["diff"], list)
    assert isinstance(params["rationale"], str)
    assert params["tags"] == ["tone-softened", "severity-downgraded"]
    assert params["policy_refs"] == ["test-policy-v1"]


def _open_empty_review(ws: Client) -> str:
    task_id = task_in_progress(ws)
    request_review(ws, task_id, {})
    return task_id


def test_rv04_review_of_an_empty_artefact_without_a_rule(review_ws: Client) -> None:
    task_id = _open_empty_review(review_ws)
    entries = review_ws.ok("audit.read", frm=ALICE, filter={"method": "review.request", "task_id": task_id})
    assert len(entries["entries"]) == 1


def test_rv05_abstain_with_a_category(review_ws: Client) -> None:
    task_id = _open_empty_review(review_ws)
    result = review_ws.ok(
        "abstain.declare",
        frm=ALICE,
        task_id=task_id,
        reason="Out of my authorisation limit.",
        category="out_of_authority",
    )
    assert result["state"] == "abstained"


def test_rv06_reject_with_request_revision_returns_to_in_progress(review_ws: Client) -> None:
    task_id = _open_empty_review(review_ws)
    result = review_ws.ok(
        "decide.reject", frm=ALICE, task_id=task_id, comment="Needs revision.", request_revision=True
    )
    assert result["state"] == "in_progress"


def test_rv07_decide_by_a_non_member_is_refused(review_ws: Client) -> None:
    task_id = task_in_progress(review_ws)
    request_review(review_ws, task_id, {"body": "x"})
    review_ws.fail(-32011, "decide.approve", frm=GHOST, task_id=task_id)


def test_rv08_decide_by_a_member_outside_the_reviewer_set_is_refused(review_ws: Client) -> None:
    task_id = task_in_progress(review_ws)
    request_review(review_ws, task_id, {"body": "x"})
    join(review_ws, BYSTANDER, "human", "observer")
    review_ws.fail(-32011, "decide.approve", frm=BYSTANDER, task_id=task_id)
    assert review_ws.ok("decide.approve", frm=ALICE, task_id=task_id)["state"] == "completed"


def test_rv09_approve_with_the_matching_digest(review_ws: Client) -> None:
    artefact = {"subject": "digest", "body": "bound body", "severity": "low"}
    task_id = task_in_progress(review_ws)
    request_review(review_ws, task_id, artefact, rule="any_one_approves")
    result = review_ws.ok(
        "decide.approve", frm=ALICE, task_id=task_id, approved_artefact_digest=digest(artefact)
    )
    assert result["state"] == "completed"


def test_rv10_approve_with_a_mismatched_digest_changes_nothing(review_ws: Client) -> None:
    artefact = {"subject": "digest", "body": "the reviewed body", "severity": "low"}
    task_id = task_in_progress(review_ws)
    request_review(review_ws, task_id, artefact, rule="any_one_approves")
    swapped = digest({**artefact, "body": "swapped body"})
    review_ws.fail(-32074, "decide.approve", frm=ALICE, task_id=task_id, approved_artefact_digest=swapped)
    # The review is still open: the addressed reviewer can decide normally.
    assert review_ws.ok("decide.approve", frm=ALICE, task_id=task_id)["state"] == "completed"


def test_rv11_re_request_substitution_is_refused_and_identical_amends(review_ws: Client) -> None:
    artefact = {"subject": "swap", "body": "first body", "severity": "low"}
    task_id = task_in_progress(review_ws)
    request_review(review_ws, task_id, artefact, rule="any_one_approves")
    review_ws.fail(
        -32014,
        "review.request",
        frm=DRAFTER,
        to=[ALICE],
        task_id=task_id,
        artefact={**artefact, "body": "substituted body"},
        rule="any_one_approves",
    )
    result = review_ws.ok(
        "review.request", frm=DRAFTER, to=[BYSTANDER], task_id=task_id, artefact=artefact, rule="any_one_approves"
    )
    assert result["amended"] is True


# -- part two: the transport's own edges ----------------------------------------

# A body sent as bytes carries no Content-Type unless given; the server takes
# only application/json (server/browser.py).
JSON = {"Content-Type": "application/json"}


def _refused_over_http(reply: httpx.Response, status: int, code: int) -> dict[str, Any]:
    """The body of `reply`, asserting a JSON-RPC refusal with `code` (see
    client.refused) answered with `status`, as JSON, without a traceback."""
    assert reply.status_code == status
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert body["jsonrpc"] == "2.0"
    refused(body, code)
    assert "Traceback" not in reply.text
    return body


def test_root_path_serves_chap_as_well(http: httpx.Client) -> None:
    reply = http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "does.not.exist", "params": {}})
    assert _refused_over_http(reply, 400, -32601)["id"] == 1


def test_a_result_is_200_without_wildcard_cors(ws: Client) -> None:
    # No page of another site may read it (test_browser_safety.py: --allow-origin).
    reply = ws.target.http.post("/chap", json=ws.envelope("workspace.describe"))
    assert reply.status_code == 200
    assert "result" in reply.json()
    assert "access-control-allow-origin" not in reply.headers
    assert reply.headers["x-content-type-options"] == "nosniff"


def test_a_body_that_is_not_utf8_is_a_parse_error(http: httpx.Client) -> None:
    _refused_over_http(http.post("/chap", content=b'{"jsonrpc": "2.0", "id": "\xff\xfe"}', headers=JSON), 400, -32700)


def test_a_body_over_the_limit_is_refused_without_a_traceback(http: httpx.Client) -> None:
    # 413: a body limit on every route (server/body.py).
    body = _refused_over_http(http.post("/chap", content=b" " * (MAX_BODY_BYTES + 1), headers=JSON), 413, -32600)
    assert body["id"] is None
    assert str(MAX_BODY_BYTES) in body["error"]["message"]


def test_a_chunked_body_over_the_limit_is_refused(http: httpx.Client) -> None:
    chunk = b" " * 65536

    def chunks() -> Iterator[bytes]:
        # No Content-Length: httpx sends this with chunked transfer encoding.
        for _ in range(MAX_BODY_BYTES // len(chunk) + 2):
            yield chunk

    _refused_over_http(http.post("/chap", content=chunks(), headers=JSON), 413, -32600)


def test_an_envelope_of_exactly_the_limit_is_served(ws: Client) -> None:
    envelope: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": "big",
        "method": "workspace.describe",
        "params": {"workspace": ws.workspace, "note": ""},
    }
    padding = MAX_BODY_BYTES - len(rfc8785.dumps(envelope))
    envelope["params"]["note"] = "x" * padding
    body = rfc8785.dumps(envelope)
    assert len(body) == MAX_BODY_BYTES
    reply = ws.target.http.post("/chap", content=body, headers=JSON)
    assert reply.status_code == 200, reply.text
    assert "members" in reply.json()["result"]


def test_an_envelope_nested_too_deep_is_an_invalid_request(ws: Client) -> None:
    deep: dict[str, Any] = {}
    for _ in range(100):
        deep = {"d": deep}
    _refused_over_http(ws.target.http.post("/chap", json=ws.envelope("workspace.describe", note=deep)), 400, -32600)


@pytest.mark.parametrize("path", ["/elsewhere", "/chap/", "/chap/inbox"])
def test_another_path_is_404_json(http: httpx.Client, path: str) -> None:
    reply = http.post(path, json={"jsonrpc": "2.0", "id": 1, "method": "x.y"})
    body = _refused_over_http(reply, 404, -32600)
    assert "POST /chap" in body["error"]["message"]


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_another_method_is_405_json(http: httpx.Client, method: str) -> None:
    reply = http.request(method, "/chap")
    _refused_over_http(reply, 405, -32600)
    assert set(reply.headers["allow"].replace(" ", "").split(",")) == {"POST", "OPTIONS"}


def test_options_is_answered_empty_and_another_sites_preflight_refused(http: httpx.Client) -> None:
    reply = http.options("/chap")
    assert reply.status_code == 204
    assert reply.content == b""
    preflight = http.options("/chap", headers={"Origin": "https://example.org", "Access-Control-Request-Method": "POST"})
    _refused_over_http(preflight, 403, -32600)
    assert "access-control-allow-origin" not in preflight.headers


def test_concurrent_calls_are_serialised(served: tuple[str, Coordinator], ws: Client) -> None:
    """Calls from many connections at once: each is answered, each recorded
    once, and the log has no gaps (the coordinator saw them one at a time)."""
    join(ws, ALICE, "human", "reviewer")
    join(ws, BOT, "agent", "drafter")
    before = len(ws.ok("audit.read", frm=ALICE, range={"from_seq": 0})["entries"])
    threads, per_thread = 8, 10
    created: list[str] = []
    lock = threading.Lock()

    def client() -> None:
        with httpx.Client(base_url=served[0], timeout=60) as own:
            mine = harness(own, ws.workspace)
            for _ in range(per_thread):
                task_id = _create(mine)["task_id"]
                with lock:
                    created.append(task_id)

    workers = [threading.Thread(target=client) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(set(created)) == threads * per_thread
    entries = ws.ok("audit.read", frm=ALICE, range={"from_seq": 0})["entries"]
    assert [e["seq"] for e in entries] == list(range(len(entries)))
    assert len(entries) == before + threads * per_thread
    logged = [e["envelope"]["params"] for e in entries[before:]]
    assert all(p["kind"] == "test_task" for p in logged)


def test_a_closed_dispatcher_takes_no_calls(served: tuple[str, Coordinator]) -> None:
    dispatcher = SerialDispatcher(served[1])
    dispatcher.start()
    dispatcher.close()
    with pytest.raises(DispatcherClosed):
        asyncio.run(dispatcher.dispatch(b'{"jsonrpc": "2.0", "id": 1, "method": "x.y"}'))


# -- answers the caller cannot fix: their status ------------------------------


def _post(url: str, envelope: dict[str, Any]) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=60) as http:
        return http.post("/chap", json=envelope)


def _call(method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": f"c-{method}", "method": method, "params": {"workspace": "w", **params}}


class _DefectiveLogReads(MemoryStore):
    """A store whose log reads fail with an exception that is not a store
    error: a defect in the server, answered -32603."""

    def read_entries(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("read_entries broke on /srv/secret/chap.db")


def test_a_defect_is_500_with_a_log_id_and_no_detail(caplog: pytest.LogCaptureFixture) -> None:
    coord = Coordinator(store=_DefectiveLogReads())
    server = LiveServer(create_app(coord))
    try:
        assert _post(server.url, _call("participant.join", **{"from": ALICE}, type="human")).status_code == 200
        reply = _post(server.url, _call("audit.read", **{"from": ALICE}))
    finally:
        server.stop()
        coord.close()
    body = _refused_over_http(reply, 500, -32603)
    log_id = body["error"]["data"]["log_id"]
    assert log_id in body["error"]["message"] and "secret" not in reply.text
    assert any(log_id in r.getMessage() for r in caplog.records)


def test_a_store_that_cannot_be_reached_is_503_and_nothing_is_applied() -> None:
    """PostgreSQL stopped under a serving coordinator: -32900 with status 503
    (retry later), and the call is not in the log once the server is back."""
    pg = PgServer()
    pg.start()
    coord = Coordinator(store=PostgresStore(pg.dsn()))
    server = LiveServer(create_app(coord))
    try:
        assert _post(server.url, _call("participant.join", **{"from": ALICE}, type="human")).status_code == 200
        pg.stop("immediate")
        down = _post(server.url, _call("participant.join", **{"from": BOT}, type="agent"))
        pg.start()
        back = _post(server.url, _call("audit.read", **{"from": ALICE}))
    finally:
        server.stop()
        coord.close()
        pg.remove()
    body = _refused_over_http(down, 503, -32900)
    assert "retry" in body["error"]["message"] and "log_id" in body["error"]["data"]
    assert back.status_code == 200
    assert [e["envelope"]["params"]["from"] for e in back.json()["result"]["entries"]] == [ALICE]


def test_a_stored_object_that_cannot_be_read_is_500(tmp_path: Path) -> None:
    """A damaged row is the operator's to repair (-32903): 500, not a 400
    telling the caller to change a request that is fine."""
    db = tmp_path / "chap.db"
    with Coordinator(store=SqliteStore(db)) as first:
        c = Client(first, "w")
        c.ok("participant.join", frm=ALICE, type="human")
        task_id = c.ok("task.create", frm=ALICE, assignee=ALICE, kind="k", input={})["task_id"]
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE chap_objects SET data = '{\"not\": \"a task\"' WHERE id = ?", (task_id,))
    coord = Coordinator(store=SqliteStore(db))
    server = LiveServer(create_app(coord))
    try:
        reply = _post(server.url, _call("task.update", **{"from": ALICE}, task_id=task_id, state="in_progress"))
    finally:
        server.stop()
        coord.close()
    _refused_over_http(reply, 500, -32903)


def test_a_refusal_in_chaplines_own_band_stays_400(http: httpx.Client) -> None:
    """The work profile's codes (-32960..) are the caller's to fix: 400."""
    c = harness(http, f"wsp_http_{uuid.uuid4().hex[:12]}")
    c.ok("workspace.create", profiles=["core/1.0", "review/1.0", "x-chapline-work/1.0"], mode="production")
    c.ok("participant.join", frm=ALICE, type="human", role="admin")
    tasks = [{"key": k, "kind": "k", "input": {}, "role": "writer"} for k in "xy"]
    reply = http.post("/chap", json=c.envelope(
        "x-chapline.plan.submit", frm=ALICE, plan="p", tasks=tasks,
        edges=[{"from": "x", "to": "y"}, {"from": "y", "to": "x"}],
    ))
    _refused_over_http(reply, 400, -32962)


# -- part three: `chapline serve` as a process ---------------------------------


def test_start_up_line_says_where_it_listens_and_what_it_writes(tmp_path: Path) -> None:
    server = Serve(tmp_path / "chap.db")
    try:
        assert server.line.count("\n") == 1
        assert str(tmp_path / "chap.db") in server.line
        assert ", ".join(DEFAULT_PROFILES) in server.line
        with httpx.Client(timeout=60) as http:
            reply = http.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "x.y", "params": {}})
            refused(reply.json(), -32601)
    finally:
        code, err = server.stop()
    assert code == 0, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_sent_as_soon_as_the_start_up_line_is_read_stops_cleanly(
    tmp_path: Path, sig: int
) -> None:
    """The line is printed once the signal handlers are in place, so a
    supervisor that stops the server right after reading it gets exit 0."""
    server = Serve(tmp_path / "chap.db")
    code, err = server.stop(sig)
    assert code == 0, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_cleanly_with_every_acknowledged_write_on_disk(tmp_path: Path, sig: int) -> None:
    """Clients keep writing while the signal arrives; every write that was
    answered with a result is in the file, which reopens cleanly."""
    db = tmp_path / "chap.db"
    server = Serve(db)
    workspace = "wsp_sigterm"
    acknowledged: list[str] = []
    lock = threading.Lock()
    enough = threading.Event()
    try:
        with httpx.Client(base_url=server.base, timeout=60) as http:
            chap = harness(http, workspace)
            chap.ok("workspace.create", mode="production")
            join(chap, ALICE, "human", "reviewer")
            join(chap, BOT, "agent", "drafter")

        def writer() -> None:
            with httpx.Client(base_url=server.base, timeout=60) as own:
                mine = harness(own, workspace)
                for _ in range(500):
                    try:
                        task_id = _create(mine)["task_id"]
                    except (httpx.HTTPError, AssertionError, ValueError):
                        return  # the server has stopped answering
                    with lock:
                        acknowledged.append(task_id)
                        if len(acknowledged) >= 20:
                            enough.set()

        writers = [threading.Thread(target=writer) for _ in range(4)]
        for w in writers:
            w.start()
        enough.wait(timeout=120)
        code, err = server.stop(sig)
        for w in writers:
            w.join()
    finally:
        if server.proc.poll() is None:
            server.stop_now()
    assert code == 0, err
    assert "Traceback" not in err
    assert len(acknowledged) >= 20
    # A cleanly closed SQLite database has checkpointed and removed its WAL.
    assert not Path(f"{db}-wal").exists()
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        stored = {
            row[0]
            for row in raw.execute(
                "SELECT id FROM chap_objects WHERE workspace = ? AND collection = 'tasks'",
                (workspace,),
            )
        }
    assert set(acknowledged) <= stored
    reopened = Coordinator(store=SqliteStore(db), default_profiles=DEFAULT_PROFILES)
    try:
        envelope = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "audit.read",
            "params": {"workspace": workspace, "filter": {"method": "task.create"}},
        }
        entries = reopened.dispatch(envelope)["result"]["entries"]
    finally:
        reopened.close()
    assert len(entries) == len(stored)


def _run_serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = _run_serve("--db", str(tmp_path / "chap.db"), "--port", str(port))
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("kind", ["missing directory", "not a database", "a directory"])
def test_a_database_that_cannot_be_opened_is_a_clear_error(tmp_path: Path, kind: str) -> None:
    if kind == "missing directory":
        db = tmp_path / "nowhere" / "chap.db"
    elif kind == "not a database":
        db = tmp_path / "chap.db"
        db.write_bytes(b"this is not an SQLite file " * 200)
    else:
        db = tmp_path
    done = _run_serve("--db", str(db), "--port", "0")
    assert done.returncode == 1
    assert "cannot open the database" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_profiles_without_core_are_refused(tmp_path: Path) -> None:
    done = _run_serve("--db", str(tmp_path / "chap.db"), "--port", "0", "--profiles", "review/1.0")
    assert done.returncode == 2
    assert "core/1.0" in done.stderr
    assert not (tmp_path / "chap.db").exists()


def test_chosen_profiles_are_what_new_workspaces_advertise(tmp_path: Path) -> None:
    server = Serve(tmp_path / "chap.db", "--profiles", "core/1.0,review/1.0")
    try:
        with httpx.Client(base_url=server.base, timeout=60) as http:
            chap = harness(http, "wsp_profiles")
            join(chap, ALICE, "human", "reviewer")
            assert chap.ok("workspace.describe")["profiles"] == ["core/1.0", "review/1.0"]
    finally:
        code, err = server.stop()
    assert code == 0, err


def test_serve_require_signatures(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from coordinator import public_jwk, sign_envelope

    key = Ed25519PrivateKey.generate()
    server = Serve(tmp_path / "chap.db", "--require-signatures")
    try:
        assert "signatures required" in server.line
        with httpx.Client(base_url=server.base, timeout=60) as http:
            def post(envelope: dict[str, Any]) -> dict[str, Any]:
                return http.post("/chap", json=envelope).json()

            joined = post({"jsonrpc": "2.0", "id": "j", "method": "participant.join", "params": {
                "workspace": "wsp_sig", "from": ALICE, "type": "human", "jwks": {"keys": [public_jwk(key, "a1")]}}})
            assert joined["result"]["joined"] is True
            describe = {"jsonrpc": "2.0", "id": "d", "method": "workspace.describe",
                        "params": {"workspace": "wsp_sig", "from": ALICE}}
            refused(post(describe), -32070)
            profiles = post(sign_envelope(describe, key, "a1"))["result"]["profiles"]
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert profiles == ["core/1.0", "review/1.0", "security-signed/1.0"]
    bad = subprocess.run([sys.executable, "-m", "coordinator", "serve", "--db", str(tmp_path / "x.db"),
                          "--port", "0", "--profiles", "core/1.0,security-signed/1.0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "require_signatures" in bad.stderr


def test_profiles_all_advertises_every_implemented_profile(tmp_path: Path) -> None:
    server = Serve(tmp_path / "chap.db", "--profiles", "all")
    try:
        assert ", ".join(ALL_PROFILES) in server.line
        with httpx.Client(base_url=server.base, timeout=60) as http:
            chap = harness(http, "wsp_all")
            join(chap, ALICE, "human", "reviewer")
            profiles = chap.ok("workspace.describe")["profiles"]
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert profiles[0] == "core/1.0"
    assert sorted(profiles) == sorted(ALL_PROFILES)
    # all but the profiles only an option enforces (--require-signatures, an OIDC verifier)
    assert set(REGISTRY.advertisable) - set(profiles) == {"security-signed/1.0", "identity-oidc/1.0"}


def test_the_module_help_runs_without_a_server() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0
    assert "--db" in done.stdout and "--profiles" in done.stdout


# -- the shortcut: a call with a declared length skips the Starlette stack --

def _chunked(body: bytes) -> Iterator[bytes]:
    """A body httpx sends chunked (no Content-Length): the full stack's path."""
    yield body


SAME_EITHER_WAY = {
    "a read": b'{"jsonrpc":"2.0","id":"r1","method":"audit.read","params":{"workspace":"w","from":"%s"}}'
              % ALICE.encode(),
    "no such method": b'{"jsonrpc":"2.0","id":"m1","method":"task.nothing","params":{"workspace":"w"}}',
    "not JSON": b'{"jsonrpc":"2.0","id":',
    "not an object": b'[1, 2]',
    "empty": b"",
    "a stranger's call": b'{"jsonrpc":"2.0","id":"s1","method":"audit.read","params":{"workspace":"w",'
                         b'"from":"human:nobody@example.org"}}',
}


@pytest.mark.parametrize("name", list(SAME_EITHER_WAY))
def test_a_call_is_answered_alike_with_a_declared_length_or_chunked(
    served: tuple[str, Coordinator], name: str
) -> None:
    """The shortcut (a declared Content-Length) and the full stack (a chunked
    body) give the same status, headers and body for the same request."""
    url, _ = served
    with httpx.Client(base_url=url, timeout=60) as http:
        Client(Http(http), "w").call("participant.join", **{"from": ALICE}, type="human")
        body = SAME_EITHER_WAY[name]
        headers = {"Content-Type": "application/json"}
        declared = http.post("/chap", content=body, headers=headers)
        chunked = http.post("/chap", content=_chunked(body), headers=headers)
    assert "content-length" in declared.request.headers and "content-length" not in chunked.request.headers
    assert declared.status_code == chunked.status_code
    # The log grows between the two reads, so compare what a read answers by shape.
    if name == "a read":
        assert declared.status_code == 200
        assert declared.json()["result"].keys() == chunked.json()["result"].keys()
    else:
        assert declared.json() == chunked.json()
    skip = {"date", "content-length"}
    assert ({k: v for k, v in declared.headers.items() if k not in skip}
            == {k: v for k, v in chunked.headers.items() if k not in skip})
    assert int(declared.headers["content-length"]) == len(declared.content)


class _BrokenAuth:
    """An authenticator whose check raises: a defect before the coordinator."""

    def admission(self, header: str | None, body: bytes) -> Any:
        raise RuntimeError("the token check broke on /srv/secret/tokens.db")

    def principal(self, header: str | None) -> str:
        raise RuntimeError("the token check broke on /srv/secret/tokens.db")


def test_a_defect_on_the_shortcut_is_500_with_a_log_id_and_the_browser_headers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    coord = Coordinator(store=MemoryStore())
    server = LiveServer(create_app(coord, auth=cast(Any, _BrokenAuth())))
    try:
        reply = _post(server.url, _call("participant.join", **{"from": ALICE}, type="human"))
        # The same defect on the full stack's path answers alike.
        with httpx.Client(base_url=server.url, timeout=60) as http:
            stacked = http.post("/chap", content=_chunked(reply.request.content),
                                headers={"Content-Type": "application/json"})
    finally:
        server.stop()
        coord.close()
    for answer in (reply, stacked):
        body = _refused_over_http(answer, 500, -32603)
        log_id = body["error"]["data"]["log_id"]
        assert log_id in body["error"]["message"] and "secret" not in answer.text
        assert any(log_id in r.getMessage() for r in caplog.records)
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert not coord.workspace_ids()  # nothing reached the coordinator


class _Recorded:
    """An app's own middleware, added after create_app: records each request."""

    seen: list[tuple[str, str]] = []

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            _Recorded.seen.append((scope["method"], scope["path"]))
        await self.app(scope, receive, send)


def test_middleware_added_to_the_app_sees_every_call() -> None:
    """With middleware of the app's own (an instrumentation's, say), the
    shortcut is off: an ordinary call goes through it as every request does."""
    coord = Coordinator(store=MemoryStore())
    app = create_app(coord)
    app.add_middleware(_Recorded)
    _Recorded.seen = []
    server = LiveServer(app)
    try:
        reply = _post(server.url, _call("participant.join", **{"from": ALICE}, type="human"))
    finally:
        server.stop()
        coord.close()
    assert reply.status_code == 200 and "result" in reply.json()
    assert "content-length" in reply.request.headers
    assert ("POST", "/chap") in _Recorded.seen
    assert [wid for wid in coord.workspace_ids()] == ["w"]


class _Answering:
    """A stand-in for ChapEndpoint: answers every call it is given."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def answer(self, scope: Any, body: bytes) -> Any:
        self.bodies.append(body)
        return 200, b"{}", [(b"content-length", b"2"), (b"content-type", b"application/json")]


def _through_shortcut(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[list[str], list[bytes]]:
    """Send one request to a ChapShortcut (limit 100 bytes) over a stack that
    records what reaches it; (what reached the stack, bodies the endpoint got)."""
    from coordinator.server.chap_route import ChapShortcut

    reached: list[str] = []

    async def stack(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])

    endpoint = _Answering()
    shortcut = ChapShortcut(stack, cast(Any, endpoint), 100)
    scope = {"type": "http", "method": method, "path": path, "headers": headers}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Any) -> None:
        pass

    asyncio.run(shortcut(scope, receive, send))
    return reached, endpoint.bodies


@pytest.mark.parametrize(("method", "path", "headers", "taken"), [
    ("POST", "/chap", [(b"content-length", b"2")], True),
    ("POST", "/", [(b"content-length", b"100")], True),
    ("POST", "/chap", [(b"content-length", b"101")], False),  # over the limit: BodyLimit refuses it
    ("POST", "/chap", [(b"transfer-encoding", b"chunked")], False),
    ("POST", "/chap", [(b"content-length", b"2"), (b"transfer-encoding", b"chunked")], False),
    ("POST", "/chap", [(b"content-length", b"+2")], False),
    ("POST", "/chap", [], False),  # no length
    ("OPTIONS", "/chap", [(b"content-length", b"2")], False),
    ("POST", "/mcp", [(b"content-length", b"2")], False),
    ("POST", "/chap/", [(b"content-length", b"2")], False),
])
def test_the_shortcut_takes_only_an_ordinary_call(
    method: str, path: str, headers: list[tuple[bytes, bytes]], taken: bool
) -> None:
    reached, answered = _through_shortcut(method, path, headers)
    assert (answered, reached) == (([b"{}"], []) if taken else ([], [path]))
