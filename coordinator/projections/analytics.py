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
  (the last opened before it in the log), latency_s, and the task's kind
  and assignee;
- `analytics_counts`, entries, accepted and refused per workspace;
- `analytics_task_calls`, the accepted calls that create or move a task,
  with the time each is dated by (what the other tables are dated from).

Every time is the one chap-analytics 0.2.4 takes: the call's own
`params.ts` when it reads as a time, else the entry's arrival (times.py).
A task's moves are matched to the calls that made them (the `*_seq`
columns); a move no dated call made keeps the object's own time. Times are
ISO text, with `*_ms` epoch-millisecond twins for arithmetic. The tables
are a function of the log and the task objects. The tables, their SQL and
the fold are written once (sql.py runs them on either database). Rows,
counts and the cursor (`chapline_cursors`) change in one transaction, which
first locks the cursors it moves and skips what another writer already
applied: every entry is applied exactly once, across crashes, restarts and
several processes feeding one target. The target may be the coordinator's
own database (separate tables, its own connection and transaction).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator.engine.canonical import canonical_bytes
from coordinator.errors import CanonicalError
from coordinator.listeners import Change
from coordinator.model import Task
from coordinator.projections.cursor import unapplied
from coordinator.projections.sql import SqlTarget, open_target
from coordinator.projections.times import Moment, call_moment, parse_time

__all__ = ["DECISION_METHODS", "SETTLED", "AnalyticsProjection", "creation_key", "epoch_ms", "moves"]

DECISION_METHODS = {
    "decide.approve": "approve",
    "decide.reject": "reject",
    "decide.override": "override",
    "abstain.declare": "abstain",
    "escalate.raise": "escalate",
}
# The states in which chap-analytics counts a task as settled.
SETTLED = frozenset({"completed", "declined", "abstained", "escalated", "cancelled", "superseded"})
# The calls that date a task's moves, and the states each can move the task
# it names into (task.update: the state it asks for).
_MOVES = {
    "task.create": "",
    "task.update": None,
    "task.complete": "completed review_requested",
    "review.request": "review_requested",
    "decide.approve": "completed review_requested",
    "decide.reject": "declined in_progress",
    "decide.override": "completed",
    "abstain.declare": "abstained",
    "escalate.raise": "escalated",
}

