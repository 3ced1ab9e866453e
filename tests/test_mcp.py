"""CHAP over MCP, driven by the official SDK's own client: in process, over
stdio (`chapline mcp`) and over streamable HTTP (`chapline serve`'s /mcp),
in both protocol eras (the 2025-11-25 handshake and 2026-07-28)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import chap_coordinator
import pytest
from chap_coordinator.transports.mcp_server import make_chap_mcp_server
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from servers import Served, env

from coordinator import Coordinator
from coordinator.profiles import REGISTRY
from coordinator.server.dispatcher import SerialDispatcher
from coordinator.server.mcp import DISCOVER_VERSIONS, create_mcp_server
from storage import SqliteStore

ERAS = ("legacy", "2026-07-28")
HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
ALICE, BOT = "human:alice", "agent:bot"


async def _list(server: Any, mode: str) -> list[dict[str, Any]]:
    async with Client(server, mode=mode) as client:
        listed = await client.list_tools()
    return [t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools]


def ours_server(coord: Coordinator) -> tuple[Any, SerialDispatcher]:
    dispatcher = SerialDispatcher(coord)
    dispatcher.start()
    return create_mcp_server(dispatcher.dispatch, REGISTRY.methods() + REGISTRY.extension_methods()), dispatcher


@pytest.fixture
def in_process() -> Iterator[tuple[Any, Coordinator]]:
    coord = Coordinator()
    server, dispatcher = ours_server(coord)
    yield server, coord
    dispatcher.close()


@pytest.mark.parametrize("mode", ERAS)
def test_tools_list_every_implemented_method(in_process, mode: str) -> None:
    server, _ = in_process
    listed = anyio.run(_list, server, mode)
    expected = {f"chap.{m.name}" for m in REGISTRY.implemented()}
    expected |= {m.name for m in REGISTRY.extension_methods()}  # x-chapline.*, namespaced
    assert {t["name"] for t in listed} == expected
    assert len(listed) == len(expected)
    for tool in listed:
        assert tool["inputSchema"]["type"] == "object", tool["name"]
        assert tool["title"] and tool["description"], tool["name"]
        assert set(HINTS) <= set(tool["annotations"]), tool["name"]


# A type naming every JSON type admits what a schema without one admits.
ANY_JSON = ["object", "array", "string", "number", "boolean", "null"]


def _shape(schema: dict[str, Any]) -> Any:
    """A property schema without its prose and examples: what a client
    validates against (a type naming every JSON type is no constraint)."""
    if not isinstance(schema, dict):
        return schema
    return {
        k: (_shape(v) if isinstance(v, dict) else [_shape(i) for i in v] if isinstance(v, list) else v)
        for k, v in schema.items()
        if k not in ("description", "title", "examples") and not (k == "type" and v == ANY_JSON)
    }


def _differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """How our tool surface differs from 0.3.3's, for the tools we list.

    Ours may document more parameters and accept more enum values than the
    reference's; everything it states must hold for ours too."""
    out = []
    for name, tool in sorted(ours.items()):
        ref = theirs.get(name)
        if ref is None:
            out.append(f"{name}: not a tool of 0.3.3")
            continue
        mine_schema, ref_schema = tool["inputSchema"], ref["inputSchema"]
        missing = set(ref_schema["properties"]) - set(mine_schema["properties"])
        if missing:
            out.append(f"{name}: lacks parameters {sorted(missing)}")
        if sorted(mine_schema.get("required", [])) != sorted(ref_schema.get("required", [])):
            out.append(f"{name}: required {mine_schema.get('required')} != {ref_schema.get('required')}")
        if mine_schema.get("additionalProperties") != ref_schema.get("additionalProperties"):
            out.append(f"{name}: additionalProperties differs")
        for prop in set(ref_schema["properties"]) - missing:
            mine, ref_prop = _shape(mine_schema["properties"][prop]), _shape(ref_schema["properties"][prop])
            if "enum" in mine and "enum" in ref_prop and set(ref_prop["enum"]) <= set(mine["enum"]):
                mine, ref_prop = {**mine, "enum": None}, {**ref_prop, "enum": None}
            if mine != ref_prop:
                out.append(f"{name}.{prop}: {mine} != {ref_prop}")
        for hint in HINTS:
            if tool["annotations"][hint] != ref["annotations"][hint]:
                out.append(f"{name}: {hint} is {tool['annotations'][hint]}, 0.3.3 says {ref['annotations'][hint]}")
    return out


