"""Listeners that see what a call changed, durable projections, and the
analytics projection (SPECIFICATION.md, "Listeners" and "Projections")."""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import signal
import sqlite3
import subprocess
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import chap_analytics
import chap_coordinator.types
import httpx
import msgspec
import pandas as pd
import pytest
from chap_analytics import watch
from client import Client, Http
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from servers import Serve

from coordinator import (
    AuditEntry,
    Change,
    Coordinator,
    CounterIds,
    RestoreError,
    StepClock,
    UnknownWorkspaceError,
)
from coordinator.model import Task
from coordinator.projections import AnalyticsProjection, CallbackProjection, ProjectionError
from coordinator.projections.analytics import (
    DECISION_METHODS,
    SETTLED,
    _Call,
    creation_key,
    epoch_ms,
    moves,
)
from coordinator.projections.times import call_moment
from storage import MemoryStore, SqliteStore
from tests import projection_workload as wl

ROOT = Path(__file__).resolve().parent.parent


def make(store: Any = None) -> Coordinator:
    return Coordinator(store, clock=StepClock(), ids=CounterIds())


def join(coord: Coordinator, who: str, ws: str = "wsp_l") -> dict[str, Any]:
    return Client(coord, ws).call("participant.join", frm=who, type=who.split(":")[0])


# -- listeners that see the change ------------------------------------------


def test_a_change_listener_sees_the_entry_the_objects_and_the_result() -> None:
    store = MemoryStore()
    coord = make(store)
    seen: list[tuple[Change, int]] = []
    coord.add_change_listener(lambda c: seen.append((c, len(store.read_entries(c.workspace)))))
    join(coord, wl.ALICE)
    join(coord, wl.BOT)
    chap = Client(coord, "wsp_l")
    created = chap.ok("task.create", frm=wl.ALICE, assignee=wl.BOT, kind="k", input={"a": [1]})
    task_id = created["task_id"]
    chap.describe()  # a read: nothing
    chap.fail(-32602, "task.update", frm=wl.BOT, task_id=task_id, state="completed")  # not recorded: nothing told
    chap.fail(-32010, "decide.approve", frm=wl.BOT, task_id=task_id)
    again = chap.ok("task.create", frm=wl.ALICE, assignee=wl.BOT, kind="k", input={}, idempotency_key="once")
    chap.ok("task.create", frm=wl.ALICE, assignee=wl.BOT, kind="k", input={},  # an idempotent replay: nothing
            idempotency_key="once")
    changes = [c for c, _ in seen]
    assert [c.entry.seq for c in changes] == [0, 1, 2, 3, 4]
    # each was told after its entry was in the store
    assert [held for _, held in seen] == [1, 2, 3, 4, 5]
    made = changes[2]
    assert made.result == created and made.error is None and not made.replayed
    (task,) = made.objects["tasks"].values()
    assert isinstance(task, Task) and task.id == task_id and task.state == "created"
    assert made.entry.envelope["method"] == "task.create"
    refusal = changes[3]
    assert refusal.result is None and refusal.error["code"] == -32010
    assert refusal.entry.outcome == {"status": "refused", "code": -32010} and refusal.objects == {}
    assert changes[4].result == again
    assert changes[4].objects["idempotency_keys"] == {"once": again["task_id"]}
    # the values are the listener's own: changing them changes nothing held
    task.input["a"].append(2)
    made.objects["tasks"].clear()
    made.result["state"] = "completed"
    assert coord.workspaces["wsp_l"].tasks[task_id].input == {"a": [1]}
    with pytest.raises(AttributeError):
        made.workspace = "x"  # type: ignore[misc]


def test_a_change_listener_gets_every_collection_a_call_writes_as_typed_objects() -> None:
    # The oracle is 0.3.3's workspace: each collection it keeps maps ids to
    # one dataclass, whose fields the Struct a listener gets carries exactly.
    kept = typing.get_type_hints(chap_coordinator.types.Workspace)
    coord = make()
    seen: list[Change] = []
    coord.add_change_listener(seen.append)
    c = Client(coord, "wsp_l")
    c.setup((wl.ALICE, wl.BOT, "agent:b2"), profiles=[
        "core/1.0", "review/1.0", "whisper/1.0", "deliberation/1.0", "handoff/1.0",
        "control/1.0", "routing/1.0",
    ])
    task = c.new_task(wl.ALICE, wl.BOT)
    c.ok("review.request", wl.BOT, task_id=task, artefact={"text": "a"}, to=[wl.ALICE])
    c.ok("decide.override", wl.ALICE, task_id=task, diff=[], rationale="fine as it is")
    other = c.new_task(wl.ALICE, wl.BOT)
    c.ok("whisper.ask", wl.BOT, to=wl.ALICE, task_id=other, question="q", deadline_ms=60_000,
         default_if_lapsed="d")
    c.ok("deliberate.open", wl.ALICE, rule="all_approve", to=[wl.ALICE])
    c.ok("handoff.propose", wl.BOT, to="agent:b2", tasks=[{"task_id": other}])
    c.ok("control.snapshot", wl.ALICE, label="now")
    c.ok("task.route", wl.ALICE, task_id=c.new_task(wl.ALICE, wl.BOT), candidates=[wl.BOT])
    written: dict[str, list[Any]] = {}
    for change in seen:
        for collection, items in (change.objects or {}).items():
            written.setdefault(collection, []).extend(v for v in items.values() if v is not None)
    typed = {c for c in written if c in kept}
    assert typed == {"members", "tasks", "overrides", "whispers", "deliberations", "handoffs",
                     "snapshots", "route_decisions"}
    for collection in typed:
        fields = {f.name for f in dataclasses.fields(typing.get_args(kept[collection])[1])}
        for value in written[collection]:
            assert isinstance(value, msgspec.Struct), (collection, value)
            assert set(value.__struct_fields__) == fields, collection


