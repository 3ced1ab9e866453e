"""What an operator sees of a running server (SPECIFICATION.md,
"Observability"): `/healthz` and `/readyz`, Prometheus metrics at
`/metrics` (also added up over `--workers`), OpenTelemetry spans of each call
and its store write, and `--log-format json`.

Metrics are read with prometheus_client's own parser after a known workload
over HTTP; the tallies expected are those of the answers the client got.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from client import Client, Http
from hypothesis import given
from hypothesis import strategies as st
from notify_receivers import WebhookReceiver
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pgserver import PgServer
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families
from servers import ROOT, LiveServer, Serve, env
from support import eventually

from coordinator import Coordinator
from coordinator.cli import DEFAULT_PROFILES
from coordinator.notify import Subscriptions
from coordinator.projections.cursor import CallbackProjection
from coordinator.server import create_app
from coordinator.server.health import store_probe
from coordinator.server.logs import JsonFormatter, calling
from coordinator.server.metrics import Metrics
from coordinator.server.observed import Observability
from coordinator.server.tracing import Tracing
from storage import SqliteStore
from storage.waits import lock_waited

ALICE = "human:alice"
BOT = "agent:bot"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition, by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def calls_counted(found: Samples) -> Counter[tuple[str, str]]:
    """chapline_calls_total as {(method, outcome): count}."""
    out: Counter[tuple[str, str]] = Counter()
    for (name, labels), value in found.items():
        if name == "chapline_calls_total" and value:
            label = dict(labels)
            out[label["method"], label["outcome"]] = int(value)
    return out


def deliveries_counted(found: Samples) -> Counter[str]:
    """chapline_webhook_deliveries_total as {outcome: count}."""
    return Counter({dict(labels)["outcome"]: int(value) for (name, labels), value in found.items()
                    if name == "chapline_webhook_deliveries_total" and value})


def scrape(base: str) -> Samples:
    reply = httpx.get(base + "/metrics", timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    return samples(reply.text)


def workload(http: httpx.Client, workspace: str, tasks: int = 3) -> Counter[tuple[str, str]]:
    """A known mix of calls on a new workspace: accepted ones, refusals and
    an unknown method. The tally of (method label, outcome) the server must
    report, from the answers received."""
    sent: Counter[tuple[str, str]] = Counter()
    c = Client(Http(http), workspace)

    def call(method: str, frm: str | None = None, **params: Any) -> None:
        response = c.call(method, frm, **params)
        error = response.get("error")
        label = method if not method.startswith("nope.") else "unknown"
        sent[label, "ok" if error is None else str(error["code"])] += 1

    call("workspace.create", ALICE)
    call("participant.join", ALICE, type="human", role="admin")
    call("participant.join", BOT, type="agent")
    for _ in range(tasks):
        call("task.create", ALICE, assignee=BOT, kind="draft", input={})
    call("task.create", "human:stranger", assignee=BOT, kind="draft", input={})  # not a member
    call("task.complete", BOT, task_id="tsk_missing", output={})  # no such task
    call("nope.method", ALICE)  # unknown: counted under "unknown", not a new series
    call("workspace.describe")
    assert sent["task.create", "ok"] == tasks and len(sent) >= 5, sent
    return sent


# -- /metrics after a known workload -----------------------------------------------


def test_metrics_count_each_call_by_method_and_outcome(tmp_path: Path) -> None:
    with Serve(tmp_path / "m.db") as server, httpx.Client(base_url=server.base, timeout=60) as http:
        sent = workload(http, "wsp_m1") + workload(http, "wsp_m2", tasks=5)
        found = scrape(server.base)
    assert calls_counted(found) == sent
    total = sum(sent.values())
    by_method: Counter[str] = Counter()
    for (method, _), n in sent.items():
        by_method[method] += n
    for method, n in by_method.items():
        assert found["chapline_call_duration_seconds_count", frozenset({("method", method)})] == n
    # Every call ran in a group of its own or with others: the sizes add up to the calls.
    assert found["chapline_group_commit_size_sum", frozenset()] == total
    # One store write per recorded call at most (a group shares one).
    writes = found["chapline_store_write_seconds_count", frozenset()]
    assert 1 <= writes <= total
    assert found["chapline_store_conflicts_total", frozenset()] == 0
    assert found["chapline_event_streams_open", frozenset()] == 0
    assert deliveries_counted(found) == Counter()  # no notifications projection, no deliveries


def test_serve_reports_its_projections_in_readyz_and_their_lag(tmp_path: Path) -> None:
    with Serve(tmp_path / "p.db", "--projection", f"analytics={tmp_path / 'analytics.db'}") as server:
        with httpx.Client(base_url=server.base, timeout=60) as http:
            workload(http, "wsp_projected")
            ready = http.get("/readyz")
        found = scrape(server.base)
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"] == {
        "store": {"ok": True},
        "projection:analytics": {"ok": True, "state": "live"},
    }
    assert found["chapline_projection_lag_entries", frozenset({("projection", "analytics")})] == 0


@pytest.mark.parametrize("workers", ["1", "2"])
def test_each_delivery_attempt_in_the_delivery_log_is_counted_by_outcome(
    tmp_path: Path, workers: str
) -> None:
    """`serve --projection notifications=DB` delivering two notices to a
    receiver that answers its first request 500: the counts by outcome are
    the attempts the delivery log holds (with two workers, each one's
    deliverer counts what it sent, and a scrape adds them up)."""
    db = tmp_path / "d.db"
    secret = "whsec_metrics"
    receiver = WebhookReceiver(secret, fail_first=1)
    subs = Subscriptions(str(db))
    subs.add_webhook("wsp_notified", receiver.url + "/hook", secret=secret, kinds=["whisper"])
    subs.close()

    def log() -> Counter[str]:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            rows = conn.execute("SELECT ok, count(*) FROM notify_attempts GROUP BY ok").fetchall()
        return Counter({"delivered" if ok else "failed": n for ok, n in rows})

    try:
        with Serve(db, "--projection", f"notifications={db}", "--workers", workers) as server:
            with httpx.Client(base_url=server.base, timeout=60) as http:
                c = Client(Http(http), "wsp_notified")
                c.ok("workspace.create", ALICE, profiles=["core/1.0", "whisper/1.0"])
                c.ok("participant.join", ALICE, type="human", role="admin")
                c.ok("participant.join", "human:bob", type="human")
                task = c.new_task(ALICE, "human:bob")
                for question in ("Ship it?", "Today?"):
                    c.ok("whisper.ask", ALICE, to=["human:bob"], task_id=task, question=question,
                         deadline_ms=600_000, default_if_lapsed="no")
            eventually(lambda: log()["delivered"] == 2, "delivery of both notices")
            attempts = log()
            # The hook runs just after each attempt's record commits: a scrape
            # may come between the two.
            eventually(lambda: deliveries_counted(scrape(server.base)) == attempts,
                       "scrape agreeing with the delivery log", timeout=10)
    finally:
        receiver.stop()
    assert attempts == Counter({"delivered": 2, "failed": 1})  # the receiver's 500, retried
    assert len(receiver.deliveries) == 2


def test_metrics_add_up_every_worker_of_serve_workers(tmp_path: Path) -> None:
    """With --workers 2 each worker counts the calls it served, and any
    scrape answers the sum: checked against each worker's own files, and
    every scrape agrees."""
    db = tmp_path / "w.db"
    Coordinator(store=SqliteStore(db)).close()
    server = Serve(db, "--workers", "2")
    try:
        workers = eventually(lambda: _children(server.proc.pid) if len(_children(server.proc.pid)) == 2 else None,
                             "two workers")
        folder = eventually(lambda: _metrics_dir(workers[0]), "the worker's metric files")
        sent: Counter[tuple[str, str]] = Counter()
        rounds = 0

        def both_served() -> bool:
            per = [_calls_of(folder, pid) for pid in workers]
            return all(sum(c.values()) > 0 for c in per)

        # Fresh connections, so the kernel hands them to either worker,
        # until both have served some (bounded: each round is a workload).
        while not both_served():
            rounds += 1
            assert rounds <= 40, "one worker served every connection of 40 rounds"
            with httpx.Client(base_url=server.base, timeout=60) as http:
                sent += workload(http, f"wsp_w{rounds}", tasks=1)
        per_worker = [_calls_of(folder, pid) for pid in workers]
        assert sum(per_worker, Counter()) == sent
        for _ in range(6):  # fresh connections: each may land on either worker
            assert calls_counted(scrape(server.base)) == sent
    finally:
        code, err = server.stop()
    assert code == 0, err
    # The run's metric files go with the server.
    assert not os.path.exists(folder)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return sorted(found)


def _metrics_dir(pid: int) -> str | None:
    """The folder of the metric files a worker has mapped (its environment
    as /proc shows it is the one it was started with, before the server set
    the folder)."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split(maxsplit=5)[-1]
        if "/chapline-metrics-" in path and path.endswith(".db"):
            return os.path.dirname(path)
    return None  # not yet: the worker is still starting


