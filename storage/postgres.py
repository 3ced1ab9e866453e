"""PostgresStore: the store contract in a PostgreSQL database, on psycopg 3
(chapline[postgres]; without it, importing this module raises
coordinator.extras.MissingExtraError naming the pip command).

The same three tables as the shared SQLite layout (`chap_meta`,
`chap_entries`, `chap_objects`), created on first use, with JSON kept as the
exact text written (chain verification hashes it). Many processes and
machines may share one database; the rules that make that safe are in
SPECIFICATION.md, "PostgreSQL":

- A write locks its workspace's `chap_meta` row first (an UPDATE; for a new
  workspace an INSERT, where two creators take turns on the primary key),
  and only then counts the entries held, in a later statement, so the
  compare-and-swap on `base` sees every commit before it. The primary key on
  (workspace, seq) is the backstop. A `create` change is refused when the
  row was already there.
- A write waits at most the store's `wait` for a lock another writer holds
  (the session's `lock_timeout`), else raises WriteTurnTimeoutError.
  `write_turn` locks the workspace's `chap_meta` row (`SELECT ... FOR
  UPDATE`) in a transaction the block's first write then commits.
- A write that reaches the database sends a notification (channel
  `chapline_changes`, payload "<writer> <workspace>") that other processes
  use to refresh a workspace before their next write to it.
- A broken connection is replaced on the next call. A call that fails
  because the server is unreachable raises StoreUnavailableError with a
  message that names no host, path or credential; one the server refused
  (no such database or role, say) says what the server said. A read, and a
  write that failed before its COMMIT was sent, is tried once more on a fresh
  connection; a write whose COMMIT got no answer is not (it may have been
  committed, and the CAS makes the caller find out by reloading).
- Every connection speaks UTF-8 (`connect`), and only a database that can
  hold any UTF-8 text is opened: UTF8, or SQL_ASCII (a plain `initdb
  --locale=C`), which keeps the bytes as sent.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from coordinator.extras import needs
from storage import _rows
from storage._encode import EncodedChange, encode_change
from storage.records import WorkspaceRecord
from storage.types import (
    DEFAULT_WAIT,
    DatabaseEncodingError,
    EntryFilter,
    HeldWorkspace,
    MalformedChangeError,
    Store,
    StoreChange,
    StoreConflictError,
    StoreError,
    StoreUnavailableError,
    WorkspaceExistsError,
    WriteTurnTimeoutError,
)

with needs("postgres"):
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.pq import TransactionStatus

__all__ = ["CHANNEL", "PostgresStore", "connect", "entries_query"]

log = logging.getLogger(__name__)

CHANNEL = "chapline_changes"

# Taken while creating the schema, so two processes opening one empty
# database at once do not race on the catalogue.
_SCHEMA_LOCK = 0x6368_6170  # "chap"

# A field of the recorded call: the accepted `envelope`, else the refused
# `request` (the SQL only narrows; entry_matches decides).
def _call_field(*path: str) -> str:
    p = ",".join(path)
    return f"coalesce(data::jsonb #>> '{{envelope,{p}}}', data::jsonb #>> '{{request,{p}}}')"


_REFUSED = "(coalesce(jsonb_typeof(data::jsonb -> 'envelope'), 'null') = 'null')"

_FILTER_SQL = {
    "method": _call_field("method"),
    "sender": _call_field("params", "from"),
    "task_id": _call_field("params", "task_id"),
}

# The JSON columns are read as the bytes stored (a conversion to SQL_ASCII is
# none, in any database), in binary results: the shared decoding takes bytes,
# and a row that is not UTF-8 (a SQL_ASCII database checks nothing) is then a
# damaged row, as on SQLite, where the server would refuse to send it as text.
_DIALECT = _rows.Dialect(
    param="%s", data="convert_to(data, 'SQL_ASCII')", inserted="ord", filters=_FILTER_SQL,
    refused=_REFUSED,
)

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS chap_meta (
        workspace  TEXT PRIMARY KEY,
        data       TEXT NOT NULL,
        version    BIGINT NOT NULL,
        updated_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS chap_entries (
        workspace TEXT NOT NULL,
        seq       BIGINT NOT NULL,
        data      TEXT NOT NULL,
        PRIMARY KEY (workspace, seq))""",
    # `ord` keeps insertion order (an upsert keeps it), as SQLite's rowid does:
    # members load in join order.
    """CREATE TABLE IF NOT EXISTS chap_objects (
        workspace  TEXT NOT NULL,
        collection TEXT NOT NULL,
        id         TEXT NOT NULL,
        data       TEXT NOT NULL,
        ord        BIGINT GENERATED ALWAYS AS IDENTITY,
        PRIMARY KEY (workspace, collection, id))""",
    *(
        f"CREATE INDEX IF NOT EXISTS chapline_entries_{name} ON chap_entries "
        f"(workspace, ({expr}), seq)"
        for name, expr in [*_FILTER_SQL.items(), ("outcome", _REFUSED)]
    ),
]

