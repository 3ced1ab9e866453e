"""Which store a command-line `--db` names: a SQLite file path, or a
PostgreSQL database given as a `postgresql://` (or `postgres://`) URI."""

from __future__ import annotations

import os

from storage import SqliteStore, Store
from storage.types import DEFAULT_WAIT

__all__ = ["describe_target", "is_postgres", "open_store"]

_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(target: str) -> bool:
    return target.startswith(_SCHEMES)


def open_store(target: str, *, watch: bool = False, wait: float | None = None) -> Store:
    """The store `target` names; `watch` makes it report other writers'
    changes (`changed()`); `wait` bounds, in seconds, how long a write waits
    for another writer's lock (None: the store's default, 30). Raises
    StoreError, sqlite3.Error or OSError when it cannot be opened, ValueError
    for a `wait` that is not a positive number, and
    coordinator.extras.MissingExtraError for a PostgreSQL database without
    chapline[postgres]."""
    waiting = DEFAULT_WAIT if wait is None else wait
    if is_postgres(target):
        from storage.postgres import PostgresStore

        return PostgresStore(target, watch=watch, wait=waiting)
    return SqliteStore(target, watch=watch and target != ":memory:", wait=waiting)


def describe_target(target: str) -> str:
    """`target` for a log line or a message: a file's absolute path, or a
    PostgreSQL database's name, host and port without user or password."""
    if not is_postgres(target):
        return target if target == ":memory:" else os.path.abspath(target)
    try:
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(target)
    except Exception:  # malformed, or no psycopg: say nothing that could hold a secret
        return "a PostgreSQL database"
    host = info.get("host") or "localhost"
    where = f"{host}:{info['port']}" if info.get("port") else str(host)
    return f"the PostgreSQL database {info.get('dbname') or '(default)'} on {where}"
