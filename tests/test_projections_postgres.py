"""The analytics projection on a real PostgreSQL server (SPECIFICATION.md,
"The analytics projection"): the same tables as on SQLite, equal to a fold
of the log and the objects and to chap-analytics' figures; restarts and
SIGKILLs with nothing missed or counted twice; several writers feeding one
projection; `chapline serve --projection analytics=postgresql://...`.

The projections live in schemas of one database (the URI sets search_path),
or in the database a PostgresStore writes, as the test says."""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chap_analytics
import httpx
import psycopg
import pytest
from client import Http, env
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pgserver import PgServer
from servers import Serve
from test_projections import (
    _WORKER,
    OPS,
    ROOT,
    TWICE_ESCALATED,
    assert_matches_chap_analytics,
    fold,
    kill_after_some_calls,
    make,
    tables,
)

from coordinator import Change, Coordinator, CounterIds, StepClock
from coordinator.projections import AnalyticsProjection, ProjectionError
from storage import MemoryStore
from storage.postgres import PostgresStore
from tests import projection_workload as wl


@pytest.fixture(scope="module")
def database(pg_server: PgServer) -> str:
    """A database of this module's own, by URI over TCP."""
    return pg_server.uri(pg_server.new_database())


@pytest.fixture(scope="module")
def new_target(database: str) -> Callable[[], str]:
    """Makes empty schemas: each call returns a postgresql:// URI whose
    search_path is a new one, so each projection has tables of its own."""
    counter = itertools.count()

    def new() -> str:
        name = f"a{next(counter)}"
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{database}?options=-csearch_path%3D{name}"

    return new


@pytest.fixture
def fresh_database(pg_server: PgServer) -> str:
    """An empty database for a store and a projection to share."""
    return pg_server.uri(pg_server.new_database())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, split=st.integers(0, 60), page=st.integers(1, 7))
def test_live_and_caught_up_postgresql_tables_equal_a_fold_of_the_log_and_objects(
    new_target: Callable[[], str], ops: list[tuple[str, int, int]], split: int, page: int
) -> None:
    with make() as coord:  # closes the projections' connections, failing or not
        live = coord.attach(AnalyticsProjection(new_target()))
        wl.setup(coord)
        tasks: list[str] = []
        for action, t, h in ops[:split]:
            wl.run_one(coord, wl.WS, tasks, action, t, h)
        later = coord.attach(AnalyticsProjection(new_target()), page_size=page)  # half-way
        for action, t, h in ops[split:]:
            wl.run_one(coord, wl.WS, tasks, action, t, h)
        after = coord.attach(AnalyticsProjection(new_target()), page_size=page)  # at the end
        expected = fold(coord.snapshot(wl.WS))
        for attachment in (live, later, after):
            assert attachment.state == "live"
            assert tables(attachment.projection.connection) == expected


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
@example(ops=TWICE_ESCALATED)
def test_chap_analytics_figures_equal_the_postgresql_projection_for_random_workloads(
    new_target: Callable[[], str], ops: list[tuple[str, int, int]]
) -> None:
    with make() as coord:
        live = coord.attach(AnalyticsProjection(new_target()))
        wl.setup(coord)
        wl.run(coord, ops)
        frames = chap_analytics.frames(chap_analytics.from_coordinator(coord, wl.WS))
        assert_matches_chap_analytics(live.projection.connection, frames, coord.snapshot(wl.WS)["audit"])


