"""Every error chapline raises on purpose, under one base.

Each carries its facts as attributes, and its message (and the class's
`remedy`) says what to do about it::

    ChaplineError                  base: `remedy` says what to do
     ├── RpcError                  a refusal answered as a JSON-RPC error:
     │    │                        code, message, data
     │    ├── StoredObjectError    -32903, a stored object cannot be read:
     │    │                        data {workspace, collection, key}
     │    ├── OpenLimitError       -32904, a cap on open event streams or
     │    │                        MCP/A2A sessions is reached: data {limit, open, ...}
     │    └── UnsafeRequest        an HTTP request a browser could have been made
     │                             to send (wrong Host, Origin, Content-Type):
     │                             status, header
     ├── Rejected                  an envelope refused before any workspace is
     │                             looked at: request_id, error (internal to
     │                             dispatch, which answers it)
     ├── BatchWriteError           a batch's write failed for a workspace; its calls
     │                             were undone: error (the RpcError they got)
     ├── RestoreError              restore() cannot take the snapshot; nothing was
     │                             written (also a ValueError)
     ├── UnknownWorkspaceError     snapshot() of a workspace not held (also a
     │                             KeyError): workspace
     ├── CanonicalError            a value has no CHAP canonical form (also a ValueError)
     ├── PatchError                a JSON Patch cannot be applied: message, data
     │    └── PatchLimitError      ... because its result would be too large
     ├── RegistryError             method declarations disagree with CHAP 0.3 or
     │                             with each other, at import: method
     ├── UnsupportedOptionError    a 0.3.3 option chapline does not take: field
     │                             (also a ValueError)
     ├── LimitError                a server bound (body size, timeout, connection
     │                             cap) set to a value it cannot take: name, value,
     │                             wanted (also a ValueError)
     ├── MissingExtraError         what was used needs an extra not installed (also
     │                             an ImportError): extra, module
     ├── CommandError              a log command cannot run (`chapline verify`, ...)
     ├── Unreplayable              a log the replay cannot run (its profiles);
     │                             also a ValueError
     ├── ProjectionError           a projection's target cannot be opened or
     │                             written, or its cursor does not fit: target
     ├── NotifyError               a notification subscription cannot be made or
     │                             found (also a ValueError)
     ├── InwardCallError           recording outside work: a call was refused:
     │                             step, error (also a RuntimeError)
     ├── DispatcherClosed          the serving worker stopped taking calls
     │                             (also a RuntimeError)
     ├── NotJsonError              text a client sent through MCP or A2A is not
     │                             strict JSON: reason (also a ValueError)
     ├── SignatureError            a signature cannot be accepted: code (also a ValueError)
     ├── JwkError                  a key offered for registration is not a public
     │                             Ed25519 JWK: field (answered -32602; also a ValueError)
     ├── IdentityRejected          a token or presentation cannot be accepted: code
     ├── ScopeError                a token's scopes cannot be read (a CLI flag, an
     │                             OIDC claim, a stored row): field (also a ValueError)
     ├── CoseError                 bytes that are not an acceptable COSE_Sign1
     │                             (also a ValueError)
     ├── ScittUnreachable          the transparency service failed (-32080)
     ├── RemoteUnavailable         a RemoteCoordinator's server could not be reached,
     │                             or answered what is not CHAP, after its retries:
     │                             url, attempts, reason (also a ConnectionError)
     ├── RemoteRefused             the server refused a RemoteCoordinator's read (a
     │                             snapshot, the event stream): url, status, message
     │                             (also a PermissionError)
     └── WaitTimedOut              nothing awaited happened in time: workspace,
                                   subject, timeout (also a TimeoutError)

The classes are defined here, and the modules that raise them import them
from here. `Coordinator.dispatch` never raises: every RpcError becomes the
response's `error`, and anything else is answered -32603 and logged under an
incident id (SPECIFICATION.md, "Errors raised to Python callers"). The
stores' errors form their own tree under `storage.StoreError`. JSON-RPC
codes are defined once, in coordinator/engine/wire.py.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "BatchWriteError",
    "CanonicalError",
    "ChaplineError",
    "CommandError",
    "CoseError",
    "DispatcherClosed",
    "IdentityRejected",
    "InwardCallError",
    "JwkError",
    "LimitError",
    "MissingExtraError",
    "NotJsonError",
    "NotifyError",
    "OpenLimitError",
    "PatchError",
    "PatchLimitError",
    "ProjectionError",
    "RegistryError",
    "Rejected",
    "RemoteRefused",
    "RemoteUnavailable",
    "RestoreError",
    "RpcError",
    "ScittUnreachable",
    "ScopeError",
    "SignatureError",
    "StoredObjectError",
    "UnknownWorkspaceError",
    "UnsafeRequest",
    "Unreplayable",
    "UnsupportedOptionError",
    "WaitTimedOut",
]


class ChaplineError(Exception):
    """Base of every error chapline raises on purpose."""

    remedy: str = "Read the message: it names what was wrong and what to send or change."


# -- answered over the wire ----------------------------------------------------


class RpcError(ChaplineError):
    """A refusal to answer with a JSON-RPC error object: `code`, `message`
    (what was wrong and what to send instead) and `data`."""

    remedy = "Change the request as the message says and send it again."

    __slots__ = ("code", "message", "data")

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_wire(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        try:
            msgspec.json.encode(err)
        except (TypeError, ValueError, UnicodeEncodeError):
            # A message or data quoting the caller's input, which held a lone
            # surrogate (or another value JSON cannot carry): show it escaped.
            err = _sendable(err)
        return err


def _sendable(value: Any) -> Any:
    """`value` with every string JSON cannot carry escaped, and every other
    value JSON cannot carry shown as its repr."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_sendable(k): _sendable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sendable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return repr(value)


