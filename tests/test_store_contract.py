"""Every store runs the one contract suite (storage/contract.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from storage import MemoryStore, PostgresStore, SqliteStore, Store
from storage.contract import StoreContract


class MemoryFactory:
    def open(self) -> Store:
        return MemoryStore()

    def reopen(self, store: Store) -> Store:
        return store  # close() would empty it: nothing outlives the process

    def another(self, store: Store) -> Store:
        return store


class SqliteFileFactory:
    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._names = itertools.count()

    def open(self) -> Store:
        return SqliteStore(self._directory / f"store{next(self._names)}.db")

    def reopen(self, store: Store) -> Store:
        store.close()
        return SqliteStore(store.path)

    def another(self, store: Store) -> Store:
        return SqliteStore(store.path)


class SqliteMemoryFactory:
    def open(self) -> Store:
        return SqliteStore(":memory:")

    def reopen(self, store: Store) -> Store:
        return store

    def another(self, store: Store) -> Store:
        return store


class PostgresFactory:
    """Each `open` is an empty schema of its own on the session's server."""

    def __init__(self, new_dsn: Callable[[], str]) -> None:
        self._new_dsn = new_dsn
        self._dsns: dict[int, str] = {}

    def open(self) -> Store:
        dsn = self._new_dsn()
        store = PostgresStore(dsn)
        self._dsns[id(store)] = dsn
        return store

    def reopen(self, store: Store) -> Store:
        store.close()
        again = PostgresStore(self._dsns[id(store)])
        self._dsns[id(again)] = self._dsns[id(store)]
        return again

    def another(self, store: Store) -> Store:
        return PostgresStore(self._dsns[id(store)])


class TestContract(StoreContract):
    @pytest.fixture(params=["memory", "sqlite-file", "sqlite-memory", "postgres"])
    def factory(self, request, tmp_path):
        if request.param == "memory":
            return MemoryFactory()
        if request.param == "sqlite-file":
            return SqliteFileFactory(tmp_path)
        if request.param == "postgres":
            return PostgresFactory(request.getfixturevalue("pg_schema"))
        return SqliteMemoryFactory()


def test_the_protocol_is_the_change_api_and_names_no_coordinator_collection() -> None:
    """What a workspace holds is the coordinator's to say (coordinator/model.py):
    the protocol reads and writes changes, and no module of storage/ spells
    a collection of chapline's own; the stores show the shared schema's."""
    from coordinator.model import (
        COLLECTIONS,
        DOCUMENT_LAYOUT,
        EXTENSION_COLLECTIONS,
        IDEMPOTENCY_KEYS,
        SIGNED_CALLS,
    )
    from storage.records import SHARED_LAYOUT

    methods = {name for name in vars(Store) if not name.startswith("_")}
    assert methods == {
        "workspace_ids", "load_held", "read_entries", "read_entry_texts",
        "apply", "apply_many", "write_turn", "delete", "close",
    }
    for path in sorted((Path(__file__).resolve().parent.parent / "storage").glob("*.py")):
        text = path.read_text()
        assert [name for name in (SIGNED_CALLS, *EXTENSION_COLLECTIONS) if name in text] == [], path
    assert SHARED_LAYOUT.shown == DOCUMENT_LAYOUT.shown == (*COLLECTIONS, IDEMPOTENCY_KEYS)
