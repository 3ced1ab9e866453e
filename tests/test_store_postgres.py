"""PostgresStore beyond the shared contract: reconnection after a broken
connection and after a server restart, messages that name no credentials or
paths, the schema created once by concurrent openers, and filtered reads
answered from the indexes at 100k entries, damaged rows; databases in other
encodings (SQL_ASCII, as a plain `initdb --locale=C` makes, holds the log;
LATIN1 is refused at open), and what a wrong database or role is told."""

from __future__ import annotations

import itertools
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from client import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pgserver import PgServer, PgServerError
from support import ALICE, BOT, eventually, make, s0
from test_store_contract import PostgresFactory

from storage import EntryFilter, PostgresStore, StoreChange, StoreError
from storage.contract import StoreContract, change, entry
from storage.postgres import entries_query

SECRET = "s3cret-pw"


@pytest.fixture
def own_server() -> Iterator[PgServer]:
    """A server of the test's own, which it may stop and start."""
    server = PgServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


def _no_secrets(text: str, server: PgServer) -> None:
    assert SECRET not in text and server.socket_dir not in text
    assert str(server.port) not in text and "postgres@" not in text


def test_a_broken_connection_is_replaced_without_an_error(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    try:
        store.apply(change("w", 0, 2))
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND datname = current_database()"
            )
        # the read finds its connection dead and runs again on a new one
        assert [e["seq"] for e in store.read_entries("w")] == [0, 1]
        store.apply(change("w", 2, 1))
        assert store.load()[0].version == 3
    finally:
        store.close()


def test_a_first_start_moves_off_a_port_taken_since_it_was_picked() -> None:
    """Parallel test workers pick free ports at about the same time: a
    server whose port another process took before it started listens on
    another, and a restart keeps the port its clients know."""
    server = PgServer()
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", server.port))
            taken.listen()
            server.start()
            assert server.port != taken.getsockname()[1]
        with psycopg.connect(server.uri(), connect_timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        port = server.port
        server.stop()
        with socket.socket() as taken:
            # The connection the server closed leaves the port in TIME_WAIT,
            # which refuses a plain bind; SO_REUSEADDR still refuses one while
            # anything listens there, so the port is free of the server.
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            taken.bind(("127.0.0.1", port))
            taken.listen()
            with pytest.raises(PgServerError, match="Address already in use"):
                server.start()
        assert server.port == port
    finally:
        server.remove()


def test_server_restart_fails_calls_during_the_outage_then_recovers(own_server: PgServer) -> None:
    dsn = own_server.dsn(password=SECRET)
    coord = make(PostgresStore(dsn))
    c = Client(coord)
    T = s0(c)
    acknowledged = [c.ok("task.update", frm=BOT, task_id=T, state="in_progress")]
    own_server.stop("immediate")
    for method, params in [
        ("task.create", {"from": ALICE, "assignee": BOT, "kind": "k", "input": {}}),
        ("audit.read", {}),  # the log is read from the store
    ]:
        err = c.fail(-32900, method, **params)
        _no_secrets(json.dumps(err), own_server)
        assert "retry" in err["message"] and "log_id" in err["data"]
    # what memory holds is still answered
    assert c.describe()["audit_count"] == 5
    with pytest.raises(StoreError) as caught:
        PostgresStore(dsn)
    _no_secrets(str(caught.value), own_server)
    own_server.start()
    # the same coordinator, not restarted, carries on
    created = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={})
    acknowledged.append(created)
    assert c.ok("audit.verify_chain")["status"] == "verified"
    log = c.log()
    assert [e["envelope"]["method"] for e in log[-2:]] == ["task.update", "task.create"]
    fresh = Client(make(PostgresStore(dsn)))
    assert fresh.describe()["audit_count"] == len(log)
    coord.close()


