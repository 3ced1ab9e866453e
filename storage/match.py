"""The one definition of which entries an `EntryFilter` keeps, and the index
keys an entry is filed under: read from its text or Struct, or, by a writer,
from the call it records (`call_keys`). Compiled (pyproject.toml): MemoryStore
files every entry through it; the Structs it decodes with live in
storage/_calls.py."""

from __future__ import annotations

from typing import Any

import msgspec

from storage._calls import read_call, read_keyed
from storage.types import EntryFilter, EntryKeys

__all__ = [
    "KEY_FIELDS",
    "call_keys",
    "entry_key",
    "entry_matches",
    "indexed_keys",
    "struct_keys",
    "text_keys",
]

# The fields an index files entries under, in `EntryKeys` order.
KEY_FIELDS = ("method", "sender", "task_id", "outcome")


def entry_matches(entry: dict[str, Any], where: EntryFilter) -> bool:
    call = entry.get("envelope")
    refused = call is None
    if refused:
        call = entry.get("request")
    if where.outcome is not None and where.outcome != ("refused" if refused else "accepted"):
        return False
    if not isinstance(call, dict):
        return where.method is None and where.sender is None and where.task_id is None
    if where.method is not None and call.get("method") != where.method:
        return False
    params = call.get("params")
    if not isinstance(params, dict):
        params = {}
    if where.sender is not None and params.get("from") != where.sender:
        return False
    if where.task_id is not None and params.get("task_id") != where.task_id:
        return False
    return True


def entry_key(entry: dict[str, Any], field: str) -> str | None:
    """The value an index on `field` files `entry` under, or None.

    An entry can match a filter whose `method`, `sender` or `task_id` is a
    string, or whose `outcome` is set, only if it is filed under that value,
    so an index built from these keys narrows a read without changing its
    result.
    """
    call = entry.get("envelope")
    refused = call is None
    if refused:
        call = entry.get("request")
    return call_keys(call, refused)[KEY_FIELDS.index(field)]


def call_keys(call: Any, refused: bool) -> EntryKeys:
    """The keys (`entry_key`) of each of `KEY_FIELDS` for the entry that
    records `call` (the envelope or request as a decoded JSON value),
    `refused` or not, read from the call itself: a writer that holds it
    gives these with its change (`StoreChange.entry_keys`) at the cost of
    three lookups."""
    # An entry whose `envelope` is null reads as refused (`entry_key`).
    outcome = "refused" if refused or call is None else "accepted"
    if not isinstance(call, dict):
        return (None, None, None, outcome)
    method = call.get("method")
    params = call.get("params")
    sender = task_id = None
    if isinstance(params, dict):
        sender = params.get("from")
        task_id = params.get("task_id")
    return (
        method if isinstance(method, str) else None,
        sender if isinstance(sender, str) else None,
        task_id if isinstance(task_id, str) else None,
        outcome,
    )


def text_keys(text: bytes, fields: list[str]) -> list[str | None]:
    """`entry_key(decoded text, field)` for each of `fields`, reading only the
    call's method and params from the text (indexing an entry costs a
    fraction of decoding it). An entry of another shape is decoded whole and
    given to `entry_key`, so the keys are always the same."""
    try:
        keyed = read_keyed(text)
    except (msgspec.ValidationError, msgspec.DecodeError):
        entry = msgspec.json.decode(text)
        return [entry_key(entry, field) for field in fields]
    refused = keyed.envelope is None
    return _keys(keyed.request if refused else keyed.envelope, refused, fields)


# Struct type -> whether it has `envelope` and `request` fields written
# under those names, so its call can be read without encoding the entry.
_named_calls: dict[type, bool] = {}


def _has_named_calls(kind: type) -> bool:
    names = dict(zip(kind.__struct_fields__, kind.__struct_encode_fields__, strict=True))  # type: ignore[attr-defined]
    named = names.get("envelope") == "envelope" and names.get("request") == "request"
    _named_calls[kind] = named
    return named


def struct_keys(entry: msgspec.Struct, fields: list[str]) -> list[str | None]:
    """`text_keys` of a Struct's JSON. The coordinator's entries keep their
    call as `msgspec.Raw` (its canonical text): only that is read."""
    kind = type(entry)
    named = _named_calls.get(kind)
    if named is None:
        named = _has_named_calls(kind)
    if named:
        fields_of: Any = entry  # a Struct with those two fields
        envelope = fields_of.envelope
        call = fields_of.request if envelope is None else envelope
        if type(call) is msgspec.Raw:
            try:
                return _keys(read_call(call), envelope is None, fields)
            except (msgspec.ValidationError, msgspec.DecodeError):
                pass
    return text_keys(msgspec.json.encode(entry), fields)


def _keys(call: Any, refused: bool, fields: list[str]) -> list[str | None]:
    out: list[str | None] = []
    for field in fields:
        if field == "outcome":
            value: Any = "refused" if refused else "accepted"
        elif call is None:
            value = None
        elif field == "method":
            value = call.method
        elif call.params is None:
            value = None
        else:
            value = call.params.sender if field == "sender" else call.params.task_id
        out.append(value if isinstance(value, str) else None)
    return out


def indexed_keys(where: EntryFilter) -> list[tuple[str, str]]:
    """The (field, value) pairs of `where` an index built with `entry_key` can look up."""
    keys = [
        (field, value)
        for field in ("method", "sender", "task_id")
        if isinstance(value := getattr(where, field), str)
    ]
    if where.outcome is not None:
        keys.append(("outcome", where.outcome))
    return keys
