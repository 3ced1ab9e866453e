"""Where a projection's tables live: a SQLite file or a PostgreSQL database.

A projection writes its SQL once, with `?` parameters and the SQL both
databases accept (CREATE TABLE IF NOT EXISTS, INSERT ... ON CONFLICT DO
UPDATE, TEXT/INTEGER/BIGINT/DOUBLE PRECISION); a `SqlTarget` runs it and
supplies what differs: connecting, the transaction, creating a view, the
parameter style, and locking the projection's cursors inside the transaction.

`open_target(target)` picks the database the way `--db` does
(storage/target.py): a `postgresql://` or `postgres://` URI names a
PostgreSQL database, anything else a SQLite file (or ":memory:").

The cursors (`chapline_cursors(projection, workspace, next_seq)`) are read
and decided on inside the writing transaction, never from an earlier read:
SQLite's `BEGIN IMMEDIATE` holds the file's write lock from the start;
PostgreSQL locks the projection's cursor rows (`SELECT ... FOR UPDATE`,
after an `INSERT ... ON CONFLICT DO NOTHING` that makes a missing row exist
or waits for the transaction creating it). Two processes feeding one
projection therefore take turns per workspace, and the second one sees how
far the first got.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from coordinator.errors import ProjectionError
from storage.target import describe_target, is_postgres

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CURSORS_TABLE",
    "PostgresTarget",
    "SqlTarget",
    "SqliteTarget",
    "open_sqlite",
    "open_target",
]

CURSORS_TABLE = (
    "CREATE TABLE IF NOT EXISTS chapline_cursors ("
    "projection TEXT NOT NULL, workspace TEXT NOT NULL, next_seq BIGINT NOT NULL, "
    "PRIMARY KEY (projection, workspace))"
)

# Taken while a PostgreSQL target creates its tables, so two processes
# opening one empty database at once do not race on the catalogue.
_SCHEMA_LOCK = 0x6368_7072  # "chpr"

Row = Sequence[Any]


class SqlTarget(ABC):
    """One connection to a projection's database. Statements use `?`."""

    #: The DB-API connection, for reading the tables in the same process.
    connection: Any

    def __init__(self, target: str) -> None:
        self.target = target
        self.where = describe_target(target)

    # -- what each database does its own way ------------------------------

    @abstractmethod
    def transaction(self) -> Any:
        """A context manager: one transaction, committed on a clean exit,
        rolled back when the block raises."""

    @abstractmethod
    def execute(self, sql: str, params: Row = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows (none for a statement without)."""

    @abstractmethod
    def executemany(self, sql: str, rows: Iterable[Row]) -> None: ...

    @abstractmethod
    def create(
        self, tables: Sequence[str], views: dict[str, str], needs: dict[str, str] | None = None,
        rebuild: str = "",
    ) -> None:
        """Create what is missing: `tables` (CREATE TABLE IF NOT EXISTS
        statements) and the cursors table, then the CREATE INDEX IF NOT
        EXISTS statements among `tables`, then each view `name AS body`. A
        table named in `needs` must have that column, else it was made by an
        earlier schema: ProjectionError, whose message gives `rebuild` (the
        statements that clear it), before any index or view is made."""

    def writes(self) -> Any:
        """A context manager around statements whose results nobody reads
        (inside a transaction): PostgreSQL sends them without waiting for
        each answer; its errors arrive by the end of the block."""
        return nullcontext()

    @abstractmethod
    def lock_cursors(self, projection: str, workspaces: Iterable[str]) -> dict[str, int]:
        """Inside a transaction: the cursors of `workspaces` (one without a
        cursor is absent, or 0), held so that no other writer moves them
        until commit."""

    @abstractmethod
    def close(self) -> None: ...

    # -- the same on both -------------------------------------------------

    def _check_columns(self, needs: dict[str, str] | None, rebuild: str) -> None:
        for table, column in (needs or {}).items():
            if column not in self.columns(table):
                raise ProjectionError(
                    self.where,
                    f"{self.where}: table {table} has no column {column}: it was made by an "
                    f"earlier version of chapline. Its rows are a function of the log, so clear "
                    f"it ({rebuild}) and the next attach rebuilds it from the store",
                )

    def columns(self, table: str) -> set[str]:
        """The column names of `table`."""
        return set(self._columns(f"SELECT * FROM {table} WHERE 1 = 0"))

    @abstractmethod
    def _columns(self, sql: str) -> list[str]: ...

    def load_cursors(self, projection: str) -> dict[str, int]:
        rows = self.execute(
            "SELECT workspace, next_seq FROM chapline_cursors WHERE projection = ?", (projection,)
        )
        return {workspace: int(seq) for workspace, seq in rows}

    def advance_cursors(self, projection: str, next_seqs: dict[str, int]) -> None:
        """Set each workspace's cursor (inside the caller's transaction)."""
        self.executemany(
            "INSERT INTO chapline_cursors (projection, workspace, next_seq) VALUES (?, ?, ?) "
            "ON CONFLICT (projection, workspace) DO UPDATE SET next_seq = excluded.next_seq",
            [(projection, workspace, seq) for workspace, seq in sorted(next_seqs.items())],
        )


def _split(statements: Sequence[str]) -> tuple[list[str], list[str]]:
    """Tables apart from indexes: an index is made after the columns are checked."""
    indexes = [s for s in statements if s.lstrip().upper().startswith("CREATE INDEX")]
    return [s for s in statements if s not in indexes], indexes


def open_target(target: str) -> SqlTarget:
    """The database `target` names: a postgresql:// URI, else a SQLite path."""
    if is_postgres(target):
        return PostgresTarget(target)
    return SqliteTarget(target)