def _calls_of(folder: str, pid: int) -> Counter[tuple[str, str]]:
    """The calls one worker counted: its files alone, read as a scrape would."""
    with tempfile.TemporaryDirectory() as alone:
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            # A file the worker has created but not yet sized holds no count
            # (prometheus_client cannot read it: it fails on the empty header).
            if name.endswith(f"_{pid}.db") and os.path.getsize(path) > 0:
                shutil.copy(path, alone)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, alone)
        out: Counter[tuple[str, str]] = Counter()
        for family in registry.collect():
            for s in family.samples:
                if s.name == "chapline_calls_total" and s.value:
                    out[s.labels["method"], s.labels["outcome"]] = int(s.value)
        return out


# -- metrics fed from inside: conflicts, lock waits, streams, lag -----------------------


@pytest.fixture
def app_server(tmp_path: Path) -> Iterator[tuple[str, Coordinator, Observability, Path]]:
    """An app in this process on a SqliteStore file the test may also write to."""
    db = tmp_path / "a.db"
    observed = Observability(probe=store_probe(str(db)))
    coord = Coordinator(store=observed.store(SqliteStore(db)), default_profiles=DEFAULT_PROFILES)
    server = LiveServer(create_app(coord, observability=observed))
    try:
        yield server.url, coord, observed, db
    finally:
        server.stop()
        coord.close()


