"""`text_keys` reads an entry's index keys from its JSON text without decoding
the rest; it must give exactly what `entry_key` gives on the decoded entry,
whatever the entry's shape (MemoryStore's filtered reads depend on it)."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.match import entry_key, text_keys

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


def test_text_keys_of_the_usual_shapes() -> None:
    accepted = {"seq": 0, "envelope": {"method": "task.update", "params": {"from": "agent:b", "task_id": "t1"}}}
    refused = {"seq": 1, "request": {"method": "decide.approve", "params": {"from": "human:a"}},
               "outcome": {"status": "refused", "code": -32011}}
    assert text_keys(msgspec.json.encode(accepted), FIELDS) == ["task.update", "agent:b", "t1", "accepted"]
    assert text_keys(msgspec.json.encode(refused), FIELDS) == ["decide.approve", "human:a", None, "refused"]