# -- SQLite ----------------------------------------------------------------------


def open_sqlite(path: str) -> sqlite3.Connection:
    """A connection for a projection's target: explicit transactions, WAL,
    and patience with the coordinator's own writes.

    Commits are atomic but not synced one by one (WAL, synchronous=NORMAL):
    a power cut may take back the last few, and their cursor with them, so
    the projection reads those entries from the store again. The store, not
    the projection, is what must be durable."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    if path != ":memory:":
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
    return connection


class SqliteTarget(SqlTarget):
    """A SQLite file (may be the coordinator's own: its own connection and
    tables), or ":memory:" for this process only."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        try:
            self.connection: sqlite3.Connection = open_sqlite(path)
        except sqlite3.Error as exc:
            raise ProjectionError(self.where, f"cannot open {self.where}: {exc}") from None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        # IMMEDIATE: the write lock from the first statement, so the cursors
        # read inside are the ones the commit moves.
        self.connection.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.connection.execute("ROLLBACK")
            raise
        self.connection.execute("COMMIT")

    def execute(self, sql: str, params: Row = ()) -> list[tuple[Any, ...]]:
        return self.connection.execute(sql, params).fetchall()

    def executemany(self, sql: str, rows: Iterable[Row]) -> None:
        self.connection.executemany(sql, rows)

    def create(
        self, tables: Sequence[str], views: dict[str, str], needs: dict[str, str] | None = None,
        rebuild: str = "",
    ) -> None:
        creates, indexes = _split(tables)
        for statement in (*creates, CURSORS_TABLE):
            self.connection.execute(statement)
        self._check_columns(needs, rebuild)
        for statement in indexes:
            self.connection.execute(statement)
        for name, body in views.items():
            self.connection.execute(f"CREATE VIEW IF NOT EXISTS {name} AS {body}")

    def _columns(self, sql: str) -> list[str]:
        return [d[0] for d in self.connection.execute(sql).description]

    def lock_cursors(self, projection: str, workspaces: Iterable[str]) -> dict[str, int]:
        wanted = set(workspaces)
        return {w: s for w, s in self.load_cursors(projection).items() if w in wanted}

    def close(self) -> None:
        self.connection.close()


# -- PostgreSQL -------------------------------------------------------------------


