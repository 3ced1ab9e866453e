"""The desk's snapshot of a workspace, streamed from the store (SPECIFICATION.md,
"Bounds on memory and time").

Built on the dispatcher, a snapshot held the writer while it read the whole
log and was one value in memory: a workspace of 600 inputs of 1 MB made a
1.2 GB answer per reader and stalled every write for seconds. Here the
workspace is read from the store on a thread of its own, never on the
dispatcher, and written out as it is read: its objects as the JSON text the
store holds, then the log in chunks of about CHUNK_BYTES, so a reader that
does not keep up holds one chunk, not the log. The answer is what
`Coordinator.snapshot` gives for what the store holds (calls of a batch not
yet written are not in it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from coordinator.model import DOCUMENT_LAYOUT
from storage import HeldWorkspace, Store

__all__ = ["CHUNK_BYTES", "held_workspace", "snapshot_chunks"]

# About how much of the log one store read brings in.
CHUNK_BYTES = 4 * 1024 * 1024
_FIRST_ENTRIES = 16
_MAX_ENTRIES = 10_000

_encode = msgspec.json.encode


async def held_workspace(store: Store, workspace_id: str) -> HeldWorkspace | None:
    """The workspace as the store holds it (objects undecoded), or None."""
    held = await asyncio.to_thread(store.load_held, workspace_id)
    return held[0] if held else None


async def snapshot_chunks(store: Store, held: HeldWorkspace) -> AsyncIterator[bytes]:
    """The snapshot of `held` as JSON text, in pieces: its fields, each
    collection keyed by id, then `audit`, its first `held.version` entries."""
    fields: dict[str, Any] = {"id": held.id, **held.meta}
    yield b"{" + b",".join(_encode(k) + b":" + _encode(v) for k, v in fields.items())
    order = [c for c in DOCUMENT_LAYOUT.shown if c not in fields]
    order += [c for c in held.objects if c not in order]
    for collection in order:
        items = held.objects.get(collection, {})
        yield b"," + _encode(collection) + b":{"
        # One object per piece: a slow reader holds one, not the collection, twice.
        for n, (key, text) in enumerate(items.items()):
            yield (b"," if n else b"") + _encode(key) + b":" + text
        yield b"}"
    yield b',"audit":['
    at, stop, weight, count = 0, held.version, 0, 0
    while at < stop:
        size = CHUNK_BYTES // (weight // count + 1) + 1 if count else _FIRST_ENTRIES
        upto = min(stop, at + min(size, _MAX_ENTRIES))
        entries = await asyncio.to_thread(store.read_entries, held.id, at, upto)
        if not entries:
            break  # the store holds fewer than it said (deleted meanwhile): end here
        piece = b",".join(_encode(e) for e in entries)
        weight += len(piece)
        yield (b"," if count else b"") + piece
        count += len(entries)
        at = upto
    yield b"]}"
