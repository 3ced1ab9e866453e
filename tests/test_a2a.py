"""CHAP over A2A, driven by the a2a-sdk's own client against `chapline serve`."""

from __future__ import annotations

import json
import sqlite3
import uuid
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers.proto_helpers import new_data_message
from a2a.types import SendMessageRequest
from client import refused
from google.protobuf.json_format import MessageToDict
from servers import Served
from starlette.applications import Starlette

from coordinator.profiles import REGISTRY
from coordinator.server import MAX_BODY_BYTES
from coordinator.server.a2a import a2a_routes

ALICE, BOT = "human:alice", "agent:bot"


async def _send(client: Any, skill: str | None, params: Any) -> tuple[dict[str, Any], bool]:
    message = new_data_message(params)
    if skill is not None:
        message.metadata.update({"skill": skill})
    replies = [MessageToDict(r) async for r in client.send_message(SendMessageRequest(message=message))]
    (reply,) = replies
    (part,) = reply["message"]["parts"]
    return part["data"], bool(part.get("metadata", {}).get("is_error"))


def test_the_card_lists_every_implemented_method(served: Served) -> None:
    async def run() -> dict[str, Any]:
        async with httpx.AsyncClient() as http:
            return MessageToDict(await A2ACardResolver(http, served.url).get_agent_card())

    card = anyio.run(run)
    implemented = sorted(
        [f"chap.{m.name}" for m in REGISTRY.implemented()] + [m.name for m in REGISTRY.extension_methods()]
    )
    assert sorted(s["id"] for s in card["skills"]) == implemented
    # One endpoint for both protocol versions.
    assert card["supportedInterfaces"] == [
        {"url": served.url + "/a2a", "protocolBinding": "JSONRPC", "protocolVersion": version}
        for version in ("1.0", "0.3")
    ]


def test_a_review_story_over_a2a(served: Served) -> None:
    async def run() -> list[tuple[dict[str, Any], bool]]:
        async with await create_client(served.url) as client:
            return await story(client)

    async def story(client: Any) -> list[tuple[dict[str, Any], bool]]:
        w = {"workspace": "wsp_a2a"}
        out = [await _send(client, "chap.workspace.create", w)]
        out.append(await _send(client, "chap.participant.join", {**w, "from": ALICE, "type": "human", "role": "admin"}))
        out.append(await _send(client, "chap.participant.join", {**w, "from": BOT, "type": "agent"}))
        created, _ = await _send(client, "chap.task.create",
                                 {**w, "from": ALICE, "assignee": BOT, "kind": "k", "input": {"n": 3}})
        out.append((created, False))
        task = {**w, "task_id": created["task_id"]}
        out.append(await _send(client, "chap.review.request", {**task, "from": BOT, "artefact": {"v": 1}, "to": [ALICE]}))
        out.append(await _send(client, "chap.decide.approve", {**task, "from": ALICE}))
        out.append(await _send(client, "chap.task.create", {**w, "from": "human:mallory", "assignee": BOT, "kind": "k", "input": {}}))
        out.append(await _send(client, "chap.no.such", w))
        out.append(await _send(client, None, w))
        out.append(await _send(client, "chap.audit.read", w))
        return out

    results = anyio.run(run)
    assert [failed for _, failed in results] == [False] * 6 + [True] * 3 + [False]
    assert results[5][0]["state"] == "completed"
    assert results[6][0]["chap_error"] == -32011 and results[6][0]["message"]
    assert results[7][0]["chap_error"] == -32601 and "chap.no.such" in results[7][0]["message"]
    assert results[8][0]["chap_error"] == -32601 and "skill" in results[8][0]["message"]
    entries = results[9][0]["entries"]
    assert [e["envelope"]["method"] for e in entries] == [
        "workspace.create", "participant.join", "participant.join", "task.create",
        "review.request", "decide.approve",
    ]
    # A2A sends doubles; the store holds the integer the client meant.
    with sqlite3.connect(served.db) as db:
        (text,) = db.execute(
            "SELECT data FROM chap_entries WHERE workspace = 'wsp_a2a' AND seq = 3"
        ).fetchone()
    assert '"input":{"n":3}' in text