def test_tool_surface_matches_the_reference(in_process) -> None:
    """Same names, parameters, required lists, types and hints as 0.3.3's
    MCP server, for every method chapline implements (the prose is ours)."""
    server, _ = in_process
    ours = {t["name"]: t for t in anyio.run(_list, server, "legacy") if t["name"].startswith("chap.")}
    theirs = {
        t["name"]: t
        for t in anyio.run(_list, make_chap_mcp_server(chap_coordinator.Coordinator()), "legacy")
    }
    assert _differences(ours, theirs) == []


def _result(result: Any) -> tuple[bool, Any]:
    (content,) = result.content
    return result.is_error, json.loads(content.text)


async def _story(client: Client, workspace: str) -> dict[str, Any]:
    """A whole review story through tools; stringified objects and arrays as
    LLM clients send them."""

    async def ok(tool: str, **arguments: Any) -> Any:
        error, value = _result(await client.call_tool(f"chap.{tool}", {"workspace": workspace, **arguments}))
        assert not error, (tool, value)
        return value

    await ok("workspace.create")
    await ok("participant.join", **{"from": ALICE}, type="human", role="admin")
    await ok("participant.join", **{"from": BOT}, type="agent")
    task = (await ok("task.create", **{"from": ALICE}, assignee=BOT, kind="draft", input='{"topic": "x"}'))[
        "task_id"
    ]
    await ok("review.request", **{"from": BOT}, task_id=task, artefact='{"text": "draft"}', to=f'["{ALICE}"]')
    override = await ok(
        "decide.override",
        **{"from": ALICE},
        task_id=task,
        diff='[{"op": "replace", "path": "/text", "value": "better"}]',
        rationale="clearer",
    )
    assert override["applied"] == {"text": "better"}
    error, refused = _result(
        await client.call_tool(
            "chap.task.create",
            {"workspace": workspace, "from": "human:mallory", "assignee": BOT, "kind": "k", "input": {}},
        )
    )
    assert error and refused["chap_error"] == -32011 and refused["message"]
    return await ok("audit.read")


def _check_story_log(log: dict[str, Any]) -> None:
    methods = [e.get("envelope", e.get("request"))["method"] for e in log["entries"]]
    assert methods[:6] == [
        "workspace.create", "participant.join", "participant.join", "task.create",
        "review.request", "decide.override",
    ]
    params = [e["envelope"]["params"] for e in log["entries"][:6]]
    # JSON values in the log, never the strings the client sent.
    assert params[3]["input"] == {"topic": "x"}
    assert params[4]["artefact"] == {"text": "draft"} and params[4]["to"] == [ALICE]
    assert params[5]["diff"] == [{"op": "replace", "path": "/text", "value": "better"}]
    # Envelope ids count the server's tool calls: mcp-<n>, consecutive here.
    ids = [e["envelope"]["id"] for e in log["entries"][:6]]
    first = int(ids[0].removeprefix("mcp-"))
    assert ids == [f"mcp-{n}" for n in range(first, first + 6)]


@pytest.mark.parametrize("mode", ERAS)
def test_a_review_story_in_process(in_process, mode: str) -> None:
    server, coord = in_process

    async def run() -> dict[str, Any]:
        async with Client(server, mode=mode) as client:
            return await _story(client, "wsp_story")

    _check_story_log(anyio.run(run))
    assert coord.dispatch(
        {"jsonrpc": "2.0", "id": 1, "method": "audit.verify_chain", "params": {"workspace": "wsp_story"}}
    )["result"]["status"] == "verified"