# SQL both SQLite and PostgreSQL take (BIGINT for seq and counts).
_TABLES = (
    """CREATE TABLE IF NOT EXISTS analytics_tasks (
    workspace TEXT NOT NULL, task_id TEXT NOT NULL, kind TEXT, delegator TEXT,
    assignee TEXT, mode TEXT, state TEXT NOT NULL, review_required INTEGER,
    created_at TEXT, created_ms DOUBLE PRECISION, created_seq BIGINT,
    decided_at TEXT, decided_ms DOUBLE PRECISION, decided_seq BIGINT,
    PRIMARY KEY (workspace, task_id))""",
    """CREATE TABLE IF NOT EXISTS analytics_reviews (
    workspace TEXT NOT NULL, task_id TEXT NOT NULL, review_index INTEGER NOT NULL,
    requested_at TEXT NOT NULL, requested_ms DOUBLE PRECISION, requested_seq BIGINT,
    closed_at TEXT, closed_ms DOUBLE PRECISION, closed_seq BIGINT, closed_as TEXT,
    PRIMARY KEY (workspace, task_id, review_index))""",
    """CREATE TABLE IF NOT EXISTS analytics_decision_log (
    workspace TEXT NOT NULL, seq BIGINT NOT NULL, task_id TEXT, reviewer TEXT,
    kind TEXT NOT NULL, ts TEXT NOT NULL, ts_ms DOUBLE PRECISION,
    PRIMARY KEY (workspace, seq))""",
    """CREATE TABLE IF NOT EXISTS analytics_counts (
    workspace TEXT PRIMARY KEY, entries BIGINT NOT NULL, accepted BIGINT NOT NULL,
    refused BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS analytics_task_calls (
    workspace TEXT NOT NULL, seq BIGINT NOT NULL, task_id TEXT, method TEXT NOT NULL,
    sender TEXT, arrived TEXT NOT NULL, moves TEXT NOT NULL, creates TEXT,
    at TEXT NOT NULL, at_ms DOUBLE PRECISION,
    PRIMARY KEY (workspace, seq))""",
    "CREATE INDEX IF NOT EXISTS analytics_task_calls_task ON analytics_task_calls (workspace, task_id)",
    "CREATE INDEX IF NOT EXISTS analytics_task_calls_creates ON analytics_task_calls (workspace, creates)",
    "CREATE INDEX IF NOT EXISTS analytics_tasks_created ON analytics_tasks (workspace, created_seq)",
)
# Present only in this schema: a table without it was made by an earlier one.
_NEEDS = {"analytics_tasks": "created_seq", "analytics_reviews": "requested_seq"}
_VIEWS = {
    "analytics_decisions": """
SELECT d.workspace, d.seq, d.task_id, d.reviewer, d.kind, d.ts, d.ts_ms,
       r.requested_at, r.requested_ms, r.review_index,
       (d.ts_ms - r.requested_ms) / 1000 AS latency_s,
       t.kind AS task_kind, t.assignee, r.requested_seq
FROM analytics_decision_log d
LEFT JOIN analytics_reviews r ON r.workspace = d.workspace AND r.task_id = d.task_id
     AND r.review_index = (SELECT max(x.review_index) FROM analytics_reviews x
                           WHERE x.workspace = d.workspace AND x.task_id = d.task_id
                             AND x.requested_seq < d.seq)
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
_PUT_CALL = (
    "INSERT INTO analytics_task_calls (workspace, seq, task_id, method, sender, arrived, moves, "
    "creates, at, at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workspace, seq) DO NOTHING"
)
_PUT_TASK = (
    "INSERT INTO analytics_tasks (workspace, task_id, kind, delegator, assignee, mode, state, "
    "review_required, created_at, created_ms, created_seq, decided_at, decided_ms, decided_seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workspace, task_id) DO UPDATE SET "
    "kind = excluded.kind, delegator = excluded.delegator, assignee = excluded.assignee, "
    "mode = excluded.mode, state = excluded.state, review_required = excluded.review_required, "
    "created_at = excluded.created_at, created_ms = excluded.created_ms, "
    "created_seq = excluded.created_seq, decided_at = excluded.decided_at, "
    "decided_ms = excluded.decided_ms, decided_seq = excluded.decided_seq"
)
# A task no creating call in the batch concerns keeps the creation its row has.
_PUT_TASK_KEEPING_CREATED = _PUT_TASK[: _PUT_TASK.index("created_at = excluded")] + (
    "decided_at = excluded.decided_at, decided_ms = excluded.decided_ms, "
    "decided_seq = excluded.decided_seq"
)
_REDATE_TASK = (
    "UPDATE analytics_tasks SET created_at = ?, created_ms = ?, created_seq = ? "
    "WHERE workspace = ? AND task_id = ?"
)
_DROP_REVIEWS = "DELETE FROM analytics_reviews WHERE workspace = ? AND task_id = ?"
_PUT_REVIEW = (
    "INSERT INTO analytics_reviews (workspace, task_id, review_index, requested_at, "
    "requested_ms, requested_seq, closed_at, closed_ms, closed_seq, closed_as) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_CHUNK = 500  # values per IN (...) list


def epoch_ms(iso: Any) -> float | None:
    """Epoch milliseconds of a time in the form times.py reads (None for anything else)."""
    ns = parse_time(iso)
    return None if ns is None else ns / 1_000_000


def creation_key(parts: list[Any]) -> str | None:
    """What pairs a created task with the call that created it: a digest of
    `["task.create", arrived, from, kind, input]` (the call's, or the task's
    created_at, delegator, kind, input) or `["escalate.raise", arrived,
    original task]` (a successor's created_at and supersedes)."""
    try:
        return hashlib.sha256(canonical_bytes(parts)).hexdigest()
    except CanonicalError:
        return None


def _task_key(task: Task) -> str | None:
    if isinstance(task.supersedes, str):
        return creation_key(["escalate.raise", task.created_at, task.supersedes])
    return creation_key(["task.create", task.created_at, task.delegator, task.kind, task.input])


@dataclass(frozen=True)
class _Call:
    """A dated call, as analytics_task_calls holds it."""

    seq: int
    method: str
    sender: Any
    arrived: str
    moves: str
    at: str
    at_ms: float | None


Dated = tuple[Moment, int | None]  # a time and the seq of the call it comes from


def moves(task: Task, calls: Sequence[_Call], created: Dated) -> list[Dated]:
    """The time and seq of each move in the task's history: the first is its
    creation (`created`); each later one, the first call naming the task after
    the previous match that arrived when the move was made, was sent by the
    one who made it, and can move a task into its state; a move no such call
    made keeps its own time (seq None)."""
    if not task.history:
        return []
    out = [created]
    position = 0
    for record in task.history[1:]:
        for i in range(position, len(calls)):
            call = calls[i]
            if call.arrived == record.ts and call.sender == record.from_ and record.state in call.moves.split():
                out.append(((call.at, call.at_ms), call.seq))
                position = i + 1
                break
        else:
            out.append(((record.ts, epoch_ms(record.ts)), None))
    return out


@dataclass
class _Fold:
    """What a run of changes does to the tables: counts to add per
    workspace, decision and call rows, and each task's latest object."""

    counts: dict[str, list[int]] = field(default_factory=dict)  # entries, accepted, refused
    decisions: list[tuple[Any, ...]] = field(default_factory=list)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    tasks: dict[tuple[str, str], Task] = field(default_factory=dict)
    next_seqs: dict[str, int] = field(default_factory=dict)
    # what may change a task's creation: a creating call here, or the whole
    # workspace handed over (the end of a catch-up)
    creates: dict[str, set[str]] = field(default_factory=dict)
    whole: set[str] = field(default_factory=set)


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
            method = entry.envelope.get("method")
            params = entry.envelope.get("params")
            if isinstance(method, str) and method in _MOVES and isinstance(params, dict):
                _fold_call(out, wid, entry.seq, entry.arrived, method, params)
        if change.current is not None:
            out.whole.add(wid)
        for objects in (change.objects, change.current):
            if objects:
                for task in (objects.get("tasks") or {}).values():
                    if isinstance(task, Task):
                        out.tasks[(wid, task.id)] = task
    return out


def _fold_call(out: _Fold, wid: str, seq: int, arrived: str, method: str, params: dict[str, Any]) -> None:
    at, at_ms = call_moment(params, arrived)
    sender = params.get("from")
    escalate = method == "escalate.raise"
    task_id = _text(params.get("original_task_id" if escalate else "task_id"))
    kind = DECISION_METHODS.get(method)
    if kind is not None:
        out.decisions.append((wid, seq, task_id, _text(sender), kind, at, at_ms))
    moves_to = _MOVES[method]
    if moves_to is None:  # task.update
        moves_to = _text(params.get("state")) or ""
    if method == "task.create":
        creates = creation_key(["task.create", arrived, sender, params.get("kind"), params.get("input")])
    elif escalate:
        creates = creation_key(["escalate.raise", arrived, task_id])
    else:
        creates = None
    if creates is not None:
        out.creates.setdefault(wid, set()).add(creates)
    out.calls.append((wid, seq, task_id, method, _text(sender), arrived, moves_to, creates, at, at_ms))


class AnalyticsProjection:
    """The analytics tables in `target`: a SQLite file (":memory:" keeps them
    in this process only) or a PostgreSQL database named by a postgresql://
    URI. `name` keys its cursors. Raises ProjectionError when the target
    cannot be opened, or holds analytics tables of an earlier schema (the
    message gives the statements that clear them; the next attach rebuilds
    them from the store)."""

    def __init__(self, target: str, *, name: str = "analytics") -> None:
        self.name = name
        self.target = target
        self.db = open_target(target)
        quoted = name.replace("'", "''")
        rebuild = "; ".join([
            "DROP VIEW analytics_decisions",
            *(f"DROP TABLE {t}" for t in ("analytics_tasks", "analytics_reviews",
                                          "analytics_decision_log", "analytics_counts",
                                          "analytics_task_calls")),
            f"DELETE FROM chapline_cursors WHERE projection = '{quoted}'",
        ])
        try:
            self.db.create(_TABLES, _VIEWS, _NEEDS, rebuild)
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
            rows = _fold(unapplied(changes, held, db.where))
            with db.writes():
                db.executemany(_ADD_COUNTS, [(w, *n) for w, n in sorted(rows.counts.items())])
                db.executemany(_PUT_DECISION, rows.decisions)
                db.executemany(_PUT_CALL, rows.calls)
            tasks, kept, redated, reviews = _task_rows(db, rows)
            with db.writes():
                db.executemany(_PUT_TASK, tasks)
                db.executemany(_PUT_TASK_KEEPING_CREATED, kept)
                db.executemany(_REDATE_TASK, redated)
                db.executemany(_DROP_REVIEWS, [row[:2] for row in (*tasks, *kept)])
                db.executemany(_PUT_REVIEW, reviews)
                db.advance_cursors(self.name, rows.next_seqs)

    def close(self) -> None:
        self.db.close()


def _task_rows(
    db: SqlTarget, fold: _Fold
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]], list[list[Any]]]:
    """The rows of the tasks `fold` holds, dated by the calls the target
    holds: those whose creation may have changed, those whose creation stays
    as the table has it (the row's creation is only a default for a new row),
    the new creation dates of other tasks sharing a creation key with them,
    and their review passes."""
    by_workspace: dict[str, list[Task]] = {}
    for (wid, _), task in sorted(fold.tasks.items()):
        by_workspace.setdefault(wid, []).append(task)
    rows: list[tuple[Any, ...]] = []
    kept: list[tuple[Any, ...]] = []
    redated: list[tuple[Any, ...]] = []
    reviews: list[list[Any]] = []
    for wid, group in by_workspace.items():
        calls = _calls_naming(db, wid, [task.id for task in group])
        fresh = fold.creates.get(wid)
        dating = [t for t in group if wid in fold.whole or (fresh and _task_key(t) in fresh)]
        created, others = _creations(db, wid, dating)
        redated.extend((*moment, seq, wid, task_id) for task_id, (moment, seq) in others.items())
        for task in group:
            first = created.get(task.id)
            if first is None:
                first = ((task.created_at, epoch_ms(task.created_at)), None)
            dated = moves(task, calls.get(task.id, []), first)
            (rows if task.id in created else kept).append(_task_row(wid, task, first, dated))
            reviews.extend(_passes(wid, task, dated))
    return rows, kept, redated, reviews