class PostgresTarget(SqlTarget):
    """A PostgreSQL database named by a postgresql:// URI; it may be the
    one a PostgresStore writes (separate tables, its own connection).

    A broken connection is replaced at the next transaction. Every database
    error becomes a ProjectionError carrying the server's message and
    SQLSTATE, never the URI (which may hold a password)."""

    def __init__(self, uri: str, *, connect_timeout: int = 5) -> None:
        super().__init__(uri)
        self._timeout = connect_timeout
        self.connection: psycopg.Connection[Any] = self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        from storage import StoreError
        from storage.postgres import connect

        try:
            # UTF-8 on any database that can hold it, as the store's (else a
            # SQL_ASCII database hands back bytes); the refusals worded alike.
            connection = connect(self.target, connect_timeout=self._timeout, what="opened")
        except StoreError as exc:
            raise ProjectionError(self.where, f"{self.where}: {exc}") from None
        with self._errors("opened"):
            try:
                # As on SQLite (open_sqlite): commits are atomic but not waited on
                # to reach the disk. A server crash may take back the last few,
                # their cursor with them, and the entries are read from the store
                # again. This session only: the store's connection is unaffected.
                connection.execute("SET synchronous_commit = off")
            except BaseException:
                connection.close()
                raise
            return connection

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        import psycopg

        try:
            yield
        except psycopg.Error as exc:
            diag = getattr(exc, "diag", None)
            detail = getattr(diag, "message_primary", None) or (
                "the server cannot be reached" if isinstance(exc, psycopg.OperationalError)
                else type(exc).__name__
            )
            state = f", SQLSTATE {exc.sqlstate}" if getattr(exc, "sqlstate", None) else ""
            raise ProjectionError(
                self.where, f"{self.where}: {detail}{state}; nothing was {what}"
            ) from None

    def _reconnect_if_broken(self) -> None:
        """Between transactions only: a connection the server or the network
        broke is replaced (the failed transaction was rolled back with it)."""
        if self.connection.closed or self.connection.broken:
            self.connection.close()
            self.connection = self._connect()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._reconnect_if_broken()
        with self._errors("written"), self.connection.transaction():
            yield

    @contextmanager
    def writes(self) -> Iterator[None]:
        with self._errors("written"), self.connection.pipeline():
            yield

    def load_cursors(self, projection: str) -> dict[str, int]:
        self._reconnect_if_broken()
        return super().load_cursors(projection)

    def execute(self, sql: str, params: Row = ()) -> list[tuple[Any, ...]]:
        with self._errors("read or written"):
            cursor = self.connection.execute(sql.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description is not None else []

    def _columns(self, sql: str) -> list[str]:
        with self._errors("read"):
            description = self.connection.execute(sql).description
            return [d.name for d in description or ()]

    def executemany(self, sql: str, rows: Iterable[Row]) -> None:
        rows = list(rows)
        if not rows:
            return
        with self._errors("written"), self.connection.cursor() as cursor:
            cursor.executemany(sql.replace("?", "%s"), rows)

    def create(
        self, tables: Sequence[str], views: dict[str, str], needs: dict[str, str] | None = None,
        rebuild: str = "",
    ) -> None:
        with self.transaction():
            self.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
            creates, indexes = _split(tables)
            for statement in (*creates, CURSORS_TABLE):
                self.execute(statement)
            self._check_columns(needs, rebuild)
            for statement in indexes:
                self.execute(statement)
            for name, body in views.items():
                self.execute(f"CREATE OR REPLACE VIEW {name} AS {body}")

    def lock_cursors(self, projection: str, workspaces: Iterable[str]) -> dict[str, int]:
        # In one order, so two writers of overlapping workspaces cannot deadlock.
        # The INSERT makes a missing row exist at 0, as good as absent (or waits
        # for the transaction creating it), so there is a row to lock; the SELECT, a new
        # statement, then reads the latest commit and locks it.
        ordered = sorted(set(workspaces))
        self.executemany(
            "INSERT INTO chapline_cursors (projection, workspace, next_seq) VALUES (?, ?, 0) "
            "ON CONFLICT (projection, workspace) DO NOTHING",
            [(projection, workspace) for workspace in ordered],
        )
        rows = self.execute(
            "SELECT workspace, next_seq FROM chapline_cursors "
            "WHERE projection = ? AND workspace = ANY(?) ORDER BY workspace FOR UPDATE",
            (projection, ordered),
        )
        return {workspace: int(seq) for workspace, seq in rows}

    def close(self) -> None:
        self.connection.close()