def test_a_lost_race_is_counted_as_a_conflict_and_the_call_still_succeeds(
    app_server: tuple[str, Coordinator, Observability, Path],
) -> None:
    base, _, _, db = app_server
    with httpx.Client(base_url=base, timeout=60) as http:
        c = Client(Http(http), "wsp_race")
        c.setup(members=(ALICE, BOT))
        # Another coordinator on the file writes first: the server's next
        # write loses the compare-and-swap, reloads and runs again.
        with Coordinator(store=SqliteStore(db)) as other:
            Client(other, "wsp_race").new_task(ALICE, BOT)
        c.new_task(ALICE, BOT)
        found = scrape(base)
    assert found["chapline_store_conflicts_total", frozenset()] == 1
    assert calls_counted(found)["task.create", "ok"] == 1


def test_lock_waits_reported_through_the_hook_are_counted_while_serving(
    app_server: tuple[str, Coordinator, Observability, Path],
) -> None:
    base = app_server[0]
    scrape(base)  # the lifespan has started: the hook is registered
    lock_waited(0.3)
    lock_waited(0.001)
    found = scrape(base)
    assert found["chapline_lock_wait_seconds_count", frozenset()] == 2
    assert found["chapline_lock_wait_seconds_sum", frozenset()] == pytest.approx(0.301)
    assert found["chapline_lock_wait_seconds_bucket", frozenset({("le", "0.25")})] == 1


def test_open_event_streams_are_counted(app_server: tuple[str, Coordinator, Observability, Path]) -> None:
    base = app_server[0]
    with httpx.Client(base_url=base, timeout=60) as http, http.stream("GET", "/chap/events") as stream:
        lines = stream.iter_lines()  # held: dropping it would close the stream
        assert next(lines) == "event: ready"
        assert scrape(base)["chapline_event_streams_open", frozenset()] == 1


