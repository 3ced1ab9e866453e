"""The store contract as a reusable pytest suite.

Every store runs the same behaviours. A test module subclasses `StoreContract`
and provides a `factory` fixture returning a `StoreFactory`:

    class TestMyStore(StoreContract):
        @pytest.fixture
        def factory(self, tmp_path):
            return MyFactory(tmp_path)

`store_machine(factory)` builds the hypothesis state machine (random apply,
conflicting apply, replace as a change or as a record, delete, reopen, ranged reads) checked
against a plain in-memory model after every step; `StoreContract` runs it.
Needs pytest and hypothesis (the test extras).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import msgspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from storage import (
    EntryFilter,
    MalformedChangeError,
    Store,
    StoreChange,
    StoreConflictError,
    StoreError,
    WorkspaceExistsError,
    entry_matches,
)
from storage.records import SHARED_LAYOUT, WorkspaceRecord, assemble_snapshot, change_from_record

__all__ = ["ContractStore", "StoreContract", "StoreFactory", "store_machine"]

# The shared schema's collections and its one map, as `load()` shows them.
COLLECTIONS = tuple(c for c in SHARED_LAYOUT.shown if c not in SHARED_LAYOUT.maps)
[IDEMPOTENCY_KEYS] = SHARED_LAYOUT.maps


class ContractStore(Store, Protocol):
    """A store as the contract drives it: the `Store` protocol (the change
    API), and `load()`, through which the contract looks at what the store
    holds as whole records in the shared schema's shape (every chapline
    store has it; SPECIFICATION.md, "Stores")."""

    def load(self, *, entries: bool = True, workspace: str | None = None) -> list[WorkspaceRecord]:
        """Every readable workspace (or only `workspace`) as a record; without
        `entries`, `data` has no "audit" and the log is not read."""
        ...


class StoreFactory(Protocol):
    def open(self) -> ContractStore:
        """A new, empty store (a new file for file stores)."""
        ...

    def reopen(self, store: ContractStore) -> ContractStore:
        """Close `store` and open what it holds again, as after a restart.
        A store that keeps nothing past `close` returns `store` unchanged."""
        ...

    def another(self, store: ContractStore) -> ContractStore:
        """A second handle on the same data (another connection), or `store`
        itself when the store has only one. The caller closes it."""
        ...


def entry(seq: int, method: str = "task.create", task: Any = "T1", refused: bool = False,
          sender: Any = "human:alice") -> dict[str, Any]:
    """An audit entry in wire shape, accepted or refused."""
    call = {"jsonrpc": "2.0", "id": f"r{seq}", "method": method,
            "params": {"workspace": "w", "from": sender, "task_id": task}}
    if refused:
        return {"seq": seq, "arrived": f"t{seq}", "request": call,
                "outcome": {"status": "refused", "code": -32011}}
    return {"seq": seq, "arrived": f"t{seq}", "envelope": call}


def change(wid: str, base: int, n: int = 1, objects: dict[str, dict[str, Any]] | None = None,
           replace: bool = False, meta: dict[str, Any] | None = None) -> StoreChange:
    start = 0 if replace else base
    entries = [entry(start + i) for i in range(n)]
    return StoreChange(
        id=wid, base=base, version=start + n, updated_at=f"t{start + n}",
        meta={"id": wid, "state": "active"} if meta is None else meta,
        entries=entries, objects=objects or {}, replace=replace,
    )


def by_id(records: list[WorkspaceRecord]) -> dict[str, tuple[dict[str, Any], int, str]]:
    return {r.id: (r.data, r.version, r.updated_at) for r in records}


class _Task(msgspec.Struct):
    id: str
    state: str


class StoreContract:
    """The behaviours every store shares (see SPECIFICATION.md, "Stores")."""

    @pytest.fixture
    def store(self, factory: StoreFactory) -> Iterator[ContractStore]:
        store = factory.open()
        yield store
        store.close()

    def test_empty_store(self, store: ContractStore) -> None:
        assert store.load() == []
        assert store.load(entries=False) == []
        assert store.read_entries("nowhere") == []
        assert store.workspace_ids() == []

    def test_workspace_ids_list_every_workspace_in_id_order(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 2))
        store.apply(change("a", 0, 1))
        store.apply(change("m", 0, 0))
        assert store.workspace_ids() == ["a", "m", "w"]
        store.delete("m")
        assert store.workspace_ids() == ["a", "w"]

    def test_round_trip(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 2, {"tasks": {"T1": {"id": "T1", "n": 1.5}},
                                       "members": {"human:a": {"uri": "human:a"}},
                                       IDEMPOTENCY_KEYS: {"k1": "T1"}}))
        (record,) = store.load()
        assert record.id == "w" and record.version == 2 and record.updated_at == "t2"
        assert record.data == {
            "id": "w", "state": "active",
            **{c: {} for c in COLLECTIONS},
            "tasks": {"T1": {"id": "T1", "n": 1.5}},
            "members": {"human:a": {"uri": "human:a"}},
            IDEMPOTENCY_KEYS: {"k1": "T1"},
            "audit": [entry(0), entry(1)],
        }
        (light,) = store.load(entries=False)
        assert "audit" not in light.data
        assert light.version == 2
        assert light.data == {k: v for k, v in record.data.items() if k != "audit"}

    def test_workspace_ids(self, store: ContractStore) -> None:
        assert store.workspace_ids() == []
        store.apply(change("b", 0, 1))
        store.apply(change("a", 0, 0, {"tasks": {"T1": {"id": "T1"}}}))
        assert store.workspace_ids() == ["a", "b"]
        store.delete("b")
        assert store.workspace_ids() == ["a"]

    def test_load_one_workspace(self, store: ContractStore) -> None:
        store.apply(change("a", 0, 2, {"tasks": {"T1": {"id": "T1"}}}))
        store.apply(change("b", 0, 3))
        everything = {r.id: r for r in store.load()}
        assert store.load(workspace="a") == [everything["a"]]
        assert store.load(entries=False, workspace="b") == [
            r for r in store.load(entries=False) if r.id == "b"
        ]
        assert store.load(workspace="nowhere") == []

    def test_held_is_load_without_entries_undecoded(self, store: ContractStore) -> None:
        store.apply(change("a", 0, 2, {"tasks": {"T1": {"id": "T1"}, "T2": {"id": "T2"}},
                                       "members": {"human:a": {"uri": "human:a"}}}))
        store.apply(change("b", 0, 1))
        for held, record in zip(store.load_held(), store.load(entries=False), strict=True):
            assert (held.id, held.version, held.updated_at) == (
                record.id, record.version, record.updated_at
            )
            decoded = {c: {k: json.loads(v) for k, v in objs.items()} for c, objs in held.objects.items()}
            rebuilt = {**held.meta, **{c: {} for c in COLLECTIONS}, IDEMPOTENCY_KEYS: {}, **decoded}
            assert rebuilt == record.data
        assert [h.id for h in store.load_held(workspace="b")] == ["b"]
        assert store.load_held(workspace="nowhere") == []

    def test_filtered_reads_stay_right_as_the_log_grows(self, store: ContractStore) -> None:
        def write(base: int, entries: list[dict[str, Any]]) -> None:
            store.apply(StoreChange(id="w", base=base, version=base + len(entries),
                                    updated_at="t", meta={"id": "w"}, entries=entries))

        write(0, [entry(0, task="A"), entry(1, task="B", refused=True), entry(2, task="A")])
        a = EntryFilter(task_id="A")
        assert [e["seq"] for e in store.read_entries("w", where=a)] == [0, 2]
        # writes after the first filtered read are found by the next ones
        write(3, [entry(3, task="A", method="task.update"), entry(4, task="B")])
        assert [e["seq"] for e in store.read_entries("w", where=a)] == [0, 2, 3]
        refused = EntryFilter(outcome="refused")
        assert [e["seq"] for e in store.read_entries("w", where=refused)] == [1]
        write(5, [entry(5, task="A", refused=True)])
        both = EntryFilter(task_id="A", outcome="refused", method="task.create")
        assert [e["seq"] for e in store.read_entries("w", where=both)] == [5]
        assert [e["seq"] for e in store.read_entries("w", 3, 6, a)] == [3, 5]

    def test_entries_given_as_stored_text_are_indexed_like_any_other(self, store: ContractStore) -> None:
        store.apply(StoreChange(id="w", base=0, version=1, updated_at="t", meta={"id": "w"},
                                entries=[entry(0, task="A")]))
        assert len(store.read_entries("w", where=EntryFilter(task_id="A"))) == 1
        text = msgspec.json.encode(entry(1, task="A"))
        store.apply(StoreChange(id="w", base=1, version=2, updated_at="t", meta={"id": "w"},
                                entries=[msgspec.Raw(text)]))
        assert [e["seq"] for e in store.read_entries("w", where=EntryFilter(task_id="A"))] == [0, 1]
        assert store.load()[0].version == 2

    def test_entry_texts_are_the_entries(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 4))
        texts = store.read_entry_texts("w", 1, 3)
        assert [json.loads(t) for t in texts] == store.read_entries("w", 1, 3)
        assert store.read_entry_texts("w") and store.read_entry_texts("nowhere") == []

    def test_entries_append_at_base(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 2))
        store.apply(change("w", 2, 3))
        store.apply(change("w", 5, 0))
        assert store.read_entries("w") == [entry(i) for i in range(5)]
        assert store.load()[0].version == 5

    @pytest.mark.parametrize("base", [0, 1, 3, 7])
    def test_conflict_writes_nothing(self, store: ContractStore, base: int) -> None:
        store.apply(change("w", 0, 2, {"tasks": {"T1": {"id": "T1"}}}))
        before = store.load()
        with pytest.raises(StoreConflictError) as caught:
            store.apply(change("w", base, 1, {"tasks": {"T1": None, "T2": {"id": "T2"}}},
                               meta={"id": "w", "state": "changed"}))
        assert (caught.value.workspace, caught.value.held, caught.value.base) == ("w", 2, base)
        assert "reload" in str(caught.value)
        assert store.load() == before

    def test_new_workspace_needs_base_zero(self, store: ContractStore) -> None:
        with pytest.raises(StoreConflictError) as caught:
            store.apply(change("w", 3, 1))
        assert (caught.value.held, caught.value.base) == (0, 3)
        assert store.load() == []

    def test_unencodable_change_writes_nothing(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 1))
        before = store.load()
        bad = StoreChange("w", 1, 2, "t2", {"id": "w"}, [entry(1)],
                          {"tasks": {"T9": {"id": "T9"}, "T8": object()}})
        with pytest.raises(MalformedChangeError, match="'T8'") as caught:
            store.apply(bad)
        assert caught.value.workspace == "w"
        assert store.load() == before

    @pytest.mark.parametrize("bad", [
        StoreChange("w", 1, 5, "t", {"id": "w"}, [entry(1)]),  # version != base + n
        StoreChange("w", 1, 2, "t", {"id": "w"}, [[1, 2]]),  # entry not an object
        StoreChange("w", 1, 1, "t", ["not", "a", "dict"]),  # type: ignore[arg-type]
        StoreChange("w", 1, 1, "t", {"id": "w"}, [], {"tasks": {1: {"id": 1}}}),  # type: ignore[dict-item]
        StoreChange("w", 1, 2, "t", {"id": "w"}, [entry(1)], entry_keys=[]),  # keys for no entry
        StoreChange("w", 1, 2, "t", {"id": "w"}, [entry(1)],
                    entry_keys=[("m", None, None, "maybe")]),  # not an outcome
        StoreChange("w", 1, 2, "t", {"id": "w"}, [entry(1)],
                    entry_keys=[("m", 7, None, "accepted")]),  # type: ignore[list-item]
        StoreChange("w", 1, 2, "t", {"id": "w"}, [entry(1)],
                    entry_keys=[("m", None, "accepted")]),  # type: ignore[list-item]  # three keys
        StoreChange("w", 1, 2, "t", {"id": "w"}, [entry(1)],
                    entry_keys=[["m", None, None, "accepted"]]),  # type: ignore[list-item]  # a list
        StoreChange("w", 1, 2, "t", {"id": "w"}, [entry(1)],
                    entry_keys=(("m", None, None, "accepted"),)),  # type: ignore[arg-type]  # a tuple of them
    ])
    def test_malformed_change_is_refused(self, store: ContractStore, bad: StoreChange) -> None:
        store.apply(change("w", 0, 1))
        before = store.load()
        with pytest.raises(MalformedChangeError, match="'w'") as caught:
            store.apply(bad)
        assert isinstance(caught.value, StoreError) and caught.value.workspace == "w"
        assert store.load() == before

    def test_none_deletes_and_meta_is_replaced(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 1, {"tasks": {"T1": {"id": "T1"}, "T2": {"id": "T2"}}},
                           meta={"id": "w", "state": "active", "mode": "trial"}))
        store.apply(change("w", 1, 1, {"tasks": {"T1": None, "T3": None},
                                       "members": {"m": {"uri": "m"}}},
                           meta={"id": "w", "state": "paused"}))
        (record,) = store.load()
        assert record.data["tasks"] == {"T2": {"id": "T2"}}
        assert record.data["members"] == {"m": {"uri": "m"}}
        assert record.data["state"] == "paused" and "mode" not in record.data
        assert (record.version, record.updated_at) == (2, "t2")

    def test_replace_drops_everything_first(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 3, {"tasks": {"T1": {"id": "T1"}}}))
        store.apply(change("w", 99, 1, {"members": {"m": {"uri": "m"}}}, replace=True))
        (record,) = store.load()
        assert record.version == 1 and record.data["audit"] == [entry(0)]
        assert record.data["tasks"] == {} and record.data["members"] == {"m": {"uri": "m"}}
        store.apply(change("new", 5, 2, replace=True))
        assert by_id(store.load())["new"][1] == 2

    def test_save_is_a_whole_replace(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 4, {"tasks": {"old": {"id": "old"}}}))
        data = {"id": "w", "state": "active",
                "members": [{"uri": "human:a", "type": "human"}],
                "tasks": {"T1": {"id": "T1"}},
                IDEMPOTENCY_KEYS: {"k": "T1"},
                "audit": [entry(0), entry(1, refused=True)]}
        store.apply(change_from_record(WorkspaceRecord("w", data, 2, "t9"), SHARED_LAYOUT))
        (record,) = store.load()
        assert record.version == 2 and record.updated_at == "t9"
        assert record.data["members"] == {"human:a": {"uri": "human:a", "type": "human"}}
        assert record.data["tasks"] == {"T1": {"id": "T1"}}
        assert record.data[IDEMPOTENCY_KEYS] == {"k": "T1"}
        assert record.data["audit"] == data["audit"]

    def test_delete(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 2, {"tasks": {"T1": {"id": "T1"}}}))
        store.apply(change("v", 0, 1))
        store.delete("w")
        store.delete("never-there")
        assert list(by_id(store.load())) == ["v"]
        assert store.read_entries("w") == []
        store.apply(change("w", 0, 1))
        (record,) = [r for r in store.load() if r.id == "w"]
        assert record.data["tasks"] == {} and record.version == 1

    def test_caller_mutation_does_not_leak(self, store: ContractStore) -> None:
        history: list[int] = [1]
        profiles = ["core/1.0"]
        task = {"id": "T1", "history": history}
        meta = {"id": "w", "profiles": profiles}
        first = entry(0)
        store.apply(StoreChange("w", 0, 1, "t1", meta, [first], {"tasks": {"T1": task}}))
        history.append(2)
        profiles.append("x")
        first["envelope"]["method"] = "changed"
        (record,) = store.load()
        assert record.data["tasks"]["T1"] == {"id": "T1", "history": [1]}
        assert record.data["profiles"] == ["core/1.0"]
        assert store.read_entries("w") == [entry(0)]
        record.data["tasks"]["T1"]["history"].append(3)
        assert store.load()[0].data["tasks"]["T1"]["history"] == [1]

    def test_struct_values_are_stored_as_json(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 1, {"tasks": {"T1": _Task("T1", "created")}}))
        assert store.load()[0].data["tasks"] == {"T1": {"id": "T1", "state": "created"}}

    def test_read_entries_range(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 6))
        log = [entry(i) for i in range(6)]
        for start, stop in [(0, None), (2, 4), (4, 100), (-3, 2), (5, 5), (3, 1),
                            (9, None), (0, -1), (0, 0)]:
            expected = log[max(start, 0): None if stop is None else max(stop, 0)]
            assert store.read_entries("w", start, stop) == expected, (start, stop)

    def test_read_entries_filter_matches_entry_matches(self, store: ContractStore) -> None:
        odd = [
            {"seq": 0, "arrived": "t", "envelope": None, "request": {"method": "m", "params": {"task_id": "A"}}},
            {"seq": 0, "arrived": "t", "envelope": {"method": "m", "params": "not-a-dict"}},
            {"seq": 0, "arrived": "t", "envelope": "not-a-call"},
            {"seq": 0, "arrived": "t"},
            {"seq": 0, "arrived": "t", "envelope": {"method": "m", "params": {"task_id": None}},
             "request": {"method": "m", "params": {"task_id": "A"}}},
            {"seq": 0, "arrived": "t", "envelope": {"method": "m", "params": {"task_id": 7}}},
            {"seq": 0, "arrived": "t", "envelope": {"method": "m", "params": {"task_id": {"a": 1}}}},
            {"seq": 0, "arrived": "t", "envelope": {"method": "m", "params": {"task_id": "7"}}},
            {"seq": 0, "arrived": "t", "envelope": {"method": "m", "params": {"task_id": True}}},
        ]
        log = [entry(0), entry(1, "decide.approve", "A", refused=True),
               entry(2, "decide.approve", "A"), entry(3, "task.update", "B", sender="agent:b"),
               *odd, entry(13, "decide.approve", "B", refused=True, sender="agent:b")]
        store.apply(StoreChange("w", 0, len(log), "t", {"id": "w"}, log))
        filters = [EntryFilter(), EntryFilter(task_id="A"), EntryFilter(task_id="B"),
                   EntryFilter(task_id=7), EntryFilter(task_id="7"), EntryFilter(task_id=1),
                   EntryFilter(task_id=True), EntryFilter(task_id={"a": 1}),
                   EntryFilter(method="decide.approve"), EntryFilter(method="m"),
                   EntryFilter(sender="agent:b"), EntryFilter(outcome="refused"),
                   EntryFilter(outcome="accepted"), EntryFilter(outcome="bogus"),
                   EntryFilter(method="decide.approve", outcome="accepted"),
                   EntryFilter(method="decide.approve", task_id="B", sender="agent:b")]
        for where in filters:
            for start, stop in [(0, None), (2, 10)]:
                expected = [e for e in log[start:stop] if entry_matches(e, where)]
                got = store.read_entries("w", start, stop, where)
                assert got == expected, (where, start, stop)

    def test_reopen_keeps_everything(self, factory: StoreFactory) -> None:
        store = factory.open()
        store.apply(change("w", 0, 3, {"tasks": {"T1": {"id": "T1"}}}))
        store.apply(change("v", 0, 1, {IDEMPOTENCY_KEYS: {"k": "T"}}))
        before = store.load()
        store = factory.reopen(store)
        try:
            assert store.load() == before
            store.apply(change("w", 3, 1))
            assert store.load(entries=False)[1].version == 4
        finally:
            store.close()

    def test_close_is_idempotent(self, factory: StoreFactory) -> None:
        store = factory.open()
        store.apply(change("w", 0, 1))
        store.close()
        store.close()  # a second close is a no-op, not an error
        again = factory.reopen(store)  # which closes it once more
        try:
            if again is store:
                # Nothing outlives close here: the closed store reads as
                # empty or refuses with a StoreError, never half its data.
                try:
                    held = again.load(entries=False)
                except StoreError:
                    held = []
                assert held == []
            else:
                assert [(r.id, r.version) for r in again.load(entries=False)] == [("w", 1)]
        finally:
            again.close()

    def test_create_writes_a_new_workspace(self, store: ContractStore) -> None:
        store.apply(StoreChange("w", 0, 0, "t0", {"id": "w", "state": "active"}, create=True))
        assert [(r.id, r.version, r.data["state"]) for r in store.load()] == [("w", 0, "active")]

    @pytest.mark.parametrize("entries", [0, 2])
    def test_create_never_overwrites_a_held_workspace(self, store: ContractStore, entries: int) -> None:
        # With no entries a generated workspace's base (0) alone cannot tell
        # two creators apart; `create` does.
        store.apply(change("w", 0, entries, {"tasks": {"T1": {"id": "T1"}}}))
        before = store.load()
        with pytest.raises(WorkspaceExistsError) as caught:
            store.apply(StoreChange("w", entries, entries, "t9", {"id": "w", "state": "x"},
                                    objects={"tasks": {"T1": None}}, create=True))
        assert isinstance(caught.value, StoreConflictError)
        assert (caught.value.workspace, caught.value.held) == ("w", entries)
        assert "already exists" in str(caught.value)
        assert store.load() == before

    def test_create_with_replace_is_malformed(self, store: ContractStore) -> None:
        with pytest.raises(MalformedChangeError, match="create and replace"):
            store.apply(StoreChange("w", 0, 0, "t0", {"id": "w"}, replace=True, create=True))
        assert store.load() == []

    def test_apply_many_keeps_only_the_first_create(self, store: ContractStore) -> None:
        first = StoreChange("w", 0, 0, "t0", {"id": "w", "by": "first"}, create=True)
        second = StoreChange("w", 0, 0, "t1", {"id": "w", "by": "second"}, create=True)
        results = store.apply_many([first, second])
        assert results[0] is None and isinstance(results[1], WorkspaceExistsError)
        assert [r.data["by"] for r in store.load()] == ["first"]

    def test_two_handles_creating_one_workspace_one_wins(self, factory: StoreFactory) -> None:
        first = factory.open()
        second = factory.another(first)
        try:
            first.apply(StoreChange("w", 0, 0, "t0", {"id": "w", "by": "first"}, create=True))
            with pytest.raises(WorkspaceExistsError):
                second.apply(StoreChange("w", 0, 0, "t1", {"id": "w", "by": "second"}, create=True))
            assert [r.data["by"] for r in second.load()] == ["first"]
        finally:
            if second is not first:
                second.close()
            first.close()

    def test_apply_many_isolates_each_change(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 2))
        results = store.apply_many([
            change("w", 2, 1), change("w", 2, 1), change("v", 0, 1),
            StoreChange("v", 1, 9, "t", {}, [entry(1)]), change("v", 1, 2),
        ])
        assert results[0] is None and results[2] is None and results[4] is None
        assert isinstance(results[1], StoreConflictError) and results[1].held == 3
        assert isinstance(results[3], MalformedChangeError)
        versions = {r.id: r.version for r in store.load()}
        assert versions == {"w": 3, "v": 3}

    def test_concurrent_writers_one_wins(self, factory: StoreFactory) -> None:
        first = factory.open()
        second = factory.another(first)
        try:
            first.apply(change("w", 0, 1))
            rounds = 15
            for r in range(rounds):
                outcome: list[str] = []
                barrier = threading.Barrier(2)

                def write(
                    s: ContractStore,
                    who: str,
                    r: int = r,
                    barrier: threading.Barrier = barrier,
                    outcome: list[str] = outcome,
                ) -> None:
                    barrier.wait()
                    try:
                        s.apply(StoreChange("w", 1 + r, 2 + r, "t", {"id": "w"},
                                            [{"seq": 1 + r, "by": who}]))
                        outcome.append(who)
                    except StoreConflictError as exc:
                        assert (exc.held, exc.base) == (2 + r, 1 + r)

                threads = [threading.Thread(target=write, args=(s, n))
                           for s, n in ((first, "a"), (second, "b"))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                assert len(outcome) == 1, outcome
            log = first.read_entries("w")
            assert [e["seq"] for e in log] == list(range(rounds + 1))
            assert second.load() == first.load()
        finally:
            if second is not first:
                second.close()
            first.close()

    # -- write turns (SPECIFICATION.md, "Contract": write_turn) ----------------

    def test_a_write_in_a_turn_is_committed_and_ends_it(self, factory: StoreFactory) -> None:
        store = factory.open()
        other = factory.another(store)
        try:
            store.apply(change("w", 0, 2))
            with store.write_turn("w"):
                (held,) = store.load_held("w")
                assert held.version == 2 and len(store.read_entries("w")) == 2
                store.apply(change("w", 2, 1))
                assert len(store.read_entries("w")) == 3
            assert [e["seq"] for e in other.read_entries("w")] == [0, 1, 2]
            other.apply(change("w", 3, 1))  # the turn is over: anyone writes
            assert store.load_held("w")[0].version == 4
        finally:
            if other is not store:
                other.close()
            store.close()

    def test_a_turn_that_writes_nothing_leaves_the_store_as_it_was(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 2))
        before = store.load()
        with store.write_turn("w"):
            pass
        with pytest.raises(RuntimeError), store.write_turn("w"):
            raise RuntimeError("the block failed")
        with store.write_turn("new"):  # a workspace the store does not hold
            assert store.load_held("new") == []
        assert store.load() == before
        store.apply(change("w", 2, 1))
        assert store.load_held("w")[0].version == 3

    def test_a_refused_write_in_a_turn_writes_nothing(self, store: ContractStore) -> None:
        store.apply(change("w", 0, 2))
        with store.write_turn("w"):
            with pytest.raises(StoreConflictError):
                store.apply(change("w", 1, 1))
        with store.write_turn("w"):
            with pytest.raises(MalformedChangeError):
                store.apply(StoreChange("w", 2, 9, "t", {}, [entry(2)]))
        assert store.load_held("w")[0].version == 2
        store.apply(change("w", 2, 1))
        assert [e["seq"] for e in store.read_entries("w")] == [0, 1, 2]

    def test_random_sequences_match_the_model(self, factory: StoreFactory) -> None:
        machine = store_machine(factory)
        run_state_machine_as_test(
            machine,
            # max_examples from the loaded hypothesis profile
            settings=settings(stateful_step_count=25, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow]),
        )


# -- the stateful test -------------------------------------------------------

_WIDS = st.sampled_from(["w1", "w2", "w3"])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
_OBJECTS = st.dictionaries(
    st.sampled_from([*COLLECTIONS[:3], IDEMPOTENCY_KEYS]),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.none() | _JSON.filter(lambda v: v is not None), max_size=3),
    max_size=2,
)
_ENTRIES = st.lists(
    st.builds(lambda m, t, r: (m, t, r), st.sampled_from(["task.create", "decide.approve"]),
              st.sampled_from(["T1", "T2"]), st.booleans()),
    max_size=3,
)


def store_machine(factory: StoreFactory) -> type[RuleBasedStateMachine]:
    """A state machine driving one store from `factory` and a plain model."""

    class StoreMachine(RuleBasedStateMachine):
        @initialize()
        def start(self) -> None:
            self.store = factory.open()
            # wid -> [meta, entries, objects {c: {k: v}}, updated_at]
            self.model: dict[str, list[Any]] = {}

        def teardown(self) -> None:
            store = getattr(self, "store", None)
            if store is not None:
                store.close()

        def _entries(self, base: int, specs: list[tuple[str, Any, bool]]) -> list[dict[str, Any]]:
            return [entry(base + i, m, t, r) for i, (m, t, r) in enumerate(specs)]

        @rule(wid=_WIDS, specs=_ENTRIES, objects=_OBJECTS, state=st.text(max_size=3))
        def apply(self, wid: str, specs: list[tuple[str, Any, bool]], objects: dict[str, dict[str, Any]], state: str) -> None:
            held = self.model.get(wid)
            base = 0 if held is None else len(held[1])
            entries = self._entries(base, specs)
            meta = {"id": wid, "state": state}
            self.store.apply(StoreChange(wid, base, base + len(entries), f"u{base}", meta,
                                         entries, objects))
            if held is None:
                held = self.model[wid] = [meta, [], {}, ""]
            held[0], held[3] = meta, f"u{base}"
            held[1].extend(entries)
            for c, items in objects.items():
                for k, v in items.items():
                    if v is None:
                        held[2].get(c, {}).pop(k, None)
                    else:
                        held[2].setdefault(c, {})[k] = v

        @rule(wid=_WIDS, specs=_ENTRIES, off=st.integers(-3, 3).filter(bool))
        def conflicting_apply(self, wid: str, specs: list[tuple[str, Any, bool]], off: int) -> None:
            held = self.model.get(wid)
            count = 0 if held is None else len(held[1])
            base = count + off
            if base < 0:
                return
            with pytest.raises(StoreConflictError) as caught:
                self.store.apply(StoreChange(wid, base, base + len(specs), "x", {"id": wid},
                                             self._entries(base, specs), {"tasks": {"a": 1}}))
            assert (caught.value.held, caught.value.base) == (count, base)

        @rule(wid=_WIDS, specs=_ENTRIES, objects=_OBJECTS, as_record=st.booleans())
        def replace(self, wid: str, specs: list[tuple[str, Any, bool]], objects: dict[str, dict[str, Any]], as_record: bool) -> None:
            entries = self._entries(0, specs)
            kept = {c: {k: v for k, v in items.items() if v is not None}
                    for c, items in objects.items()}
            meta = {"id": wid, "state": "replaced"}
            if as_record:
                record = WorkspaceRecord(wid, {**meta, **kept, "audit": entries}, len(entries), "r")
                self.store.apply(change_from_record(record, SHARED_LAYOUT))
            else:
                self.store.apply(StoreChange(wid, 7, len(entries), "r", meta, entries,
                                             objects, replace=True))
            self.model[wid] = [meta, entries, {c: v for c, v in kept.items() if v}, "r"]

        @rule(wid=_WIDS)
        def delete(self, wid: str) -> None:
            self.store.delete(wid)
            self.model.pop(wid, None)

        @rule()
        def reopen(self) -> None:
            self.store = factory.reopen(self.store)

        @precondition(lambda self: bool(self.model))
        @rule(data=st.data(), start=st.integers(-1, 6), stop=st.none() | st.integers(-1, 8),
              task=st.none() | st.sampled_from(["T1", "T2"]),
              outcome=st.none() | st.sampled_from(["accepted", "refused"]))
        def read_range(self, data: st.DataObject, start: int, stop: int | None,
                       task: str | None, outcome: str | None) -> None:
            wid = data.draw(st.sampled_from(sorted(self.model)))
            where = EntryFilter(task_id=task, outcome=outcome)
            log = self.model[wid][1][max(start, 0): None if stop is None else max(stop, 0)]
            assert self.store.read_entries(wid, start, stop, where) == [
                e for e in log if entry_matches(e, where)]

        @invariant()
        def loads_like_the_model(self) -> None:
            if not hasattr(self, "store"):
                return
            expected = {}
            for wid, (meta, entries, objects, updated_at) in self.model.items():
                items = [(c, k, v) for c, kv in objects.items() for k, v in kv.items()]
                expected[wid] = (
                    assemble_snapshot(meta, entries, items, SHARED_LAYOUT), len(entries), updated_at
                )
            assert by_id(self.store.load()) == expected
            light = {wid: ({k: v for k, v in data.items() if k != "audit"}, n, u)
                     for wid, (data, n, u) in expected.items()}
            assert by_id(self.store.load(entries=False)) == light

    return StoreMachine

