"""Ready to shard (SPECIFICATION.md, "Distributed PostgreSQL (Citus)"): the
store tables' keys and every statement the stores issue are per workspace,
so a database that distributes the three tables by workspace id routes each
statement to one node.

Checked on SQLite and on PostgreSQL: every primary key, unique index and
index of the three tables begins with `workspace`; and, while a coordinator
runs a workload on two workspaces (calls, a batch over both, a lost race and
its write turn, a restore, a sweep, a delete), every statement that reads or
writes a store table names exactly one workspace, or is one of the
catalogue reads the specification lists, which read every workspace:
`workspace_ids()`, `load()`/`load_held()` without a workspace (a
coordinator's start), and SqliteStore's `changed()`. Statements are
captured from the database's side: SQLite's trace callback (the SQL with
its parameters expanded) and PostgreSQL's statement log (`log_statement =
all`, parameters in the DETAIL lines)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support import ALICE, BOT, eventually
from test_multiprocess import _call, _task

from coordinator import Coordinator
from storage import SqliteStore, Store
from storage.postgres import PostgresStore

TABLES = ("chap_meta", "chap_entries", "chap_objects")
ALPHA, BETA = "wsp_alpha", "wsp_beta"
_TABLE = re.compile(r"\b(?:chap_meta|chap_entries|chap_objects|chapline_entry_keys)\b")
# What names no table: transaction control, session settings (psycopg drops
# its prepared statements after a rollback), notification.
_CONTROL = re.compile(
    r"^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|PRAGMA|SET|LISTEN|DEALLOCATE|"
    r"SELECT set_config\(|SELECT pg_notify\(|SELECT pg_advisory_xact_lock\()",
    re.IGNORECASE,
)
# Schema work when a store opens: creating what is missing, SQLite's look for
# the pre-0.3.2 table.
_SCHEMA = re.compile(r"^\s*(CREATE|ALTER|DROP)\b|^SELECT type FROM sqlite_master ", re.IGNORECASE)


# -- keys -------------------------------------------------------------------


def test_every_key_and_index_of_the_sqlite_tables_begins_with_the_workspace(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "s.db").close()
    db = sqlite3.connect(tmp_path / "s.db")
    try:
        for table in (*TABLES, "chapline_entry_keys"):
            pk = [name for _, name, *_, at in sorted(
                db.execute(f"PRAGMA table_info({table})"), key=lambda c: c[-1]) if at]
            assert pk[0] == "workspace", (table, pk)
            indexes = db.execute(f"PRAGMA index_list({table})").fetchall()
            assert any(unique for _, _, unique, *_ in indexes), table  # the key has its index
            for _, name, _, _, _ in indexes:
                columns = db.execute(f"PRAGMA index_xinfo({name})").fetchall()
                assert columns[0][2] == "workspace", (table, name, columns)
    finally:
        db.close()


def test_every_key_and_index_of_the_postgres_tables_begins_with_the_workspace(pg_server: Any) -> None:
    uri = pg_server.uri(pg_server.new_database())
    PostgresStore(uri).close()
    with psycopg.connect(uri, autocommit=True) as conn:
        constraints = conn.execute(
            "SELECT c.conrelid::regclass::text, c.conname, c.contype, a.attname "
            "FROM pg_constraint c JOIN pg_attribute a "
            "ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] "
            "WHERE c.contype IN ('p', 'u') AND c.conrelid::regclass::text = ANY(%s)",
            (list(TABLES),),
        ).fetchall()
        indexes = conn.execute(
            "SELECT i.indrelid::regclass::text, i.indexrelid::regclass::text, i.indisunique, "
            "a.attname FROM pg_index i LEFT JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
            "WHERE i.indrelid::regclass::text = ANY(%s)",
            (list(TABLES),),
        ).fetchall()
    assert sorted(table for table, _, kind, _ in constraints if kind == "p") == sorted(TABLES)
    assert [c for c in constraints if c[3] != "workspace"] == []
    assert {table for table, _, unique, _ in indexes if unique} == set(TABLES)
    assert [i for i in indexes if i[3] != "workspace"] == []


# -- statements ---------------------------------------------------------------


def _workload(open_store: Callable[[], Store]) -> None:
    """A coordinator's life on two workspaces, touching every store path."""
    coord = Coordinator(open_store())
    rival = Coordinator(open_store())
    try:
        for ws in (ALPHA, BETA):
            for envelope in (
                _call(ws, "c", "workspace.create"),
                _call(ws, "a", "participant.join", **{"from": ALICE}, type="human", role="admin"),
                _call(ws, "b", "participant.join", **{"from": BOT}, type="agent", role="drafter"),
                _task(ws, f"{ws}-t1"),
            ):
                assert "result" in coord.dispatch(envelope), envelope
        with coord.batch():  # one apply_many over both
            for ws in (ALPHA, BETA):
                assert "result" in coord.dispatch(_task(ws, f"{ws}-batched"))
        assert "result" in rival.dispatch(_task(ALPHA, "rival"))
        assert "result" in coord.dispatch(_task(ALPHA, "after-rival"))  # may lose, then its turn
        with coord.store.write_turn(ALPHA):
            coord.store.load_held(ALPHA)
        for ws in (ALPHA, BETA):
            reads = (
                _call(ws, "r", "audit.read", **{"from": ALICE}, filter={"method": "task.create"}),
                _call(ws, "v", "audit.verify_chain"),
                _call(ws, "d", "workspace.describe"),
            )
            for envelope in reads:
                assert "result" in coord.dispatch(envelope), envelope
        coord.restore(coord.snapshot(BETA), overwrite=True)  # a replace
        coord.sweep()
        coord.store.read_entry_texts(ALPHA, 0, 3)
        coord.store.delete(BETA)
    finally:
        rival.close()
        coord.close()