def test_nothing_unacknowledged_is_claimed_and_nothing_acknowledged_lost(own_server: PgServer) -> None:
    """Stop the server while a thread writes as fast as it can: every call
    answered with a result is in the log afterwards, and the chain verifies."""
    dsn = own_server.dsn()
    coord = make(PostgresStore(dsn))
    c = Client(coord)
    s0(c)
    answered: list[dict[str, Any]] = []
    stop = threading.Event()

    def write() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            env = c.envelope("task.create", frm=ALICE, assignee=BOT, kind="k", input={"n": n})
            answered.append({"n": n, "response": coord.dispatch(env)})

    writer = threading.Thread(target=write)
    writer.start()
    try:
        eventually(lambda: len(answered) >= 20, "20 answers before the stop")
        own_server.stop("immediate")
        failed_before = len(answered)
        eventually(lambda: len(answered) >= failed_before + 5, "5 answers while the server is down")
        own_server.start()
        eventually(lambda: any("result" in a["response"] for a in answered[failed_before + 5:]),
                   "a result once the server is back")
    finally:
        stop.set()
        writer.join()
    codes = {a["response"]["error"]["code"] for a in answered if "error" in a["response"]}
    assert codes and codes <= {-32900, -32901}, codes
    ok = [a["n"] for a in answered if "result" in a["response"]]
    fresh = Client(make(PostgresStore(dsn)))
    logged = [e["envelope"]["params"]["input"]["n"] for e in fresh.log()
              if "n" in e.get("envelope", {}).get("params", {}).get("input", {})]
    assert set(ok) <= set(logged)
    assert len(logged) == len(set(logged))  # nothing recorded twice
    assert fresh.ok("audit.verify_chain")["status"] == "verified"
    coord.close()


def test_concurrent_first_opens_create_the_schema_once(pg_dsn: str) -> None:
    stores: list[PostgresStore] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_one() -> None:
        barrier.wait()
        try:
            stores.append(PostgresStore(pg_dsn))
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stores[0].apply(change("w", 0, 1))
    assert [s.load()[0].version for s in stores] == [1, 1, 1, 1]
    for s in stores:
        s.close()


