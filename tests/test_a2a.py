"""CHAP over A2A, driven by the a2a-sdk's own client against `chapline serve`."""

from __future__ import annotations

import sqlite3
from typing import Any

import anyio
import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers.proto_helpers import new_data_message
from a2a.types import SendMessageRequest
from google.protobuf.json_format import MessageToDict
from servers import Served

from coordinator.profiles import REGISTRY

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
    (interface,) = card["supportedInterfaces"]
    assert interface["url"] == served.url + "/a2a" and interface["protocolBinding"] == "JSONRPC"


def test_a_review_story_over_a2a(served: Served) -> None:
    async def run() -> list[tuple[dict[str, Any], bool]]:
        client = await create_client(served.url)
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
            await as_holder(None, "chap.participant.join", {"from": BOT, "type": "agent"}),
            await as_holder(alice, "chap.participant.join", {"from": BOT, "type": "agent"}),
            await as_holder(alice, "chap.audit.read", {"from": ALICE}),
        ]

    outcomes = anyio.run(run)
    assert [failed for _, failed in outcomes] == [False, True, True, False]
    assert outcomes[1][0]["chap_error"] == -32902
    assert outcomes[2][0]["chap_error"] == -32011
    assert [e["envelope"]["params"]["from"] for e in outcomes[3][0]["entries"]] == [ALICE]