class StoredObjectError(RpcError):
    """An object the store holds cannot be read as the coordinator's type.

    Answered with `code` (-32903, wire.STORED_OBJECT_UNREADABLE) and
    `{workspace, collection, key}`; the call changes nothing and is not
    recorded (the fault is the store's, not the caller's).
    """

    def __init__(self, code: int, workspace: str, collection: str, key: str, detail: str) -> None:
        super().__init__(
            code,
            f"workspace {workspace!r}: the stored {collection} object {key!r} cannot be "
            f"read ({detail}); repair or delete its row in the store",
            {"workspace": workspace, "collection": collection, "key": key},
        )


class UnsafeRequest(RpcError):
    """An HTTP request refused before any route sees it, because a web page
    could have made a browser send it (server/browser.py): `status` is the
    HTTP status to answer (421, 403 or 415), `header` the header at fault."""

    remedy = (
        "Reach the server by a name it answers to, from its own pages or an origin it lists, "
        "and POST bodies as application/json; its operator can add --allowed-host and "
        "--allow-origin."
    )

    def __init__(self, status: int, header: str, code: int, message: str, data: Any) -> None:
        super().__init__(code, message, data)
        self.status = status
        self.header = header


class OpenLimitError(RpcError):
    """A stream or session refused because a cap on how many may be open is
    reached (answered 429 with `code` -32904, wire.OPEN_LIMIT_REACHED); `data`
    holds `limit` and `open` (and `principal` for a cap per participant)."""

    remedy = "Close a stream or session you no longer use, or retry once others have ended."


class Rejected(ChaplineError):
    """The envelope is refused before any workspace is looked at (never
    recorded); `error` is the RpcError to answer with. Internal to dispatch."""

    def __init__(self, request_id: Any, error: RpcError) -> None:
        super().__init__(error.message)
        self.request_id = request_id
        self.error = error


# -- raised to Python callers --------------------------------------------------


class BatchWriteError(ChaplineError):
    """A batch's store write failed for a workspace; its calls were undone.

    `error` is the JSON-RPC error (-32900) each of those calls is now answered
    with; the other workspaces of the batch were written.
    """

    remedy = "Check the store (disk space, permissions, connection) and run the calls again."

    def __init__(self, error: ChaplineError) -> None:  # an RpcError (wire.py imports this module)
        super().__init__(str(error))
        self.error = error


class RestoreError(ChaplineError, ValueError):
    """`restore()` was given data it cannot take; nothing was written."""

    remedy = "Fix the snapshot the message names and restore again."