def _calls_naming(db: SqlTarget, wid: str, task_ids: list[str]) -> dict[str, list[_Call]]:
    out: dict[str, list[_Call]] = {}
    select = "SELECT task_id, seq, method, sender, arrived, moves, at, at_ms FROM analytics_task_calls"
    for task_id, *fields in _rows_in(db, select, wid, "task_id", task_ids, "ORDER BY seq"):
        out.setdefault(task_id, []).append(_Call(*fields))
    return out


def _creations(db: SqlTarget, wid: str, group: list[Task]) -> tuple[dict[str, Dated], dict[str, Dated]]:
    """Each task's creating call: tasks and calls with one creation key are
    paired in order (tasks by id, calls by seq), so that tasks no log tells
    apart (made in one millisecond, alike but for their ts) are dated the same
    way whichever order the projection saw them in. Also the tasks already in
    the tables whose pairing that changes."""
    if not group:
        return {}, {}
    keys = {task.id: _task_key(task) for task in group}
    wanted = sorted({key for key in keys.values() if key is not None})
    calls: dict[str, list[tuple[int, str, float | None]]] = {}
    select = "SELECT creates, seq, at, at_ms FROM analytics_task_calls"
    for key, seq, at, at_ms in _rows_in(db, select, wid, "creates", wanted, "ORDER BY seq"):
        calls.setdefault(key, []).append((int(seq), at, at_ms))
    members: dict[str, set[str]] = {}
    for task_id, key in keys.items():
        if key is not None:
            members.setdefault(key, set()).add(task_id)
    seqs = {seq: key for key, found in calls.items() for seq, _, _ in found}
    select = "SELECT task_id, created_seq FROM analytics_tasks"
    for task_id, seq in _rows_in(db, select, wid, "created_seq", sorted(seqs)):
        members[seqs[int(seq)]].add(task_id)
    paired: dict[str, Dated] = {}
    for key, ids in members.items():
        for task_id, (seq, at, at_ms) in zip(sorted(ids), calls.get(key, []), strict=False):
            paired[task_id] = ((at, at_ms), seq)
    created = {}
    for task in group:
        created[task.id] = paired.pop(task.id, ((task.created_at, epoch_ms(task.created_at)), None))
    return created, paired


