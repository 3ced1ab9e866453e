"""Request bodies, read with a bound: no endpoint holds more than its limit
of one request in memory, whether the client declared the length or not."""

from __future__ import annotations

from coordinator.extras import needs

with needs("server"):
    from starlette.requests import Request

__all__ = ["MAX_BODY_BYTES", "read_body"]

# CHAP requires accepting envelopes of at least 1 MiB; we accept exactly that.
MAX_BODY_BYTES = 1024 * 1024


async def read_body(request: Request, limit: int) -> bytes | None:
    """The request body, or None when it is larger than `limit` bytes.

    A declared Content-Length over the limit is refused before reading; a
    chunked body is counted as it arrives and refused once it passes the limit.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