class UnknownWorkspaceError(ChaplineError, KeyError):
    """A workspace this coordinator does not hold was asked for by id.

    `workspace` is the id asked for; the message names the ones held. A
    KeyError, so code that caught the bare one keeps working."""

    remedy = "Ask for one of the workspaces held (coord.workspace_ids()), or restore() it first."

    def __init__(self, workspace: Any, held: list[str]) -> None:
        shown = ", ".join(map(repr, held[:10])) + (", ..." if len(held) > 10 else "")
        self.message = (
            f"no workspace {workspace!r} is held by this coordinator "
            f"(held: {shown or 'none'}); check the id, or restore() it first"
        )
        super().__init__(self.message)
        self.workspace = workspace

    def __str__(self) -> str:  # KeyError would show the message quoted
        return self.message


class CanonicalError(ChaplineError, ValueError):
    """A value has no CHAP canonical form; the message says why and what to send."""

    remedy = "Send integers only (within 2^53-1), strings without lone surrogates."


class PatchError(ChaplineError):
    """A patch that cannot be applied; nothing was changed.

    ``data`` says where: ``op_index`` (0-based position in the patch, absent
    for whole-patch problems), ``op`` and ``path`` when known. The coordinator
    passes it on as the JSON-RPC error's ``data``.
    """

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = dict(data or {})

    @property
    def op_index(self) -> int | None:
        return self.data.get("op_index")

    @property
    def path(self) -> str | None:
        return self.data.get("path")


class PatchLimitError(PatchError):
    """The patch would make the document deeper or larger than the bounds
    (``MAX_DEPTH``, ``MAX_CHARS`` of coordinator/engine/patch.py); nothing was
    changed. ``data`` adds ``limit`` and what was reached (``depth`` or
    ``chars``)."""


class RegistryError(ChaplineError):
    """The method declarations disagree with CHAP 0.3 or with each other.

    Raised when the registry is built (at import), never during a call;
    `method` names the declaration at fault.
    """

    def __init__(self, method: str, problem: str) -> None:
        self.method = method
        super().__init__(f"{method}: {problem}")


