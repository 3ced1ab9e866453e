"""Who an MCP or A2A session acts as, and the checks a tool call passes
before it becomes an envelope (SPECIFICATION.md, "MCP and A2A", "Bound
sessions").

A session is bound to one participant: on stdio by `chapline mcp --as URI`,
over HTTP under `--auth` by the principal of the bearer token that carried
the call. A bound call's `from` is filled in when absent, and a `from`
naming anyone else is refused (-32011) by the same check POST /chap makes
(`auth.admit`). Who may call what comes from the registry: a method that
is a human's decision (`Method.humans_only`, `decide.*`) is for `human:`
participants only, and an unbound stdio session, which cannot say who is
at the keyboard, is refused those and the privileged methods unless it was
started with `--allow-unbound-humans`.

Parameters a method does not declare are refused (-32602, naming them):
a misplaced one (`from_seq` beside `range` instead of inside it) would
otherwise be dropped and the call answered as if it had not been given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from coordinator.engine.registry import Method
from coordinator.engine.wire import INVALID_PARAMS, NOT_AUTHORISED
from coordinator.errors import RpcError
from coordinator.server.auth import Authenticator, Identity, admit, bearer

__all__ = [
    "Binding",
    "authenticated",
    "bind",
    "human",
    "may_call",
    "principal_of",
    "unknown_parameters",
]


@dataclass(frozen=True)
class Binding:
    """The participant a session acts as (`principal`, None: unbound), and
    whether an unbound session may call the human-only methods."""

    principal: str | None = None
    allow_unbound_humans: bool = True


def human(principal: str) -> bool:
    """Whether a participant URI names a person (`human:...`)."""
    return principal.startswith("human:")


def may_call(method: Method, binding: Binding) -> RpcError | None:
    """Why `binding` may not call `method` (-32011), or None when it may."""
    principal = binding.principal
    if principal is None:
        if binding.allow_unbound_humans or not (method.humans_only or method.privileged):
            return None
        return RpcError(
            NOT_AUTHORISED,
            f"{method.name} is for a human (a decision or a privileged call), and this session "
            "is bound to no participant, so anyone driving it could make it; start the server "
            "with --as human:NAME for that person, or with --allow-unbound-humans",
            {"method": method.name, "principal": None},
        )
    if method.humans_only and not human(principal):
        return RpcError(
            NOT_AUTHORISED,
            f"{method.name} is a human's decision and this session acts as {principal}; "
            "ask for review (review.request) and let the reviewer decide in their own session",
            {"method": method.name, "principal": principal},
        )
    return None


def unknown_parameters(method: Method, arguments: Mapping[str, Any]) -> RpcError | None:
    """-32602 naming the arguments `method` does not declare, or None."""
    if method.params.get("additionalProperties") is True:
        return None
    known = method.params.get("properties") or {}
    unknown = sorted(name for name in arguments if name not in known)
    if not unknown:
        return None
    return RpcError(
        INVALID_PARAMS,
        f"Invalid params: {method.name} has no parameter {', '.join(map(repr, unknown))}; "
        f"its parameters are {', '.join(sorted(known))} (see the tool's inputSchema)",
        {"unknown": unknown, "known": sorted(known)},
    )


def bind(
    method: Method, arguments: Mapping[str, Any], principal: str | None, how: str
) -> tuple[dict[str, Any], RpcError | None]:
    """The arguments with `from` filled in from `principal` where the method
    takes one and it is absent, and the refusal (-32011, nothing recorded)
    of a `from` naming anyone else, as POST /chap refuses it under --auth;
    `how` says what bound the session, for the message."""
    out = dict(arguments)
    if principal is None:
        return out, None
    if "from" not in out and "from" in (method.params.get("properties") or {}):
        out["from"] = principal
    refused = admit(principal, msgspec.json.encode({"params": out}))
    if refused is None:
        return out, None
    return out, RpcError(
        NOT_AUTHORISED,
        f"'from' is {out['from']!r} but this session acts as {principal!r} ({how}); leave "
        "'from' out, or connect as that participant",
        refused[1].data,
    )


def principal_of(auth: Authenticator, header: str | None) -> str | None:
    """The principal an `Authorization` header authenticates, or None (no
    valid token, or one that cannot be checked now: the call itself is then
    refused by `authenticated`)."""
    if bearer(header) is None:
        return None
    try:
        return auth.principal(header)
    except Exception:  # noqa: BLE001  (any failure binds no one; the call's own check answers it)
        return None


def authenticated(auth: Authenticator, header: str | None, body: bytes) -> Identity | RpcError:
    """Whom POST /chap would let this call go on as under --auth (its
    identity, whose grant the coordinator then holds it to), or the refusal
    it would give (401, 403 and 503 alike become the error a tool or a reply
    carries)."""
    admission = auth.admission(header, body)
    if admission.refusal is not None:
        return admission.refusal[2]
    assert admission.identity is not None
    return admission.identity
