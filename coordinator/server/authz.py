"""Authorisation: every authenticated call held to its token's grant.

Authentication (server/auth.py) says who a request is and what its token
may do (server/scopes.py, a `Grant`). This module holds calls to that, in
three places:

- inside the coordinator: `authoriser(identity)` is the check
  `Coordinator.dispatch(envelope, authorise=...)` runs at step 11, so a
  refusal is answered and recorded exactly as CHAP records a member's
  refusal (-32011, on the log when a current member made a recordable call);
- `Gatekeeper`, which the transports send calls through: a
  `workspace.create` that the grant allows is followed, in the same store
  write, by the creator's principal joining as the workspace's admin (the
  first admin of a workspace is the creator's principal, whatever the
  envelope says);
- the reads outside CHAP (the desk's workspace list and snapshot, the event
  stream): `readable` and `visible_to`, members only.

The rules, and the -32011 refusals' `data`, are in SPECIFICATION.md,
"Authorisation".
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from coordinator.engine.wire import NOT_AUTHORISED, decode_json
from coordinator.errors import BatchWriteError, RpcError
from coordinator.server.auth import Identity
from coordinator.server.scopes import ADMIN, DEFAULT_MAX_ROLE

if TYPE_CHECKING:
    from coordinator.engine.call import Call
    from coordinator.engine.registry import CallCheck, Method
    from coordinator.server.dispatcher import SerialDispatcher

__all__ = [
    "Authorisation",
    "Gatekeeper",
    "Workspaces",
    "authoriser",
    "readable",
    "visible_to",
]

log = logging.getLogger(__name__)

# Privileged methods a member may call on what is its own: rotating its own
# keys, revoking its own key (revoking another's needs admin, as CHAP says).
_OWN_KEYS = frozenset({"participant.rotate_key", "participant.revoke_key"})
_JOIN_TYPES = re.compile(r"^(human|agent|service|group):")


class Authorisation:
    """The check of one identity's calls (a `CallCheck`): raises the
    -32011 RpcError of the first rule the call breaks."""

    def __init__(self, identity: Identity) -> None:
        self.identity = identity

    def __call__(self, call: Call, method: Method) -> None:
        refusal = self.refusal(call, method)
        if refusal is not None:
            log.info("refused %s by %s: %s", method.name, self.identity.principal, refusal.message)
            raise refusal

    def refusal(self, call: Call, method: Method) -> RpcError | None:
        grant = self.identity.grant
        name = method.name
        wid = call.params.get("workspace")
        if name == "workspace.create" or (name == "participant.join" and call.ws is None):
            # Creating: the creator may then take any role in what it made.
            if not grant.may_create:
                return self._refused(
                    "create", "this token may not create workspaces; ask the operator for one "
                    "made with --may-create, or join an existing workspace", wid)
            if not isinstance(wid, str) and grant.workspaces is not None:
                return self._refused(
                    "workspace", "this token creates only the workspaces it names; send the "
                    "workspace id to create (params.workspace)", wid)
            if isinstance(wid, str) and not grant.covers(wid):
                return self._outside(wid)
            return None
        if isinstance(wid, str) and not grant.covers(wid):
            return self._outside(wid)
        if name == "participant.join":
            role = call.params.get("role") or DEFAULT_MAX_ROLE
            if isinstance(role, str) and not grant.may_take(role):
                return self._refused(
                    "role", f"this token may take at most the role {grant.max_role!r}, not "
                    f"{role!r}; join with a role it allows, or ask the operator for a token made "
                    f"with --max-role {role}", wid, role=role)
            return None
        if call.ws is not None and call.member(self.identity.principal) is None:
            # CHAP's membership precondition (every method but join), held to
            # the principal, reads included: whatever `from` says or omits.
            return self._refused(
                "member", f"{self.identity.principal} is not a member of {call.ws.id}; join it "
                "first with participant.join", wid)
        if _privileged(method, call.params) and not grant.may_take(ADMIN):
            return self._refused(
                "role", f"{name} is privileged and needs a token that may act as admin; this "
                f"one may take at most {grant.max_role!r}", wid, role=ADMIN)
        return None

    def _outside(self, wid: str) -> RpcError:
        return _outside(self.identity, wid)

    def _refused(self, reason: str, message: str, wid: Any, **data: Any) -> RpcError:
        return _refused(self.identity, reason, message, wid, **data)


def _outside(identity: Identity, wid: str) -> RpcError:
    reach = ", ".join(sorted(identity.grant.workspaces or ())) or "no workspace"
    return _refused(
        identity, "workspace", f"this token reaches {reach}, not {wid!r}; ask the operator "
        f"for a token made with --workspace {wid}", wid)


def _refused(identity: Identity, reason: str, message: str, wid: Any, **data: Any) -> RpcError:
    """-32011 with `data: {principal, reason, workspace, role?, grant}`."""
    return RpcError(
        NOT_AUTHORISED,
        f"Not authorised: {message}",
        {
            "principal": identity.principal,
            "reason": reason,
            "workspace": wid if isinstance(wid, str) else None,
            **data,
            "grant": identity.grant.as_json(),
        },
    )


def _privileged(method: Method, params: Mapping[str, Any]) -> bool:
    if not method.privileged:
        return False
    if method.name not in _OWN_KEYS:
        return True
    target = params.get("target_uri")
    return method.name == "participant.revoke_key" and target != params.get("from")


def authoriser(identity: Identity) -> CallCheck:
    """The check `Coordinator.dispatch(..., authorise=)` runs for `identity`'s calls."""
    return Authorisation(identity)


