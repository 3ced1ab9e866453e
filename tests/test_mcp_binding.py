"""MCP (and A2A) sessions bound to a participant, and the tools a session is
offered, driven by the official SDK clients against the real commands:
`chapline mcp` on stdio (--as, --allow-unbound-humans, --workspace, --tools,
--tool-names) and `chapline serve --auth` (/mcp and /a2a)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from a2a.client import ClientConfig, create_client
from mcp import Client, StdioServerParameters
from servers import Served, env
from test_a2a import _send

from coordinator import Coordinator
from coordinator.profiles import REGISTRY
from coordinator.server.dispatcher import SerialDispatcher
from coordinator.server.mcp import create_mcp_server
from coordinator.server.mcp_binding import Binding
from coordinator.server.mcp_tools import ToolSelection
from storage import SqliteStore

ALICE, BOT, DRAFTER = "human:alice", "agent:bot", "agent:drafter"
WS = "wsp_bound"
HUMANS_ONLY = {f"chap.{m.name}" for m in REGISTRY.implemented() if m.humans_only}
PRIVILEGED = {f"chap.{m.name}" for m in REGISTRY.implemented() if m.privileged}


def _result(result: Any) -> tuple[bool, Any]:
    (content,) = result.content
    return result.is_error, json.loads(content.text)


def _chap(coord: Coordinator, method: str, **params: Any) -> dict[str, Any]:
    response: dict[str, Any] = coord.dispatch({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    assert "result" in response, response
    result: dict[str, Any] = response["result"]
    return result


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A database holding a core+review workspace where alice (human, admin),
    bot and drafter (agents) are members."""
    path = tmp_path / "bound.db"
    coord = Coordinator(store=SqliteStore(path))
    try:
        _chap(coord, "workspace.create", workspace=WS, profiles=["core/1.0", "review/1.0"])
        _chap(coord, "participant.join", workspace=WS, **{"from": ALICE}, type="human", role="admin")
        for agent in (BOT, DRAFTER):
            _chap(coord, "participant.join", workspace=WS, **{"from": agent}, type="agent")
    finally:
        coord.close()
    return path


def _log(db: Path) -> list[dict[str, Any]]:
    coord = Coordinator(store=SqliteStore(db))
    try:
        entries: list[dict[str, Any]] = _chap(coord, "audit.read", workspace=WS)["entries"]
        return entries
    finally:
        coord.close()


def _senders(db: Path) -> list[tuple[str, Any]]:
    return [(e["envelope"]["method"], e["envelope"]["params"].get("from")) for e in _log(db)]


def _stdio(db: Path, *options: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "coordinator", "mcp", "--db", str(db), *options], env=env()
    )


async def _names(client: Client) -> set[str]:
    return {t.name for t in (await client.list_tools()).tools}


# -- bound on stdio: --as ---------------------------------------------------------------


def test_a_session_bound_with_as_cannot_act_as_anyone_else(db: Path) -> None:
    before = _senders(db)

    async def run() -> tuple[Any, ...]:
        async with Client(_stdio(db, "--as", BOT), mode="legacy") as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            w = {"workspace": WS}
            own = _result(await client.call_tool("chap.task.create", {**w, "assignee": BOT, "kind": "k", "input": {}}))
            named = _result(await client.call_tool(
                "chap.task.create", {**w, "from": BOT, "assignee": BOT, "kind": "k", "input": {}}
            ))
            as_alice = _result(await client.call_tool(
                "chap.task.create", {**w, "from": ALICE, "assignee": BOT, "kind": "k", "input": {}}
            ))
            join = _result(await client.call_tool(
                "chap.participant.join", {**w, "from": "human:mallory", "type": "human"}
            ))
            decide = _result(await client.call_tool(
                "chap.decide.approve", {**w, "task_id": own[1]["task_id"]}
            ))
            return listed, own, named, as_alice, join, decide

    listed, own, named, as_alice, join, decide = anyio.run(run)
    # An agent is offered no human's decision; `from` is not required of it.
    assert not HUMANS_ONLY & set(listed)
    schema = listed["chap.task.create"].input_schema
    assert "from" not in schema["required"] and BOT in schema["properties"]["from"]["description"]
    assert not own[0] and not named[0]
    for error, refusal in (as_alice, join):
        assert error and refusal["chap_error"] == -32011
        assert BOT in refusal["message"] and "--as" in refusal["message"]
    assert as_alice[1]["data"] == {"from": ALICE, "principal": BOT}
    assert decide[0] and decide[1]["chap_error"] == -32011 and "human's decision" in decide[1]["message"]
    # Two tasks created, both as the bot; nothing recorded of the refusals.
    assert _senders(db) == [*before, ("task.create", BOT), ("task.create", BOT)]