def test_projection_lag_and_a_stalled_projection_turn_readyz_503(tmp_path: Path) -> None:
    """A projection whose apply fails stays behind: its lag is the entries
    it has not applied, and /readyz says it is stalled until it recovers."""
    failing = threading.Event()
    applied: list[int] = []

    def fn(changes: Any) -> None:
        if failing.is_set():
            raise RuntimeError("the projection's target is down")
        applied.extend(ch.entry.seq for ch in changes)

    coord = Coordinator(store=SqliteStore(tmp_path / "p.db"), default_profiles=DEFAULT_PROFILES)
    attachment = coord.attach(CallbackProjection("mirror", fn, str(tmp_path / "cursor.db")))
    observed = Observability(projections=[attachment])
    server = LiveServer(create_app(coord, observability=observed))
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            c = Client(Http(http), "wsp_lag")
            c.setup(members=(ALICE, BOT))
            ready = http.get("/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["checks"]["projection:mirror"] == {"ok": True, "state": "live"}
            assert scrape(server.url)["chapline_projection_lag_entries", frozenset({("projection", "mirror")})] == 0
            failing.set()
            c.new_task(ALICE, BOT)
            c.new_task(ALICE, BOT)
            unready = http.get("/readyz")
            assert unready.status_code == 503, unready.text
            body = unready.json()
            assert body["status"] == "unready"
            assert body["checks"]["projection:mirror"]["ok"] is False
            assert "retried" in body["checks"]["projection:mirror"]["error"]
            lag = scrape(server.url)["chapline_projection_lag_entries", frozenset({("projection", "mirror")})]
            assert lag == 2
    finally:
        server.stop()
        coord.close()


def test_without_metrics_there_is_no_metrics_path(tmp_path: Path) -> None:
    coord = Coordinator(store=SqliteStore(tmp_path / "n.db"))
    server = LiveServer(create_app(coord, observability=Observability(metrics=None, tracing=None)))
    try:
        assert httpx.get(server.url + "/metrics").status_code == 404
        assert httpx.get(server.url + "/healthz").json() == {"status": "alive"}
        # Nothing watches: the dispatcher calls the coordinator itself.
        assert Observability(metrics=None, tracing=None).store(coord.store) is coord.store
    finally:
        server.stop()
        coord.close()


def test_two_apps_in_one_process_keep_their_own_counts(tmp_path: Path) -> None:
    apps = []
    try:
        for name in ("one", "two"):
            coord = Coordinator(store=SqliteStore(tmp_path / f"{name}.db"))
            apps.append((coord, LiveServer(create_app(coord, observability=Observability(metrics=Metrics())))))
        with httpx.Client(base_url=apps[0][1].url, timeout=60) as http:
            sent = workload(http, "wsp_one")
        assert calls_counted(scrape(apps[0][1].url)) == sent
        assert calls_counted(scrape(apps[1][1].url)) == Counter()
    finally:
        for coord, server in apps:
            server.stop()
            coord.close()


# -- /healthz and /readyz -------------------------------------------------------


def test_healthz_and_readyz_answer_json_without_a_token(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    subprocess.run(
        [sys.executable, "-m", "coordinator", "token", "create", "--db", str(db), "--as", ALICE,
         "--all-workspaces"],
        capture_output=True, text=True, env=env(), timeout=120, check=True, cwd=ROOT,
    )
    with Serve(db, "--auth") as server:
        health = httpx.get(server.base + "/healthz")
        assert (health.status_code, health.json()) == (200, {"status": "alive"})
        assert health.headers["content-type"] == "application/json"
        ready = httpx.get(server.base + "/readyz")
        assert (ready.status_code, ready.json()) == (200, {"status": "ready", "checks": {"store": {"ok": True}}})
        # The calls themselves still need the token.
        assert httpx.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "x"}).status_code == 401


def test_readyz_turns_503_when_the_sqlite_file_is_gone(
    app_server: tuple[str, Coordinator, Observability, Path],
) -> None:
    base, _, _, db = app_server
    assert httpx.get(base + "/readyz").status_code == 200
    moved = db.with_suffix(".moved")
    db.rename(moved)
    try:
        unready = httpx.get(base + "/readyz")
        assert unready.status_code == 503
        assert unready.json()["checks"]["store"] == {
            "ok": False, "error": f"the database file {db} cannot be opened for writing",
        }
        assert httpx.get(base + "/healthz").status_code == 200
    finally:
        moved.rename(db)
    assert httpx.get(base + "/readyz").status_code == 200


def test_readyz_follows_the_postgresql_server_down_and_back() -> None:
    pg = PgServer()
    try:
        pg.start()
        with Serve(pg.uri()) as server:
            ready = httpx.get(server.base + "/readyz", timeout=30)
            assert ready.status_code == 200, ready.text
            pg.stop()
            unready = httpx.get(server.base + "/readyz", timeout=30)
            assert unready.status_code == 503, unready.text
            error = unready.json()["checks"]["store"]["error"]
            assert error == f"the PostgreSQL database postgres on 127.0.0.1:{pg.port} did not answer"
            assert "postgres@" not in unready.text  # no user named
            assert httpx.get(server.base + "/healthz").status_code == 200
            pg.start()
            back = httpx.get(server.base + "/readyz", timeout=30)
            assert back.status_code == 200, back.text
            # And calls work again on the store's reconnected connection.
            with httpx.Client(base_url=server.base, timeout=60) as http:
                Client(Http(http), "wsp_pg_back").setup(members=(ALICE,))
    finally:
        pg.remove()


# -- traces -------------------------------------------------------------------------


