"""CHAP over A2A 1.0: chapline as an agent other agents can delegate to.

The Agent Card lists every implemented CHAP method as a skill `chap.<method>`
(derived from the method registry). A `message/send` names the skill in the
message's metadata (`{"skill": "chap.task.create"}`) and carries the params
as its first data part; the call is dispatched through the coordinator's
pipeline like any other, and the answer comes back as a message whose data
part is the result, or `{"chap_error": code, "message": ..., "data"?}` with
the part's metadata `{"is_error": true}`.

A2A carries numbers as doubles: whole numbers are given back their integer
form before dispatch, so they hash as CHAP requires.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
from a2a.helpers.proto_helpers import get_data_parts, new_data_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from a2a.utils.constants import TransportProtocol
from google.protobuf.json_format import MessageToDict
from starlette.routing import Route

from coordinator import __version__
from coordinator.registry import Method
from coordinator.transports.auth import Authenticator
from coordinator.transports.mcp import Call, tool_name
from coordinator.wire import INVALID_PARAMS, METHOD_NOT_FOUND

__all__ = ["A2A_PATH", "ChaplineAgentExecutor", "a2a_routes", "agent_card"]

A2A_PATH = "/a2a"


def agent_card(url: str, methods: list[Method], *, version: str = __version__) -> AgentCard:
    """The card served at /.well-known/agent-card.json; `url` is where
    `message/send` is posted (this server's /a2a)."""
    return AgentCard(
        name="chapline",
        description=(
            "A CHAP (Collaborative Human-Agent Protocol) coordinator: each skill is one CHAP "
            "method; agents draft work, humans approve, edit or reject it, and every "
            "accepted call is kept in a hash-linked audit log."
        ),
        version=version,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC, protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=["data"],
        default_output_modes=["data"],
        skills=[
            AgentSkill(
                id=tool_name(m),
                name=tool_name(m),
                description=m.description,
                tags=["chap", m.name.split(".", 1)[0]],
                input_modes=["data"],
                output_modes=["data"],
            )
            for m in methods
            if m.handler is not None
        ],
    )


def _integers(value: Any) -> Any:
    """Whole doubles back to integers, all the way down."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integers(v) for v in value]
    return value


class ChaplineAgentExecutor(AgentExecutor):
    """Answers each message with one CHAP call, dispatched through `call`."""

    def __init__(self, call: Call, methods: list[Method], auth: Authenticator | None = None) -> None:
        self._call = call
        self._auth = auth
        self._methods = {tool_name(m): m for m in methods if m.handler is not None}
        self._numbers = itertools.count(1)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        payload, failed = await self._answer(context)
        reply = new_data_message(payload, context_id=context.context_id, task_id=context.task_id)
        if failed:
            reply.parts[0].metadata.update({"is_error": True})
        await event_queue.enqueue_event(reply)

    async def _answer(self, context: RequestContext) -> tuple[dict[str, Any], bool]:
        message = context.message
        metadata = MessageToDict(message.metadata) if message is not None else {}
        skill = metadata.get("skill")
        method = self._methods.get(skill) if isinstance(skill, str) else None
        if method is None:
            return _error(
                METHOD_NOT_FOUND,
                f"Unknown skill: {skill!r}; name one of the card's skills (chap.<method>) "
                'in the message metadata as {"skill": "chap.task.create"}',
            ), True
        parts = get_data_parts(message.parts) if message is not None else []
        params = _integers(parts[0]) if parts else {}
        if not isinstance(params, dict):
            return _error(INVALID_PARAMS, "Invalid params: the first data part must be an object"), True
        envelope = {"jsonrpc": "2.0", "id": f"a2a-{next(self._numbers)}", "method": method.name, "params": params}
        body = msgspec.json.encode(envelope)
        if self._auth is not None:
            headers = context.call_context.state.get("headers") or {}
            refusal = self._auth.refusal(headers.get("authorization"), body)
            if refusal is not None:
                error = refusal[2]
                return _error(error.code, error.message, error.data), True
        response = await self._call(body)
        if "error" in response:
            error = response["error"]
            return _error(error.get("code"), error.get("message"), error.get("data")), True
        result = response.get("result")
        return (result if isinstance(result, dict) else {"result": result}), False

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # Every call is answered within its own message/send: nothing runs on.
        return None


def _error(code: int, message: str, data: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"chap_error": code, "message": message}
    if data is not None:
        out["data"] = data
    return out


def a2a_routes(
    call: Call, methods: list[Method], url: str, auth: Authenticator | None = None
) -> list[Route]:
    """The Agent Card route and the JSON-RPC route at A2A_PATH. With `auth`,
    each message is held to the rules of POST /chap."""
    card = agent_card(url, methods)
    handler = DefaultRequestHandler(
        agent_executor=ChaplineAgentExecutor(call, methods, auth),
        task_store=InMemoryTaskStore(),
        agent_card=card,
    )
    return [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url=A2A_PATH)]
