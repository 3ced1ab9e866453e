"""The analytics projection: live review figures in SQLite or PostgreSQL tables.

Attach it (`coord.attach(AnalyticsProjection("analytics.db"))` or
`AnalyticsProjection("postgresql://...")`, or `chapline serve --projection
analytics=TARGET`) and any SQL tool can read, as calls arrive:

- `analytics_tasks`, one row per task (its current object): kind,
  delegator, assignee, mode, state, review_required, created_at and
  decided_at (when it reached a settled state: completed, declined,
  abstained, escalated, cancelled, superseded; NULL while open);
- `analytics_reviews`, one row per review pass (a move into
  `review_requested` in the task's history): requested_at, closed_at and
  the state it closed into;
- `analytics_decision_log`, one row per accepted decision entry (approve,
  reject, override, abstain, escalate): seq, task, reviewer, time;
- `analytics_decisions`, a view adding the pass the decision answered
  (requested_at), latency_s, and the task's kind and assignee;
- `analytics_counts`, entries, accepted and refused per workspace.

Times are the entries' ISO text, with `*_ms` epoch-millisecond twins for
arithmetic. The tasks and reviews are a function of the task objects; the
decisions and counts, of the log. The tables, their SQL and the fold are
written once (sql.py runs them on either database). Rows, counts and the
cursor (`chapline_cursors`) change in one transaction, which first locks the
cursors it moves and skips what another writer already applied: every entry
is applied exactly once, across crashes, restarts and several processes
feeding one target. The target may be the coordinator's own database
(separate tables, its own connection and transaction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from coordinator.listeners import Change
from coordinator.model import Task
from coordinator.projections.sql import ProjectionError, open_target

__all__ = ["DECISION_METHODS", "SETTLED", "AnalyticsProjection", "epoch_ms"]

DECISION_METHODS = {
    "decide.approve": "approve",
    "decide.reject": "reject",
    "decide.override": "override",
    "abstain.declare": "abstain",
    "escalate.raise": "escalate",
}
# The states in which chap-analytics counts a task as settled.
SETTLED = frozenset({"completed", "declined", "abstained", "escalated", "cancelled", "superseded"})

# SQL both SQLite and PostgreSQL take (times in ms need BIGINT on PostgreSQL).
_TABLES = (
    """CREATE TABLE IF NOT EXISTS analytics_tasks (
    workspace TEXT NOT NULL, task_id TEXT NOT NULL, kind TEXT, delegator TEXT,
    assignee TEXT, mode TEXT, state TEXT NOT NULL, review_required INTEGER,
    created_at TEXT, created_ms BIGINT, decided_at TEXT, decided_ms BIGINT,
    PRIMARY KEY (workspace, task_id))""",
    """CREATE TABLE IF NOT EXISTS analytics_reviews (
    workspace TEXT NOT NULL, task_id TEXT NOT NULL, review_index INTEGER NOT NULL,
    requested_at TEXT NOT NULL, requested_ms BIGINT, closed_at TEXT, closed_ms BIGINT,
    closed_as TEXT,
    PRIMARY KEY (workspace, task_id, review_index))""",
    """CREATE TABLE IF NOT EXISTS analytics_decision_log (
    workspace TEXT NOT NULL, seq BIGINT NOT NULL, task_id TEXT, reviewer TEXT,
    kind TEXT NOT NULL, ts TEXT NOT NULL, ts_ms BIGINT,
    PRIMARY KEY (workspace, seq))""",
    """CREATE TABLE IF NOT EXISTS analytics_counts (
    workspace TEXT PRIMARY KEY, entries BIGINT NOT NULL, accepted BIGINT NOT NULL,
    refused BIGINT NOT NULL)""",
)
_VIEWS = {
    "analytics_decisions": """