def test_with_auth_a_message_acts_only_as_its_token(served_with_auth: Served) -> None:
    w = {"workspace": "wsp_auth"}

    async def as_holder(token: str | None, skill: str, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(headers=headers) as http:
            client = await create_client(served_with_auth.url, ClientConfig(httpx_client=http))
            return await _send(client, skill, {**w, **params})

    alice = served_with_auth.tokens[ALICE]

    async def run() -> list[tuple[dict[str, Any], bool]]:
        return [
            await as_holder(alice, "chap.participant.join", {"from": ALICE, "type": "human"}),
            await as_holder(alice, "chap.participant.join", {"from": BOT, "type": "agent"}),
            await as_holder(alice, "chap.audit.read", {"from": ALICE}),
        ]

    # Without a token the message is refused before the agent sees it (401,
    # as on POST /chap), so it leaves no task behind.
    join = {"skill": "chap.participant.join", "params": {**w, "from": BOT, "type": "agent"}}
    anonymous = httpx.post(served_with_auth.url + "/a2a", timeout=60, json={
        "jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
            "role": "user", "kind": "message", "messageId": "m-1", "parts": [{"kind": "data", "data": join}]}}})
    assert anonymous.status_code == 401
    refused(anonymous.json(), -32902)
    outcomes = anyio.run(run)
    assert [failed for _, failed in outcomes] == [False, True, False]
    assert outcomes[1][0]["chap_error"] == -32011
    assert [e["envelope"]["params"]["from"] for e in outcomes[2][0]["entries"]] == [ALICE]


# -- text JSON cannot carry, and failures inside the agent ---------------------------------

SDK_WORDS = ("Fail to serialize", "recursion", "Exceeds the limit", "codec", "Traceback")


def _rpc(url: str, body: str | bytes, headers: dict[str, str] | None = None) -> dict[str, Any]:
    reply = httpx.post(url + "/a2a", content=body, timeout=60,
                       headers={"Content-Type": "application/json", **(headers or {})})
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def _send_text(workspace: str, value: str) -> str:
    """A 1.0 SendMessage creating a task whose input holds `value`, as JSON text."""
    params = {"workspace": workspace, "from": ALICE, "assignee": ALICE, "kind": "k", "input": {"a": 0}}
    text = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {
        "role": "ROLE_USER", "messageId": "m-text", "parts": [{"data": params}],
        "metadata": {"skill": "chap.task.create"}}}})
    return text.replace('{"a": 0}', value)


@pytest.mark.parametrize(
    "value, says",
    [
        ('{"a": NaN}', "NaN and Infinity are not JSON numbers"),
        ('{"a": Infinity}', "NaN and Infinity are not JSON numbers"),
        ('{"a": -Infinity}', "NaN and Infinity are not JSON numbers"),
        ('{"a": 1e999}', "out of range"),
        ('{"a": ' + "9" * 5000 + "}", "out of range"),
        ("[" * 100_000 + "]" * 100_000, "nests too deep"),
        ('{"a": "\\ud800"}', "lone UTF-16 surrogate"),
    ],
    ids=["NaN", "Infinity", "-Infinity", "1e999", "5000 digits", "100000 levels", "lone surrogate"],
)
def test_a_message_json_cannot_carry_is_refused_and_tasks_stay_listable(served: Served, value: str, says: str) -> None:
    workspace = f"wsp_a2a_bad_{uuid.uuid4().hex[:8]}"
    joined = _rpc(served.url, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"role": "ROLE_USER", "messageId": "m-join", "metadata": {"skill": "chap.participant.join"},
                    "parts": [{"data": {"workspace": workspace, "from": ALICE, "type": "human"}}]}}}),
                  {"A2A-Version": "1.0"})
    assert joined["result"]["message"]["parts"][0]["data"]["joined"] is True, joined
    answer = _rpc(served.url, _send_text(workspace, value), {"A2A-Version": "1.0"})
    error = refused(answer, -32700)
    assert says in error["message"], error
    assert not any(word in json.dumps(answer) for word in SDK_WORDS)
    listed = _rpc(served.url, json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {}}),
                  {"A2A-Version": "1.0"})
    assert "result" in listed, listed
    described = httpx.post(served.url + "/chap", timeout=60, json={
        "jsonrpc": "2.0", "id": 3, "method": "workspace.describe", "params": {"workspace": workspace}}).json()
    assert described["result"]["audit_count"] == 1  # the join only