_UNREACHABLE = (
    "the PostgreSQL server cannot be reached (connection refused, lost or timed "
    "out), so nothing was {what}. The connection is made again by itself: retry "
    "once the server is back."
)

# The server encodings that hold any text of a log: UTF8, and SQL_ASCII,
# which stores the UTF-8 bytes a UTF8 client sends as they are. Any other
# would refuse (or convert) some character of some call.
_ENCODINGS = ("UTF8", "SQL_ASCII")

# libpq words a refusal by the server as "... failed: FATAL:  <message>"
# (the severity in the server's language); its own failures have no such part.
_SERVER_SAID = re.compile(r"failed: \w+:  ([^\n]+)")

T = TypeVar("T")

# A connection in one of these states is inside a write turn (outside one,
# every transaction ends before the store's lock is released).
_IN_TURN = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


class _Ambiguous(Exception):
    """The connection broke after COMMIT was sent: the write may have landed."""


def connect(dsn: str, *, connect_timeout: int = 5, what: str = "read or written") -> psycopg.Connection[Any]:
    """An autocommit connection to the database `dsn` names that speaks UTF-8,
    whatever the connection string, PGCLIENTENCODING or the database's
    default say (else a SQL_ASCII database would hand back bytes).

    Raises StoreUnavailableError when no connection is made, worded for each
    cause (`what` is what was therefore not done), and DatabaseEncodingError
    for a database whose encoding cannot hold the log."""
    try:
        conn = psycopg.connect(
            dsn, autocommit=True, connect_timeout=connect_timeout, client_encoding="UTF8"
        )
    except psycopg.ProgrammingError:
        # libpq's reason quotes the string, which may hold a password.
        raise StoreUnavailableError(
            "",
            "the connection string is not a valid PostgreSQL connection string (a "
            "postgresql://USER@HOST:PORT/DBNAME URI or libpq key=value pairs), so nothing "
            f"was {what}. Correct it and retry.",
        ) from None
    except psycopg.OperationalError as exc:
        said = _SERVER_SAID.findall(str(exc))
        if not said:
            raise StoreUnavailableError("", _UNREACHABLE.format(what=what)) from None
        raise StoreUnavailableError(
            "",
            f"the PostgreSQL server refused the connection: {said[-1].strip()}. Nothing was "
            f"{what}; correct what it names (the database, role or password in the "
            "connection string, or the server's access rules), then retry.",
        ) from None
    encoding = conn.info.parameter_status("server_encoding") or ""
    if encoding not in _ENCODINGS:
        conn.close()
        raise DatabaseEncodingError(encoding)
    return conn


