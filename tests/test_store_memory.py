"""MemoryStore's own promise beside the contract: what it keeps of a value."""

from __future__ import annotations

import msgspec
import pytest

from storage import MalformedChangeError, MemoryStore, StoreChange


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
