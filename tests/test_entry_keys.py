"""Writer-given filter keys (`StoreChange.entry_keys`): the coordinator reads
each entry's keys from the call it records, and MemoryStore files its filter
index from them instead of decoding the entries (SPECIFICATION.md, "Store
contract"). The keys must be the ones the entry's own text gives, or a
filtered read would miss or add entries."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from client import Client, refused
from hypothesis import given, settings
from hypothesis import strategies as st
from support import ALICE, BOT, FailingStore, make, s0

from storage import EntryFilter, MemoryStore, StoreChange, entry_matches
from storage.match import KEY_FIELDS, call_keys, text_keys
from storage.types import EntryKeys

FIELDS = list(KEY_FIELDS)


def _keys_of_entries(change: StoreChange) -> list[list[str | None]]:
    """Each entry's keys read from its own JSON text, the change's keys aside."""
    return [text_keys(msgspec.json.encode(e), FIELDS) for e in change.entries]


def test_the_coordinators_changes_give_the_keys_of_their_entries_text() -> None:
    store = FailingStore()
    coord = make(store)
    c = Client(coord)
    task = s0(c)
    c.ok("task.update", frm=BOT, task_id=task, state="in_progress")
    refused(c.call("workspace.set_profiles", frm=BOT, profiles=["core/1.0"]), -32011)  # recorded
    with coord.batch():
        c.call("task.update", frm=BOT, task_id=task, state="in_progress", progress_note="again")
        c.call("task.create", frm=ALICE, assignee=BOT, kind="k", input={"n": 1.0})
    written = [change for change in store.applied if change.entries]
    outcomes = {keys[3] for change in written for keys in _keys_of_entries(change)}
    assert outcomes == {"accepted", "refused"}
    assert any(len(change.entries) == 2 for change in written)  # the batch's one change
    for change in written:
        assert change.entry_keys is not None
        assert [list(keys) for keys in change.entry_keys] == _keys_of_entries(change)


def _spec_match(entry: dict[str, Any], flt: dict[str, str]) -> bool:
    """audit.read's filter as the protocol states it: the recorded call's
    method, params.from and params.task_id, and whether it was accepted."""
    accepted = "envelope" in entry
    call = entry["envelope"] if accepted else entry["request"]
    params = call.get("params") or {}
    wanted = {
        "method": call.get("method"),
        "from": params.get("from"),
        "task_id": params.get("task_id"),
        "outcome": "accepted" if accepted else "refused",
    }
    return all(wanted[field] == value for field, value in flt.items())


@pytest.mark.parametrize(
    "flt",
    [
        {"method": "task.update"},
        {"from": BOT},
        {"outcome": "refused"},
        {"task_id": "$T"},
        {"task_id": "$T", "from": BOT, "outcome": "accepted"},
        {"method": "task.create", "from": ALICE},
    ],
)
def test_filtered_reads_on_a_memory_store_keep_exactly_the_matching_entries(flt: dict[str, str]) -> None:
    coord = make(MemoryStore())
    c = Client(coord)
    task = s0(c)
    flt = {k: task if v == "$T" else v for k, v in flt.items()}
    c.log(filter={"task_id": task})  # an index made before the writes below files them later
    c.ok("task.update", frm=BOT, task_id=task, state="in_progress")
    refused(c.call("workspace.set_profiles", frm=BOT, profiles=["core/1.0"]), -32011)
    refused(c.call("task.update", frm=BOT, task_id=task, state="bogus"), -32602)
    c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={})
    everything = c.log()
    expected = [e for e in everything if _spec_match(e, flt)]
    assert expected, "the filter should keep something"
    assert c.log(filter=flt) == expected


_value = st.one_of(st.none(), st.integers(-2, 2), st.sampled_from(["task.update", "a:x", "T1", "T2"]))
_call = st.one_of(
    _value,
    st.fixed_dictionaries(
        {},
        optional={
            "method": _value,
            "params": st.one_of(_value, st.fixed_dictionaries({}, optional={"from": _value, "task_id": _value})),
        },
    ),
)


def _entry(seq: int, call: Any, refused: bool, as_struct: bool) -> Any:
    raw = msgspec.Raw(msgspec.json.encode(call))
    if as_struct:
        return Entry(seq, request=raw, outcome={"status": "refused"}) if refused else Entry(seq, envelope=raw)
    return {"seq": seq, "request": call, "outcome": {"status": "refused"}} if refused else {"seq": seq, "envelope": call}


class Entry(msgspec.Struct, frozen=True, omit_defaults=True):
    seq: int
    envelope: Any = None
    request: Any = None
    outcome: Any = None


_filter = st.builds(
    EntryFilter,
    method=st.none() | _value,
    sender=st.none() | _value,
    task_id=st.none() | _value,
    outcome=st.none() | st.sampled_from(["accepted", "refused"]),
)


@settings(max_examples=150, deadline=None)
@given(
    writes=st.lists(
        st.tuples(st.lists(st.tuples(_call, st.booleans()), max_size=4), st.booleans(), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    reads=st.lists(_filter, min_size=1, max_size=3),
)
def test_memory_store_filtered_reads_match_every_matching_entry_with_keys_given_or_not(
    writes: list[tuple[list[tuple[Any, bool]], bool, bool]], reads: list[EntryFilter]
) -> None:
    """Oracle: `entry_matches` over the whole log, decoded; reads made after
    every write, so indexes are built early and filed incrementally."""
    store = MemoryStore()
    log: list[dict[str, Any]] = []
    for calls, keyed, as_struct in writes:
        base = len(log)
        entries = [_entry(base + i, call, no, as_struct) for i, (call, no) in enumerate(calls)]
        keys = [call_keys(call, no) for call, no in calls] if keyed else None
        store.apply(StoreChange("w", base, base + len(entries), "t", {"id": "w"}, entries, entry_keys=keys))
        log += [msgspec.json.decode(msgspec.json.encode(e)) for e in entries]
        for where in reads:
            assert store.read_entries("w", where=where) == [e for e in log if entry_matches(e, where)]


def test_memory_store_files_by_the_keys_given_without_reading_the_entry() -> None:
    """The keys are what the store files by, so a writer vouches for them:
    an entry given keys its text does not hold is missed by a filter its
    text matches. A read still checks each entry it returns, so wrong keys
    can never add one."""
    store = MemoryStore()
    text = msgspec.Raw(b'{"method":"m.text","params":{"task_id":"T-text"}}')
    wrong: list[EntryKeys] = [("m.given", None, "T-given", "accepted")]
    store.apply(StoreChange("w", 0, 1, "t", {"id": "w"}, [Entry(0, envelope=text)], entry_keys=wrong))
    assert store.read_entries("w", where=EntryFilter(task_id="T-text")) == []
    assert store.read_entries("w", where=EntryFilter(method="m.given")) == []
    # an entry written without keys is read for them
    store.apply(StoreChange("w", 1, 2, "t", {"id": "w"}, [Entry(1, envelope=text)]))
    assert [e["seq"] for e in store.read_entries("w", where=EntryFilter(task_id="T-text"))] == [1]
