"""`text_keys` reads an entry's index keys from its JSON text without decoding
the rest, and `struct_keys` from a frozen Struct entry without encoding it;
both must give exactly what `entry_key` gives on the decoded entry, whatever
the entry's shape (MemoryStore's filtered reads depend on it)."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.match import KEY_FIELDS, call_keys, entry_key, struct_keys, text_keys

FIELDS = ["method", "sender", "task_id", "outcome"]

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3))
_json = st.recursive(_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)), max_leaves=6)
_params = st.one_of(
    _json,
    st.fixed_dictionaries({}, optional={"from": _json, "task_id": _json, "x": _json}),
)
_call = st.one_of(
    _json,
    st.fixed_dictionaries({}, optional={"method": _json, "params": _params, "id": _json}),
)
_entry = st.fixed_dictionaries(
    {"seq": st.integers(0, 9)},
    optional={"envelope": _call, "request": _call, "outcome": _json, "arrived": st.text(max_size=3)},
)


@settings(max_examples=400, deadline=None)
@given(_entry)
def test_text_keys_agree_with_entry_key(entry: dict[str, Any]) -> None:
    text = msgspec.json.encode(entry)
    assert text_keys(text, FIELDS) == [entry_key(entry, field) for field in FIELDS]


@settings(max_examples=400, deadline=None)
@given(_call, st.booleans())
def test_call_keys_are_the_keys_of_the_entry_that_records_the_call(call: Any, refused: bool) -> None:
    """What a writer gives (StoreChange.entry_keys) is what the entry's text holds."""
    entry = {"seq": 0, "request": call, "outcome": {"status": "refused"}} if refused else {"seq": 0, "envelope": call}
    assert list(KEY_FIELDS) == FIELDS
    assert list(call_keys(call, refused)) == text_keys(msgspec.json.encode(entry), FIELDS)
    assert list(call_keys(call, refused)) == [entry_key(entry, field) for field in FIELDS]


def test_text_keys_of_the_usual_shapes() -> None:
    accepted = {"seq": 0, "envelope": {"method": "task.update", "params": {"from": "agent:b", "task_id": "t1"}}}
    refused = {"seq": 1, "request": {"method": "decide.approve", "params": {"from": "human:a"}},
               "outcome": {"status": "refused", "code": -32011}}
    assert text_keys(msgspec.json.encode(accepted), FIELDS) == ["task.update", "agent:b", "t1", "accepted"]
    assert text_keys(msgspec.json.encode(refused), FIELDS) == ["decide.approve", "human:a", None, "refused"]


class Entry(msgspec.Struct, frozen=True, omit_defaults=True):
    """An entry as the coordinator hands it to a store: its call kept as Raw."""

    seq: int
    envelope: Any = None
    request: Any = None
    outcome: Any = None


class Renamed(msgspec.Struct, frozen=True, rename={"envelope": "request", "request": "envelope"}):
    seq: int
    envelope: Any = None
    request: Any = None


def _raw(call: Any) -> Any:
    return msgspec.Raw(msgspec.json.encode(call))


@settings(max_examples=300, deadline=None)
@given(_entry, st.booleans())
def test_struct_keys_agree_with_the_keys_of_its_text(entry: dict[str, Any], raw: bool) -> None:
    calls = {k: (_raw(v) if raw else v) for k, v in entry.items() if k in ("envelope", "request")}
    for held in (
        Entry(entry["seq"], outcome=entry.get("outcome"), **calls),
        Renamed(entry["seq"], **calls),
    ):
        assert struct_keys(held, FIELDS) == text_keys(msgspec.json.encode(held), FIELDS)


def test_struct_keys_of_the_usual_shapes() -> None:
    accepted = Entry(0, envelope=_raw({"method": "task.update", "params": {"from": "agent:b", "task_id": "t1"}}))
    refused = Entry(1, request=_raw({"method": "decide.approve", "params": {"from": "human:a"}}),
                    outcome={"status": "refused", "code": -32011})
    assert struct_keys(accepted, FIELDS) == ["task.update", "agent:b", "t1", "accepted"]
    assert struct_keys(refused, FIELDS) == ["decide.approve", "human:a", None, "refused"]
    # the names as written decide: a renamed field is read through the text
    swapped = Renamed(2, envelope=_raw({"method": "m", "params": {"task_id": "t2"}}))
    assert struct_keys(swapped, FIELDS) == ["m", None, "t2", "refused"]