def test_old_style_listeners_are_unchanged_and_every_listener_detaches() -> None:
    heard: list[tuple[str, AuditEntry]] = []
    changes: list[Change] = []
    coord = Coordinator(on_audit=lambda w, e: heard.append((w, e)))
    second = coord.add_audit_listener(lambda w, e: heard.append((w, e)))
    watching = coord.add_change_listener(changes.append)
    join(coord, wl.ALICE)
    assert [(w, e.seq) for w, e in heard] == [("wsp_l", 0)] * 2 and len(changes) == 1
    assert isinstance(heard[0][1], AuditEntry) and heard[0][1] is not heard[1][1]
    second.detach()
    watching.detach()
    watching.detach()  # twice: nothing
    assert not second.attached and not watching.attached
    join(coord, wl.BOB)
    assert [(w, e.seq) for w, e in heard] == [("wsp_l", 0)] * 2 + [("wsp_l", 1)]
    assert len(changes) == 1


def test_listeners_in_a_batch_hear_after_the_write_in_log_order() -> None:
    store = MemoryStore()
    coord = make(store)
    told: list[tuple[int, int]] = []
    coord.add_change_listener(lambda c: told.append((c.entry.seq, len(store.read_entries("wsp_l")))))
    with coord.batch():
        join(coord, wl.ALICE)
        join(coord, wl.BOB)
        assert told == []
    assert told == [(0, 2), (1, 2)]


def test_a_raising_listener_is_reported_once_and_never_breaks_a_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    coord = make()
    state = {"fail": True}

    def flaky(change: Change) -> None:
        if state["fail"]:
            raise ValueError("the dashboard is down")

    coord.add_change_listener(flaky)
    coord.add_audit_listener(lambda w, e: 1 / 0)
    with caplog.at_level(logging.WARNING, logger="chapline"):
        for who in ("human:a", "human:b", "human:c", "human:d"):
            assert join(coord, who)["result"]["joined"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2  # one per failing listener, not one per entry
    assert "the dashboard is down" in errors[0].getMessage() + errors[1].getMessage()
    caplog.clear()
    state["fail"] = False
    with caplog.at_level(logging.WARNING, logger="chapline"):
        join(coord, "human:e")
    assert ["works again after 4 failures" in r.getMessage() for r in caplog.records] == [True]


# -- durable projections -----------------------------------------------------


class Recording:
    """A projection keeping its rows and cursors in memory (a test double of
    a target; the real one is AnalyticsProjection)."""

    def __init__(self, name: str = "rec") -> None:
        self.name = name
        self.seen: list[tuple[str, int]] = []
        self.next: dict[str, int] = {}
        self.fail = 0
        self.calls = 0
        self.current: dict[str, Any] = {}
        self.closed = False

    def cursors(self) -> dict[str, int]:
        return dict(self.next)

    def apply(self, changes: Sequence[Change]) -> None:
        self.calls += 1
        if self.fail:
            self.fail -= 1
            raise OSError("target unavailable")
        for change in changes:
            assert change.entry.seq == self.next.get(change.workspace, 0), "gap or duplicate"
            self.seen.append((change.workspace, change.entry.seq))
            self.next[change.workspace] = change.entry.seq + 1
            if change.current is not None:
                self.current[change.workspace] = change.current

    def close(self) -> None:
        self.closed = True


def test_catch_up_reads_every_workspace_in_pages_then_follows_live(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "chap.db"))
    coord = make(store)
    for ws in ("wsp_b", "wsp_a"):
        for who in ("human:a", "human:b", "human:c"):
            join(coord, who, ws)
    rec = Recording()
    rec.next = {"wsp_b": 1}
    pages: list[int] = []
    original = rec.apply
    rec.apply = lambda changes: (pages.append(len(changes)), original(changes))[1]  # type: ignore[method-assign]
    attachment = coord.attach(rec, page_size=2)
    assert attachment.state == "live"
    assert rec.seen == [("wsp_a", 0), ("wsp_a", 1), ("wsp_a", 2), ("wsp_b", 1), ("wsp_b", 2)]
    assert pages == [2, 1, 2]
    assert set(rec.current["wsp_a"]["members"]) == {"human:a", "human:b", "human:c"}
    join(coord, "human:d", "wsp_a")
    assert rec.seen[-1] == ("wsp_a", 3) and attachment.cursor("wsp_a") == 4
    # another writer on the same store: its entries are read from the store
    # when this coordinator's next change shows the gap
    other = make(SqliteStore(str(tmp_path / "chap.db")))
    join(other, "human:e", "wsp_a")
    join(other, "human:f", "wsp_a")
    join(coord, "human:g", "wsp_a")
    assert [s for w, s in rec.seen if w == "wsp_a"] == list(range(7))
    attachment.detach()
    assert rec.closed and attachment.state == "detached"
    join(coord, "human:h", "wsp_a")
    assert rec.seen[-1] == ("wsp_a", 6)
    # attached again: catches up from its cursor, nothing twice
    rec.closed = False
    coord.attach(rec)
    assert [s for w, s in rec.seen if w == "wsp_a"] == list(range(8))
    other.close()
    coord.close()
    assert rec.closed