def test_an_unparseable_string_is_refused_and_not_recorded(in_process) -> None:
    server, coord = in_process

    async def run() -> tuple[Any, Any]:
        async with Client(server, mode="legacy") as client:
            await client.call_tool("chap.participant.join", {"workspace": "w", "from": ALICE, "type": "human"})
            bad = await client.call_tool(
                "chap.task.create",
                {"workspace": "w", "from": ALICE, "assignee": ALICE, "kind": "k", "input": "{not json"},
            )
            unknown = await client.call_tool("chap.no.such", {})
            return _result(bad), _result(unknown)

    (error, bad), (unknown_error, unknown) = anyio.run(run)
    assert error and bad["chap_error"] == -32602
    assert "input must be a JSON object" in bad["message"] and "does not parse" in bad["message"]
    assert unknown_error and unknown["chap_error"] == -32601 and "chap.no.such" in unknown["message"]
    described = coord.dispatch({"jsonrpc": "2.0", "id": 1, "method": "workspace.describe", "params": {"workspace": "w"}})
    assert described["result"]["audit_count"] == 1


def test_discover_advertises_both_eras(in_process) -> None:
    server, _ = in_process

    async def run() -> dict[str, Any]:
        async with Client(server, mode="2026-07-28") as client:
            return await client.session.send_discover("2026-07-28")

    assert anyio.run(run)["supportedVersions"] == list(DISCOVER_VERSIONS)


# -- over stdio and over HTTP: the real commands --------------------------------


@pytest.mark.parametrize("mode", ERAS)
def test_a_review_story_over_stdio(tmp_path: Path, mode: str) -> None:
    db = tmp_path / "mcp.db"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "coordinator", "mcp", "--db", str(db), "--allow-unbound-humans"], env=env()
    )

    async def run() -> dict[str, Any]:
        async with Client(params, mode=mode) as client:
            tools = await client.list_tools()
            assert len(tools.tools) == len(REGISTRY.implemented()) + len(REGISTRY.extension_methods())
            return await _story(client, "wsp_stdio")

    _check_story_log(anyio.run(run))
    # The process has exited and closed the file: everything answered is there.
    store = SqliteStore(db)
    try:
        # Six accepted calls; the non-member's refusal is not recorded.
        assert len(store.read_entries("wsp_stdio")) == 6
    finally:
        store.close()


@pytest.mark.parametrize("mode", ERAS)
def test_a_review_story_over_http(served: Served, mode: str) -> None:
    async def run() -> dict[str, Any]:
        async with Client(served.url + "/mcp", mode=mode) as client:
            return await _story(client, f"wsp_http_{mode.replace('-', '')}")

    _check_story_log(anyio.run(run))


def _leaves(group: BaseExceptionGroup[Any]) -> list[Any]:
    return [e for x in group.exceptions for e in (_leaves(x) if isinstance(x, BaseExceptionGroup) else [x])]


