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