def test_a_batch_reaches_a_projection_as_one_apply() -> None:
    coord = make()
    rec = Recording()
    coord.attach(rec)
    join(coord, "human:a")
    with coord.batch():
        for who in ("human:b", "human:c", "human:d"):
            join(coord, who)
        join(coord, "human:e", "wsp_other")
    assert rec.calls == 2  # the lone call, then the batch's four changes at once
    assert rec.seen == [("wsp_l", 0), ("wsp_l", 1), ("wsp_l", 2), ("wsp_l", 3), ("wsp_other", 0)]


def test_a_failing_projection_is_retried_with_backoff_and_reported_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    coord = make()
    rec = Recording()
    attachment = coord.attach(rec)
    now = [100.0]
    attachment._monotonic = lambda: now[0]
    rec.fail = 3
    with caplog.at_level(logging.WARNING, logger="chapline"):
        assert join(coord, "human:a")["result"]["joined"]  # fails: behind, retry at +0.1
        assert attachment.state == "behind" and "target unavailable" in attachment.error
        calls = rec.calls
        now[0] += 0.05
        join(coord, "human:b")  # before the retry time: not even tried
        assert rec.calls == calls
        now[0] += 0.1
        join(coord, "human:c")  # retried from the cursor: fails again, next at +0.2
        assert rec.calls == calls + 1
        now[0] += 0.1
        join(coord, "human:d")
        assert rec.calls == calls + 1
        now[0] += 0.15
        join(coord, "human:e")  # fails the third time; next retry at +0.4
        assert rec.calls == calls + 2
        now[0] += 0.5
        join(coord, "human:f")  # succeeds: catches up everything, in order
    assert attachment.state == "live" and attachment.error is None
    assert rec.seen == [("wsp_l", s) for s in range(6)]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "target unavailable" in errors[0].getMessage()
    assert any("caught up after 3 failures" in r.getMessage() for r in caplog.records)


def test_a_callback_projection_delivers_at_least_once_with_seq(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "chap.db"))
    coord = make(store)
    got: list[int] = []
    crash = {"now": False}

    def fn(changes: Sequence[Change]) -> None:
        got.extend(c.entry.seq for c in changes)
        if crash["now"]:
            raise KeyboardInterrupt  # as if the process died before the cursor was saved

    cursor_file = str(tmp_path / "cursor.db")
    coord.attach(CallbackProjection("mail", fn, cursor_file))
    join(coord, "human:a")
    crash["now"] = True
    with pytest.raises(KeyboardInterrupt):
        join(coord, "human:b")
    coord.close()
    crash["now"] = False
    again = make(SqliteStore(str(tmp_path / "chap.db")))
    again.attach(CallbackProjection("mail", fn, cursor_file))
    assert got == [0, 1, 1]  # seq 1 seen twice: at least once, and seq says so
    join(again, "human:c")
    assert got == [0, 1, 1, 2]
    again.close()


# -- the analytics projection ------------------------------------------------


TABLES = ("analytics_tasks", "analytics_reviews", "analytics_decision_log", "analytics_counts",
          "analytics_task_calls")


