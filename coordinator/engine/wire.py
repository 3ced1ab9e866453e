"""JSON-RPC 2.0 on the wire: error codes and response shapes (the refusal
itself, `RpcError`, is in coordinator/errors.py)."""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec

from coordinator.engine.canonical import inspect, is_ascii
from coordinator.errors import RpcError

__all__ = [
    "MAX_DEPTH",
    "PARSE_ERROR",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "INVALID_PARAMS",
    "INTERNAL_ERROR",
    "NOT_REVIEWABLE",
    "NOT_AUTHORISED",
    "PATCH_FAILED",
    "REVIEW_ALREADY_OPEN",
    "WHISPER_ANSWERED",
    "WHISPER_LAPSED",
    "NOT_AN_OPTION",
    "NOT_A_PARTICIPANT",
    "ALREADY_VOTED",
    "DELIBERATION_NOT_OPEN",
    "BAD_RULE",
    "MODE_CEILING_EXCEEDED",
    "NOT_TASK_OWNER",
    "HANDOFF_NOT_PROPOSED",
    "NOT_RECIPIENT",
    "WORKSPACE_PAUSED",
    "CONTROL_NOT_AUTHORISED",
    "SNAPSHOT_NOT_FOUND",
    "NO_ELIGIBLE_ASSIGNEE",
    "CANDIDATES_EMPTY",
    "DEPTH_NOT_APPLICABLE",
    "POLICY_UNREACHABLE",
    "ESCALATION_TARGET_UNAVAILABLE",
    "DIGEST_MISMATCH",
    "SIG_VERIFY_FAILED",
    "SIG_KEY_NOT_FOUND",
    "SIG_KEY_REVOKED",
    "SIG_ROTATION_KEY_MISMATCH",
    "SCITT_UNREACHABLE",
    "SCITT_STATEMENT_REJECTED",
    "SCITT_RECEIPT_INVALID",
    "OIDC_STEP_UP_REQUIRED",
    "OIDC_TOKEN_INVALID",
    "OIDC_CNF_MISMATCH",
    "VC_VP_INVALID",
    "VC_HOLDER_BINDING_INVALID",
    "STORE_WRITE_FAILED",
    "STORE_CONFLICT",
    "STORED_OBJECT_UNREADABLE",
    "OPEN_LIMIT_REACHED",
    "AUTHENTICATION_REQUIRED",
    "WORK_STALE_TOKEN",
    "WORK_TASK_REDEFINED",
    "WORK_PLAN_CYCLE",
    "WORK_CLAIM_REQUIRED",
    "error_response",
    "result_response",
    "decode_json",
    "invalid_params",
    "missing",
]

# CHAP's nesting limit: the envelope is level 1 (dispatch step 4).
MAX_DEPTH: Final = 64

# JSON-RPC band.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# Profile decades.
NOT_REVIEWABLE = -32010
NOT_AUTHORISED = -32011
PATCH_FAILED = -32012
REVIEW_ALREADY_OPEN = -32014
# whisper/1.0
WHISPER_ANSWERED = -32020
WHISPER_LAPSED = -32021
NOT_AN_OPTION = -32022
# deliberation/1.0
NOT_A_PARTICIPANT = -32030
ALREADY_VOTED = -32031
DELIBERATION_NOT_OPEN = -32032
BAD_RULE = -32033
MODE_CEILING_EXCEEDED = -32040
# handoff/1.0
NOT_TASK_OWNER = -32050
HANDOFF_NOT_PROPOSED = -32051
NOT_RECIPIENT = -32052
WORKSPACE_PAUSED = -32063
# control/1.0 (0.3.3 answers a task in the wrong state with "not authorised").
CONTROL_NOT_AUTHORISED = -32061
SNAPSHOT_NOT_FOUND = -32062
# routing/1.0.
NO_ELIGIBLE_ASSIGNEE = -32510
CANDIDATES_EMPTY = -32513
DEPTH_NOT_APPLICABLE = -32514
POLICY_UNREACHABLE = -32515
ESCALATION_TARGET_UNAVAILABLE = -32516
DIGEST_MISMATCH = -32074
# security-signed: a signature that cannot be accepted (never recorded).
SIG_VERIFY_FAILED = -32070
SIG_KEY_NOT_FOUND = -32071
SIG_KEY_REVOKED = -32072
SIG_ROTATION_KEY_MISMATCH = -32073
# audit-scitt.
SCITT_UNREACHABLE = -32080
SCITT_STATEMENT_REJECTED = -32081
SCITT_RECEIPT_INVALID = -32082
# identity-oidc and identity-vc.
OIDC_STEP_UP_REQUIRED = -32402
OIDC_TOKEN_INVALID = -32403
OIDC_CNF_MISMATCH = -32404
VC_VP_INVALID = -32410
VC_HOLDER_BINDING_INVALID = -32411
# Implementation-defined (-32900..-32999): the store did not take the write.
STORE_WRITE_FAILED = -32900
STORE_CONFLICT = -32901
# HTTP with --auth: no valid bearer token (server/auth.py).
AUTHENTICATION_REQUIRED = -32902
STORED_OBJECT_UNREADABLE = -32903
# HTTP: a cap on open event streams or MCP/A2A sessions is reached (answered 429).
OPEN_LIMIT_REACHED = -32904
# x-chapline-work/1.0 (profiles/work/), in -32960..-32969 where no CHAP code is:
# a call with a fencing token that is not the live claim's (a lease that
# expired and was reclaimed, or released); a plan task key resubmitted with a
# different descriptor; a plan whose strong or weak edges form a cycle; a CHAP
# write (task.update, task.complete) to a plan task without its live claim.
WORK_STALE_TOKEN = -32960
WORK_TASK_REDEFINED = -32961
WORK_PLAN_CYCLE = -32962
WORK_CLAIM_REQUIRED = -32963


