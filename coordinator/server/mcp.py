"""CHAP over MCP: every implemented CHAP method as a tool `chap.<method>`.

The tool list (names, input schemas, titles, descriptions, annotations) is
derived from the method registry, so a method and its tool are declared in
one place. A tool call becomes one JSON-RPC envelope dispatched through the
coordinator's pipeline like any other call: gated, recorded and chained.

LLM clients often send objects and arrays as JSON text. An argument whose
schema asks for an object or an array and that arrives as a string is parsed
before dispatch, so the audit log holds JSON values, never stringified ones;
a string that does not parse is refused (-32602) and nothing is recorded.
Parsing is strict (server/strict_json.py): NaN, Infinity and numbers out
of range are refused in text and in the arguments the SDK parsed alike, since
the envelope would carry them as null. A failure inside the transport is
answered -32603 with a log id, as POST /chap answers a defect.

Who a session acts as and which tools it is offered are decided in
mcp_binding.py and mcp_tools.py: a bound session's `from` is filled in and
may name no one else, human-only tools are offered to humans only, and a
tool call with a parameter its method does not declare is refused.

Results come back as `isError: false` with the JSON result as text and as
structured content (every tool declares an object output schema); a CHAP
error as `isError: true` with the text `{"chap_error": code, "message": ...}`
(plus `data` when the error has some). Both MCP eras the SDK speaks are
served: the 2025-11-25 `initialize` handshake and the stateless 2026-07-28
revision with `server/discover`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec

from coordinator import __version__
from coordinator.engine.incidents import internal_error
from coordinator.engine.registry import Method
from coordinator.engine.wire import INVALID_PARAMS, METHOD_NOT_FOUND
from coordinator.errors import NotJsonError, RpcError
from coordinator.extras import needs
from coordinator.server.auth import Authenticator
from coordinator.server.authz import authoriser
from coordinator.server.catalogue import TOOL_PREFIX, tool_name
from coordinator.server.dispatcher import Dispatcher, SerialDispatcher, sweep_every
from coordinator.server.mcp_binding import (
    Binding,
    authenticated,
    bind,
    may_call,
    principal_of,
    unknown_parameters,
)
from coordinator.server.mcp_tools import ToolSelection, bound_schema, offered, session_tool_name
from coordinator.server.strict_json import loads, non_finite

with needs("mcp"):
    import anyio
    import mcp_types as types
    from mcp.server import Server, ServerRequestContext
    from mcp.server.lowlevel.server import NotificationOptions
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

__all__ = [
    "AsyncDispatch",
    "DISCOVER_VERSIONS",
    "OUTPUT_SCHEMA",
    "TOOL_PREFIX",
    "UNBOUND_STDIO",
    "create_mcp_server",
    "run_stdio",
    "tool_for",
    "tool_name",
    "tools",
]

log = logging.getLogger(__name__)

# What `server/discover` advertises, newest first: CHAP serves clients of
# both eras, while the SDK's own discover lists only the stateless one.
DISCOVER_VERSIONS = ("2026-07-28", "2025-11-25")

# A stdio session nobody bound: whoever launched the process drives it, so
# it may not make a human's decisions (SPECIFICATION.md, "Bound sessions").
UNBOUND_STDIO = Binding(allow_unbound_humans=False)

AsyncDispatch = Callable[..., Awaitable[dict[str, Any]]]
"""Dispatches one JSON-RPC request body and awaits the response
(`SerialDispatcher.dispatch`, or server/authz.py's `Gatekeeper`, which also
takes the authorise check of an authenticated call); what a transport hands
each call to."""


# What every tool's structured result is: the method's result object (or,
# with isError, the CHAP error object), as SPECIFICATION.md describes each.
OUTPUT_SCHEMA: Mapping[str, Any] = {"type": "object"}


def tool_for(method: Method, naming: str = "chap", principal: str | None = None) -> types.Tool:
    """The MCP tool of one implemented method; each hint stated, False unless
    declared. `naming` as mcp_tools.session_tool_name; with `principal`, the
    schema of a session bound to it (`from` filled in)."""

    def hint(name: str) -> bool:
        return bool(method.annotations.get(name, False))

    params = dict(method.params) if principal is None else bound_schema(method.params, principal)
    return types.Tool(
        name=session_tool_name(method, naming),
        title=method.title,
        description=method.description,
        input_schema=params,
        output_schema=dict(OUTPUT_SCHEMA),
        annotations=types.ToolAnnotations(
            title=method.title,
            read_only_hint=hint("readOnlyHint"),
            destructive_hint=hint("destructiveHint"),
            idempotent_hint=hint("idempotentHint"),
            open_world_hint=hint("openWorldHint"),
        ),
    )


def tools(methods: list[Method]) -> list[types.Tool]:
    """One tool per method that has a handler, in the registry's order (an
    unbound session's full list)."""
    return [tool_for(m) for m in methods if m.handler is not None]


class _BadArgument(ValueError):
    pass


