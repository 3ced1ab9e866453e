"""SqliteStore: the store contract in one SQLite file, on the stdlib sqlite3.

The file layout is shared with the other CHAP 0.3 coordinators: the tables
`chap_meta`, `chap_entries` and `chap_objects` and the read-only view
`chap_workspaces` (see SPECIFICATION.md, "Stores"). The indexes named
`chapline_*` are ours; other implementations ignore them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any

from storage import _rows
from storage._encode import EncodedChange, encode_change
from storage._rows import _Unreadable, decode_object
from storage.records import SHARED_LAYOUT, WorkspaceRecord, change_from_record
from storage.types import (
    DEFAULT_WAIT,
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

__all__ = ["SqliteStore"]

log = logging.getLogger(__name__)

_LEGACY = "chap_workspaces"

_TABLES = """
CREATE TABLE IF NOT EXISTS chap_meta (
    workspace  TEXT PRIMARY KEY,
    data       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chap_entries (
    workspace TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    data      TEXT NOT NULL,
    PRIMARY KEY (workspace, seq)
);
CREATE TABLE IF NOT EXISTS chap_objects (
    workspace  TEXT NOT NULL,
    collection TEXT NOT NULL,
    id         TEXT NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (workspace, collection, id)
);
"""


def _call_field(path: str, data: str = "data") -> str:
    """SQL for a field of the recorded call in the entry text `data`: the
    accepted `envelope`, else the refused `request`. The json_valid guard
    keeps one malformed row (written by anyone) from failing a write."""
    return (
        f"CASE WHEN json_valid({data}) THEN coalesce("
        f"json_extract({data}, '$.envelope.{path}'), "
        f"json_extract({data}, '$.request.{path}')) END"
    )


def _refused(data: str = "data") -> str:
    """1 for a refusal (no usable `envelope`), 0 for an accepted call."""
    return (
        f"CASE WHEN json_valid({data}) THEN "
        f"coalesce(json_type({data}, '$.envelope'), 'null') = 'null' END"
    )


_REFUSED = _refused()

# EntryFilter field -> where the recorded call holds it.
_FIELD_PATHS = {"method": "method", "sender": "params.from", "task_id": "params.task_id"}
# EntryFilter field -> the SQL expression that narrows candidates.
# The SQL only narrows: every row it returns is checked again with
# entry_matches, the one definition of the filter's meaning.
_FILTER_SQL = {name: _call_field(path) for name, path in _FIELD_PATHS.items()}

# The filter index (SPECIFICATION.md, "SQLite file layout"): each entry's filter
# fields, one row per entry, kept behind the log. Expression indexes on
# chap_entries parsed every entry's JSON a dozen times and touched four more
# pages in every commit; this table is written a group of entries at a time,
# once KEYS_LAG entries are unindexed, and a filtered read scans the
# unindexed tail by the same expressions. Its columns have no type, so a
# value compares exactly as the expression's would.
_KEYS = "chapline_entry_keys"
_KEYS_INDEX = "chapline_keys_"  # + a column: that column's index
KEYS_LAG = 64


def _key_values(data: str) -> str:
    """The keys columns' values for the entry text `data`, in column order."""
    return ", ".join([*(_call_field(path, data) for path in _FIELD_PATHS.values()), _refused(data)])


_KEY_COLUMNS = (*_FIELD_PATHS, "refused")
_KEYS_SCHEMA = [
    f"CREATE TABLE IF NOT EXISTS {_KEYS} (workspace TEXT NOT NULL, seq INTEGER NOT NULL, "
    f"{', '.join(_KEY_COLUMNS)}, PRIMARY KEY (workspace, seq)) WITHOUT ROWID",
    *(f"CREATE INDEX IF NOT EXISTS {_KEYS_INDEX}{c} ON {_KEYS} (workspace, {c}, seq)"
      for c in _KEY_COLUMNS),
    # Every entry at or below a workspace's highest keyed seq has its keys,
    # whoever writes chap_entries: an entry removed takes its keys along, and
    # one rewritten, or inserted below that seq, drops the keys from its seq
    # on (the next catch-up writes them again; reads scan them meanwhile).
    f"CREATE TRIGGER IF NOT EXISTS chapline_entry_deleted AFTER DELETE ON chap_entries "
    f"BEGIN DELETE FROM {_KEYS} WHERE workspace = old.workspace AND seq = old.seq; END",
    f"CREATE TRIGGER IF NOT EXISTS chapline_entry_rewritten AFTER UPDATE ON chap_entries BEGIN "
    f"DELETE FROM {_KEYS} WHERE workspace = old.workspace AND seq >= old.seq; "
    f"DELETE FROM {_KEYS} WHERE workspace = new.workspace AND seq >= new.seq; END",
    f"CREATE TRIGGER IF NOT EXISTS chapline_entry_inserted_below AFTER INSERT ON chap_entries "
    f"WHEN new.seq <= (SELECT max(seq) FROM {_KEYS} WHERE workspace = new.workspace) "
    f"BEGIN DELETE FROM {_KEYS} WHERE workspace = new.workspace AND seq >= new.seq; END",
]
# The expression indexes of earlier versions, replaced by the table above.
_OLD_INDEXES = [f"chapline_entries_{name}" for name in ("method", "sender", "task_id", "outcome")]
# A workspace's last keyed seq, -1 when none is.
_KEYED = f"SELECT coalesce(max(seq), -1) FROM {_KEYS} WHERE workspace = ?"
# A workspace's last entry and last keyed entry, in one statement.
_TOPS = f"SELECT (SELECT max(seq) FROM chap_entries WHERE workspace = ?), ({_KEYED})"
# Keys for one workspace's entries after a seq; for every workspace's.
_CATCH_UP = (
    f"INSERT INTO {_KEYS} (workspace, seq, {', '.join(_KEY_COLUMNS)}) "
    f"SELECT workspace, seq, {_key_values('data')} FROM chap_entries WHERE workspace = ? AND seq > ?"
)
_CATCH_UP_ALL = (
    f"INSERT INTO {_KEYS} (workspace, seq, {', '.join(_KEY_COLUMNS)}) "
    f"SELECT e.workspace, e.seq, {_key_values('e.data')} FROM chap_meta AS m "
    f"JOIN chap_entries AS e ON e.workspace = m.workspace AND e.seq > "
    f"coalesce((SELECT max(seq) FROM {_KEYS} AS k WHERE k.workspace = m.workspace), -1)"
)

# CAST: the driver returns the JSON text as the bytes stored, undecoded.
_DIALECT = _rows.Dialect(
    param="?",
    data="CAST(data AS BLOB)",
    # rowid order is insertion order (writes upsert, keeping the rowid).
    inserted="rowid",
    filters=_FILTER_SQL,
    refused=_REFUSED,
    keys=_KEYS,
    keys_index=_KEYS_INDEX,
)


def _view_sql() -> str:
    """The read-only `chap_workspaces` view: each workspace as one JSON
    document in the pre-0.3.2 shape, for tools that read the old table."""
    parts = [
        "'$.audit', json((SELECT json_group_array(json(e.data)) FROM "
        "(SELECT data FROM chap_entries WHERE workspace = m.workspace "
        "ORDER BY seq) AS e))"
    ]
    for c in SHARED_LAYOUT.shown:
        parts.append(
            f"'$.{c}', json((SELECT json_group_object(o.id, json(o.data)) "
            f"FROM chap_objects AS o WHERE o.workspace = m.workspace "
            f"AND o.collection = '{c}'))"
        )
    return (
        f"CREATE VIEW IF NOT EXISTS {_LEGACY} AS SELECT m.workspace AS id, "
        f"json_set(m.data, {', '.join(parts)}) AS data, "
        "m.version AS version, m.updated_at AS updated_at FROM chap_meta AS m"
    )




class SqliteStore(Store):
    """A store in the SQLite file at `path` (":memory:" for a private one).

    Files use WAL unless `wal=False`; every commit is synced to disk before
    `apply` returns (PRAGMA synchronous=FULL). One instance may be shared by
    threads; several instances and processes may share one file. A write
    waits at most `wait` seconds for another connection's write lock (the
    file's write turn), else raises WriteTurnTimeoutError.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        wal: bool = True,
        watch: bool = False,
        wait: float = DEFAULT_WAIT,
    ) -> None:
        if not 0 < wait < float("inf"):
            raise ValueError(f"wait must be a positive number of seconds, got {wait!r}")
        self.path = os.fspath(path)
        self.wait = wait
        # With `watch`: the file's data_version and each workspace's
        # (version, updated_at) as last seen, for `changed()`.
        self._watch = watch
        self._data_version: int | None = None
        self._seen: dict[str, tuple[int, str]] = {}
        # isolation_level=None: we issue BEGIN ourselves, so a read-then-write
        # (the base check, then the insert) is one transaction.
        self._db = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=wait
        )
        self._lock = threading.RLock()
        self._closed = False
        try:
            if wal and self.path != ":memory:":
                self._switch_to_wal()
            # In WAL mode NORMAL syncs only at checkpoints, so a commit could
            # be lost on power failure after apply returned; FULL syncs the
            # WAL on every commit.
            self._db.execute("PRAGMA synchronous=FULL")
            self._prepare()
            if watch:
                self.changed()  # the baseline: what is there now is not news
        except BaseException:
            self._db.close()
            raise

    # -- opening -----------------------------------------------------------

    def _switch_to_wal(self) -> None:
        """Switch an old rollback-journal file to WAL.

        The switch needs an exclusive lock, and SQLite refuses at once rather
        than wait (a wait could deadlock) while another process that opened the
        same old file holds its lock; so wait here, for as long as the
        connection's own busy timeout.
        """
        deadline = time.monotonic() + self.wait
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def _prepare(self) -> None:
        """Create the schema, migrating a pre-0.3.2 file, in one transaction,
        so two processes opening one old file at once both see one result."""
        with self._write():
            kind = self._db.execute(
                "SELECT type FROM sqlite_master WHERE name = ?", (_LEGACY,)
            ).fetchone()
            for statement in _TABLES.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            for name in _OLD_INDEXES:
                self._db.execute(f"DROP INDEX IF EXISTS {name}")
            for statement in _KEYS_SCHEMA:
                self._db.execute(statement)
            if kind is not None and kind[0] == "table":
                self._migrate()
            # What other writers (or an older chapline) left unindexed.
            self._db.execute(_CATCH_UP_ALL)
            self._db.execute(_view_sql())

    def _migrate(self) -> None:
        """Move every readable row of the old one-table layout into the three
        tables; keep the old table (renamed) with every row, readable or not."""
        rows = self._db.execute(
            f"SELECT id, CAST(data AS BLOB), version, updated_at FROM {_LEGACY}"
        ).fetchall()
        migrated = 0
        for wid, text, version, updated_at in rows:
            try:
                data = decode_object(text, "its data")
                change = change_from_record(
                    WorkspaceRecord(wid, data, version, updated_at), SHARED_LAYOUT
                )
                encoded = encode_change(change)
            except (_Unreadable, MalformedChangeError) as exc:
                log.warning(
                    "workspace %r was not migrated from the pre-0.3.2 table: %s; "
                    "its row is kept unchanged in the renamed table",
                    wid,
                    exc,
                )
                continue
            # The log decides the version (the old column could disagree).
            self._write_change(wid, 0, change.version, change.updated_at, encoded, True)
            migrated += 1
        taken = {
            name for (name,) in self._db.execute("SELECT name FROM sqlite_master")
        }
        target, n = f"{_LEGACY}_v1", 1
        while target in taken:
            n += 1
            target = f"{_LEGACY}_v1_{n}"
        self._db.execute(f'ALTER TABLE {_LEGACY} RENAME TO "{target}"')
        self._db.execute("DROP INDEX IF EXISTS idx_chap_workspaces_updated_at")
        log.warning(
            "%s: migrated %d of %d workspaces from the pre-0.3.2 table; the old "
            "table is kept, with every row, as %s",
            self.path,
            migrated,
            len(rows),
            target,
        )

    # -- transactions ------------------------------------------------------

    def _write(self, workspace: str = "") -> _Transaction:
        return _Transaction(
            self._lock, self._db, self._check_open, "BEGIN IMMEDIATE", workspace, self.wait
        )

    def _read(self) -> _Transaction:
        return _Transaction(self._lock, self._db, self._check_open, "BEGIN", "", self.wait)

    @contextlib.contextmanager
    def write_turn(self, workspace: str) -> Iterator[None]:
        """The file's write lock (`BEGIN IMMEDIATE`, waiting at most `wait`),
        held until the block's first `apply` commits, or the block ends
        (SPECIFICATION.md, "Contract": `write_turn`). Threads sharing this
        instance wait for the block too."""
        with self._lock:
            self._check_open()
            _begin(self._db, "BEGIN IMMEDIATE", workspace, self.wait)
            try:
                yield
            finally:
                if self._db.in_transaction:  # the block wrote nothing
                    self._db.execute("ROLLBACK")

    # -- writing -----------------------------------------------------------

    def apply(self, change: StoreChange) -> None:
        encoded = encode_change(change)
        with self._write(change.id):
            self._apply_encoded(change, encoded)
        if self._watch:
            self._saw([change])

    def apply_many(self, changes: Iterable[StoreChange]) -> list[Exception | None]:
        """Apply several changes with one commit (one disk sync).

        Each change is still all-or-nothing on its own: a change that
        conflicts or is malformed is left out, and its error is returned in
        its place; the others are committed. The list holds None for every
        change that was applied.
        """
        changes = list(changes)
        results: list[Exception | None] = []
        encoded: list[EncodedChange | None] = []
        for change in changes:
            try:
                encoded.append(encode_change(change))
                results.append(None)
            except MalformedChangeError as exc:
                encoded.append(None)
                results.append(exc)
        with self._write(changes[0].id if changes else ""):
            for i, (change, enc) in enumerate(zip(changes, encoded, strict=True)):
                if enc is None:
                    continue
                self._db.execute("SAVEPOINT change")
                try:
                    self._apply_encoded(change, enc)
                except StoreError as exc:
                    results[i] = exc
                    self._db.execute("ROLLBACK TO change")
                self._db.execute("RELEASE change")
        if self._watch:
            self._saw([c for c, r in zip(changes, results, strict=True) if r is None])
        return results

    def _apply_encoded(self, change: StoreChange, encoded: EncodedChange) -> None:
        keyed = None
        if not change.replace:
            top, keyed = self._db.execute(_TOPS, (change.id, change.id)).fetchone()
            held = 0 if top is None else top + 1
            if encoded.create and self._db.execute(
                "SELECT 1 FROM chap_meta WHERE workspace = ?", (change.id,)
            ).fetchone():
                raise WorkspaceExistsError(change.id, held, change.base)
            if held != change.base:
                raise StoreConflictError(change.id, held, change.base)
        base = 0 if change.replace else change.base
        self._write_change(
            change.id, base, change.version, change.updated_at, encoded, change.replace, keyed
        )

    def _write_change(
        self,
        wid: str,
        base: int,
        version: int,
        updated_at: str,
        encoded: EncodedChange,
        replace: bool,
        keyed: int | None = None,
    ) -> None:
        """Write one change; `keyed` is the workspace's last keyed seq (-1:
        none) when already read in this transaction, else None."""
        db = self._db
        if replace:
            for table in ("chap_entries", "chap_objects", "chap_meta"):
                db.execute(f"DELETE FROM {table} WHERE workspace = ?", (wid,))
        db.execute(
            "INSERT INTO chap_meta (workspace, data, version, updated_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (workspace) DO UPDATE SET "
            "data = excluded.data, version = excluded.version, "
            "updated_at = excluded.updated_at",
            (wid, encoded.meta.decode(), version, updated_at),
        )
        if encoded.entries:
            db.executemany(
                "INSERT INTO chap_entries (workspace, seq, data) VALUES (?, ?, ?)",
                [(wid, base + i, text.decode()) for i, text in enumerate(encoded.entries)],
            )
            if keyed is None:
                (keyed,) = db.execute(_KEYED, (wid,)).fetchone()
            if base + len(encoded.entries) - 1 - keyed >= KEYS_LAG:
                db.execute(_CATCH_UP, (wid, keyed))
        gone = [(wid, c, k) for c, k, text in encoded.objects if text is None]
        kept = [(wid, c, k, text.decode()) for c, k, text in encoded.objects if text is not None]
        if gone:
            db.executemany(
                "DELETE FROM chap_objects WHERE workspace = ? AND collection = ? AND id = ?",
                gone,
            )
        if kept:
            db.executemany(
                "INSERT INTO chap_objects (workspace, collection, id, data) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (workspace, collection, id) "
                "DO UPDATE SET data = excluded.data",
                kept,
            )

    def delete(self, workspace: str) -> None:
        with self._write(workspace):
            for table in ("chap_entries", "chap_objects", "chap_meta"):
                self._db.execute(f"DELETE FROM {table} WHERE workspace = ?", (workspace,))
        self._seen.pop(workspace, None)

    # -- other writers -------------------------------------------------------

    def changed(self) -> set[str] | None:
        """The workspaces other connections changed since the last call
        (always empty without `watch`).

        `PRAGMA data_version` moves only when another connection commits, so
        the common case costs one pragma; when it moved, the meta rows are
        compared with what was last seen (our own writes are noted as we
        make them)."""
        if not self._watch:
            return set()
        with self._lock:
            self._check_open()
            (version,) = self._db.execute("PRAGMA data_version").fetchone()
            if version == self._data_version:
                return set()
            self._data_version = version
            rows = self._db.execute("SELECT workspace, version, updated_at FROM chap_meta").fetchall()
            seen = {wid: (held, updated_at) for wid, held, updated_at in rows}
            changed = {wid for wid, state in seen.items() if self._seen.get(wid) != state}
            changed |= self._seen.keys() - seen.keys()
            self._seen = seen
        return changed

    def _saw(self, changes: list[StoreChange]) -> None:
        """Note our own committed writes, so `changed()` does not report them."""
        with self._lock:
            for change in changes:
                self._seen[change.id] = (change.version, change.updated_at)

    # -- reading -----------------------------------------------------------

    def workspace_ids(self) -> list[str]:
        with self._read():
            rows = self._db.execute(_rows.WORKSPACE_IDS).fetchall()
        return [wid for (wid,) in rows]

    def load_held(self, workspace: str | None = None) -> list[HeldWorkspace]:
        return [held for held, _ in self._load(workspace, entries=False)]

    def load(self, *, entries: bool = True, workspace: str | None = None) -> list[WorkspaceRecord]:
        return _rows.records(self._load(workspace, entries), log, self.path)

    def _load(
        self, workspace: str | None, entries: bool
    ) -> list[tuple[HeldWorkspace, list[dict[str, Any]] | None]]:
        """Each readable workspace, read in one read transaction and decoded
        after it."""
        metas, objects, log_ = _rows.load_queries(_DIALECT, workspace, entries)
        with self._read():
            loaded = _rows.Loaded.gather(
                entries,
                self._db.execute(*metas),
                self._db.execute(*objects),
                self._db.execute(*log_),
            )
        return loaded.held(log, self.path)

    def read_entries(
        self,
        workspace: str,
        start: int = 0,
        stop: int | None = None,
        where: EntryFilter | None = None,
    ) -> list[dict[str, Any]]:
        sql, args = _rows.entries_query(_DIALECT, f"seq, {_DIALECT.data}", workspace, start, stop, where)
        with self._lock:
            self._check_open()
            rows = self._db.execute(sql, args).fetchall()
        return _rows.matching_entries(rows, workspace, where, self.path)

    def read_entry_texts(self, workspace: str, start: int = 0, stop: int | None = None) -> list[bytes]:
        """The stored JSON text of entries `start <= seq < stop`, by seq, undecoded."""
        sql, args = _rows.entries_query(_DIALECT, _DIALECT.data, workspace, start, stop)
        with self._lock:
            self._check_open()
            rows = self._db.execute(sql, args).fetchall()
        return [text for (text,) in rows]

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailableError(
                self.path,
                f"the SqliteStore on {self.path} is closed; open a new SqliteStore to use the file"
            )


def _begin(db: sqlite3.Connection, begin: str, workspace: str, wait: float) -> None:
    """Start a transaction; a write lock for `workspace` not had within the
    connection's busy timeout (`wait`) is WriteTurnTimeoutError."""
    try:
        db.execute(begin)
    except sqlite3.OperationalError as exc:
        busy = exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
        if not busy or not workspace:  # opening the file: "database is locked" says it
            raise
        raise WriteTurnTimeoutError(workspace, wait) from None