def _rows_in(
    db: SqlTarget, select: str, wid: str, column: str, values: Sequence[Any], order: str = ""
) -> Iterator[Any]:
    """The rows of `select` in workspace `wid` whose `column` is one of
    `values`, asked in chunks of `_CHUNK` (each chunk in `order`)."""
    for i in range(0, len(values), _CHUNK):
        chunk = values[i : i + _CHUNK]
        marks = ", ".join("?" * len(chunk))
        yield from db.execute(f"{select} WHERE workspace = ? AND {column} IN ({marks}) {order}", (wid, *chunk))


def _task_row(wid: str, task: Task, created: Dated, dated: list[Dated]) -> tuple[Any, ...]:
    (created_at, created_ms), created_seq = created
    settled = task.state in SETTLED and dated
    (decided_at, decided_ms), decided_seq = dated[-1] if settled else ((None, None), None)
    return (
        wid,
        task.id,
        _text(task.kind),
        _text(task.delegator),
        _text(task.assignee),
        _text(task.mode),
        task.state,
        None if task.review_required is None else int(bool(task.review_required)),
        created_at,
        created_ms,
        created_seq,
        decided_at,
        decided_ms,
        decided_seq,
    )


def _passes(wid: str, task: Task, dated: list[Dated]) -> list[list[Any]]:
    """The task's review passes: each move into review_requested, and what closed it."""
    passes: list[list[Any]] = []
    previous = None
    for record, ((at, at_ms), seq) in zip(task.history, dated, strict=True):
        if record.state == "review_requested" and previous != "review_requested":
            passes.append([wid, task.id, len(passes), at, at_ms, seq, None, None, None, None])
        elif record.state != "review_requested" and previous == "review_requested":
            passes[-1][6:10] = [at, at_ms, seq, record.state]
        previous = record.state
    return passes


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