SELECT d.workspace, d.seq, d.task_id, d.reviewer, d.kind, d.ts, d.ts_ms,
       r.requested_at, r.requested_ms, r.review_index,
       CAST(d.ts_ms - r.requested_ms AS DOUBLE PRECISION) / 1000 AS latency_s,
       t.kind AS task_kind, t.assignee
FROM analytics_decision_log d
LEFT JOIN analytics_reviews r ON r.workspace = d.workspace AND r.task_id = d.task_id
     AND r.review_index = (SELECT max(x.review_index) FROM analytics_reviews x
                           WHERE x.workspace = d.workspace AND x.task_id = d.task_id
                             AND x.requested_ms <= d.ts_ms)
LEFT JOIN analytics_tasks t ON t.workspace = d.workspace AND t.task_id = d.task_id""",
}

_ADD_COUNTS = (
    "INSERT INTO analytics_counts (workspace, entries, accepted, refused) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (workspace) DO UPDATE SET "
    "entries = analytics_counts.entries + excluded.entries, "
    "accepted = analytics_counts.accepted + excluded.accepted, "
    "refused = analytics_counts.refused + excluded.refused"
)
_PUT_DECISION = (
    "INSERT INTO analytics_decision_log (workspace, seq, task_id, reviewer, kind, ts, ts_ms) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workspace, seq) DO UPDATE SET "
    "task_id = excluded.task_id, reviewer = excluded.reviewer, kind = excluded.kind, "
    "ts = excluded.ts, ts_ms = excluded.ts_ms"
)
_PUT_TASK = (
    "INSERT INTO analytics_tasks (workspace, task_id, kind, delegator, assignee, mode, state, "
    "review_required, created_at, created_ms, decided_at, decided_ms) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workspace, task_id) DO UPDATE SET "
    "kind = excluded.kind, delegator = excluded.delegator, assignee = excluded.assignee, "
    "mode = excluded.mode, state = excluded.state, review_required = excluded.review_required, "
    "created_at = excluded.created_at, created_ms = excluded.created_ms, "
    "decided_at = excluded.decided_at, decided_ms = excluded.decided_ms"
)
_DROP_REVIEWS = "DELETE FROM analytics_reviews WHERE workspace = ? AND task_id = ?"
_PUT_REVIEW = (
    "INSERT INTO analytics_reviews (workspace, task_id, review_index, requested_at, "
    "requested_ms, closed_at, closed_ms, closed_as) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def epoch_ms(iso: Any) -> int | None:
    """Milliseconds since the epoch of an entry's `YYYY-MM-DDTHH:MM:SS.mmmZ`
    (None for anything else)."""
    if not isinstance(iso, str) or not iso.endswith("Z"):
        return None
    try:
        moment = datetime.fromisoformat(iso[:-1]).replace(tzinfo=UTC)
    except ValueError:
        return None
    return round(moment.timestamp() * 1000)


@dataclass
class _Fold:
    """What a run of changes does to the tables: counts to add per
    workspace, decision rows, and each task's latest object."""

    counts: dict[str, list[int]] = field(default_factory=dict)  # entries, accepted, refused
    decisions: list[tuple[Any, ...]] = field(default_factory=list)
    tasks: dict[tuple[str, str], Task] = field(default_factory=dict)
    next_seqs: dict[str, int] = field(default_factory=dict)


def _fold(changes: Sequence[Change]) -> _Fold:
    """The rows `changes` (in log order) add or replace."""
    out = _Fold()
    for change in changes:
        entry, wid = change.entry, change.workspace
        out.next_seqs[wid] = entry.seq + 1
        accepted = entry.envelope is not None
        counts = out.counts.setdefault(wid, [0, 0, 0])
        counts[0] += 1
        counts[1 if accepted else 2] += 1
        if accepted and isinstance(entry.envelope, dict):
            kind = DECISION_METHODS.get(entry.envelope.get("method"))  # type: ignore[arg-type]
            if kind is not None:
                params = entry.envelope.get("params") or {}
                task_id = params.get("original_task_id" if kind == "escalate" else "task_id")
                reviewer = params.get("from")
                out.decisions.append((
                    wid,
                    entry.seq,
                    _text(task_id),
                    _text(reviewer),
                    kind,
                    entry.arrived,
                    epoch_ms(entry.arrived),
                ))
        for objects in (change.objects, change.current):
            if objects:
                for task in (objects.get("tasks") or {}).values():
                    if isinstance(task, Task):
                        out.tasks[(wid, task.id)] = task
    return out