@pytest.mark.parametrize("encoding", ["UTF8", "SQL_ASCII"])
def test_the_tables_in_the_stores_own_database_match_chap_analytics(
    pg_server: PgServer, encoding: str, new_target: Callable[[], str]
) -> None:
    """In a UTF8 database, and in a SQL_ASCII one (a plain `initdb
    --locale=C`), under a workspace id that is not ASCII."""
    fresh_database = pg_server.uri(pg_server.new_database(encoding))
    ws = "wsp_dèsk☕"
    with make(PostgresStore(fresh_database)) as coord:
        live = coord.attach(AnalyticsProjection(fresh_database))  # beside chap_entries
        wl.desk(coord, ws)
        caught_up = coord.attach(AnalyticsProjection(new_target()))
        log = coord.snapshot(ws)["audit"]
        frames = chap_analytics.frames(chap_analytics.from_coordinator(coord, ws))
        assert len(frames.decisions) >= 7 and len(frames.refusals) >= 1
        for attachment in (live, caught_up):
            assert_matches_chap_analytics(attachment.projection.connection, frames, log)
            counts = attachment.projection.connection.execute("SELECT workspace FROM analytics_counts")
            assert counts.fetchall() == [(ws,)]
    # SQL tools read the view with a float latency, as on SQLite
    with psycopg.connect(fresh_database) as reader:
        latencies = reader.execute(
            "SELECT latency_s FROM analytics_decisions WHERE kind = 'approve'"
        ).fetchall()
    assert latencies and all(isinstance(latency, float) for (latency,) in latencies)


def test_restarts_catch_up_with_no_gap_and_no_duplicate(fresh_database: str) -> None:
    def coordinator() -> Coordinator:
        return Coordinator(PostgresStore(fresh_database), clock=StepClock(), ids=CounterIds())

    rng = random.Random(5)

    def some(coord: Coordinator, tasks: list[str], n: int) -> None:
        for _ in range(n):
            wl.run_one(coord, wl.WS, tasks, rng.choice(wl.ACTIONS), rng.randrange(8), rng.randrange(3))

    tasks: list[str] = []
    with coordinator() as coord:
        attachment = coord.attach(AnalyticsProjection(fresh_database))
        wl.setup(coord)
        some(coord, tasks, 30)
        first = attachment.cursor(wl.WS)
    with coordinator() as coord:  # calls while the projection is not attached
        some(coord, tasks, 30)
    with coordinator() as coord:
        attachment = coord.attach(AnalyticsProjection(fresh_database), page_size=7)
        held = len(coord.snapshot(wl.WS)["audit"])
        assert first < held and attachment.cursor(wl.WS) == held
        some(coord, tasks, 30)  # and live again
        snapshot = coord.snapshot(wl.WS)
        assert attachment.cursor(wl.WS) == len(snapshot["audit"])
        assert tables(attachment.projection.connection) == fold(snapshot)
        assert attachment.projection.cursors() == {wl.WS: len(snapshot["audit"])}


def _changes(n: int) -> tuple[list[Change], dict[str, Any]]:
    """The changes `n` random operations make (setup included), as a live
    projection sees them, and the workspace's snapshot after them."""
    coord = make(MemoryStore())
    seen: list[Change] = []
    coord.add_change_listener(seen.append)
    wl.setup(coord)
    rng = random.Random(n)
    tasks: list[str] = []
    for _ in range(n):
        wl.run_one(coord, wl.WS, tasks, rng.choice(wl.ACTIONS), rng.randrange(8), rng.randrange(3))
    return seen, coord.snapshot(wl.WS)


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_writers_racing_on_one_projection_apply_each_entry_once(
    kind: str, new_target: Callable[[], str], tmp_path: Path
) -> None:
    """Four threads, each with its own connection, apply the same pages at
    once: the cursor check inside the transaction lets one apply each entry
    (on SQLite too, whose file the threads share)."""
    changes, snapshot = _changes(80)
    target = new_target() if kind == "postgresql" else str(tmp_path / "analytics.db")
    projections: list[AnalyticsProjection] = []
    with contextlib.ExitStack() as closing:  # every connection closed, failing or not
        for _ in range(4):
            projections.append(AnalyticsProjection(target))
            closing.callback(projections[-1].close)
        _race(projections, changes, snapshot)


def _race(projections: list[AnalyticsProjection], changes: list[Change], snapshot: dict[str, Any]) -> None:
    pages = [changes[i : i + 5] for i in range(0, len(changes), 5)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(projections))

    def feed(projection: AnalyticsProjection) -> None:
        start.wait()
        for page in pages:
            try:
                projection.apply(page)
            except BaseException as exc:  # reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=feed, args=(p,)) for p in projections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    expected = fold(snapshot)
    assert expected["analytics_counts"][0][1] == len(changes)
    for projection in projections:
        assert tables(projection.connection) == expected
        assert projection.cursors() == {wl.WS: len(changes)}


