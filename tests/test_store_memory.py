"""MemoryStore's own promise beside the contract: what it keeps of a value."""

from __future__ import annotations

import msgspec
import pytest

from storage import EntryFilter, MalformedChangeError, MemoryStore, StoreChange


class Frozen(msgspec.Struct, frozen=True):
    id: str
    history: tuple[str, ...] = ()


class Thawed(msgspec.Struct):
    id: str
    history: list[str] = []


def _write(store: MemoryStore, value: object) -> None:
    store.apply(StoreChange("w", 0, 0, "t", {"id": "w"}, [], {"tasks": {"T1": value}}))


def test_a_frozen_struct_is_read_back_as_its_json() -> None:
    store = MemoryStore()
    _write(store, Frozen("T1", ("created",)))
    (held,) = store.load_held()
    assert held.objects["tasks"]["T1"] == b'{"history":["created"],"id":"T1"}'
    (record,) = store.load()
    assert record.data["tasks"]["T1"] == {"id": "T1", "history": ["created"]}


def test_a_mutable_struct_is_copied_at_the_write() -> None:
    store = MemoryStore()
    task = Thawed("T1", ["created"])
    _write(store, task)
    task.history.append("done")
    task.id = "changed"
    (record,) = store.load()
    assert record.data["tasks"]["T1"] == {"id": "T1", "history": ["created"]}


def test_an_unencodable_mutable_value_fails_the_whole_write() -> None:
    store = MemoryStore()
    with pytest.raises(MalformedChangeError, match="tasks 'T1'"):
        _write(store, {"id": "T1", "when": object()})
    assert store.load() == []


class Entry(msgspec.Struct, frozen=True, omit_defaults=True):
    seq: int
    arrived: str
    envelope: msgspec.Raw | None = None
    request: msgspec.Raw | None = None
    outcome: dict[str, object] | None = None


def _entry(seq: int, task: str, refused: bool = False) -> Entry:
    call = msgspec.Raw(msgspec.json.encode({"method": "task.update", "params": {"from": "a:x", "task_id": task}}))
    if refused:
        return Entry(seq, "t", request=call, outcome={"status": "refused", "code": -32011})
    return Entry(seq, "t", envelope=call)


def test_frozen_entries_are_read_back_and_found_by_filters_written_before_and_after() -> None:
    store = MemoryStore()

    def write(base: int, entries: list[Entry]) -> None:
        store.apply(StoreChange("w", base, base + len(entries), "t", {"id": "w"}, entries))

    write(0, [_entry(0, "A"), _entry(1, "B", refused=True), _entry(2, "A")])
    by_a = EntryFilter(task_id="A")
    assert [e["seq"] for e in store.read_entries("w", where=by_a)] == [0, 2]
    write(3, [_entry(3, "A", refused=True), _entry(4, "B")])
    # an index made earlier files the new entries; a new one files them all
    assert [e["seq"] for e in store.read_entries("w", where=by_a)] == [0, 2, 3]
    assert [e["seq"] for e in store.read_entries("w", where=EntryFilter(outcome="refused"))] == [1, 3]
    write(5, [_entry(5, "B")])
    both = EntryFilter(task_id="B", outcome="accepted")
    assert [e["seq"] for e in store.read_entries("w", where=both)] == [4, 5]
    everything = [msgspec.to_builtins(msgspec.json.decode(msgspec.json.encode(e))) for e in
                  [_entry(0, "A"), _entry(1, "B", True), _entry(2, "A"), _entry(3, "A", True), _entry(4, "B"), _entry(5, "B")]]
    assert store.read_entries("w") == everything
    assert [msgspec.json.decode(t) for t in store.read_entry_texts("w", 2, 4)] == everything[2:4]
    assert store.load()[0].data["audit"] == everything


def test_a_replace_starts_the_index_again() -> None:
    store = MemoryStore()
    store.apply(StoreChange("w", 0, 2, "t", {"id": "w"}, [_entry(0, "A"), _entry(1, "A")]))
    assert len(store.read_entries("w", where=EntryFilter(task_id="A"))) == 2
    store.apply(StoreChange("w", 0, 1, "t", {"id": "w"}, [_entry(0, "B")], replace=True))
    assert store.read_entries("w", where=EntryFilter(task_id="A")) == []
    assert [e["seq"] for e in store.read_entries("w", where=EntryFilter(task_id="B"))] == [0]