def _unapplied(changes: Sequence[Change], cursors: dict[str, int], where: str) -> list[Change]:
    """The changes at or past each workspace's cursor (the others were applied,
    by this writer or another); raises ProjectionError if they leave a gap."""
    expected = dict(cursors)
    fresh = []
    for change in changes:
        wid, seq = change.workspace, change.entry.seq
        want = expected.get(wid, 0)
        if seq < want:
            continue
        if seq > want:
            raise ProjectionError(
                where,
                f"{where}, workspace {wid!r}: the projection's cursor is at seq {want} but it was "
                f"handed seq {seq}; it catches up from its cursor on the next retry",
            )
        expected[wid] = seq + 1
        fresh.append(change)
    return fresh


class AnalyticsProjection:
    """The analytics tables in `target`: a SQLite file (":memory:" keeps them
    in this process only) or a PostgreSQL database named by a postgresql://
    URI. `name` keys its cursors. Raises ProjectionError when the target
    cannot be opened."""

    def __init__(self, target: str, *, name: str = "analytics") -> None:
        self.name = name
        self.target = target
        self.db = open_target(target)
        try:
            self.db.create(_TABLES, _VIEWS)
        except BaseException:
            self.db.close()  # nobody else holds it: a failed open leaks no connection
            raise

    @property
    def connection(self) -> Any:
        """The target's DB-API connection (sqlite3 or psycopg), to read the tables."""
        return self.db.connection

    def cursors(self) -> dict[str, int]:
        return self.db.load_cursors(self.name)

    def apply(self, changes: Sequence[Change]) -> None:
        db = self.db
        with db.transaction():
            held = db.lock_cursors(self.name, {change.workspace for change in changes})
            rows = _fold(_unapplied(changes, held, db.where))
            tasks = sorted(rows.tasks.items())
            with db.writes():
                db.executemany(_ADD_COUNTS, [(w, *n) for w, n in sorted(rows.counts.items())])
                db.executemany(_PUT_DECISION, rows.decisions)
                db.executemany(_PUT_TASK, [_task_row(wid, task) for (wid, _), task in tasks])
                db.executemany(_DROP_REVIEWS, [key for key, _ in tasks])
                db.executemany(_PUT_REVIEW, [p for (wid, _), task in tasks for p in _passes(wid, task)])
                db.advance_cursors(self.name, rows.next_seqs)

    def close(self) -> None:
        self.db.close()


def _task_row(wid: str, task: Task) -> tuple[Any, ...]:
    history = task.history
    decided = history[-1].ts if task.state in SETTLED and history else None
    return (
        wid,
        task.id,
        _text(task.kind),
        _text(task.delegator),
        _text(task.assignee),
        _text(task.mode),
        task.state,
        None if task.review_required is None else int(bool(task.review_required)),
        task.created_at,
        epoch_ms(task.created_at),
        decided,
        epoch_ms(decided),
    )


def _passes(wid: str, task: Task) -> list[list[Any]]:
    """The task's review passes: each move into review_requested, and what closed it."""
    passes: list[list[Any]] = []
    previous = None
    for record in task.history:
        if record.state == "review_requested" and previous != "review_requested":
            passes.append([wid, task.id, len(passes), record.ts, epoch_ms(record.ts), None, None, None])
        elif record.state != "review_requested" and previous == "review_requested":
            passes[-1][5:8] = [record.ts, epoch_ms(record.ts), record.state]
        previous = record.state
    return passes


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