def test_two_coordinators_feeding_one_projection_count_each_entry_once(fresh_database: str) -> None:
    with contextlib.ExitStack() as closing:  # both closed, failing or not
        a = closing.enter_context(
            Coordinator(PostgresStore(fresh_database, watch=True), clock=StepClock(), ids=CounterIds()))
        b = closing.enter_context(
            Coordinator(PostgresStore(fresh_database, watch=True), clock=StepClock(), ids=CounterIds()))
        _feed_from_two(a, b, fresh_database)


def _feed_from_two(a: Coordinator, b: Coordinator, fresh_database: str) -> None:
    wl.setup(a)
    on_a = a.attach(AnalyticsProjection(fresh_database))
    on_b = b.attach(AnalyticsProjection(fresh_database))
    rng = random.Random(3)
    tasks: list[str] = []
    for i in range(40):
        coord = a if i % 3 else b
        wl.run_one(coord, wl.WS, tasks, rng.choice(wl.ACTIONS), rng.randrange(8), rng.randrange(3))
    with Coordinator(PostgresStore(fresh_database)) as reader:  # a and b may each miss the other's last
        snapshot = reader.snapshot(wl.WS)
    for attachment in (on_a, on_b):
        assert attachment.state == "live"
    # each saw the other's entries as a gap, read them from the store, and
    # skipped those the other had applied already
    assert tables(on_a.projection.connection) == fold(snapshot)
    assert on_b.projection.cursors() == {wl.WS: len(snapshot["audit"])}


def test_two_processes_killed_at_random_moments_equal_a_rebuilt_projection(
    tmp_path: Path, fresh_database: str, new_target: Callable[[], str]
) -> None:
    """Two workers on one workspace, each feeding the projection kept in the
    store's own database, SIGKILLed at random moments, round after round."""
    with Coordinator(PostgresStore(fresh_database)) as coord:
        wl.setup(coord)
    script = tmp_path / "worker.py"
    script.write_text(_WORKER.format(root=str(ROOT)))
    rng = random.Random(17)
    for round_ in range(3):
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), fresh_database, fresh_database, str(10 * round_ + n)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for n in range(2)
        ]
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        for proc in procs:
            kill_after_some_calls(proc, rng)
    with Coordinator(PostgresStore(fresh_database)) as coord:
        resumed = coord.attach(AnalyticsProjection(fresh_database))
        rebuilt = coord.attach(AnalyticsProjection(new_target()))
        snapshot = coord.snapshot(wl.WS)
        assert len(snapshot["audit"]) > 20
        assert tables(resumed.projection.connection) == tables(rebuilt.projection.connection)
        assert tables(resumed.projection.connection) == fold(snapshot)