def test_over_http_with_auth_a_tool_call_acts_only_as_its_token(served_with_auth: Served) -> None:
    """`serve --auth` holds MCP to the rules of POST /chap: no token, or a
    `from` that is not the token's principal, is refused and not recorded."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError

    w = {"workspace": "wsp_auth"}

    async def as_holder(token: str | None, tool: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        refused: list[MCPError] = []
        async with httpx2.AsyncClient(headers=headers) as http:
            transport = streamable_http_client(served_with_auth.url + "/mcp", http_client=http)
            try:
                async with Client(transport, mode="legacy") as client:
                    return _result(await client.call_tool(f"chap.{tool}", {**w, **arguments}))
            except* MCPError as group:
                # Without a valid token not even `initialize` is served (no
                # session is opened): the handshake is refused with the code.
                refused.extend(_leaves(group))
        (error,) = refused
        return True, {"chap_error": error.code, "message": error.message}

    alice, bot = served_with_auth.tokens[ALICE], served_with_auth.tokens[BOT]

    async def run() -> list[tuple[bool, Any]]:
        return [
            await as_holder(alice, "participant.join", {"from": ALICE, "type": "human", "role": "admin"}),
            await as_holder(None, "participant.join", {"from": BOT, "type": "agent"}),
            await as_holder(alice, "participant.join", {"from": BOT, "type": "agent"}),
            await as_holder("not-a-token", "participant.join", {"from": BOT, "type": "agent"}),
            await as_holder(bot, "participant.join", {"from": BOT, "type": "agent"}),
            await as_holder(alice, "audit.read", {"from": ALICE}),
        ]

    outcomes = anyio.run(run)
    assert [failed for failed, _ in outcomes] == [False, True, True, True, False, False]
    assert outcomes[1][1]["chap_error"] == -32902 and outcomes[3][1]["chap_error"] == -32902
    assert outcomes[2][1]["chap_error"] == -32011 and "authenticates" in outcomes[2][1]["message"]
    log = outcomes[5][1]["entries"]
    assert [e["envelope"]["params"]["from"] for e in log] == [ALICE, BOT]


def test_chaplines_own_methods_are_tools_too(in_process) -> None:
    """The work profile's x-chapline.* methods are tools named as themselves."""
    server, _ = in_process
    w = {"workspace": "wsp_work"}

    async def run() -> list[tuple[bool, Any]]:
        async with Client(server, mode="legacy") as client:
            async def call(tool: str, **arguments: Any) -> tuple[bool, Any]:
                return _result(await client.call_tool(tool, {**w, **arguments}))

            return [
                await call("chap.workspace.create", profiles=["core/1.0", "review/1.0", "x-chapline-work/1.0"]),
                await call("chap.participant.join", **{"from": ALICE}, type="human", role="admin"),
                await call("chap.participant.join", **{"from": BOT}, type="agent", role="worker"),
                await call("x-chapline.plan.submit", **{"from": ALICE}, plan="p",
                           tasks='[{"key": "a", "kind": "k", "input": {}, "role": "worker"}]'),
                await call("x-chapline.work.claim", **{"from": BOT}),
            ]

    outcomes = anyio.run(run)
    assert [failed for failed, _ in outcomes] == [False] * 5, outcomes
    assert outcomes[4][1]["outcome"] == "claimed"
    assert outcomes[4][1]["task_id"] == outcomes[3][1]["tasks"]["a"]


# -- values JSON cannot carry, and failures inside the transport ------------------------


async def _create_with_input(server: Any, given: Any) -> tuple[bool, Any]:
    async with Client(server, mode="legacy") as client:
        await client.call_tool("chap.participant.join", {"workspace": "w", "from": ALICE, "type": "human"})
        return _result(await client.call_tool(
            "chap.task.create", {"workspace": "w", "from": ALICE, "assignee": ALICE, "kind": "k", "input": given}
        ))


def _audit_count(coord: Coordinator) -> int:
    described = coord.dispatch({"jsonrpc": "2.0", "id": 1, "method": "workspace.describe", "params": {"workspace": "w"}})
    count: int = described["result"]["audit_count"]
    return count


@pytest.mark.parametrize(
    "text",
    ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": [1, NaN]}', '{"a": 1e999}'],
)
def test_json_text_holding_a_number_json_cannot_carry_is_refused(in_process, text: str) -> None:
    """NaN and Infinity are not JSON (RFC 8259): recording them as null would
    change the caller's data without a word."""
    server, coord = in_process
    error, answer = anyio.run(_create_with_input, server, text)
    assert error and answer["chap_error"] == -32602
    assert answer["message"].startswith("Invalid params: input must be a JSON object")
    assert _audit_count(coord) == 1  # the join only


@pytest.mark.parametrize(
    "text, says",
    [
        ('{"a": ' + "9" * 5000 + "}", "out of range"),
        ("[" * 100_000 + "]" * 100_000, "nests too deep"),
    ],
    ids=["5000-digit number", "100000 levels"],
)
def test_json_text_too_large_to_read_is_refused_in_our_words(in_process, text: str, says: str) -> None:
    server, coord = in_process
    error, answer = anyio.run(_create_with_input, server, text)
    assert error and answer["chap_error"] == -32602 and says in answer["message"]
    assert "input must be a JSON object" in answer["message"]
    assert _audit_count(coord) == 1