def tables(connection: Any) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for table in TABLES:
        out[table] = sorted(connection.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
    return out


MOVES = {"task.create": "", "task.complete": "completed review_requested",
         "review.request": "review_requested", "decide.approve": "completed review_requested",
         "decide.reject": "declined in_progress", "decide.override": "completed",
         "abstain.declare": "abstained", "escalate.raise": "escalated"}


def fold(snapshot: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    """The analytics tables of one workspace computed from its snapshot at
    once: the calls, decisions and counts from the log, the tasks and reviews
    from the objects, dated by the calls that made their moves."""
    wid = snapshot["id"]
    log = snapshot["audit"]
    accepted = [e for e in log if e.get("envelope") is not None]
    decisions, calls = [], []
    for e in accepted:
        method, p = e["envelope"]["method"], e["envelope"]["params"]
        if method not in MOVES and method != "task.update":
            continue
        at, ms = call_moment(p, e["arrived"])
        task = p.get("original_task_id") if method == "escalate.raise" else p.get("task_id")
        if method in DECISION_METHODS:
            decisions.append((wid, e["seq"], task, p.get("from"), DECISION_METHODS[method], at, ms))
        creates = (creation_key(["task.create", e["arrived"], p.get("from"), p.get("kind"), p.get("input")])
                   if method == "task.create" else
                   creation_key(["escalate.raise", e["arrived"], task]) if method == "escalate.raise" else None)
        moves_to = p.get("state") if method == "task.update" else MOVES[method]
        calls.append((wid, e["seq"], task, method, p.get("from"), e["arrived"],
                      moves_to if isinstance(moves_to, str) else "", creates, at, ms))
    objects = {tid: msgspec.convert(t, Task) for tid, t in snapshot["tasks"].items()}
    # tasks and creating calls with one key, paired in order (tasks by id, calls by seq)
    created: dict[str, Any] = {}
    for key in {c[7] for c in calls if c[7] is not None}:
        ids = sorted(tid for tid, t in objects.items() if (
            creation_key(["escalate.raise", t.created_at, t.supersedes]) if t.supersedes
            else creation_key(["task.create", t.created_at, t.delegator, t.kind, t.input])) == key)
        for tid, c in zip(ids, [c for c in calls if c[7] == key], strict=False):
            created[tid] = ((c[8], c[9]), c[1])
    tasks, reviews = [], []
    for tid, t in objects.items():
        first = created.get(tid, ((t.created_at, epoch_ms(t.created_at)), None))
        naming = [_Call(c[1], c[3], c[4], c[5], c[6], c[8], c[9]) for c in calls if c[2] == tid]
        dated = moves(t, naming, first)
        (decided, decided_ms), decided_seq = dated[-1] if t.state in SETTLED else ((None, None), None)
        rr = t.review_required
        tasks.append((wid, tid, t.kind, t.delegator, t.assignee, t.mode, t.state,
                      None if rr is None else int(rr), first[0][0], first[0][1], first[1],
                      decided, decided_ms, decided_seq))
        states = [h.state for h in t.history]
        n = 0
        for i, h in enumerate(t.history):
            if h.state == "review_requested" and (i == 0 or states[i - 1] != "review_requested"):
                closing = next((j for j in range(i, len(states)) if states[j] != "review_requested"), None)
                (opened, opened_ms), opened_seq = dated[i]
                (closed, closed_ms), closed_seq = dated[closing] if closing else ((None, None), None)
                reviews.append((wid, tid, n, opened, opened_ms, opened_seq, closed, closed_ms, closed_seq,
                                closing and states[closing]))
                n += 1
    counts = [(wid, len(log), len(accepted), len(log) - len(accepted))] if log else []
    return {
        "analytics_tasks": sorted(tasks, key=repr),
        "analytics_reviews": sorted(reviews, key=repr),
        "analytics_decision_log": sorted(decisions, key=repr),
        "analytics_counts": counts,
        "analytics_task_calls": sorted(calls, key=repr),
    }


OPS = st.lists(
    st.tuples(st.sampled_from(wl.ACTIONS), st.integers(0, 7), st.integers(0, 2)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, split=st.integers(0, 60), page=st.integers(1, 7))
def test_live_and_caught_up_tables_equal_a_fold_of_the_log_and_objects(
    ops: list[tuple[str, int, int]], split: int, page: int
) -> None:
    coord = make()
    live = coord.attach(AnalyticsProjection(":memory:"))
    wl.setup(coord)
    tasks: list[str] = []
    for action, t, h in ops[:split]:
        wl.run_one(coord, wl.WS, tasks, action, t, h)
    # one attached half-way: caught up from the log, then live
    later = coord.attach(AnalyticsProjection(":memory:"), page_size=page)
    for action, t, h in ops[split:]:
        wl.run_one(coord, wl.WS, tasks, action, t, h)
    # one attached at the end: caught up only
    after = coord.attach(AnalyticsProjection(":memory:"), page_size=page)
    expected = fold(coord.snapshot(wl.WS))
    for attachment in (live, later, after):
        assert attachment.state == "live"
        assert tables(attachment.projection.connection) == expected


def _times(series: pd.Series) -> list[Any]:
    return [None if pd.isna(v) else pd.Timestamp(v).tz_convert("UTC").isoformat() for v in series]


def _iso(series: pd.Series) -> list[Any]:
    return [None if v is None or pd.isna(v) else pd.Timestamp(v).tz_convert("UTC").isoformat()
            for v in pd.to_datetime(series, utc=True)]


def frame(connection: Any, sql: str) -> pd.DataFrame:
    """A query's rows on a sqlite3 or psycopg connection."""
    cursor = connection.execute(sql)
    return pd.DataFrame(cursor.fetchall(), columns=[d[0] for d in cursor.description])


def assert_matches_chap_analytics(
    connection: Any, frames: chap_analytics.Frames, log: list[dict[str, Any]]
) -> None:
    """Our tables give chap-analytics' figures. One deliberate difference: a
    review opened by task.complete (review_required) is dated at that call
    (its ts, else its arrival); chap-analytics 0.2.4 dates some of those
    passes at their first decision instead, so for those decisions ours is
    checked against the log."""
    ours = frame(
        connection,
        "SELECT seq, task_id, reviewer, kind, ts, requested_at, latency_s FROM analytics_decisions "
        "WHERE kind != 'escalate' ORDER BY seq")
    theirs = frames.decisions.sort_values("seq").reset_index(drop=True)
    assert list(ours["seq"]) == [int(s) for s in theirs["seq"]]
    assert list(ours["task_id"]) == list(theirs["task_id"])
    assert list(ours["reviewer"]) == list(theirs["reviewer"])
    assert list(ours["kind"]) == list(theirs["kind"])
    assert _iso(ours["ts"]) == _times(theirs["ts"])
    opened_by_complete = _opened_by_complete(log)
    for i, seq in enumerate(ours["seq"]):
        if seq in opened_by_complete:
            assert _iso(ours["requested_at"])[i] == opened_by_complete[seq]
        else:
            assert _iso(ours["requested_at"])[i] == _times(theirs["requested_at"])[i]
            assert float(ours["latency_s"][i]) == pytest.approx(float(theirs["latency_s"][i]))
    # escalations: one row per successor task chap-analytics shows, dated at
    # the successor's creation. A task escalated twice has two successors:
    # compared as sorted (task, time) pairs, since ordering by the task alone
    # leaves those two in no particular order on either side.
    escalated = frame(connection, "SELECT task_id, ts FROM analytics_decisions WHERE kind = 'escalate'")
    successors = frames.tasks[frames.tasks["supersedes"].notna()]
    assert sorted(zip(escalated["task_id"], _iso(escalated["ts"]), strict=True)) == sorted(
        zip(successors["supersedes"], _times(successors["created_at"]), strict=True))
    tasks = frame(
        connection,
        "SELECT task_id, kind, delegator, assignee, state, created_at, decided_at "
        "FROM analytics_tasks ORDER BY task_id")
    ref = frames.tasks.sort_values("task_id").reset_index(drop=True)
    for column in ("task_id", "kind", "delegator", "assignee", "state"):
        assert list(tasks[column]) == list(ref[column]), column
    assert _iso(tasks["created_at"]) == _times(ref["created_at"])
    # The second deliberate difference: a task completed by task.complete whose
    # settlement chap-analytics 0.2.4 leaves empty. Its replay does so for an
    # escalation's successor (the coordinator, as 0.3.3, does not make it
    # review_required for its trial mode alone, so task.complete completes it;
    # the replay expects a review there), and where calls state times out of
    # the log's order (it pairs some calls with tasks by time; found by
    # hypothesis: create, create_reviewed, create, a start stated without a
    # zone, then the third task completed without a ts). Ours is that call's
    # time, read from the log.
    completed = _completions(log)
    ours_at = _iso(tasks["decided_at"])
    for i, (theirs_at, state) in enumerate(zip(_times(ref["settled_at"]), ref["state"], strict=True)):
        if theirs_at is None and state == "completed":
            assert ours_at[i] == completed[ref["task_id"][i]]
        else:
            assert ours_at[i] == theirs_at
    # the headline rates read from our tables equal chap-analytics'
    mine = frame(connection, "SELECT kind, count(*) AS n FROM analytics_decisions "
                 "WHERE kind != 'escalate' GROUP BY kind")
    assert dict(zip(mine["kind"], mine["n"], strict=True)) == theirs["kind"].value_counts().to_dict()
    counts = connection.execute("SELECT sum(refused) FROM analytics_counts").fetchone()[0]
    assert counts == len(frames.refusals)


def _opened_by_complete(log: list[dict[str, Any]]) -> dict[int, str]:
    """Decision seq -> when task.complete opened the review it answers."""
    opened: dict[str, str | None] = {}
    out: dict[int, str] = {}
    for e in log:
        call = e.get("envelope")
        if call is None:
            continue
        task = call["params"].get("task_id")
        if call["method"] == "task.complete":
            opened[task] = call_moment(call["params"], e["arrived"])[0]
        elif call["method"] == "review.request":
            opened[task] = None
        elif call["method"].startswith(("decide.", "abstain.")) and opened.get(task):
            out[e["seq"]] = pd.Timestamp(opened[task]).tz_convert("UTC").isoformat()
    return out


def _completions(log: list[dict[str, Any]]) -> dict[str, str]:
    """Task -> the time of the last accepted task.complete naming it."""
    out: dict[str, str] = {}
    for e in log:
        call = e.get("envelope")
        if call is not None and call["method"] == "task.complete":
            params = call["params"]
            out[params["task_id"]] = pd.Timestamp(call_moment(params, e["arrived"])[0]).tz_convert("UTC").isoformat()
    return out


def test_the_tables_match_chap_analytics_on_the_same_log(tmp_path: Path) -> None:
    db = str(tmp_path / "chap.db")
    coord = make(SqliteStore(db))
    live = coord.attach(AnalyticsProjection(str(tmp_path / "live.db")))
    wl.desk(coord)
    # the same file as the store, attached afterwards: caught up
    same = coord.attach(AnalyticsProjection(db))
    log = coord.snapshot(wl.WS)["audit"]
    frames = chap_analytics.frames(chap_analytics.from_sqlite(db, workspace=wl.WS))
    assert len(frames.decisions) >= 7 and len(frames.refusals) >= 1
    for attachment in (live, same):
        assert_matches_chap_analytics(attachment.projection.connection, frames, log)
    coord.close()


# One task escalated twice (accepted both times): two successors of one task.
TWICE_ESCALATED = [("create", 0, 0), ("create", 0, 0), ("escalate", 0, 0), ("escalate", 0, 0),
                   ("start", 3, 0)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
@example(ops=TWICE_ESCALATED)
@example(ops=[("create", 0, 0), ("create_reviewed", 0, 0), ("create", 0, 0), ("start", 0, 0), ("complete", 2, 0)])
def test_chap_analytics_figures_equal_the_projection_for_random_workloads(
    ops: list[tuple[str, int, int]],
) -> None:
    coord = make()
    live = coord.attach(AnalyticsProjection(":memory:"))
    wl.setup(coord)
    wl.run(coord, ops)
    frames = chap_analytics.frames(chap_analytics.from_coordinator(coord, wl.WS))
    assert_matches_chap_analytics(live.projection.connection, frames, coord.snapshot(wl.WS)["audit"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, page=st.integers(1, 7))
@example(ops=TWICE_ESCALATED, page=1)
@example(ops=[("complete", 6, 0)], page=1)  # DESK_OPS' successor, completed unreviewed
def test_calls_in_one_millisecond_are_dated_and_linked_in_log_order(
    ops: list[tuple[str, int, int]], page: int
) -> None:
    # every call arrives in the same millisecond: reviews and creations are
    # told apart by the log's order and the calls' own ts, never by arrival
    coord = Coordinator(clock=StepClock(step_ms=0), ids=CounterIds())
    live = coord.attach(AnalyticsProjection(":memory:"))
    wl.setup(coord)
    wl.run(coord, [*wl.DESK_OPS, *ops])
    after = coord.attach(AnalyticsProjection(":memory:"), page_size=page)
    snapshot = coord.snapshot(wl.WS)
    frames = chap_analytics.frames(chap_analytics.from_coordinator(coord, wl.WS))
    for attachment in (live, after):
        assert tables(attachment.projection.connection) == fold(snapshot)
        assert_matches_chap_analytics(attachment.projection.connection, frames, snapshot["audit"])


def test_the_real_clock_gives_chap_analytics_figures() -> None:
    # several reviews of one task open within a millisecond or two here
    for _ in range(5):
        coord = Coordinator()
        live = coord.attach(AnalyticsProjection(":memory:"))
        wl.desk(coord)
        snapshot = coord.snapshot(wl.WS)
        frames = chap_analytics.frames(chap_analytics.from_coordinator(coord, wl.WS))
        assert_matches_chap_analytics(live.projection.connection, frames, snapshot["audit"])
        assert tables(live.projection.connection) == fold(snapshot)


def test_a_projection_of_the_earlier_schema_is_refused_until_cleared(tmp_path: Path) -> None:
    target = str(tmp_path / "old.db")
    old = sqlite3.connect(target)
    old.execute("CREATE TABLE analytics_tasks (workspace TEXT NOT NULL, task_id TEXT NOT NULL, "
                "state TEXT NOT NULL, created_at TEXT, created_ms BIGINT, PRIMARY KEY (workspace, task_id))")
    old.execute("CREATE TABLE chapline_cursors (projection TEXT NOT NULL, workspace TEXT NOT NULL, "
                "next_seq BIGINT NOT NULL, PRIMARY KEY (projection, workspace))")
    old.execute("INSERT INTO chapline_cursors VALUES ('analytics', 'wsp_desk', 40)")
    old.execute("CREATE VIEW analytics_decisions AS SELECT 1 AS seq")
    old.commit()
    with pytest.raises(ProjectionError, match="no column created_seq") as caught:
        AnalyticsProjection(target)
    statements = str(caught.value).split("(", 1)[1].rsplit(")", 1)[0]
    assert "DROP TABLE analytics_tasks" in statements
    # doing what the message says clears it; the next attach rebuilds from the log
    for statement in statements.split("; "):
        old.execute(statement.replace("DROP TABLE", "DROP TABLE IF EXISTS"))
    old.commit()
    old.close()
    coord = make()
    wl.desk(coord)
    rebuilt = coord.attach(AnalyticsProjection(target))
    assert tables(rebuilt.projection.connection) == fold(coord.snapshot(wl.WS))
    coord.close()


def test_a_task_escalated_twice_has_one_row_per_escalation_dated_as_its_successor() -> None:
    coord = make()
    live = coord.attach(AnalyticsProjection(":memory:"))
    wl.setup(coord)
    wl.run(coord, TWICE_ESCALATED)
    log = coord.snapshot(wl.WS)["audit"]
    raised = [e for e in log if e["envelope"]["method"] == "escalate.raise"]
    frames = chap_analytics.frames(chap_analytics.from_coordinator(coord, wl.WS))
    successors = frames.tasks[frames.tasks["supersedes"].notna()]
    (original,) = {e["envelope"]["params"]["original_task_id"] for e in raised}
    assert list(successors["supersedes"]) == [original, original]
    # each escalation's row is at its call's time, which is when its successor was made
    rows = live.projection.connection.execute(
        "SELECT seq, task_id, ts FROM analytics_decisions WHERE kind = 'escalate' ORDER BY seq").fetchall()
    assert rows == [(e["seq"], original, call_moment(e["envelope"]["params"], e["arrived"])[0])
                    for e in raised]
    assert sorted(_times(successors["created_at"])) == _iso(pd.Series([ts for _, _, ts in rows]))
    assert_matches_chap_analytics(live.projection.connection, frames, log)
    coord.close()


def test_chap_analytics_reads_a_chapline_coordinator_through_every_entry_point() -> None:
    coord = make()
    wl.desk(coord)
    state = chap_analytics.frames(chap_analytics.from_coordinator(coord, wl.WS))
    fetch = watch.coordinator_source(coord, wl.WS, actor=wl.ALICE)
    assert [e["seq"] for e in fetch(0)] == list(range(len(coord.snapshot(wl.WS)["audit"])))
    assert [e["seq"] for e in fetch(30)][0] == 30
    updates: list[Any] = []
    watcher = watch.Watcher(coord, wl.WS, actor=wl.ALICE, on_update=updates.append)
    watcher.poll()
    assert watcher.cursor == len(coord.snapshot(wl.WS)["audit"])
    assert len(watcher.frames.decisions) == len(state.decisions)
    join(coord, "human:zed", wl.WS)
    watcher.poll()
    assert watcher.cursor == len(coord.snapshot(wl.WS)["audit"]) and len(updates) == 2


# -- killed at random moments --------------------------------------------------

_WORKER = """
import random, sys
sys.path.insert(0, {root!r})
from coordinator import Coordinator
from coordinator.projections import AnalyticsProjection
from storage.target import open_store
from tests import projection_workload as wl
db, target, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
coord = Coordinator(open_store(db, watch=True))  # watch: another worker may share the workspace
coord.attach(AnalyticsProjection(target))
if wl.WS not in coord.workspaces:
    wl.setup(coord)
rng = random.Random(seed)
tasks = list(coord.workspaces[wl.WS].tasks)
print("ready", flush=True)
while True:
    wl.run_one(coord, wl.WS, tasks, rng.choice(wl.ACTIONS), rng.randrange(8), rng.randrange(3))
    print("called", flush=True)
"""


def kill_after_some_calls(proc: subprocess.Popen[str], rng: random.Random) -> None:
    """SIGKILL `proc` (a _WORKER) once it has made a random number of calls
    more: it is then in the middle of its next one."""
    assert proc.stdout is not None
    for _ in range(rng.randrange(5, 60)):
        assert proc.stdout.readline() == "called\n", proc.stderr.read() if proc.stderr else ""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("same_file", [False, True])
def test_a_projection_killed_at_random_moments_equals_one_rebuilt_from_the_log(
    tmp_path: Path, same_file: bool
) -> None:
    db = str(tmp_path / "chap.db")
    target = db if same_file else str(tmp_path / "analytics.db")
    script = tmp_path / "worker.py"
    script.write_text(_WORKER.format(root=str(ROOT)))
    rng = random.Random(11)
    for round_ in range(5):
        proc = subprocess.Popen(
            [sys.executable, str(script), db, target, str(round_)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        kill_after_some_calls(proc, rng)
    coord = Coordinator(SqliteStore(db))
    resumed = coord.attach(AnalyticsProjection(target))  # catches up what the last kill left
    rebuilt = coord.attach(AnalyticsProjection(str(tmp_path / "rebuilt.db")))
    snapshot = coord.snapshot(wl.WS)
    assert len(snapshot["audit"]) > 20
    assert tables(resumed.projection.connection) == tables(rebuilt.projection.connection)
    assert tables(resumed.projection.connection) == fold(snapshot)
    # every entry counted once
    counted = resumed.projection.connection.execute("SELECT entries FROM analytics_counts").fetchone()
    assert counted == (len(snapshot["audit"]),)
    coord.close()


# -- restore, snapshot, closing ----------------------------------------------


def test_restore_refuses_to_roll_back_a_workspace_the_store_holds(tmp_path: Path) -> None:
    coord = make(SqliteStore(str(tmp_path / "chap.db")))
    join(coord, wl.ALICE)
    older = coord.snapshot("wsp_l")
    join(coord, wl.BOB)
    newer = coord.snapshot("wsp_l")
    with pytest.raises(RestoreError, match="would lose the store's entries.*overwrite=True"):
        coord.restore(older)
    assert coord.snapshot("wsp_l") == newer
    assert len(coord.store.read_entries("wsp_l")) == 2
    # a log the store's is a prefix of, or the same log, is taken
    assert coord.restore(newer) == ["wsp_l"]
    other = make()
    join(other, wl.CAROL)
    with pytest.raises(RestoreError, match="differing from seq 0"):
        coord.restore(other.snapshot("wsp_l"))
    assert coord.snapshot("wsp_l") == newer
    assert coord.restore(older, overwrite=True) == ["wsp_l"]
    assert coord.snapshot("wsp_l") == older
    assert coord.restore(newer) == ["wsp_l"]  # extends: nothing lost
    coord.close()


def test_snapshot_of_an_unknown_workspace_raises_our_error() -> None:
    coord = make()
    join(coord, wl.ALICE)
    with pytest.raises(UnknownWorkspaceError, match="'wsp_nope'.*held: 'wsp_l'") as caught:
        coord.snapshot("wsp_nope")
    assert caught.value.workspace == "wsp_nope"
    assert str(caught.value).startswith("no workspace 'wsp_nope' is held")


def test_a_coordinator_closes_its_store_and_projections_as_a_context_manager(tmp_path: Path) -> None:
    path = str(tmp_path / "chap.db")
    with Coordinator(SqliteStore(path)) as coord:
        attachment = coord.attach(AnalyticsProjection(str(tmp_path / "a.db")))
        join(coord, wl.ALICE)
    assert attachment.state == "detached"
    with pytest.raises(sqlite3.ProgrammingError):
        attachment.projection.connection.execute("SELECT 1")
    with Coordinator(SqliteStore(path)) as again:
        assert list(again.workspaces) == ["wsp_l"]


# -- chapline serve --projection ---------------------------------------------


def test_serve_runs_the_analytics_projection_and_catches_it_up_at_start(tmp_path: Path) -> None:
    db, target = tmp_path / "chap.db", tmp_path / "analytics.db"
    with Serve(db) as server, httpx.Client(base_url=server.base, timeout=60) as http:  # no projection
        for who in (wl.ALICE, wl.BOB):
            Client(Http(http), "wsp_s").ok("participant.join", frm=who, type="human")
    with Serve(db, "--projection", f"analytics={target}") as server:
        assert f"projecting analytics into {target} (live)" in server.line
        with httpx.Client(base_url=server.base, timeout=60) as http:
            task_id = Client(Http(http), "wsp_s").ok(
                "task.create", frm=wl.ALICE, assignee=wl.BOB, kind="k", input={}
            )["task_id"]
    with sqlite3.connect(target) as connection:
        assert connection.execute("SELECT * FROM analytics_counts").fetchall() == [("wsp_s", 3, 3, 0)]
        assert connection.execute("SELECT task_id, state FROM analytics_tasks").fetchall() == [
            (task_id, "created")
        ]
    # the database file itself as the target, and a bad name refused
    with Serve(db, "--projection", f"analytics={db}") as server:
        with httpx.Client(base_url=server.base, timeout=60) as http:  # serving (its signal handlers are set)
            Client(Http(http), "wsp_s").ok("workspace.describe")
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT entries FROM analytics_counts").fetchall() == [(3,)]
    bad = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--db", str(db), "--projection", "charts=x"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 2 and "expected NAME=TARGET with NAME one of analytics" in bad.stderr