class Target(Protocol):
    """What the Gatekeeper needs of a coordinator (a Coordinator has it)."""

    def dispatch(self, envelope: Any, *, authorise: CallCheck | None = None) -> dict[str, Any]: ...

    def batch(self) -> AbstractContextManager[None]: ...


class Gatekeeper:
    """Sends calls to the coordinator through `dispatcher`, each held to the
    grant of the `authorise` check given with it (an `Authorisation`); has
    the signature of `SerialDispatcher.dispatch`, so the transports take it
    in its place."""

    def __init__(self, dispatcher: SerialDispatcher, target: Target) -> None:
        self._dispatcher = dispatcher
        self._target = target

    async def __call__(self, body: bytes, authorise: CallCheck | None = None) -> dict[str, Any]:
        if isinstance(authorise, Authorisation) and _method(body) == "workspace.create":
            check = authorise
            return await self._dispatcher.run(lambda: self._create(body, check))
        return await self._dispatcher.dispatch(body, authorise)

    def _create(self, body: bytes, check: Authorisation) -> dict[str, Any]:
        """On the dispatcher's thread: the create, then its creator's admin
        join, in one batch (one store write: both or neither)."""
        principal = check.identity.principal
        try:
            with self._target.batch():
                response = self._target.dispatch(body, authorise=check)
                result = response.get("result")
                kind = _JOIN_TYPES.match(principal)
                if isinstance(result, dict) and kind is not None:
                    joined = self._target.dispatch({
                        "jsonrpc": "2.0",
                        "id": "chapline-creator",
                        "method": "participant.join",
                        "params": {"workspace": result["workspace"], "from": principal,
                                   "type": kind.group(1), "role": ADMIN},
                    }, authorise=_first_member)
                    error = joined.get("error")
                    # Refused by _first_member: the workspace has its members
                    # already, so this create was a resend answered from its
                    # kept answer (an idempotency key or a signed envelope
                    # seen before), and its first admin joined back then.
                    if error is not None and error["code"] != NOT_AUTHORISED:
                        # Else never expected (the workspace is new); the batch
                        # must not write a workspace without its first admin.
                        raise RpcError(error["code"], error["message"])
        except BatchWriteError:
            pass  # the batch rewrote the response to the write's error
        except RpcError as err:
            raise RuntimeError(f"the creator of a workspace could not join it: {err}") from err
        return response


def _first_member(call: Call, method: Method) -> None:
    """The creator's join is let in only as the workspace's first member:
    run again after another writer created the workspace first (the
    create then answers that it exists), it refuses rather than make the
    loser an admin of the winner's workspace."""
    if call.ws is None or call.count("members") > 0:
        raise RpcError(NOT_AUTHORISED, "Not authorised: the workspace was created by another call; "
                                       "join it as its admin allows")


def _method(body: bytes) -> Any:
    try:
        envelope = decode_json(body)
    except RpcError:
        return None
    return envelope.get("method") if isinstance(envelope, dict) else None


# -- reads outside CHAP ----------------------------------------------------------


class Workspaces(Protocol):
    """What the reads below need of a coordinator: `workspaces[id].members`."""

    @property
    def workspaces(self) -> Mapping[str, Any]: ...


def readable(target: Workspaces, identity: Identity, workspace: str) -> RpcError | None:
    """None when `identity` may read `workspace` (the token reaches it and
    its principal is a member); else the 403's -32011 error. An unknown
    workspace is readable by nobody. The event stream calls this when it
    opens on one workspace."""
    if not identity.grant.covers(workspace):
        return _outside(identity, workspace)
    held = target.workspaces.get(workspace)
    if held is None or identity.principal not in held.members:
        return _refused(
            identity, "member", f"{identity.principal} is not a member of {workspace!r}; join it first "
            "with participant.join", workspace)
    return None


def visible_to(target: Workspaces, identity: Identity) -> Callable[[str], bool]:
    """Whether each workspace is readable by `identity`, asked afresh each
    time (a join or leave changes it): for the desk's list and for an event
    stream of every workspace."""
    return lambda workspace: readable(target, identity, workspace) is None
