"""Messages for calls that cannot be routed: what was wrong and what to send.

The codes are 0.3.3's (-32700, -32600, -32601); the words are ours. Each
message names the one thing to fix, so a client author never has to guess
which part of "Invalid JSON-RPC 2.0 request" they got wrong.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from typing import Any

from coordinator.engine.wire import INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR
from coordinator.errors import RpcError

__all__ = ["empty_body", "invalid_request", "unknown_method"]


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def empty_body() -> RpcError:
    return RpcError(
        PARSE_ERROR,
        'Parse error: the body is empty; send one JSON-RPC 2.0 request object, e.g. '
        '{"jsonrpc": "2.0", "id": 1, "method": "workspace.describe", "params": {"workspace": "..."}}',
    )


def invalid_request(envelope: Any) -> RpcError | None:
    """The -32600 for an envelope that is not a JSON-RPC 2.0 request, or None.

    Checked in 0.3.3's order: an object, `jsonrpc` exactly "2.0", then a
    non-empty string `method`.
    """
    if isinstance(envelope, list):
        return RpcError(
            INVALID_REQUEST,
            "Invalid JSON-RPC 2.0 request: batches (arrays) are not supported; "
            "send one request object per call",
        )
    if not isinstance(envelope, dict):
        return RpcError(
            INVALID_REQUEST,
            f"Invalid JSON-RPC 2.0 request: expected a request object, got {_type_name(envelope)}",
        )
    if "jsonrpc" not in envelope:
        return RpcError(INVALID_REQUEST, 'Invalid JSON-RPC 2.0 request: missing "jsonrpc": "2.0"')
    version = envelope["jsonrpc"]
    if version != "2.0":
        # a string is shown (JSON-quoted, surrogates escaped): "1.0" and "2" are the usual slips
        got = json.dumps(version[:20]) if isinstance(version, str) else _type_name(version)
        return RpcError(
            INVALID_REQUEST,
            f'Invalid JSON-RPC 2.0 request: "jsonrpc" must be the string "2.0", got {got}',
        )
    method = envelope.get("method")
    if "method" not in envelope or method is None:
        return RpcError(
            INVALID_REQUEST,
            'Invalid JSON-RPC 2.0 request: missing "method", the CHAP method to call (e.g. "task.create")',
        )
    if not isinstance(method, str):
        return RpcError(
            INVALID_REQUEST,
            f'Invalid JSON-RPC 2.0 request: "method" must be a string, got {_type_name(method)}',
        )
    if not method:
        return RpcError(
            INVALID_REQUEST,
            'Invalid JSON-RPC 2.0 request: "method" is empty; name a CHAP method (e.g. "task.create")',
        )
    return None


def unknown_method(method: str, known: Iterable[str]) -> RpcError:
    """-32601 for a method outside CHAP 0.3, with the closest names or the
    methods of the namespace it names."""
    names = sorted(known)
    # Matching costs length squared: a name longer than any method matches none.
    close = difflib.get_close_matches(method, names, n=3, cutoff=0.75) if len(method) <= 64 else []
    namespace = method.split(".", 1)[0] + "."
    siblings = [n for n in names if n.startswith(namespace)]
    if close:
        hint = "did you mean " + " or ".join(close) + "?"
    elif siblings:
        hint = f"the {namespace[:-1]} methods are " + ", ".join(siblings)
    else:
        spaces = sorted({n.split(".", 1)[0] for n in names})
        hint = "CHAP methods are namespaced: " + ", ".join(f"{s}.*" for s in spaces)
    shown = method if len(method) <= 100 else method[:100] + "..."
    return RpcError(METHOD_NOT_FOUND, f"Unknown method: {shown}; {hint}")