def test_bad_mcp_session_options_exit_2(tmp_path: Path) -> None:
    for options in (["--as", "alice"], ["--as", BOT, "--allow-unbound-humans"], ["--http", "--as", BOT]):
        done = subprocess.run(
            [sys.executable, "-m", "coordinator", "mcp", "--db", str(tmp_path / "x.db"), *options],
            capture_output=True, text=True, env=env(), timeout=120, stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 2, (options, done.stderr)
        assert done.stderr.startswith("chapline: mcp: --as"), done.stderr
        assert "Traceback" not in done.stderr
    for options in (["--http", "--tool-names", "safe"], ["--tools", "chap.task.*,,"]):
        done = subprocess.run(
            [sys.executable, "-m", "coordinator", "mcp", "--db", str(tmp_path / "x.db"), *options],
            capture_output=True, text=True, env=env(), timeout=120, stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 2 and "--tool" in done.stderr and "Traceback" not in done.stderr, done.stderr


# -- unbound on stdio: no human-only methods unless --allow-unbound-humans ------------------


def _review_pending(db: Path) -> str:
    coord = Coordinator(store=SqliteStore(db))
    try:
        task = _chap(coord, "task.create", workspace=WS, **{"from": ALICE}, assignee=BOT, kind="k", input={})
        _chap(coord, "review.request", workspace=WS, **{"from": BOT}, task_id=task["task_id"],
              artefact={"text": "draft"}, to=[ALICE])
        task_id: str = task["task_id"]
        return task_id
    finally:
        coord.close()


def test_an_unbound_stdio_session_cannot_decide_or_make_privileged_calls(db: Path) -> None:
    task = _review_pending(db)
    before = _senders(db)

    async def run() -> tuple[set[str], list[tuple[bool, Any]]]:
        async with Client(_stdio(db), mode="legacy") as client:
            names = await _names(client)
            w = {"workspace": WS, "from": ALICE}
            return names, [
                _result(await client.call_tool("chap.decide.approve", {**w, "task_id": task})),
                _result(await client.call_tool("chap.decide.override", {
                    **w, "task_id": task, "diff": [], "rationale": "r"})),
                _result(await client.call_tool("chap.workspace.set_profiles", {**w, "profiles": ["core/1.0"]})),
                _result(await client.call_tool("chap.control.pause", {**w, "reason": "r"})),
            ]

    names, outcomes = anyio.run(run)
    assert HUMANS_ONLY and not (HUMANS_ONLY | PRIVILEGED) & names
    assert "chap.review.request" in names and "chap.task.create" in names
    for error, refusal in outcomes:
        assert error and refusal["chap_error"] == -32011
        assert "--as human:NAME" in refusal["message"] and "--allow-unbound-humans" in refusal["message"]
    assert _senders(db) == before


def test_allow_unbound_humans_offers_them_with_a_warning(db: Path) -> None:
    task = _review_pending(db)

    async def run() -> tuple[set[str], tuple[bool, Any]]:
        async with Client(_stdio(db, "--allow-unbound-humans"), mode="legacy") as client:
            names = await _names(client)
            return names, _result(await client.call_tool(
                "chap.decide.approve", {"workspace": WS, "from": ALICE, "task_id": task}
            ))

    names, (error, approved) = anyio.run(run)
    assert (HUMANS_ONLY | PRIVILEGED) <= names
    assert not error and approved["state"] == "completed"
    assert _senders(db)[-1] == ("decide.approve", ALICE)
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "mcp", "--db", str(db), "--allow-unbound-humans"],
        capture_output=True, text=True, env=env(), timeout=120, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "warning: --allow-unbound-humans" in done.stderr and "any human" in done.stderr


# -- unknown parameters -------------------------------------------------------------------


@pytest.fixture
def in_process() -> Iterator[tuple[Any, Coordinator]]:
    coord = Coordinator()
    dispatcher = SerialDispatcher(coord)
    dispatcher.start()
    _chap(coord, "workspace.create", workspace=WS, profiles=["core/1.0"])
    _chap(coord, "participant.join", workspace=WS, **{"from": ALICE}, type="human", role="admin")
    server = create_mcp_server(
        dispatcher.dispatch, REGISTRY.methods() + REGISTRY.extension_methods(),
        selection=ToolSelection(workspace=WS),
    )
    yield server, coord
    dispatcher.close()


def _count(coord: Coordinator) -> int:
    count: int = _chap(coord, "workspace.describe", workspace=WS)["audit_count"]
    return count


@pytest.mark.parametrize(
    ("tool", "arguments", "unknown"),
    [
        ("chap.audit.read", {"from_seq": 1}, ["from_seq"]),
        ("chap.task.create", {"from": ALICE, "assignee": ALICE, "kind": "k", "input": {}, "asignee": ALICE},
         ["asignee"]),
        ("chap.participant.join", {"from": "human:b", "type": "human", "roles": "x", "extra": 1}, ["extra", "roles"]),
    ],
)
def test_an_unknown_parameter_is_refused_naming_it(in_process, tool: str, arguments: dict[str, Any],
                                                   unknown: list[str]) -> None:
    server, coord = in_process
    before = _count(coord)

    async def run() -> tuple[bool, Any]:
        async with Client(server, mode="legacy") as client:
            return _result(await client.call_tool(tool, {"workspace": WS, **arguments}))

    error, refusal = anyio.run(run)
    assert error and refusal["chap_error"] == -32602
    assert refusal["data"]["unknown"] == unknown
    assert all(repr(name) in refusal["message"] for name in unknown)
    assert _count(coord) == before


def test_a_range_inside_range_still_reads_from_it(in_process) -> None:
    server, coord = in_process

    async def run() -> tuple[bool, Any]:
        async with Client(server, mode="legacy") as client:
            return _result(await client.call_tool("chap.audit.read", {"workspace": WS, "range": {"from_seq": 1}}))

    error, read = anyio.run(run)
    assert not error and [e["seq"] for e in read["entries"]] == [1]


# -- the tools follow the workspace's profiles ------------------------------------------------


def test_the_tool_list_follows_the_workspaces_profiles(in_process) -> None:
    server, coord = in_process
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async def run() -> tuple[set[str], set[str], Any]:
        async with Client(server, mode="legacy", message_handler=on_message) as client:
            core = await _names(client)
            set_profiles = await client.call_tool("chap.workspace.set_profiles", {
                "workspace": WS, "from": ALICE, "profiles": ["core/1.0", "review/1.0"]})
            with anyio.fail_after(1):
                await changed.wait()
            return core, await _names(client), set_profiles

    core, review, set_profiles = anyio.run(run)
    assert not set_profiles.is_error
    assert "chap.task.create" in core and "chap.audit.read" in core
    assert not any(n.startswith(("chap.review.", "chap.decide.", "chap.whisper.")) for n in core)
    assert review - core == {f"chap.{m.name}" for m in REGISTRY.implemented() if m.profile == "review/1.0"}
    assert structured(set_profiles) is not None


def structured(result: Any) -> Any:
    """The structured result, which equals the text's JSON."""
    assert result.structured_content == json.loads(result.content[0].text)
    return result.structured_content


def test_tools_narrows_by_name_or_glob_in_either_naming() -> None:
    coord = Coordinator()
    dispatcher = SerialDispatcher(coord)
    dispatcher.start()
    methods = REGISTRY.methods() + REGISTRY.extension_methods()
    try:
        async def run(selection: ToolSelection) -> tuple[set[str], tuple[bool, Any]]:
            server = create_mcp_server(dispatcher.dispatch, methods, selection=selection)
            async with Client(server, mode="legacy") as client:
                names = await _names(client)
                refused = _result(await client.call_tool(
                    "chap_audit_read" if selection.naming == "safe" else "chap.audit.read", {"workspace": WS}))
                return names, refused

        names, (error, refusal) = anyio.run(run, ToolSelection(patterns=("chap.task.*", "chap_review_request")))
        assert names == {"chap.task.create", "chap.task.update", "chap.task.complete", "chap.task.route",
                         "chap.review.request"}
        assert error and refusal["chap_error"] == -32601
        safe, _ = anyio.run(run, ToolSelection(patterns=("chap.audit.*",), naming="safe"))
        assert safe == {"chap_audit_read", "chap_audit_verify_chain", "chap_audit_verify_receipt",
                        "chap_audit_submit_to_scitt"}
    finally:
        dispatcher.close()


def test_safe_names_hold_only_letters_digits_underscores_and_dashes() -> None:
    coord = Coordinator()
    dispatcher = SerialDispatcher(coord)
    dispatcher.start()
    try:
        server = create_mcp_server(dispatcher.dispatch, REGISTRY.methods() + REGISTRY.extension_methods(),
                                   selection=ToolSelection(naming="safe"))

        async def run() -> tuple[set[str], tuple[bool, Any]]:
            async with Client(server, mode="legacy") as client:
                names = await _names(client)
                created = _result(await client.call_tool("chap_workspace_create", {"workspace": "wsp_safe"}))
                return names, created

        names, (error, created) = anyio.run(run)
        assert "chap_task_create" in names and "x-chapline_plan_submit" in names
        assert all(n.replace("_", "").replace("-", "").isalnum() for n in names)
        assert not error and "wsp_safe" in json.dumps(created)
    finally:
        dispatcher.close()


# -- bound over HTTP under --auth: MCP and A2A -----------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_over_http_a_token_binds_the_session(served_with_auth: Served, mode: str) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    w = {"workspace": f"wsp_http_bound_{mode.replace('-', '')}"}

    async def session(token: str, work: Any) -> Any:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
            transport = streamable_http_client(served_with_auth.url + "/mcp", http_client=http)
            async with Client(transport, mode=mode) as client:
                return await work(client)

    async def alice(client: Client) -> Any:
        return await _names(client), [
            _result(await client.call_tool("chap.workspace.create", w)),
            _result(await client.call_tool("chap.participant.join", {**w, "type": "human", "role": "admin"})),
        ]

    async def bot(client: Client) -> Any:
        joined = _result(await client.call_tool("chap.participant.join", {**w, "type": "agent"}))
        task = _result(await client.call_tool("chap.task.create", {**w, "assignee": BOT, "kind": "k", "input": {}}))
        decide = _result(await client.call_tool("chap.decide.reject", {**w, "task_id": task[1]["task_id"]}))
        return await _names(client), [joined, task, decide]

    async def run() -> Any:
        return (await session(served_with_auth.tokens[ALICE], alice),
                await session(served_with_auth.tokens[BOT], bot))

    (alice_tools, alice_calls), (bot_tools, (joined, task, decide)) = anyio.run(run)
    assert HUMANS_ONLY <= alice_tools and not HUMANS_ONLY & bot_tools
    assert all(not error for error, _ in [*alice_calls, joined, task])
    assert decide[0] and decide[1]["chap_error"] == -32011
    entries = httpx.post(served_with_auth.url + "/chap", timeout=60, json={
        "jsonrpc": "2.0", "id": 1, "method": "audit.read", "params": {**w, "from": ALICE}},
        headers={"Authorization": f"Bearer {served_with_auth.tokens[ALICE]}"}).json()["result"]["entries"]
    # The token's principal joined as the creator's first admin (SPECIFICATION.md, "Authorisation").
    assert [(e["envelope"]["method"], e["envelope"]["params"].get("from")) for e in entries] == [
        ("workspace.create", None), ("participant.join", ALICE), ("participant.join", ALICE),
        ("participant.join", BOT), ("task.create", BOT)]


def test_over_a2a_a_token_binds_the_message(served_with_auth: Served) -> None:
    w = {"workspace": "wsp_a2a_bound"}

    async def send(token: str, skill: str, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
            client = await create_client(served_with_auth.url, ClientConfig(httpx_client=http))
            return await _send(client, skill, {**w, **params})

    alice, bot = served_with_auth.tokens[ALICE], served_with_auth.tokens[BOT]

    async def run() -> list[tuple[dict[str, Any], bool]]:
        joined = await send(alice, "chap.participant.join", {"type": "human", "role": "admin"})
        await send(bot, "chap.participant.join", {"type": "agent"})
        task = await send(alice, "chap.task.create", {"assignee": BOT, "kind": "k", "input": {}})
        await send(bot, "chap.review.request", {"task_id": task[0]["task_id"], "artefact": {"a": 1}, "to": [ALICE]})
        return [
            joined,
            await send(bot, "chap.decide.approve", {"task_id": task[0]["task_id"]}),
            await send(bot, "chap.task.create", {"from": ALICE, "assignee": BOT, "kind": "k", "input": {}}),
            await send(alice, "chap.audit.read", {"form_seq": 2}),
            await send(alice, "chap.audit.read", {}),
        ]

    joined, decided, forged, misspelt, log = anyio.run(run)
    assert not joined[1] and joined[0] == {"joined": True, "as": ALICE}
    assert decided[1] and decided[0]["chap_error"] == -32011 and "human's decision" in decided[0]["message"]
    assert forged[1] and forged[0]["chap_error"] == -32011
    assert misspelt[1] and misspelt[0]["chap_error"] == -32602 and misspelt[0]["data"]["unknown"] == ["form_seq"]
    assert [(e["envelope"]["method"], e["envelope"]["params"]["from"]) for e in log[0]["entries"]] == [
        ("participant.join", ALICE), ("participant.join", BOT), ("task.create", ALICE), ("review.request", BOT)]


# -- an LLM-style run of the review story, each participant in its own bound session ----------


def test_an_llm_style_review_story_uses_only_listed_tools(db: Path) -> None:
    """Each step picks its tool from the session's own list, as a model does:
    the drafter (safe names, as a function-calling API wants them) drafts and
    requests review; alice, in her own session, overrides the draft."""

    async def step(client: Client, listed: set[str], wanted: str, arguments: dict[str, Any]) -> Any:
        (tool,) = [n for n in listed if n.replace("_", ".") == wanted.replace("_", ".")]
        error, value = _result(await client.call_tool(tool, {"workspace": WS, **arguments}))
        assert not error, (tool, value)
        return value

    async def alice_assigns() -> str:
        async with Client(_stdio(db, "--as", ALICE, "--workspace", WS), mode="legacy") as client:
            listed = await _names(client)
            task = await step(client, listed, "chap.task.create",
                              {"assignee": DRAFTER, "kind": "summary", "input": {"topic": "q3"}})
            task_id: str = task["task_id"]
            return task_id

    async def drafter_drafts(task_id: str) -> set[str]:
        async with Client(_stdio(db, "--as", DRAFTER, "--workspace", WS, "--tool-names", "safe"),
                          mode="legacy") as client:
            listed = await _names(client)
            await step(client, listed, "chap_task_update", {"task_id": task_id, "state": "in_progress"})
            await step(client, listed, "chap_review_request",
                       {"task_id": task_id, "artefact": {"text": "draft"}, "to": [ALICE]})
            return listed

    async def alice_decides(task_id: str) -> tuple[set[str], Any]:
        async with Client(_stdio(db, "--as", ALICE, "--workspace", WS), mode="legacy") as client:
            listed = await _names(client)
            return listed, await step(client, listed, "chap.decide.override", {
                "task_id": task_id, "diff": [{"op": "replace", "path": "/text", "value": "final"}],
                "rationale": "tighter"})

    async def run() -> tuple[set[str], set[str], Any]:
        task_id = await alice_assigns()
        drafter_tools = await drafter_drafts(task_id)
        alice_tools, decided = await alice_decides(task_id)
        return drafter_tools, alice_tools, decided

    drafter_tools, alice_tools, decided = anyio.run(run)
    assert not any("decide" in n for n in drafter_tools)
    assert {"chap.decide.approve", "chap.decide.override", "chap.decide.reject"} <= alice_tools
    assert decided["applied"] == {"text": "final"}
    assert _senders(db)[-4:] == [
        ("task.create", ALICE), ("task.update", DRAFTER), ("review.request", DRAFTER), ("decide.override", ALICE)]


def test_the_registry_names_the_human_only_methods() -> None:
    assert HUMANS_ONLY == {"chap.decide.approve", "chap.decide.reject", "chap.decide.override"}
    assert Binding().allow_unbound_humans


# -- every parameter described, with an example that fits -------------------------------------


def test_every_tool_parameter_is_described_with_an_example_its_schema_accepts() -> None:
    from jsonschema import Draft202012Validator

    for method in REGISTRY.implemented() + REGISTRY.extension_methods():
        for name, prop in method.params["properties"].items():
            assert prop.get("description"), (method.name, name)
            (example,) = prop["examples"]
            Draft202012Validator(prop).validate(example)
    review = REGISTRY.get("review.request")
    assert review is not None and review.params["properties"]["artefact"]["type"] == [
        "object", "array", "string", "number", "boolean", "null"]
    override = REGISTRY.get("decide.override")
    assert override is not None
    operation = override.params["properties"]["diff"]["items"]
    assert operation["required"] == ["op", "path"] and all(p.get("description") for p in operation["properties"].values())


def test_results_are_structured_content_under_an_output_schema(in_process) -> None:
    server, _ = in_process

    async def run() -> tuple[list[Any], Any, Any]:
        async with Client(server, mode="legacy") as client:
            listed = (await client.list_tools()).tools
            read = await client.call_tool("chap.audit.read", {"workspace": WS})
            refused = await client.call_tool("chap.task.update", {"workspace": WS, "from": ALICE, "task_id": "nope",
                                                                  "state": "in_progress"})
            return listed, read, refused

    listed, read, refused = anyio.run(run)
    assert all(t.output_schema and t.output_schema["type"] == "object" for t in listed)
    assert structured(read)["entries"][0]["envelope"]["method"] == "workspace.create"
    assert refused.is_error and structured(refused)["chap_error"] == -32602


def test_over_http_who_calls_is_checked_before_the_parameters(served_with_auth: Served) -> None:
    """Without a token, a call with a misspelt parameter is refused for the
    token (-32902), as POST /chap answers, not for the parameter: not even
    the handshake is served (SPECIFICATION.md, "MCP and A2A")."""
    from mcp.shared.exceptions import MCPError
    from test_mcp import _leaves

    async def run() -> list[MCPError]:
        refused: list[MCPError] = []
        try:
            async with Client(served_with_auth.url + "/mcp", mode="legacy") as client:
                await client.call_tool("chap.audit.read", {"workspace": WS, "form_seq": 1})
        except* MCPError as group:
            refused.extend(_leaves(group))
        return refused

    (error,) = anyio.run(run)
    assert error.code == -32902