def test_filtered_reads_use_the_indexes_at_100k_entries(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    try:
        store.apply(StoreChange("w", 0, 1, "t", {"id": "w"}, [entry(0, task="T0")]))
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            # 100k entries over 1000 tasks, written server-side (fast)
            conn.execute(
                "INSERT INTO chap_entries (workspace, seq, data) "
                "SELECT 'w', g, json_build_object('seq', g, 'arrived', 't', 'envelope', "
                "json_build_object('method', 'task.update', 'params', "
                "json_build_object('from', 'agent:b' || (g % 7), 'task_id', 'T' || (g % 1000))))::text "
                "FROM generate_series(1, 100000) AS g"
            )
            conn.execute("ANALYZE chap_entries")
            for where in (EntryFilter(task_id="T5"), EntryFilter(sender="agent:b3", outcome="refused"),
                          EntryFilter(method="task.create")):
                sql, args = entries_query("w", 0, None, where)
                (plan,) = conn.execute("EXPLAIN (FORMAT JSON) " + sql, args).fetchone()
                text = json.dumps(plan)
                assert "Seq Scan" not in text, text
                assert "chapline_entries_" in text, text
        got = store.read_entries("w", where=EntryFilter(task_id="T5"))
        assert [e["seq"] for e in got] == list(range(5, 100001, 1000))
    finally:
        store.close()


def test_damaged_workspaces_in_postgresql_are_skipped_whole(pg_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """The damage tests/test_store_sqlite.py makes, made here: skipped the same
    way, since both stores decode their rows in storage/_rows.py."""
    store = PostgresStore(pg_dsn)
    try:
        for wid in ("bad_entry", "gap", "bad_meta", "bad_object", "good"):
            store.apply(change(wid, 0, 3, {"tasks": {"T1": {"id": "T1"}}}))
        with psycopg.connect(pg_dsn, autocommit=True) as db:
            # The filter indexes parse every entry as jsonb; without them a
            # row that is not JSON can be written, as another writer might.
            for name in ("method", "sender", "task_id", "outcome"):
                db.execute(f"DROP INDEX chapline_entries_{name}")
            db.execute("UPDATE chap_entries SET data = '{broken' WHERE workspace = 'bad_entry' AND seq = 1")
            db.execute("DELETE FROM chap_entries WHERE workspace = 'gap' AND seq = 1")
            db.execute("UPDATE chap_meta SET data = '[1]' WHERE workspace = 'bad_meta'")
            db.execute("UPDATE chap_objects SET data = 'nope' WHERE workspace = 'bad_object'")
        with caplog.at_level(logging.WARNING, logger="storage"):
            loaded = store.load()
        assert [r.id for r in loaded] == ["good"]
        assert loaded[0].data["audit"] == [entry(0), entry(1), entry(2)]
        warned = {r.args[0]: r.getMessage() for r in caplog.records if r.name == "storage.postgres"}
        assert set(warned) == {"bad_entry", "gap", "bad_meta", "bad_object"}
        assert "seq 1" in warned["bad_entry"] and "seq 1 is missing" in warned["gap"]
        assert "meta" in warned["bad_meta"] and "tasks/T1" in warned["bad_object"]
        assert all("skipped while loading: " in message for message in warned.values())

        assert [r.id for r in store.load(entries=False)] == ["bad_entry", "good"]
        assert [h.id for h in store.load_held()] == ["bad_entry", "bad_object", "good"]
        with pytest.raises(StoreError, match=r"^workspace 'bad_entry': the entry at seq 1 is not valid JSON"):
            store.read_entries("bad_entry")
        assert store.read_entries("bad_entry", 2) == [entry(2)]
    finally:
        store.close()


# -- encodings ---------------------------------------------------------------

_schemas = itertools.count()


def _schema_maker(server: PgServer, dbname: str) -> Callable[[], str]:
    """Each call makes an empty schema in `dbname`; returns its DSN."""

    def new() -> str:
        name = f"e{next(_schemas)}"
        with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return server.dsn(dbname, options=f"-c search_path={name}")

    return new


@pytest.fixture(scope="module")
def sql_ascii(pg_server: PgServer) -> str:
    """A database in the encoding a plain `initdb --locale=C` gives: SQL_ASCII."""
    return pg_server.new_database("SQL_ASCII")


@pytest.fixture(scope="module", params=["UTF8", "SQL_ASCII"])
def new_schema(request: pytest.FixtureRequest, pg_server: PgServer) -> Callable[[], str]:
    """Empty schemas in the server's UTF8 database, then in a SQL_ASCII one."""
    dbname = "postgres" if request.param == "UTF8" else request.getfixturevalue("sql_ascii")
    return _schema_maker(pg_server, dbname)


class TestContractOnSqlAscii(StoreContract):
    """The whole store contract once more, in a SQL_ASCII database."""

    @pytest.fixture
    def factory(self, pg_server: PgServer, sql_ascii: str) -> PostgresFactory:
        return PostgresFactory(_schema_maker(pg_server, sql_ascii))


# Any Unicode text but NUL, which PostgreSQL's text cannot hold (and
# surrogates, which UTF-8 cannot).
_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=5)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    wid=_TEXT,
    words=st.lists(_TEXT, min_size=4, max_size=4),
    calls=st.lists(st.tuples(_TEXT, _TEXT, _TEXT, st.booleans()), min_size=1, max_size=4),
)
def test_any_unicode_text_round_trips_and_filters(
    new_schema: Callable[[], str], wid: str, words: list[str], calls: list[tuple[str, str, str, bool]]
) -> None:
    """What is written is what is read back, byte for byte, and a filtered
    read finds exactly the entries whose field equals the value (computed
    here from the calls, not by the store's matcher)."""
    entries = [entry(i, method, task, refused, sender) for i, (method, sender, task, refused) in enumerate(calls)]
    meta = {"id": wid, "name": words[0]}
    objects = {"tasks": {words[1]: {"id": words[1], "title": words[2]}}}
    store = PostgresStore(new_schema())
    try:
        store.apply(StoreChange(wid, 0, len(entries), words[3], meta, entries, objects))
        assert store.workspace_ids() == [wid]
        (record,) = store.load()
        assert (record.id, record.version, record.updated_at) == (wid, len(entries), words[3])
        assert record.data["name"] == words[0] and record.data["audit"] == entries
        assert record.data["tasks"] == objects["tasks"]
        assert [json.loads(t) for t in store.read_entry_texts(wid)] == entries
        for field, position in (("method", 0), ("sender", 1), ("task_id", 2)):
            value = calls[-1][position]
            expected = [e for e, call in zip(entries, calls, strict=True) if call[position] == value]
            assert store.read_entries(wid, where=EntryFilter(**{field: value})) == expected
        refused = [e for e, call in zip(entries, calls, strict=True) if call[3]]
        assert store.read_entries(wid, where=EntryFilter(outcome="refused")) == refused
    finally:
        store.close()