class PostgresStore(Store):
    """A store in the PostgreSQL database named by `dsn` (a libpq URI or
    key=value string).

    One instance holds one connection and may be shared by threads (they
    take turns); any number of instances and processes may share one
    database. `watch=True` also listens for other writers' changes, which
    `changed()` reports. A write waits at most `wait` seconds for a lock
    another writer holds, else raises WriteTurnTimeoutError.
    """

    def __init__(
        self, dsn: str, *, watch: bool = False, connect_timeout: int = 5, wait: float = DEFAULT_WAIT
    ) -> None:
        if not 0 < wait < float("inf"):
            raise ValueError(f"wait must be a positive number of seconds, got {wait!r}")
        self.wait = wait
        self._dsn = dsn
        self._timeout = connect_timeout
        self._lock = threading.RLock()
        self._conn: psycopg.Connection[Any] | None = None
        self._closed = False
        self._schema_ready = False
        # Names this instance in its notifications, so it ignores its own.
        self._writer = uuid.uuid4().hex[:16]
        self._listener: _Listener | None = None
        with self._lock:
            self._connection()
        if watch:
            self._listener = _Listener(self._connect_raw, self._writer)

    # -- connections -----------------------------------------------------

    def _connect_raw(self) -> psycopg.Connection[Any]:
        return connect(self._dsn, connect_timeout=self._timeout)

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            self._conn = None
            conn = self._connect_raw()
            try:
                # Bounds every lock wait of this session: a writer that holds a
                # workspace's row past it (stopped, stuck) delays others by no more.
                conn.execute(
                    "SELECT set_config('lock_timeout', %s, false)",
                    (f"{max(1, round(self.wait * 1000))}ms",),
                )
            except psycopg.Error:
                conn.close()
                raise
            if not self._schema_ready:
                try:
                    _create_schema(conn)
                except psycopg.Error:
                    conn.close()
                    raise
                self._schema_ready = True
            self._conn = conn
        return conn

    def _run(self, work: Callable[[psycopg.Connection[Any]], T], what: str) -> T:
        """`work(connection)` under the lock, once more on a fresh connection
        if the first one turns out to be broken (nothing was committed then).
        Inside a write turn, on the turn's connection only: a broken one has
        lost the turn, and nothing was committed."""
        with self._lock:
            self._check_open()
            conn = self._conn
            if conn is not None and conn.info.transaction_status in _IN_TURN:
                try:
                    return work(conn)
                except _Ambiguous:
                    raise _ambiguous() from None
                except (psycopg.Error, UnicodeError) as exc:
                    if conn.broken:
                        self._conn = None
                        conn.close()
                        raise StoreUnavailableError("", _UNREACHABLE.format(what=what)) from None
                    raise _server_error(exc, what) from None
            for attempt in (1, 2):
                conn = self._connection()
                try:
                    return work(conn)
                except _Ambiguous:
                    raise _ambiguous() from None
                except psycopg.OperationalError as exc:
                    if not conn.broken:
                        raise _server_error(exc, what) from None
                    self._conn = None
                    conn.close()
                    if attempt == 2:
                        raise StoreUnavailableError("", _UNREACHABLE.format(what=what)) from None
                except (psycopg.Error, UnicodeError) as exc:
                    if conn.broken:
                        self._conn = None
                        conn.close()
                    raise _server_error(exc, what) from None
            raise AssertionError("unreachable")

    @contextlib.contextmanager
    def write_turn(self, workspace: str) -> Iterator[None]:
        """The workspace's `chap_meta` row locked (`SELECT ... FOR UPDATE`,
        waiting at most `wait`) in a transaction held until the block's first
        `apply` commits it, or the block ends (SPECIFICATION.md, "Contract":
        `write_turn`). Every writer of the workspace locks that row first, so
        none commits to it meanwhile; the lock goes with the session if this
        process dies. Threads sharing this instance wait for the block too."""

        def begin(conn: psycopg.Connection[Any]) -> None:
            conn.execute("BEGIN")
            try:
                conn.execute(
                    "SELECT 1 FROM chap_meta WHERE workspace = %s FOR UPDATE", (workspace,)
                )
            except pg_errors.LockNotAvailable:
                conn.execute("ROLLBACK")
                raise WriteTurnTimeoutError(workspace, self.wait) from None
            except BaseException:
                if not conn.broken:
                    conn.execute("ROLLBACK")
                raise

        with self._lock:
            self._run(begin, "written")
            try:
                yield
            finally:
                conn = self._conn
                if conn is not None and conn.info.transaction_status in _IN_TURN:
                    try:
                        conn.execute("ROLLBACK")  # the block wrote nothing
                    except psycopg.OperationalError:
                        pass  # broken meanwhile: the server rolls back

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError(
                "", "this PostgresStore is closed; open a new PostgresStore to use the database"
            )

    # -- writing ---------------------------------------------------------

    def apply(self, change: StoreChange) -> None:
        encoded = encode_change(change)
        self._run(lambda conn: self._write(conn, [(change, encoded)], None), "written")

    def apply_many(self, changes: Iterable[StoreChange]) -> list[Exception | None]:
        """Apply several changes in one transaction, with one commit.

        Each change is all-or-nothing on its own (a savepoint each): one that
        conflicts or is malformed is left out and its error returned in its
        place; None for every change applied. Workspaces are locked in id
        order, so two processes writing overlapping groups cannot deadlock.
        """
        changes = list(changes)
        results: list[Exception | None] = [None] * len(changes)
        todo: list[tuple[int, StoreChange, EncodedChange]] = []
        for i, change in enumerate(changes):
            try:
                todo.append((i, change, encode_change(change)))
            except MalformedChangeError as exc:
                results[i] = exc
        todo.sort(key=lambda item: item[1].id)
        if todo:
            conflicts: dict[int, Exception] = {}
            self._run(
                lambda conn: self._write(conn, [(c, e) for _, c, e in todo], conflicts),
                "written",
            )
            for position, conflict in conflicts.items():
                results[todo[position][0]] = conflict
        return results

    def _write(
        self,
        conn: psycopg.Connection[Any],
        changes: list[tuple[StoreChange, EncodedChange]],
        conflicts: dict[int, Exception] | None,
    ) -> None:
        """One transaction. With `conflicts`, each change in a savepoint and its
        conflict recorded there; without, a conflict raises."""
        if conflicts is not None:
            conflicts.clear()  # a retry on a fresh connection starts over
        with conn.cursor() as cur:
            if conn.info.transaction_status not in _IN_TURN:
                cur.execute("BEGIN")
            # else: inside a write turn, whose transaction this write commits
            try:
                for position, (change, encoded) in enumerate(changes):
                    if conflicts is None:
                        self._write_one(cur, change, encoded)
                        continue
                    cur.execute("SAVEPOINT change")
                    try:
                        self._write_one(cur, change, encoded)
                    except (StoreConflictError, WriteTurnTimeoutError) as exc:
                        # WorkspaceExistsError too
                        cur.execute("ROLLBACK TO SAVEPOINT change")
                        conflicts[position] = exc
                    cur.execute("RELEASE SAVEPOINT change")
                written = [
                    change.id for i, (change, _) in enumerate(changes)
                    if conflicts is None or i not in conflicts
                ]
                for wid in dict.fromkeys(written):
                    cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{self._writer} {wid}"))
            except BaseException:
                if not conn.broken:
                    try:
                        conn.execute("ROLLBACK")
                    except psycopg.OperationalError:
                        pass  # broken meanwhile: the server rolls back
                raise
            try:
                cur.execute("COMMIT")
            except psycopg.OperationalError:
                if conn.broken:
                    raise _Ambiguous() from None
                raise

    def _write_one(self, cur: psycopg.Cursor[Any], change: StoreChange, encoded: EncodedChange) -> None:
        wid = change.id
        try:
            existed = _lock_meta(cur, wid, encoded.meta.decode(), change.version, change.updated_at)
        except pg_errors.LockNotAvailable:
            raise WriteTurnTimeoutError(wid, self.wait) from None
        if existed and encoded.create:
            raise WorkspaceExistsError(wid, _held(cur, wid), change.base)
        if change.replace:
            cur.execute("DELETE FROM chap_entries WHERE workspace = %s", (wid,))
            cur.execute("DELETE FROM chap_objects WHERE workspace = %s", (wid,))
            base = 0
        else:
            held = _held(cur, wid)
            if held != change.base:
                raise StoreConflictError(wid, held, change.base)
            base = change.base
        if encoded.entries:
            try:
                cur.executemany(
                    "INSERT INTO chap_entries (workspace, seq, data) VALUES (%s, %s, %s)",
                    [(wid, base + i, text.decode()) for i, text in enumerate(encoded.entries)],
                )
            except pg_errors.UniqueViolation:
                # The backstop; the row lock above makes this unreachable.
                raise StoreConflictError(wid, base + 1, base) from None
        gone = [(wid, c, k) for c, k, text in encoded.objects if text is None]
        kept = [(wid, c, k, text.decode()) for c, k, text in encoded.objects if text is not None]
        if gone:
            cur.executemany(
                "DELETE FROM chap_objects WHERE workspace = %s AND collection = %s AND id = %s",
                gone,
            )
        if kept:
            cur.executemany(
                "INSERT INTO chap_objects (workspace, collection, id, data) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (workspace, collection, id) "
                "DO UPDATE SET data = excluded.data",
                kept,
            )

    def delete(self, workspace: str) -> None:
        def work(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                try:
                    conn.execute(
                        "SELECT 1 FROM chap_meta WHERE workspace = %s FOR UPDATE", (workspace,)
                    )
                except pg_errors.LockNotAvailable:
                    raise WriteTurnTimeoutError(workspace, self.wait) from None
                for table in ("chap_entries", "chap_objects", "chap_meta"):
                    conn.execute(f"DELETE FROM {table} WHERE workspace = %s", (workspace,))
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{self._writer} {workspace}"))

        self._run(work, "deleted")

    # -- reading -----------------------------------------------------------

    def workspace_ids(self) -> list[str]:
        rows = self._run(lambda conn: conn.execute(_rows.WORKSPACE_IDS).fetchall(), "read")
        return [wid for (wid,) in rows]

    def load_held(self, workspace: str | None = None) -> list[HeldWorkspace]:
        return [held for held, _ in self._load(workspace, entries=False)]

    def load(self, *, entries: bool = True, workspace: str | None = None) -> list[WorkspaceRecord]:
        return _rows.records(self._load(workspace, entries), log, "")

    def _load(
        self, workspace: str | None, entries: bool
    ) -> list[tuple[HeldWorkspace, list[dict[str, Any]] | None]]:
        metas, objects, log_ = _rows.load_queries(_DIALECT, workspace, entries)

        def work(conn: psycopg.Connection[Any]) -> list[list[Any]]:
            if conn.info.transaction_status in _IN_TURN:
                # Inside a write turn: no writer of the workspace commits
                # while it is held, so the three reads agree.
                return [
                    conn.execute(sql, args, binary=True).fetchall()
                    for sql, args in (metas, objects, log_)
                ]
            # One snapshot for all three reads.
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                return [
                    conn.execute(sql, args, binary=True).fetchall()
                    for sql, args in (metas, objects, log_)
                ]

        meta_rows, object_rows, log_rows = self._run(work, "read")
        return _rows.Loaded.gather(entries, meta_rows, object_rows, log_rows).held(log, "")

    def read_entries(
        self,
        workspace: str,
        start: int = 0,
        stop: int | None = None,
        where: EntryFilter | None = None,
    ) -> list[dict[str, Any]]:
        sql, args = entries_query(workspace, start, stop, where)
        rows = self._run(lambda conn: conn.execute(sql, args, binary=True).fetchall(), "read")
        return _rows.matching_entries(rows, workspace, where, "")

    def read_entry_texts(self, workspace: str, start: int = 0, stop: int | None = None) -> list[bytes]:
        """The stored JSON text of entries `start <= seq < stop`, by seq."""
        sql, args = _rows.entries_query(_DIALECT, _DIALECT.data, workspace, start, stop)
        rows = self._run(lambda conn: conn.execute(sql, args, binary=True).fetchall(), "read")
        return [text for (text,) in rows]


    # -- other writers -------------------------------------------------------

    def changed(self) -> set[str] | None:
        """The workspaces other writers changed since the last call, or None
        when that is unknown (the listening connection was lost meanwhile):
        then any workspace may have changed. Always empty without `watch`."""
        if self._listener is None:
            return set()
        return self._listener.take()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._listener is not None:
                self._listener.close()
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _ambiguous() -> StoreUnavailableError:
    return StoreUnavailableError(
        "",
        "the connection to the PostgreSQL server was lost while committing, "
        "so this write may or may not have been stored. Reload the workspace "
        "from the store (a coordinator does so on its next write) and retry."
    )


def _create_schema(conn: psycopg.Connection[Any]) -> None:
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        for statement in _SCHEMA:
            conn.execute(statement)


def _lock_meta(cur: psycopg.Cursor[Any], wid: str, meta: str, version: int, updated_at: str) -> bool:
    """Write the workspace's meta row, holding its lock until the transaction
    ends; True if the row was there before. Every writer of one workspace
    queues here, and the statements after this one see every earlier commit."""
    args = (meta, version, updated_at, wid)
    for _ in range(2):
        cur.execute(
            "UPDATE chap_meta SET data = %s, version = %s, updated_at = %s WHERE workspace = %s",
            args,
        )
        if cur.rowcount:
            return True
        # New here; a concurrent creator makes this wait for its commit, and
        # then the row is there: update (and lock) it after all.
        cur.execute(
            "INSERT INTO chap_meta (data, version, updated_at, workspace) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (workspace) DO NOTHING",
            args,
        )
        if cur.rowcount:
            return False
    raise AssertionError("a chap_meta row neither updated nor inserted")


def _held(cur: psycopg.Cursor[Any], wid: str) -> int:
    cur.execute("SELECT max(seq) FROM chap_entries WHERE workspace = %s", (wid,))
    row = cur.fetchone()
    return 0 if row is None or row[0] is None else row[0] + 1


def entries_query(
    workspace: str, start: int, stop: int | None, where: EntryFilter | None
) -> tuple[str, list[Any]]:
    """The SELECT behind `read_entries`: (seq, data) in seq order, narrowed by
    the indexed fields of `where` (entry_matches has the last word)."""
    return _rows.entries_query(_DIALECT, f"seq, {_DIALECT.data}", workspace, start, stop, where)


def _server_error(exc: Exception, what: str) -> StoreUnavailableError:
    """A StoreError for an error the server reported: its primary message and
    SQLSTATE only (never the connection string, host or socket path)."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    state = getattr(exc, "sqlstate", None)
    detail = primary or type(exc).__name__
    return StoreUnavailableError(
        "",
        f"the PostgreSQL server refused the operation ({detail}"
        + (f", SQLSTATE {state}" if state else "")
        + f"), so nothing was {what}. Check the database and retry."
    )


class _Listener:
    """A thread on its own connection that LISTENs for other writers' changes."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], writer: str) -> None:
        self._connect = connect
        self._writer = writer
        self._lock = threading.Lock()
        self._changed: set[str] = set()
        self._lost = False  # notifications may have been missed
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._listen()  # listening before the first write, so nothing is missed
        self._thread = threading.Thread(target=self._work, name="chap-listen", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        conn = self._connect()
        conn.execute(f"LISTEN {CHANNEL}")
        self._conn = conn

    def take(self) -> set[str] | None:
        with self._lock:
            if self._lost:
                self._lost = False
                self._changed = set()
                return None
            changed, self._changed = self._changed, set()
            return changed

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                if self._conn is None:
                    self._listen()
                    with self._lock:
                        self._lost = True
                assert self._conn is not None
                for note in self._conn.notifies(timeout=0.5, stop_after=256):
                    writer, _, wid = note.payload.partition(" ")
                    if writer != self._writer:
                        with self._lock:
                            self._changed.add(wid)
            except (psycopg.Error, StoreError):
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                with self._lock:
                    self._lost = True
                self._stop.wait(0.5)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._conn is not None:
            self._conn.close()