def invalid_params(message: str) -> RpcError:
    return RpcError(INVALID_PARAMS, message)


def missing(field: str) -> RpcError:
    return RpcError(INVALID_PARAMS, f"Missing field: {field}")


def result_response(req_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": req_id, "result": result}


def error_response(req_id: Any, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": _sendable_id(req_id), "error": error.to_wire()}


def _sendable_id(req_id: Any) -> Any:
    """The request's id as the answer can carry it: the id itself; its JSON
    text (`msgspec.Raw`) when it holds a lone surrogate, which JSON writes as
    an escape but no encoder takes from a str, so the client reads back the
    very id it sent; null when it cannot be sent at all (nested deeper than
    CHAP reads an envelope, or not a JSON value). Never raises."""
    if req_id is None or isinstance(req_id, (bool, int, float)):
        return req_id
    if type(req_id) is str and is_ascii(req_id):
        return req_id  # the usual id: no lone surrogate, nothing to encode to know it
    if isinstance(req_id, (dict, list)) and inspect(req_id).depth > MAX_DEPTH:
        return None  # the walk is bounded; encoding it might meet the recursion limit
    try:
        msgspec.json.encode(req_id)
        return req_id
    except UnicodeEncodeError:
        pass
    except (TypeError, ValueError, RecursionError):
        return None
    try:
        return msgspec.Raw(json.dumps(req_id, allow_nan=False).encode())
    except (TypeError, ValueError, RecursionError):
        return None


_decoder = msgspec.json.Decoder()
_TOO_DEEP = f"Envelope nests too deep to parse (CHAP allows {MAX_DEPTH} levels)"
_TRUNCATED = "Input data was truncated"  # msgspec's words for JSON that ends early


def decode_json(raw: bytes | str) -> Any:
    """Parse a request body. Raises RpcError only: -32700 for anything that is
    not JSON (saying where, and what to send), -32600 when it nests too deep
    to read."""
    try:
        return _decoder.decode(raw)
    except RecursionError:
        raise RpcError(INVALID_REQUEST, _TOO_DEEP) from None
    except (msgspec.DecodeError, UnicodeError) as exc:  # UnicodeError: a str with a lone surrogate
        fast = exc
    return _decode_what_msgspec_refused(raw, fast)


def _not_a_json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _decode_what_msgspec_refused(raw: bytes | str, fast: Exception) -> Any:
    """JSON that msgspec refuses and the standard library reads: lone
    surrogates (escaped, or raw in the str or the bytes) and numbers beyond a
    float. Dispatch step 8 then refuses them with -32602, as it does the same
    envelope given as a dict (they have no canonical form). Anything else is
    not JSON: -32700, saying where."""
    if isinstance(raw, str):
        text, unit = raw, "character"
    else:
        try:
            text, unit = raw.decode("utf-8", "surrogatepass"), "byte"
        except UnicodeDecodeError as bad:
            raise RpcError(
                PARSE_ERROR,
                f"Parse error: the body is not UTF-8 text: byte {bad.start} (0x{raw[bad.start]:02x}) "
                "does not belong to a character; send the JSON encoded as UTF-8",
            ) from None
    try:
        return json.loads(text, parse_constant=_not_a_json_constant)
    except RecursionError:
        raise RpcError(INVALID_REQUEST, _TOO_DEEP) from None
    except json.JSONDecodeError as slow:
        where = f"{slow.msg} at character {slow.pos}"
    except ValueError:  # NaN or Infinity, or an integer too long to read
        where = ""
    if str(fast) == _TRUNCATED:
        message = (
            f"the JSON text ends at {unit} {len(raw)} before it is complete (it looks cut "
            "off); send the whole request"
        )
    elif isinstance(fast, UnicodeError) and where:
        message = where  # a str msgspec could not look at: the standard library's place
    else:
        message = str(fast)
    raise RpcError(PARSE_ERROR, f"Parse error: {message}")