def test_a_broken_connection_is_reported_and_replaced_on_the_retry(
    fresh_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    with make() as coord:
        attachment = coord.attach(AnalyticsProjection(fresh_database))
        wl.setup(coord)
        with psycopg.connect(fresh_database, autocommit=True) as admin:  # as a server restart would
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with caplog.at_level(logging.ERROR, logger="chapline"):
            wl.run(coord, [("create", 0, 0), ("start", 0, 0)])
        assert attachment.state == "behind" and "ProjectionError" in str(attachment.error)
        assert len(caplog.records) == 1  # once, not once per call
        assert attachment.catch_up() == 2  # on a new connection, from the cursor
        assert tables(attachment.projection.connection) == fold(coord.snapshot(wl.WS))


def test_an_unreachable_target_is_a_projection_error_that_names_no_secret() -> None:
    # a port nothing listens on (stopping the suite's server would disturb the others)
    closed = f"postgresql://someone:s3cret@127.0.0.1:{_closed_port()}/db"
    with pytest.raises(ProjectionError) as caught:
        AnalyticsProjection(closed)
    assert "s3cret" not in str(caught.value) and "someone" not in str(caught.value)
    assert "the PostgreSQL database db on 127.0.0.1" in caught.value.target
    assert "cannot be reached" in str(caught.value)


def test_a_target_that_cannot_hold_the_text_is_refused_naming_its_encoding(pg_server: PgServer) -> None:
    target = pg_server.uri(pg_server.new_database("LATIN1"))
    with pytest.raises(ProjectionError, match="encoding is LATIN1.*ENCODING 'UTF8'"):
        AnalyticsProjection(target)
    with psycopg.connect(target) as conn:  # nothing was made in it
        assert conn.execute("SELECT to_regclass('chapline_cursors')").fetchone() == (None,)


def test_tables_of_the_earlier_schema_are_refused_until_cleared(new_target: Callable[[], str]) -> None:
    target = new_target()
    with psycopg.connect(target, autocommit=True) as old:
        old.execute("CREATE TABLE analytics_tasks (workspace TEXT NOT NULL, task_id TEXT NOT NULL, "
                    "state TEXT NOT NULL, created_ms BIGINT, PRIMARY KEY (workspace, task_id))")
        old.execute("CREATE VIEW analytics_decisions AS SELECT workspace, task_id FROM analytics_tasks")
        old.execute("CREATE TABLE chapline_cursors (projection TEXT NOT NULL, workspace TEXT NOT NULL, "
                    "next_seq BIGINT NOT NULL, PRIMARY KEY (projection, workspace))")
        old.execute("INSERT INTO chapline_cursors VALUES ('analytics', 'wsp_desk', 40)")
    with pytest.raises(ProjectionError, match="no column created_seq") as refused:
        AnalyticsProjection(target)
    statements = str(refused.value).split("(", 1)[1].rsplit(")", 1)[0]
    with psycopg.connect(target, autocommit=True) as old:
        # the refusal made nothing: the new table is not there either
        assert old.execute("SELECT to_regclass('analytics_task_calls')").fetchone() == (None,)
        for statement in statements.split("; "):
            old.execute(statement.replace("DROP TABLE", "DROP TABLE IF EXISTS"))
    coord = make()
    wl.desk(coord)
    rebuilt = coord.attach(AnalyticsProjection(target))
    try:
        assert tables(rebuilt.projection.connection) == fold(coord.snapshot(wl.WS))
    finally:
        coord.close()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_projects_into_postgresql(fresh_database: str) -> None:
    command = [sys.executable, "-m", "coordinator", "serve", "--db", fresh_database, "--port", "0",
               "--projection", f"analytics={fresh_database}"]

    def served(calls: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        with Serve(fresh_database, "--projection", f"analytics={fresh_database}") as server:
            with httpx.Client(base_url=server.base, timeout=60) as http:
                replies = [Http(http).dispatch(call) for call in calls]
        return server.line, replies

    line, _ = served([
        env("participant.join", {"workspace": "wsp_s", "from": who, "type": "human"})
        for who in (wl.ALICE, wl.BOB)
    ])
    name = fresh_database.rsplit("/", 1)[1]
    assert f"projecting analytics into the PostgreSQL database {name} on 127.0.0.1" in line
    _, (reply,) = served([env("task.create", {
        "workspace": "wsp_s", "from": wl.ALICE, "assignee": wl.BOB, "kind": "k", "input": {},
    })])
    with psycopg.connect(fresh_database) as reader:
        assert reader.execute("SELECT * FROM analytics_counts").fetchall() == [("wsp_s", 3, 3, 0)]
        assert reader.execute("SELECT task_id, state FROM analytics_tasks").fetchall() == [
            (reply["result"]["task_id"], "created")
        ]
    bad = subprocess.run(
        [*command[:-1], f"analytics=postgresql://u:s3cret@127.0.0.1:{_closed_port()}/x"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert bad.returncode == 1, bad.stderr
    assert "cannot open the analytics projection's target" in bad.stderr
    assert "s3cret" not in bad.stderr
