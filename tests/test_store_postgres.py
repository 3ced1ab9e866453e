"""PostgresStore beyond the shared contract: reconnection after a broken
connection and after a server restart, messages that name no credentials or
paths, the schema created once by concurrent openers, and filtered reads
answered from the indexes at 100k entries, damaged rows."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from client import Client
from pgserver import PgServer
from support import ALICE, BOT, make, s0

from storage import EntryFilter, PostgresStore, StoreChange, StoreError
from storage.contract import change, entry
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


def test_server_restart_fails_calls_during_the_outage_then_recovers(own_server: PgServer) -> None:
    dsn = own_server.dsn(password=SECRET)
    coord = make(PostgresStore(dsn))
    c = Client(coord)
    T = s0(c)
    acknowledged = [c.ok("task.update", **{"from": BOT}, task_id=T, state="in_progress")]
    own_server.stop("immediate")
    for method, params in [
        ("task.create", {"from": ALICE, "assignee": BOT, "kind": "k", "input": {}}),
        ("audit.read", {}),  # the log is read from the store
    ]:
        err = c.err(method, **params)
        assert err["code"] == -32900, err
        _no_secrets(json.dumps(err), own_server)
        assert "retry" in err["message"] and "log_id" in err["data"]
    # what memory holds is still answered
    assert c.describe()["audit_count"] == 5
    with pytest.raises(StoreError) as caught:
        PostgresStore(dsn)
    _no_secrets(str(caught.value), own_server)
    own_server.start()
    # the same coordinator, not restarted, carries on
    created = c.ok("task.create", **{"from": ALICE}, assignee=BOT, kind="k", input={})
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
            env = c.envelope("task.create", **{"from": ALICE}, assignee=BOT, kind="k", input={"n": n})
            answered.append({"n": n, "response": coord.dispatch(env)})

    writer = threading.Thread(target=write)
    writer.start()
    try:
        while len(answered) < 20:
            threading.Event().wait(0.01)
        own_server.stop("immediate")
        failed_before = len(answered)
        while len(answered) < failed_before + 5:
            threading.Event().wait(0.01)
        own_server.start()
        while not any("result" in a["response"] for a in answered[failed_before + 5:]):
            threading.Event().wait(0.01)
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


def test_damaged_workspaces_are_skipped_whole(pg_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
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