class _Transaction:
    """`with` block around one explicit transaction on the store's connection
    `db`, holding the store's `lock` so threads sharing the instance take
    turns; `check_open` refuses a closed store once the lock is held. Inside
    a write turn (a transaction already open on `db`, which only
    `write_turn` leaves open) it joins that transaction: a read leaves it
    open, a write commits it, ending the turn."""

    __slots__ = ("_lock", "_db", "_check_open", "_begin", "_workspace", "_wait", "_joined")

    def __init__(
        self,
        lock: threading.RLock,
        db: sqlite3.Connection,
        check_open: Callable[[], None],
        begin: str,
        workspace: str,
        wait: float,
    ) -> None:
        self._lock = lock
        self._db = db
        self._check_open = check_open
        self._begin = begin
        self._workspace = workspace
        self._wait = wait
        self._joined = False

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            self._check_open()
            self._joined = self._db.in_transaction
            if not self._joined:
                _begin(self._db, self._begin, self._workspace, self._wait)
        except BaseException:
            self._lock.release()
            raise

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        db = self._db
        try:
            if self._joined and self._begin == "BEGIN":
                return  # a read inside a write turn: the turn goes on
            if kind is None:
                try:
                    db.execute("COMMIT")
                except BaseException:
                    # A failed COMMIT (disk full, I/O error) can leave the
                    # transaction open; end it so the next one can begin.
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            elif db.in_transaction:
                db.execute("ROLLBACK")
        finally:
            self._lock.release()
