"""The one place a `StoreChange` is checked and turned into what a store keeps.

Every store prepares a change completely before touching what it holds, so an
unencodable or malformed change fails whole and the caller's later mutations
cannot reach the store. The SQL stores keep JSON text (`encode_change`);
MemoryStore keeps frozen Structs as they are and text for everything else
(`hold_change`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

from storage.types import EntryKeys, MalformedChangeError, StoreChange

__all__ = ["EncodedChange", "Held", "Prepared", "decode", "encode", "encode_change", "held_text", "hold_change"]

encode = msgspec.json.Encoder(order="sorted").encode
decode = msgspec.json.decode

# What MemoryStore keeps of a value: its JSON text, or the value itself when
# it is a frozen Struct (see `hold_change`).
Held = bytes | msgspec.Struct
V = TypeVar("V", bytes, Held)


class Prepared(Generic[V]):
    """A change ready to be written: what the store keeps of each part.

    A plain class, not a NamedTuple: compiled, building one is a C call
    (every write builds one)."""

    __slots__ = ("meta", "entries", "objects", "create", "entry_keys")

    def __init__(
        self,
        meta: V,
        entries: list[V],
        objects: list[tuple[str, str, V | None]],
        create: bool,
        entry_keys: list[EntryKeys] | None,
    ) -> None:
        self.meta: V = meta
        self.entries: list[V] = entries
        # (collection, key, value as kept or None to delete), in the change's order.
        self.objects: list[tuple[str, str, V | None]] = objects
        self.create = create
        # The writer's filter keys of each entry (StoreChange.entry_keys), checked.
        self.entry_keys = entry_keys


# What the SQL stores write: everything as JSON text.
EncodedChange = Prepared[bytes]


def _bad(change: StoreChange, what: str, remedy: str) -> MalformedChangeError:
    return MalformedChangeError(change.id, what, remedy)


def _keys_fault(given: Any, entries: int) -> str | None:
    """What is wrong with a change's `entry_keys` (None: nothing, or none given)."""
    if given is None:
        return None
    if type(given) is not list or len(given) != entries:
        return f"entry_keys is not a list of one EntryKeys per entry ({entries})"
    for at, keys in enumerate(given):
        if (
            type(keys) is not tuple
            or len(keys) != 4
            or not _str_or_none(keys[0])
            or not _str_or_none(keys[1])
            or not _str_or_none(keys[2])
            or keys[3] not in ("accepted", "refused")
        ):
            return f"entry_keys[{at}] is not (method, sender, task_id, outcome) as call_keys gives them"
    return None


def _str_or_none(key: Any) -> bool:
    return key is None or type(key) is str


def _encode(change: StoreChange, value: Any, what: str, convert: Callable[[Any], V]) -> V:
    try:
        return convert(value)
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
    return _prepare(change, encode)


# type -> whether its values are frozen Structs that encode as JSON objects
# (msgspec builds a new config object on every `__struct_config__` read).
_frozen: dict[type, bool] = {}


def _is_frozen(kind: type) -> bool:
    config = getattr(kind, "__struct_config__", None)
    frozen = config is not None and config.frozen and not config.array_like
    _frozen[kind] = frozen
    return frozen


def _hold(value: Any) -> Held:
    kind = type(value)
    frozen = _frozen.get(kind)
    if frozen is None:
        frozen = _is_frozen(kind)
    return value if frozen else encode(value)


def hold_change(change: StoreChange) -> Prepared[Held]:
    """`encode_change` for a store held in memory: a frozen Struct (meta or
    object) is kept as it is, since nobody can change it after the write
    (the containers inside it are the writer's to leave alone, as the
    coordinator's staged values are); everything else becomes JSON text."""
    return _prepare(change, _hold)


def not_object(value: Held) -> bool:
    """Whether what a store keeps of a value is not a JSON object (kept
    frozen Structs encode as objects, see `_is_frozen`)."""
    return isinstance(value, bytes) and value[:1] != b"{"


def held_text(value: Held) -> bytes:
    """The JSON text of a value `hold_change` kept."""
    return value if isinstance(value, bytes) else encode(value)


def _prepare(change: StoreChange, convert: Callable[[Any], V]) -> Prepared[V]:
    # Every write comes through here: the usual well-formed change is
    # converted in one pass; anything unusual is looked at again, one check
    # and one value at a time, by `_prepare_checked`, which names the fault.
    # Each field read once: a Struct's attribute is a generic lookup, compiled too.
    wid, base, written = change.id, change.base, change.entries
    if change.replace or getattr(change, "create", False) or type(wid) is not str:
        return _prepare_checked(change, convert)
    if not wid or base < 0 or change.version != base + len(written):
        return _prepare_checked(change, convert)
    entry_keys = getattr(change, "entry_keys", None)
    if _keys_fault(entry_keys, len(written)) is not None:
        return _prepare_checked(change, convert)
    try:
        meta = convert(change.meta)
        entries = [convert(e) for e in written]
        objects: list[tuple[str, str, V | None]] = []
        for collection, items in change.objects.items():
            if type(collection) is not str or type(items) is not dict:
                return _prepare_checked(change, convert)
            for key, value in items.items():
                if type(key) is not str:
                    return _prepare_checked(change, convert)
                objects.append((collection, key, None if value is None else convert(value)))
    except (TypeError, ValueError, msgspec.EncodeError):
        return _prepare_checked(change, convert)
    if not_object(meta):
        return _prepare_checked(change, convert)
    for held in entries:
        if not_object(held):
            return _prepare_checked(change, convert)
    # A copy, as the entries are: the caller's later changes reach nothing held.
    return Prepared(meta, entries, objects, False, None if entry_keys is None else list(entry_keys))


def _prepare_checked(change: StoreChange, convert: Callable[[Any], V]) -> Prepared[V]:
    """`_prepare`, one check and one value at a time, naming the first fault."""
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
    entry_keys = getattr(change, "entry_keys", None)
    fault = _keys_fault(entry_keys, len(change.entries))
    if fault is not None:
        raise _bad(
            change,
            fault,
            "Give each entry's storage.match.call_keys of the call it records, or leave entry_keys None.",
        )
    meta = _encode(change, change.meta, "meta", convert)
    if not_object(meta):
        raise _bad(change, "meta is not a JSON object", "Pass the workspace fields as a dict.")
    entries = [
        _encode(change, e, f"the entry for seq {change.base + i}", convert)
        for i, e in enumerate(change.entries)
    ]
    for i, held in enumerate(entries):
        if not_object(held):
            raise _bad(
                change,
                f"the entry for seq {change.base + i} is not a JSON object",
                "Pass audit entries in their wire shape (a dict per entry).",
            )
    objects: list[tuple[str, str, V | None]] = []
    # Whatever the annotation says, a caller's change can hold anything here.
    given: dict[Any, Any] = change.objects
    for collection, items in given.items():
        if not isinstance(collection, str) or not isinstance(items, dict):
            raise _bad(
                change,
                f"objects[{collection!r}] is not a mapping of key -> value",
                "Pass objects as {collection: {key: value or None}}.",
            )
        keyed: dict[Any, Any] = items
        for key, value in keyed.items():
            if not isinstance(key, str):
                raise _bad(
                    change,
                    f"object key {key!r} in {collection!r} is not a string",
                    "Key objects by their string id (members by uri).",
                )
            if value is None:
                objects.append((collection, key, None))
            else:
                objects.append((collection, key, _encode(change, value, f"{collection} {key!r}", convert)))
    return Prepared(meta, entries, objects, create, None if entry_keys is None else list(entry_keys))