def test_a_failure_inside_the_agent_answers_a_log_id(caplog: pytest.LogCaptureFixture) -> None:
    """A defect is answered as POST /chap answers one: -32603 naming the log
    entry that holds the detail, never the exception's text."""

    async def broken(body: bytes) -> dict[str, Any]:
        raise RuntimeError("the secret detail")

    app = Starlette(routes=a2a_routes(broken, REGISTRY.methods(), "http://agent/a2a"))

    async def run() -> dict[str, Any]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as http:
            reply = await http.post("/a2a", headers={"A2A-Version": "1.0"}, json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                    "role": "ROLE_USER", "messageId": "m", "parts": [{"data": {"workspace": "w"}}],
                    "metadata": {"skill": "chap.workspace.describe"}}}})
            answer: dict[str, Any] = reply.json()
            return answer

    answer = anyio.run(run)
    (part,) = answer["result"]["message"]["parts"]
    assert part["metadata"] == {"is_error": True}
    assert part["data"]["chap_error"] == -32603
    log_id = part["data"]["data"]["log_id"]
    assert log_id in part["data"]["message"] and "secret" not in json.dumps(answer)
    assert any(log_id in r.getMessage() and "secret" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


# -- A2A 0.3 clients --------------------------------------------------------------------------


def _v03(
    url: str, n: int, data: dict[str, Any], metadata: dict[str, Any] | None = None, token: str | None = None
) -> dict[str, Any]:
    """`message/send` as A2A 0.3 clients send it (the TypeScript SDK among them)."""
    message: dict[str, Any] = {"role": "user", "kind": "message", "messageId": f"m-{n}",
                               "parts": [{"kind": "data", "data": data}]}
    if metadata is not None:
        message["metadata"] = metadata
    body = json.dumps({"jsonrpc": "2.0", "id": n, "method": "message/send", "params": {"message": message}})
    return _rpc(url, body, {"Authorization": f"Bearer {token}"} if token else None)


def test_a_0_3_client_is_served(served: Served) -> None:
    w = {"workspace": "wsp_a2a_v03"}
    answers = [
        _v03(served.url, 1, {"skill": "chap.participant.join", "params": {**w, "from": ALICE, "type": "human"}}),
        # 0.3.3 also takes the params beside the skill, and the skill in the metadata.
        _v03(served.url, 2, {"skill": "chap.participant.join", **w, "from": BOT, "type": "agent"}),
        _v03(served.url, 3, {**w, "from": ALICE, "assignee": BOT, "kind": "k", "input": {"n": 3}},
             {"skill": "chap.task.create"}),
        _v03(served.url, 4, {"skill": "chap.no.such", "params": w}),
        _v03(served.url, 5, {"skill": "chap.task.create", "params": "not an object"}),
        _v03(served.url, 6, {"skill": "chap.audit.read", "params": {**w, "from": ALICE}}),
    ]
    results = [a["result"] for a in answers]
    assert all(r["kind"] == "message" and r["role"] == "agent" for r in results), results
    parts = [r["parts"][0] for r in results]
    assert all(p["kind"] == "data" for p in parts)
    failed = [bool(p.get("metadata", {}).get("is_error")) for p in parts]
    assert failed == [False, False, False, True, True, False]
    assert parts[3]["data"]["chap_error"] == -32601 and "chap.no.such" in parts[3]["data"]["message"]
    assert parts[4]["data"]["chap_error"] == -32602 and "params" in parts[4]["data"]["message"]
    entries = parts[5]["data"]["entries"]
    assert [(e["envelope"]["method"], e["envelope"]["params"]["from"]) for e in entries] == [
        ("participant.join", ALICE), ("participant.join", BOT), ("task.create", ALICE)]
    assert entries[2]["envelope"]["params"]["input"] == {"n": 3}
    assert all(e["envelope"]["id"].startswith("a2a-") for e in entries)


def test_the_sdks_own_0_3_client_is_served(served: Served) -> None:
    """The a2a-sdk's 0.3 JSON-RPC transport: the card as 0.3 reads it, and a
    call whose answer comes back as a 0.3 message."""
    from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport

    card = httpx.get(served.url + "/.well-known/agent-card.json", timeout=60).json()
    assert card["protocolVersion"] == "0.3" and card["url"] == served.url + "/a2a"
    assert card["preferredTransport"] == "JSONRPC"

    async def run() -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=60) as http:
            transport = CompatJsonRpcTransport(http, None, card["url"])
            message = new_data_message({"skill": "chap.participant.join",
                                        "params": {"workspace": "wsp_a2a_sdk03", "from": ALICE, "type": "human"}})
            return MessageToDict(await transport.send_message(SendMessageRequest(message=message)))

    reply = anyio.run(run)
    (part,) = reply["message"]["parts"]
    assert part["data"] == {"joined": True, "as": ALICE}


def test_with_auth_a_0_3_message_acts_only_as_its_token(served_with_auth: Served) -> None:
    w = {"workspace": "wsp_auth_v03"}
    alice = served_with_auth.tokens[ALICE]
    join = {"skill": "chap.participant.join", "params": {**w, "from": ALICE, "type": "human"}}
    parts = [
        _v03(served_with_auth.url, 2, {**join, "params": {**w, "from": BOT, "type": "agent"}}, token=alice)
        ["result"]["parts"][0],
        _v03(served_with_auth.url, 3, join, token=alice)["result"]["parts"][0],
    ]
    assert [p["data"].get("chap_error") for p in parts] == [-32011, None]
    assert parts[1]["data"] == {"joined": True, "as": ALICE}


def test_a_body_over_the_limit_is_refused_before_it_is_read(served: Served) -> None:
    # 413 since issue 27: every route shares the server's body limit (server/body.py).
    reply = httpx.post(served.url + "/a2a", content=b" " * (MAX_BODY_BYTES + 1), timeout=60,
                       headers={"Content-Type": "application/json", "A2A-Version": "1.0"})
    assert reply.status_code == 413, reply.text
    answer = reply.json()
    refused(answer, -32600)
    assert str(MAX_BODY_BYTES) in answer["error"]["message"]
