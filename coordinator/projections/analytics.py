"""The analytics projection: live review figures in SQLite tables.

Attach it (`coord.attach(AnalyticsProjection("analytics.db"))`, or
`chapline serve --projection analytics=analytics.db`) and any SQL tool can
read, as calls arrive:

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
decisions and counts, of the log. Rows, counts and the cursor
(`chapline_cursors`) change in one transaction: every entry is applied
exactly once, across crashes and restarts. The file may be the coordinator's
own SQLite file (separate tables, its own connection).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from coordinator.listeners import Change
from coordinator.model import Task
from coordinator.projections.cursor import SqliteCursors, open_sqlite

__all__ = ["AnalyticsProjection", "DECISION_METHODS", "SETTLED"]

DECISION_METHODS = {
    "decide.approve": "approve",
    "decide.reject": "reject",
    "decide.override": "override",
    "abstain.declare": "abstain",
    "escalate.raise": "escalate",
}
# The states in which chap-analytics counts a task as settled.
SETTLED = frozenset({"completed", "declined", "abstained", "escalated", "cancelled", "superseded"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS analytics_tasks (
    workspace TEXT NOT NULL, task_id TEXT NOT NULL, kind TEXT, delegator TEXT,
    assignee TEXT, mode TEXT, state TEXT NOT NULL, review_required INTEGER,
    created_at TEXT, created_ms INTEGER, decided_at TEXT, decided_ms INTEGER,
    PRIMARY KEY (workspace, task_id));
CREATE TABLE IF NOT EXISTS analytics_reviews (
    workspace TEXT NOT NULL, task_id TEXT NOT NULL, review_index INTEGER NOT NULL,
    requested_at TEXT NOT NULL, requested_ms INTEGER, closed_at TEXT, closed_ms INTEGER,
    closed_as TEXT,
    PRIMARY KEY (workspace, task_id, review_index));
CREATE TABLE IF NOT EXISTS analytics_decision_log (
    workspace TEXT NOT NULL, seq INTEGER NOT NULL, task_id TEXT, reviewer TEXT,
    kind TEXT NOT NULL, ts TEXT NOT NULL, ts_ms INTEGER,
    PRIMARY KEY (workspace, seq));
CREATE TABLE IF NOT EXISTS analytics_counts (
    workspace TEXT PRIMARY KEY, entries INTEGER NOT NULL, accepted INTEGER NOT NULL,
    refused INTEGER NOT NULL);
CREATE VIEW IF NOT EXISTS analytics_decisions AS
SELECT d.workspace, d.seq, d.task_id, d.reviewer, d.kind, d.ts, d.ts_ms,
       r.requested_at, r.requested_ms, r.review_index,
       (d.ts_ms - r.requested_ms) / 1000.0 AS latency_s,
       t.kind AS task_kind, t.assignee
FROM analytics_decision_log d
LEFT JOIN analytics_reviews r ON r.workspace = d.workspace AND r.task_id = d.task_id
     AND r.review_index = (SELECT max(x.review_index) FROM analytics_reviews x
                           WHERE x.workspace = d.workspace AND x.task_id = d.task_id
                             AND x.requested_ms <= d.ts_ms)
LEFT JOIN analytics_tasks t ON t.workspace = d.workspace AND t.task_id = d.task_id;
"""


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


class AnalyticsProjection:
    """The analytics tables in the SQLite file `path` (":memory:" keeps them
    in this process only). `name` tells projections sharing a file apart."""

    def __init__(self, path: str, *, name: str = "analytics") -> None:
        self.name = name
        self.path = path
        self.connection = open_sqlite(path)
        self.connection.executescript(_SCHEMA)
        self._cursors = SqliteCursors(self.connection, name)

    def cursors(self) -> dict[str, int]:
        return self._cursors.load()

    def apply(self, changes: Sequence[Change]) -> None:
        db = self.connection
        db.execute("BEGIN IMMEDIATE")
        try:
            for change in changes:
                self._apply_one(db, change)
            self._cursors.advance(changes)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def close(self) -> None:
        self.connection.close()

    # -- one change -----------------------------------------------------------

    def _apply_one(self, db: sqlite3.Connection, change: Change) -> None:
        entry = change.entry
        wid = change.workspace
        accepted = entry.envelope is not None
        db.execute(
            "INSERT INTO analytics_counts (workspace, entries, accepted, refused) "
            "VALUES (?, 1, ?, ?) ON CONFLICT (workspace) DO UPDATE SET "
            "entries = entries + 1, accepted = accepted + excluded.accepted, "
            "refused = refused + excluded.refused",
            (wid, int(accepted), int(not accepted)),
        )
        if accepted and isinstance(entry.envelope, dict):
            kind = DECISION_METHODS.get(entry.envelope.get("method"))  # type: ignore[arg-type]
            if kind is not None:
                params = entry.envelope.get("params") or {}
                task_id = params.get("original_task_id" if kind == "escalate" else "task_id")
                reviewer = params.get("from")
                db.execute(
                    "INSERT OR REPLACE INTO analytics_decision_log "
                    "(workspace, seq, task_id, reviewer, kind, ts, ts_ms) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        wid,
                        entry.seq,
                        task_id if isinstance(task_id, str) else None,
                        reviewer if isinstance(reviewer, str) else None,
                        kind,
                        entry.arrived,
                        epoch_ms(entry.arrived),
                    ),
                )
        for objects in (change.objects, change.current):
            if objects:
                for task in (objects.get("tasks") or {}).values():
                    if isinstance(task, Task):
                        self._put_task(db, wid, task)

    def _put_task(self, db: sqlite3.Connection, wid: str, task: Task) -> None:
        history = task.history
        decided = history[-1].ts if task.state in SETTLED and history else None
        db.execute(
            "INSERT OR REPLACE INTO analytics_tasks (workspace, task_id, kind, delegator, "
            "assignee, mode, state, review_required, created_at, created_ms, decided_at, "
            "decided_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
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
            ),
        )
        db.execute(
            "DELETE FROM analytics_reviews WHERE workspace = ? AND task_id = ?", (wid, task.id)
        )
        passes: list[list[Any]] = []
        previous = None
        for record in history:
            if record.state == "review_requested" and previous != "review_requested":
                passes.append([wid, task.id, len(passes), record.ts, epoch_ms(record.ts), None, None, None])
            elif record.state != "review_requested" and previous == "review_requested":
                passes[-1][5:8] = [record.ts, epoch_ms(record.ts), record.state]
            previous = record.state
        db.executemany(
            "INSERT INTO analytics_reviews (workspace, task_id, review_index, requested_at, "
            "requested_ms, closed_at, closed_ms, closed_as) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            passes,
        )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