def test_a_failure_inside_the_transport_answers_a_log_id(caplog: pytest.LogCaptureFixture) -> None:
    """A defect is answered as `/chap` answers one: -32603 with the id the
    detail was logged under, never the exception's own text."""

    async def broken(body: bytes) -> dict[str, Any]:
        raise RuntimeError("the secret detail")

    server = create_mcp_server(broken, REGISTRY.methods() + REGISTRY.extension_methods())

    async def run() -> tuple[bool, Any]:
        async with Client(server, mode="legacy") as client:
            return _result(await client.call_tool("chap.workspace.describe", {"workspace": "w"}))

    error, answer = anyio.run(run)
    assert error and answer["chap_error"] == -32603
    log_id = answer["data"]["log_id"]
    assert log_id in answer["message"] and "secret" not in json.dumps(answer)
    assert any(log_id in r.getMessage() and "secret" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


def test_over_http_raw_arguments_json_cannot_carry_are_refused(served: Served) -> None:
    """A client posting its own JSON text may write NaN or 1e999, which the
    SDK's parser reads as floats JSON has no form for: refused, not recorded
    as null."""
    import httpx

    workspace = "wsp_mcp_nan"
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with httpx.Client(base_url=served.url, headers=headers, timeout=60) as http:
        hello = http.post("/mcp", json={
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        })
        assert hello.status_code == 200, hello.text
        http.headers["mcp-session-id"] = hello.headers["mcp-session-id"]
        http.headers["mcp-protocol-version"] = "2025-11-25"
        http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"})

        def tool(n: int, name: str, arguments: str) -> Any:
            body = '{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "%s", "arguments": %s}}'
            reply = http.post("/mcp", content=body % (n, name, arguments))
            (line,) = [x for x in reply.text.splitlines() if x.startswith("data: ")]
            result = json.loads(line.removeprefix("data: "))["result"]
            return result["isError"], json.loads(result["content"][0]["text"])

        joined = tool(1, "chap.participant.join", json.dumps({"workspace": workspace, "from": ALICE, "type": "human"}))
        common = f'"workspace": "{workspace}", "from": "{ALICE}", "assignee": "{ALICE}", "kind": "k"'
        answers = [tool(2 + i, "chap.task.create", "{" + common + ", " + given + "}")
                   for i, given in enumerate(['"input": {"a": NaN}', '"input": {"a": [1e999]}', '"input": -Infinity'])]
        log = tool(9, "chap.audit.read", json.dumps({"workspace": workspace, "from": ALICE}))
    assert joined[0] is False
    for failed, answer in answers:
        assert failed and answer["chap_error"] == -32602 and "input" in answer["message"], answer
    assert [e["envelope"]["method"] for e in log[1]["entries"]] == ["participant.join"]


SAFE = 2**53 - 1
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-SAFE, SAFE) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)
NOT_JSON = st.sampled_from([math.nan, math.inf, -math.inf])


@st.composite
def _inputs(draw: st.DrawFn) -> tuple[dict[str, Any], bool]:
    """An object for `input`, and whether a NaN or infinity was put somewhere in it."""
    value = draw(st.dictionaries(st.text(max_size=4), JSON_VALUES, max_size=3))
    if not draw(st.booleans()):
        return value, False
    spot: Any = value
    while True:
        keys = list(spot) if isinstance(spot, dict) else list(range(len(spot)))
        inner = [k for k in keys if isinstance(spot[k], (dict, list))]
        if not inner or draw(st.booleans()):
            break
        spot = spot[draw(st.sampled_from(inner))]
    if isinstance(spot, dict):
        spot[draw(st.text(max_size=4))] = draw(NOT_JSON)
    else:
        spot.append(draw(NOT_JSON))
    return value, True


@settings(max_examples=30, deadline=None)
@given(case=_inputs())
def test_json_text_reaches_the_log_as_written_or_is_refused(case: tuple[dict[str, Any], bool]) -> None:
    """Python's json module is the oracle for what the text says: the logged
    input equals it, unless it holds NaN or Infinity, which is refused."""
    value, poisoned = case
    coord = Coordinator()
    server, dispatcher = ours_server(coord)
    try:
        error, answer = anyio.run(_create_with_input, server, json.dumps(value))
        log = coord.dispatch({"jsonrpc": "2.0", "id": 1, "method": "audit.read", "params": {"workspace": "w"}})
    finally:
        dispatcher.close()
    entries = log["result"]["entries"]
    if poisoned:
        assert error and answer["chap_error"] == -32602 and "NaN and Infinity" in answer["message"]
        assert len(entries) == 1
    else:
        assert not error, answer
        assert entries[-1]["envelope"]["params"]["input"] == json.loads(json.dumps(value))