class UnsupportedOptionError(ChaplineError, ValueError):
    """A `CoordinatorOptions` field chapline does not support was set.

    `field` names it; the message says why and what to do instead."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(
            f"CoordinatorOptions.{field} is not supported by chapline: {why}. "
            f"Leave {field} at its default to build this coordinator."
        )
        self.field = field


class LimitError(ChaplineError, ValueError):
    """A server bound set to a value it cannot take (SPECIFICATION.md,
    "Bounds on memory and time"): `name` is the bound, `value` what it was
    given, `wanted` (and the message) what it takes."""

    remedy = "Give the bound a value in its range, or leave it at its default."

    def __init__(self, name: str, value: object, wanted: str) -> None:
        super().__init__(f"{name} must be {wanted}, got {value!r}")
        self.name = name
        self.value = value
        self.wanted = wanted


class CommandError(ChaplineError):
    """What stopped a command, said in one line (exit status 1)."""


class Unreplayable(ChaplineError, ValueError):
    """A workspace whose log the replay cannot run: its profiles are not
    ones chapline implements, or one only the deployment's own verifier
    enforces (identity-oidc/1.0). The message says which."""

    remedy = (
        "Check the workspace's profiles; a log only the deployment's own verifier can "
        "check is verified by its chain alone."
    )


class ProjectionError(ChaplineError):
    """A projection's target cannot be opened or written, or holds a cursor
    that does not fit the entries handed to it.

    `target` describes the database (a file's path, or a PostgreSQL
    database's name, host and port: never a user or password)."""

    remedy = (
        "Check that the projection's database can be reached and written (for "
        "PostgreSQL: the server runs and the URI's user may create tables in that "
        "database). An attached projection that fails is retried from its cursor "
        "by itself; the calls are unaffected."
    )

    def __init__(self, target: str, message: str) -> None:
        super().__init__(message)
        self.target = target


class NotifyError(ChaplineError, ValueError):
    """A notification subscription cannot be made as asked (a URL, address,
    format or kind it cannot take), or the one named does not exist."""

    remedy = "Read the message: it names the value to change; `chapline notify list` shows the subscriptions."


# -- the server ----------------------------------------------------------------


class InwardCallError(ChaplineError, RuntimeError):
    """A call a helper made was refused. `step` is the method ("task.create",
    ...), `error` the JSON-RPC error; the calls before it stay recorded, so a
    refused `task.complete` leaves the task in progress, where it can be
    completed or cancelled by hand. A RuntimeError too, as 0.3.3 raises."""

    remedy = (
        "Fix the cause the error names (is the caller a member of the workspace? are "
        "numbers in the values integers or strings?) and record the work again."
    )

    def __init__(self, step: str, error: dict[str, Any]) -> None:
        self.step = step
        self.error = error
        super().__init__(f"{step} failed: {error}. {self.remedy}")


class DispatcherClosed(ChaplineError, RuntimeError):
    """The dispatcher was closed; the call was not run."""


class NotJsonError(ChaplineError, ValueError):
    """Text that is not strict JSON, or that this server cannot read; `reason`
    says which, in words a client author can act on."""

    remedy = (
        "Send standard JSON (RFC 8259): no NaN or Infinity, numbers within a double's "
        "range, strings of valid Unicode, nesting at most a few hundred levels."
    )

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# -- signatures, identity and transparency -------------------------------------


class SignatureError(ChaplineError, ValueError):
    """A signature that cannot be accepted; `code` is its CHAP error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class JwkError(ChaplineError, ValueError):
    """A key offered for registration that is not one: `field` names the
    member at fault (`jwks.keys[0].x`, `new_jwk.kid`); answered -32602."""

    remedy = (
        "Register the public half of an Ed25519 key, as coordinator.public_jwk(key, kid) "
        "writes it: {kty: OKP, crv: Ed25519, kid, x}."
    )

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.message = f"{field} {problem}"
        super().__init__(self.message)


class IdentityRejected(ChaplineError):
    """A token or presentation that cannot be accepted; `code` is the CHAP code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ScopeError(ChaplineError, ValueError):
    """A token's scopes that cannot be read: `field` names what is wrong
    (`workspaces`, `max_role`, `may_create`, or the OIDC claim's name)."""

    remedy = (
        "Give the workspaces as ids (or * for all), the highest role as one role name "
        "(observer, participant, reviewer, admin, or a role of your own) and may_create "
        "as true or false; see SPECIFICATION.md, \"Authorisation\"."
    )

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.message = f"{field}: {problem}"
        super().__init__(self.message)


class CoseError(ChaplineError, ValueError):
    """Bytes that are not a COSE_Sign1 this module accepts, or whose signature fails."""


class ScittUnreachable(ChaplineError):
    """The transparency service could not be reached or failed (-32080)."""


class MissingExtraError(ChaplineError, ImportError):
    """Something was used that needs an extra which is not installed.

    `extra` names it (`crypto`), `module` the package found missing;
    `remedy` is the command that installs it.
    """

    def __init__(self, extra: str, module: str) -> None:
        self.extra = extra
        self.module = module
        self.remedy = f"pip install 'chapline[{extra}]'"
        super().__init__(
            f"this needs chapline[{extra}], which is not installed (no module {module}): "
            f"{self.remedy}",
            name=module,
        )


class RemoteUnavailable(ChaplineError, ConnectionError):
    """A RemoteCoordinator got no CHAP answer from `url` after `attempts`
    tries (the server down, or something else answering); `reason` is the
    last failure. A call that carried an idempotency key or a signature may be
    sent again as it was: it is answered, not run twice."""

    remedy = "Check that `chapline serve` runs at the URL and is reachable, then send the call again."

    def __init__(self, url: str, attempts: int, reason: str) -> None:
        self.url = url
        self.attempts = attempts
        self.reason = reason
        super().__init__(f"no CHAP answer from {url} after {attempts} attempts: {reason}")


class RemoteRefused(ChaplineError, PermissionError):
    """The server at `url` refused a read a RemoteCoordinator made (HTTP
    `status`): a token that may not read the workspace, or none under --auth."""

    remedy = "Use a token whose holder is a member of the workspace (chapline token create --as ...)."

    def __init__(self, url: str, status: int, message: str) -> None:
        self.url = url
        self.status = status
        self.message = message
        super().__init__(f"{url} refused the read (HTTP {status}): {message}")


class WaitTimedOut(ChaplineError, TimeoutError):
    """Nothing awaited (a decision, a whisper's answer) happened within
    `timeout` seconds on `subject` (a task or whisper id) of `workspace`."""

    remedy = "Wait again (nothing was lost: waiting reads the log from the start), or ask the people involved."

    def __init__(self, workspace: str, subject: str, timeout: float) -> None:
        self.workspace = workspace
        self.subject = subject
        self.timeout = timeout
        super().__init__(f"nothing decided on {subject!r} in workspace {workspace!r} within {timeout:g} s")
