"""A read the server refused (HTTP 4xx), as a `RemoteRefused` carrying the
server's own words: the remote client and the event follower share it."""

from __future__ import annotations

import msgspec

from coordinator.errors import RemoteRefused
from coordinator.extras import needs

with needs("client"):
    import httpx

__all__ = ["refusal"]


def refusal(reply: httpx.Response) -> RemoteRefused:
    """The refusal `reply` carries (a JSON-RPC error body, or its text)."""
    try:
        body = msgspec.json.decode(reply.content)
    except msgspec.DecodeError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else reply.text
    return RemoteRefused(str(reply.request.url), reply.status_code, str(message))
