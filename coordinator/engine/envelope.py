"""Dispatch steps 1-8 (SPECIFICATION.md, "Dispatch"): from what a transport
received to a checked request, or the JSON-RPC error that refuses it."""

from __future__ import annotations

from typing import Any

from coordinator.engine.canonical import canonical_bytes, inspect, inspect_copy
from coordinator.engine.hints import empty_body, invalid_request, unknown_method
from coordinator.engine.registry import Method, Registry
from coordinator.engine.wire import INVALID_PARAMS, INVALID_REQUEST, MAX_DEPTH, decode_json
from coordinator.errors import Rejected, RpcError

__all__ = ["MAX_DEPTH", "Request", "read_envelope"]

class Request:
    """A checked request: the pipeline's own copy of the envelope, its
    canonical bytes (`raw`), its params object and its method.
    (A plain class, not a Struct: this module is compiled, setup.py.)"""

    __slots__ = ("envelope", "raw", "params", "method")

    def __init__(
        self, envelope: dict[str, Any], raw: bytes, params: dict[str, Any], method: Method
    ) -> None:
        self.envelope = envelope
        self.raw = raw
        self.params = params
        self.method = method


def _blank(body: bytes | bytearray | memoryview | str) -> bool:
    """An empty body, or whitespace only (long bodies are not copied to check)."""
    if len(body) > 64:
        return False
    return not (body.strip() if isinstance(body, str) else bytes(body).strip())


def read_envelope(envelope: Any, registry: Registry, max_bytes: int) -> Request:
    """Steps 1-8, first failure wins; raises Rejected."""
    parsed = False
    if isinstance(envelope, (bytes, bytearray, memoryview, str)):
        parsed = True
        if _blank(envelope):
            raise Rejected(None, empty_body())  # 1
        try:
            envelope = decode_json(envelope if isinstance(envelope, str) else bytes(envelope))  # 1
        except RpcError as err:
            raise Rejected(None, err) from None
    invalid = invalid_request(envelope)  # 2, 3
    if invalid is not None:
        raise Rejected(envelope.get("id") if isinstance(envelope, dict) else None, invalid)
    req_id = envelope.get("id")
    name = envelope["method"]
    # From here on the pipeline works on its own copy, in the caller's key
    # order (hint names are answered in it, as 0.3.3 answers them): a body
    # parsed here is one already; a caller's dict is copied by the walk that
    # checks it (new dicts and lists, the immutable scalars shared).
    shape, own = (inspect(envelope), envelope) if parsed else inspect_copy(envelope)
    if shape.depth > MAX_DEPTH:  # 4
        raise Rejected(
            req_id, RpcError(INVALID_REQUEST, f"Envelope nests deeper than {MAX_DEPTH} levels")
        )
    raw = b""
    if shape.error is None:
        raw = canonical_bytes(envelope, shape)
        if len(raw) > max_bytes:  # 5
            raise Rejected(
                req_id,
                RpcError(
                    INVALID_REQUEST, f"Envelope exceeds max_envelope_bytes ({len(raw)} > {max_bytes})"
                ),
            )
    params = envelope.get("params")
    if params is not None and not isinstance(params, dict):  # 6 (absent or null: no params)
        raise Rejected(req_id, RpcError(INVALID_PARAMS, "Invalid params: expected an object"))
    method = registry.get(name)
    if method is None:  # 7
        raise Rejected(req_id, unknown_method(name, [m.name for m in registry.methods()]))
    if shape.error is not None:  # 8
        raise Rejected(req_id, RpcError(INVALID_PARAMS, str(shape.error)))
    if parsed and shape.needs_copy:
        own = inspect_copy(envelope)[1]  # integral floats become integers
    return Request(own, raw, own.get("params") or {}, method)