@pytest.mark.parametrize("encoding", ["LATIN1", "EUC_JP"])
def test_a_database_that_cannot_hold_the_log_is_refused_at_open(pg_server: PgServer, encoding: str) -> None:
    """LATIN1 cannot hold "☕" and EUC_JP cannot hold "é": either would refuse
    (or, converting, alter) some call later. Refused at open, naming the
    encoding and the fix, and nothing is created in it."""
    dbname = pg_server.new_database(encoding)
    with pytest.raises(StoreError) as caught:
        PostgresStore(pg_server.dsn(dbname))
    message = str(caught.value)
    assert f"encoding is {encoding}" in message, message
    assert "ENCODING 'UTF8'" in message and "chapline copy" in message, message
    with psycopg.connect(pg_server.dsn(dbname)) as conn:
        assert conn.execute("SELECT to_regclass('chap_entries')").fetchone() == (None,)


def test_a_wrong_database_or_role_is_reported_in_the_servers_words(pg_server: PgServer) -> None:
    for dsn, said in [
        (pg_server.dsn("no_such_db"), 'database "no_such_db" does not exist'),
        (pg_server.uri("postgres", user="no_such_role"), 'role "no_such_role" does not exist'),
    ]:
        with pytest.raises(StoreError) as caught:
            PostgresStore(dsn)
        message = str(caught.value)
        assert f"the PostgreSQL server refused the connection: {said}" in message, message
        assert "cannot be reached" not in message
        assert pg_server.socket_dir not in message and str(pg_server.port) not in message


def test_a_malformed_connection_string_is_a_store_error_that_repeats_nothing(pg_server: PgServer) -> None:
    for dsn in ("postgresql://u:s3cret@[::1/db", "host=x s3cret"):
        with pytest.raises(StoreError) as caught:
            PostgresStore(dsn)
        message = str(caught.value)
        assert "s3cret" not in message and "not a valid PostgreSQL connection string" in message, message


def test_a_row_that_is_not_utf8_in_a_sql_ascii_database_is_damage(
    pg_server: PgServer, sql_ascii: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SQL_ASCII checks nothing, so another writer can store bytes that are
    not UTF-8: that workspace is skipped as any damaged one, the others load."""
    dsn = _schema_maker(pg_server, sql_ascii)()
    store = PostgresStore(dsn)
    try:
        for wid in ("bad", "good"):
            store.apply(change(wid, 0, 2))
        with psycopg.connect(dsn, autocommit=True, client_encoding="SQL_ASCII") as raw:
            raw.execute("UPDATE chap_entries SET data = convert_from('\\x7b22223a22ff227d'::bytea, 'SQL_ASCII') "
                        "WHERE workspace = 'bad' AND seq = 1")
        with caplog.at_level(logging.WARNING, logger="storage"):
            assert [r.id for r in store.load()] == ["good"]
        assert any("'bad' skipped while loading" in r.getMessage() for r in caplog.records)
        with pytest.raises(StoreError, match=r"^workspace 'bad': the entry at seq 1 is not valid JSON"):
            store.read_entries("bad")
        assert store.read_entries("bad", 0, 1) == [entry(0)]
    finally:
        store.close()


def test_a_watching_store_hears_of_a_non_ascii_workspace_in_sql_ascii(
    pg_server: PgServer, sql_ascii: str
) -> None:
    dsn = _schema_maker(pg_server, sql_ascii)()
    watching, writer = PostgresStore(dsn, watch=True), PostgresStore(dsn)
    try:
        writer.apply(change("wsp_☕", 0, 1))
        def heard() -> set[str]:
            got = watching.changed()
            assert got is not None  # the listening connection was never lost
            return got

        assert eventually(heard, "the notification") == {"wsp_☕"}
    finally:
        watching.close()
        writer.close()