def _wants(schema: Mapping[str, Any]) -> set[str]:
    """The JSON types a property schema admits (empty: anything)."""
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    out: set[str] = set()
    for key in ("oneOf", "anyOf"):
        for option in schema.get(key) or ():
            if isinstance(option, Mapping):
                wanted = _wants(option)
                if not wanted:
                    return set()
                out |= wanted
    return out


def coerce_arguments(method: Method, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments with JSON text parsed where the schema wants an object
    or an array. Where the schema admits a string too (`to`: one URI or a
    list; an artefact, which may be anything), text is parsed only when it is
    JSON of an admitted container type: '["human:a"]' is a list, "human:a"
    stays a string."""
    properties = method.params.get("properties") or {}
    out = dict(arguments)
    for name, value in arguments.items():
        place = non_finite(value, name)
        if place is not None:
            raise _BadArgument(
                f"{name} holds NaN or Infinity at {place}, for which JSON has no form; "
                "send a finite number, null, or the value as a string"
            )
        schema = properties.get(name)
        if not isinstance(value, str) or not isinstance(schema, Mapping):
            continue
        wanted = _wants(schema) or {"object", "array", "string"}
        containers = wanted & {"object", "array"}
        if not containers:
            continue
        try:
            parsed = loads(value)
        except NotJsonError as exc:
            if "string" in wanted:
                continue
            raise _BadArgument(
                f"{name} must be a JSON {' or '.join(sorted(containers))}; the string given "
                f"does not parse as JSON: {exc.reason}"
            ) from None
        if _is(parsed, containers):
            out[name] = parsed
        elif "string" not in wanted:
            raise _BadArgument(
                f"{name} must be a JSON {' or '.join(sorted(containers))}; the string given "
                f"parses as {type(parsed).__name__}"
            )
    return out


def _is(value: Any, wanted: set[str]) -> bool:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean"}
    kind = kinds.get(type(value))
    if kind is None and isinstance(value, int):
        kind = "integer"
    return kind in wanted or (kind == "integer" and "number" in wanted)


def _text(payload: Any, error: bool) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(payload, indent=2, ensure_ascii=False))],
        structured_content=payload if isinstance(payload, dict) else {"result": payload},
        is_error=error,
    )


def _refused(error: RpcError) -> types.CallToolResult:
    return _chap_error(error.code, error.message, error.data)


def _chap_error(code: int, message: str, data: Any = None) -> types.CallToolResult:
    payload: dict[str, Any] = {"chap_error": code, "message": message}
    if data is not None:
        payload["data"] = data
    return _text(payload, True)


def create_mcp_server(
    call: AsyncDispatch,
    methods: list[Method],
    *,
    auth: Authenticator | None = None,
    binding: Binding | None = None,
    selection: ToolSelection | None = None,
    name: str = "chapline",
    version: str = __version__,
) -> Server[Any]:
    """An MCP server whose tools dispatch through `call`.

    `methods` is the registry's lists (`REGISTRY.methods()` and
    `REGISTRY.extension_methods()`); those with a handler become tools. Envelope ids are `mcp-1`, `mcp-2`, ... in the
    order calls arrive, as the reference's adapter numbers them. With `auth`
    (an HTTP server that requires authentication), each call is held to the
    rules of POST /chap, against the HTTP request that carried it, and the
    session is bound to the token's principal. `binding` binds a session
    without `auth` (stdio's `--as`); without either, calls act as whoever
    their `from` names, as POST /chap without --auth. `selection` narrows and
    names the tools (mcp_tools.py).
    """
    fixed = binding or Binding()
    selection = selection or ToolSelection()
    naming = selection.naming
    by_tool = {session_tool_name(m, naming): m for m in methods if m.handler is not None}
    numbers = itertools.count(1)
    # The profiles of the workspace the session is tied to, as last listed:
    # a call that finds them changed re-announces the tools.
    seen: dict[str, list[str] | None] = {}

    def binding_of(ctx: ServerRequestContext[Any]) -> Binding:
        if auth is None:
            return fixed
        return Binding(principal_of(auth, _authorization(getattr(ctx.request, "headers", None))))

    async def profiles(principal: str | None) -> list[str] | None:
        """The advertised profiles of the session's workspace; None when it
        cannot be described (not created yet, or not readable to this caller)."""
        if selection.workspace is None:
            return None
        params: dict[str, Any] = {"workspace": selection.workspace}
        if principal is not None:
            params["from"] = principal
        response = await call(
            msgspec.json.encode(
                {"jsonrpc": "2.0", "id": "mcp-tools", "method": "workspace.describe", "params": params}
            )
        )
        result = response.get("result")
        found = result.get("profiles") if isinstance(result, dict) else None
        return [p for p in found if isinstance(p, str)] if isinstance(found, list) else None

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        session = binding_of(ctx)
        now = await profiles(session.principal)
        seen["profiles"] = now
        return types.ListToolsResult(
            tools=[tool_for(m, naming, session.principal) for m in offered(methods, session, selection, now)]
        )

    async def announce_changes(ctx: ServerRequestContext[Any], principal: str | None) -> None:
        """notifications/tools/list_changed when the workspace's profiles
        differ from those the tools were last listed for (2025-11-25 era; the
        2026-07-28 era delivers changes on subscriptions only)."""
        if selection.workspace is None or "profiles" not in seen:
            return
        now = await profiles(principal)
        if now == seen["profiles"]:
            return
        seen["profiles"] = now
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            await ctx.session.send_notification(types.ToolListChangedNotification(), ctx.request_id)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            return await answer(ctx, params)
        except Exception as exc:
            error = internal_error(log, f"MCP tool call {params.name!r} failed", exc)
            return _chap_error(error.code, error.message, error.data)

    async def answer(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        method = by_tool.get(params.name)
        if method is None or not selection.wanted(method):
            return _chap_error(
                METHOD_NOT_FOUND,
                f"Unknown tool: {params.name}; this session's tools are those tools/list "
                "gives (chap.<method> for each CHAP method chapline implements, and "
                "chapline's own x-chapline.* methods, as the server was started to offer)",
            )
        session = fixed
        given = dict(params.arguments or {})

        def envelope_of(arguments: dict[str, Any], number: int | None) -> bytes:
            return msgspec.json.encode(
                {"jsonrpc": "2.0", "id": f"mcp-{number}", "method": method.name, "params": arguments}
            )

        how = "bound by --as"
        identity = None
        if auth is not None:
            # Who is calling first, as POST /chap checks it before anything else.
            header = _authorization(getattr(ctx.request, "headers", None))
            admitted = authenticated(auth, header, envelope_of(given, None))
            if isinstance(admitted, RpcError):
                return _refused(admitted)
            identity = admitted
            # Bound to whom this very check authenticated, not to a second lookup.
            session = Binding(identity.principal)
            how = "the principal of its bearer token"
        refused = may_call(method, session) or unknown_parameters(method, given)
        if refused is not None:
            return _refused(refused)
        try:
            arguments = coerce_arguments(method, given)
        except _BadArgument as exc:
            return _chap_error(INVALID_PARAMS, f"Invalid params: {exc}")
        arguments, refused = bind(method, arguments, session.principal, how)
        if refused is not None:
            return _refused(refused)
        body = envelope_of(arguments, next(numbers))
        response = await (call(body) if identity is None else call(body, authoriser(identity)))
        await announce_changes(ctx, session.principal)
        if "error" in response:
            error = response["error"]
            return _chap_error(error.get("code"), error.get("message"), error.get("data"))
        return _text(response.get("result"), False)

    async def discover(
        ctx: ServerRequestContext[Any], params: types.RequestParams | None
    ) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(DISCOVER_VERSIONS),
            capabilities=server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=server.instructions,
        )

    server: Server[Any] = Server(
        name,
        version=version,
        instructions=(
            "CHAP, the Collaborative Human-Agent Protocol: each tool chap.<method> is one "
            "CHAP call. Join a workspace with chap.participant.join, then create, complete "
            "and review tasks; every accepted call is kept in a hash-linked audit log."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    server.add_request_handler("server/discover", types.RequestParams, discover)
    return server


def _authorization(headers: Mapping[str, str] | None) -> str | None:
    return None if headers is None else headers.get("authorization")


def run_stdio(
    target: Dispatcher,
    sweep: Callable[[], object] | None = None,
    sweep_interval: float = 0,
    *,
    binding: Binding = UNBOUND_STDIO,
    selection: ToolSelection | None = None,
) -> None:
    """Serve `target` (a Coordinator) as MCP on stdin/stdout until the client
    closes the stream. Calls run one at a time on one worker thread, as in
    `chapline serve`; every call answered has been written when this returns.
    With `sweep` and `sweep_interval` > 0, `sweep()` (`Coordinator.sweep`)
    runs that often on the same thread. `binding` is who the session acts
    as (by default no one, refused the human-only methods); `selection`
    narrows and names its tools."""
    from mcp.server.stdio import stdio_server

    from coordinator.profiles import REGISTRY

    registry = getattr(target, "registry", REGISTRY)  # a Coordinator's own, given or default
    dispatcher = SerialDispatcher(target)
    server = create_mcp_server(
        dispatcher.dispatch, registry.methods() + registry.extension_methods(), binding=binding, selection=selection
    )

    async def serve() -> None:
        timer = None
        if sweep is not None and sweep_interval > 0:
            timer = asyncio.create_task(sweep_every(dispatcher, sweep, sweep_interval))
        try:
            async with stdio_server() as (read, write):
                options = server.create_initialization_options(NotificationOptions(tools_changed=True))
                await server.run(read, write, options)
        finally:
            if timer is not None:
                timer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await timer

    dispatcher.start()
    try:
        anyio.run(serve)
    finally:
        dispatcher.close()