def test_a_call_is_one_span_with_its_store_write_as_a_child(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observed = Observability(metrics=None, tracing=Tracing(provider))
    coord = Coordinator(store=observed.store(SqliteStore(tmp_path / "t.db")))
    server = LiveServer(create_app(coord, observability=observed))
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            c = Client(Http(http), "wsp_traced")
            c.ok("workspace.create", ALICE)
            c.call("task.create", "human:stranger", assignee=BOT, kind="draft", input={})
    finally:
        server.stop()
        coord.close()
    spans = exporter.get_finished_spans()
    calls = [s for s in spans if s.name == "workspace.create"]
    assert len(calls) == 1
    call = calls[0]
    assert call.attributes is not None and dict(call.attributes) == {
        "rpc.system": "jsonrpc",
        "rpc.method": "workspace.create",
        "rpc.jsonrpc.request_id": "r1",
        "chap.workspace": "wsp_traced",
        "chap.outcome": "ok",
    }
    assert call.parent is None
    writes = [s for s in spans if s.name == "chap.store.write"]
    assert len(writes) == 1  # the refused call by a stranger writes nothing
    write = writes[0]
    assert write.parent is not None and call.context is not None
    assert (write.parent.trace_id, write.parent.span_id) == (call.context.trace_id, call.context.span_id)
    assert write.attributes is not None and dict(write.attributes) == {
        "chap.workspace": "wsp_traced",
        "chap.store.entries": 1,
        "chap.store.outcome": "ok",
    }
    refused_span = [s for s in spans if s.name == "task.create"][0]
    assert refused_span.attributes is not None
    assert refused_span.attributes["chap.outcome"] == str(refused_span.attributes["rpc.jsonrpc.error_code"])
    assert refused_span.attributes["rpc.jsonrpc.request_id"] == "r2"


# -- JSON logs --------------------------------------------------------------------------


def test_json_logs_are_one_object_a_line_carrying_the_call_id(tmp_path: Path) -> None:
    server = Serve(tmp_path / "j.db", "--log-format", "json")
    try:
        with httpx.Client(base_url=server.base, timeout=60) as http:
            sent = workload(http, "wsp_json", tasks=2)
    finally:
        code, err = server.stop(signal.SIGTERM)
    assert code == 0, err
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]
    calls = [line for line in lines if line["logger"] == "chapline.calls"]
    assert len(calls) == sum(sent.values())
    assert [line["call_id"] for line in calls] == [f"r{i}" for i in range(1, len(calls) + 1)]
    for line in calls:
        assert line["level"] == "info" and line["ts"].endswith("Z")
        assert line["workspace"] == "wsp_json"
    assert Counter((line["method"], line["outcome"]) for line in calls) == sent


def test_a_record_logged_during_a_call_carries_its_id_workspace_and_traceback() -> None:
    try:
        raise ValueError("the disk is full")
    except ValueError:
        failure = sys.exc_info()
    record = logging.LogRecord("storage.sqlite", logging.ERROR, __file__, 1, "write failed: %s", ("w1",), failure)
    with calling(7, "wsp_logged"):
        line = json.loads(JsonFormatter().format(record))
    outside = json.loads(JsonFormatter().format(record))
    assert line["call_id"] == 7 and line["workspace"] == "wsp_logged"
    assert (line["level"], line["logger"], line["message"]) == ("error", "storage.sqlite", "write failed: w1")
    assert line["exception"].endswith("ValueError: the disk is full")
    assert "call_id" not in outside and "workspace" not in outside


def test_log_format_takes_text_or_json_only(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--db", str(tmp_path / "x.db"), "--log-format", "xml"],
        capture_output=True, text=True, env=env(), timeout=120, cwd=ROOT,
    )
    assert done.returncode == 2
    assert "argument --log-format: invalid choice: 'xml'" in done.stderr


# -- any request is counted once, under a bounded label ----------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_envelopes = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.just("2.0"),
        "id": st.text(max_size=5) | st.integers(),
        "method": st.sampled_from(["workspace.create", "task.create", "nope.x"]) | st.text(max_size=8),
        "params": st.fixed_dictionaries({}, optional={"workspace": st.text(max_size=5)}) | _json_values,
    },
)


@given(bodies=st.lists(_envelopes.map(lambda e: json.dumps(e).encode()) | st.binary(max_size=20), max_size=6))
def test_any_body_is_counted_once_under_a_known_method_or_unknown(bodies: list[bytes]) -> None:
    metrics = Metrics()
    coord = Coordinator()
    methods = {m.name for m in coord.registry.methods() + coord.registry.extension_methods()}
    target = Observability(metrics=metrics, tracing=None).target(coord, methods)
    for body in bodies:
        target.dispatch(body)
    counted = calls_counted(samples(metrics.render()[0].decode()))
    assert sum(counted.values()) == len(bodies)
    assert {method for method, _ in counted} <= methods | {"unknown"}
