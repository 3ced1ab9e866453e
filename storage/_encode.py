"""The one place a `StoreChange` is checked and turned into JSON text.

Every store encodes a change completely before touching what it holds, so an
unencodable or malformed change fails whole and the caller's later mutations
cannot reach the store.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from storage.types import MalformedChangeError, StoreChange

__all__ = ["EncodedChange", "decode", "encode", "encode_change"]

encode = msgspec.json.Encoder(order="sorted").encode
decode = msgspec.json.decode


class EncodedChange(NamedTuple):
    meta: bytes
    entries: list[bytes]
    # (collection, key, JSON text or None to delete), in the change's order.
    objects: list[tuple[str, str, bytes | None]]
    create: bool


def _bad(change: StoreChange, what: str, remedy: str) -> MalformedChangeError:
    return MalformedChangeError(change.id, what, remedy)


def _encode(change: StoreChange, value: Any, what: str) -> bytes:
    try:
        return encode(value)
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        raise _bad(
            change,
            f"{what} cannot be encoded as JSON ({exc})",
            "Pass only JSON values (dicts, lists, strings, numbers, booleans, null) or Structs.",
        ) from None


def encode_change(change: StoreChange) -> EncodedChange:
    """JSON text for everything `change` writes, after checking its shape.

    Raises MalformedChangeError (naming the workspace and the fault) when the
    change cannot be stored as the contract describes.
    """
    if not isinstance(change.id, str) or not change.id:
        raise _bad(change, "the workspace id is not a non-empty string", "Name the workspace.")
    # The reference coordinator drives our stores with its own change type,
    # which has no `create`.
    create = bool(getattr(change, "create", False))
    if create and change.replace:
        raise _bad(
            change,
            "create and replace are both set",
            "A create never overwrites; a replace always does. Set one.",
        )
    expected = (0 if change.replace else change.base) + len(change.entries)
    if change.version != expected:
        raise _bad(
            change,
            f"version is {change.version} but base {change.base} plus "
            f"{len(change.entries)} entries makes {expected}"
            + (" (a replace starts at 0)" if change.replace else ""),
            "Set version to the number of audit entries after the change.",
        )
    if not change.replace and change.base < 0:
        raise _bad(change, f"base is {change.base}", "Use the number of entries held.")
    meta = _encode(change, change.meta, "meta")
    if not meta.startswith(b"{"):
        raise _bad(change, "meta is not a JSON object", "Pass the workspace fields as a dict.")
    entries = [
        _encode(change, e, f"the entry for seq {change.base + i}")
        for i, e in enumerate(change.entries)
    ]
    for i, text in enumerate(entries):
        if not text.startswith(b"{"):
            raise _bad(
                change,
                f"the entry for seq {change.base + i} is not a JSON object",
                "Pass audit entries in their wire shape (a dict per entry).",
            )
    objects: list[tuple[str, str, bytes | None]] = []
    for collection, items in change.objects.items():
        if not isinstance(collection, str) or not isinstance(items, dict):
            raise _bad(
                change,
                f"objects[{collection!r}] is not a mapping of key -> value",
                "Pass objects as {collection: {key: value or None}}.",
            )
        for key, value in items.items():
            if not isinstance(key, str):
                raise _bad(
                    change,
                    f"object key {key!r} in {collection!r} is not a string",
                    "Key objects by their string id (members by uri).",
                )
            if value is None:
                objects.append((collection, key, None))
            else:
                objects.append((collection, key, _encode(change, value, f"{collection} {key!r}")))
    return EncodedChange(meta, entries, objects, create)