def _catalogue(open_store: Callable[[], Store]) -> None:
    """The catalogue reads, each of every workspace at once."""
    store = open_store()
    other = open_store()
    try:
        store.workspace_ids()
        store.load_held()
        store.load()  # type: ignore[attr-defined]  (every chapline store has it)
        other.apply(_touch(other))
        changed = getattr(store, "changed", None)
        if changed is not None:
            changed()
    finally:
        other.close()
        store.close()


def _touch(store: Store) -> Any:
    """A change that rewrites a held workspace's meta as it is (so that a
    watching store has something to notice)."""
    from storage import StoreChange

    (held,) = store.load_held(ALPHA)
    return StoreChange(ALPHA, held.version, held.version, held.updated_at, held.meta)


def _check(statements: list[tuple[str, list[str]]], catalogue: set[str]) -> None:
    """Each statement: (SQL, its parameter values as text)."""
    touched = 0
    for sql, params in statements:
        if _SCHEMA.match(sql):
            continue
        if not _TABLE.search(sql):
            assert _CONTROL.match(sql), f"a statement naming no store table: {sql!r}"
            continue
        if sql in catalogue:
            continue
        named = {ws for ws in (ALPHA, BETA) if any(f"'{ws}'" in text or text == ws
                                                    for text in [sql, *params])}
        assert len(named) == 1, f"names {sorted(named) or 'no workspace'}: {sql!r} {params!r}"
        assert "workspace" in sql, sql
        touched += 1
    assert touched > 20  # the workload reached the tables


@pytest.fixture
def sqlite_statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, list[str]]]]:
    """Every statement of every SQLite connection made meanwhile."""
    statements: list[tuple[str, list[str]]] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(lambda sql: statements.append((sql, [])))
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    yield statements


def test_every_sqlite_statement_names_one_workspace_or_is_a_catalogue_read(
    tmp_path: Path, sqlite_statements: list[tuple[str, list[str]]]
) -> None:
    path = tmp_path / "s.db"

    def open_store() -> Store:
        return SqliteStore(path, watch=True)

    _workload(open_store)
    worked = list(sqlite_statements)
    sqlite_statements.clear()
    _catalogue(open_store)
    catalogue = {
        sql for sql, _ in sqlite_statements
        if _TABLE.search(sql) and ALPHA not in sql and not _SCHEMA.match(sql)
    }
    assert any("UNION" in sql for sql in catalogue), catalogue  # workspace_ids() was seen
    _check(worked, catalogue)


# PostgreSQL's log: "<time> <zone> [pid] LOG:  execute <name>: SQL" (or
# "statement: SQL"), continued on tab-indented lines, then for an execute
# with parameters "... DETAIL:  parameters: $1 = 'text', $2 = NULL".
_LOG_LINE = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] ([A-Z]+):  (.*)$")
_STATEMENT = re.compile(r"^(?:statement|execute [^:]+): (.*)$", re.DOTALL)
_PARAM = re.compile(r"\$\d+ = (?:'((?:[^']|'')*)'|NULL)")


def _logged(text: str) -> list[tuple[str, list[str]]]:
    records: list[tuple[str, str, str]] = []
    for line in text.splitlines():
        found = _LOG_LINE.match(line)
        if found:
            records.append((found.group(1), found.group(2), found.group(3)))
        elif records and line.startswith("\t"):
            pid, kind, body = records[-1]
            records[-1] = (pid, kind, body + "\n" + line[1:])
    statements: list[tuple[str, list[str]]] = []
    last: dict[str, int] = {}  # pid -> its last statement's index
    for pid, kind, body in records:
        if kind == "LOG" and (found := _STATEMENT.match(body)):
            last[pid] = len(statements)
            statements.append((found.group(1), []))
        elif kind == "DETAIL" and body.startswith("parameters: ") and pid in last:
            values = [(v or "").replace("''", "'") for v in _PARAM.findall(body)]
            statements[last[pid]][1].extend(values)
    return statements


def test_every_postgres_statement_names_one_workspace_or_is_a_catalogue_read(pg_server: Any) -> None:
    name = pg_server.new_database()
    uri = pg_server.uri(name)
    PostgresStore(uri).close()  # the schema, before the log starts
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET log_statement = \'all\'')
    log = pg_server.dir / "server.log"

    def logged_since(start: int, marker: str) -> list[tuple[str, list[str]]]:
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute(f"SELECT '{marker}'")
        text = eventually(
            lambda: (t := log.read_bytes()[start:].decode(errors="replace")) and marker in t and t,
            "the statement log",
        )
        return [s for s in _logged(text) if marker not in s[0]]

    def open_store() -> Store:
        return PostgresStore(uri, watch=True)

    start = log.stat().st_size
    _workload(open_store)
    worked = logged_since(start, "chapline-workload-end")
    start = log.stat().st_size
    _catalogue(open_store)
    catalogue = {
        sql for sql, params in logged_since(start, "chapline-catalogue-end")
        if _TABLE.search(sql) and not params and not _SCHEMA.match(sql)
    }
    assert any("UNION" in sql for sql in catalogue), catalogue  # workspace_ids() was seen
    _check(worked, catalogue)
