"""x-chapline-work/1.0 scheduler state and its transitions, all staged on a
`Call` so that each decision lands in the call's one write (same CAS, same
audit entry) or not at all.

Three collections (model.EXTENSION_COLLECTIONS), values plain dicts never
changed in place (a transition stages a new dict):

- `x_chapline_work`: per plan task (by CHAP task id) its descriptor facts,
  dependencies, status, last fencing token and attempt history; per plan
  (`plan:<name>`) its hash and task ids; `config` the capacity caps.
- `x_chapline_frontier`: the tasks whose dependencies are met and that wait
  for a claim (status `ready`, or `retry` until `retry_at_ms`). Ready-work
  reads walk this and the claims, never the plan.
- `x_chapline_claims`: the live claims (holder, token, lease expiry),
  indexed in memory by `_index` so that no call walks them all.

Statuses: waiting (dependencies not met), ready, held, retry (backoff after
a failed attempt), human (blocked on a human), review (the CHAP review is
open), and the ends completed, failed, blocked (a strong dependency did not
succeed), cancelled.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from coordinator.engine.call import Call
from coordinator.engine.clock import epoch_ms, iso_ms
from coordinator.engine.wire import WORK_STALE_TOKEN
from coordinator.errors import RpcError
from coordinator.model import Task
from coordinator.profiles.work._index import CLAIMS, LiveClaims
from coordinator.profiles.work._plan import retry_delay_ms

__all__ = [
    "CLAIMS",
    "ENDS",
    "FRONTIER",
    "WORK",
    "admit",
    "check_token",
    "finish",
    "fail_attempt",
    "now_ms",
    "record",
    "release_claim",
    "settle_touched",
    "sweep",
    "to_frontier",
]

WORK = "x_chapline_work"
FRONTIER = "x_chapline_frontier"
ENDS = frozenset({"completed", "failed", "blocked", "cancelled"})
# CHAP task states that end a plan task without success.
_CHAP_FAILED = {"declined": "failed", "cancelled": "cancelled", "superseded": "failed",
                "escalated": "failed", "abstained": "failed"}


def now_ms(call: Call) -> int:
    return epoch_ms(call.arrived)


def record(call: Call, task_id: Any) -> dict[str, Any] | None:
    """The scheduler record of a plan task, or None for any other id."""
    if not isinstance(task_id, str) or task_id.startswith(("plan:", "config")):
        return None
    rec: dict[str, Any] | None = call.get(WORK, task_id)
    return rec


def _put(call: Call, rec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    new = {**rec, **changes}
    call.put(WORK, rec["task_id"], new)
    return new


def _note(call: Call, task_id: str, note: str, state: str | None = None, **fields: Any) -> None:
    """A history entry on the CHAP task (its state kept unless given)."""
    task: Task = call.task(task_id)
    call.put("tasks", task_id, call.advance(task, state or task.state, note, **fields))


def _attempt(rec: dict[str, Any], claim: dict[str, Any], ended_at: str, outcome: str,
             **more: Any) -> list[dict[str, Any]]:
    entry = {"token": claim["token"], "holder": claim["holder"], "claimed_at": claim["claimed_at"],
             "ended_at": ended_at, "outcome": outcome, **{k: v for k, v in more.items() if v is not None}}
    attempts: list[dict[str, Any]] = [*rec["attempts"], entry]
    return attempts


def to_frontier(call: Call, rec: dict[str, Any], retry_at_ms: int | None = None) -> None:
    call.put(FRONTIER, rec["task_id"], {
        "priority": rec["priority"], "order": rec["order"], "plan": rec["plan"],
        "reads": rec["reads"], "writes": rec["writes"],
        "assignee": rec["assignee"], "role": rec["role"], "retry_at_ms": retry_at_ms,
    })


def release_claim(call: Call, task_id: str) -> None:
    call.delete(CLAIMS, task_id)


def check_token(call: Call, task_id: str, token: Any, now: int) -> dict[str, Any]:
    """The caller's live claim on `task_id` with this fencing token, else
    -32960 naming what the token lost to (data: task_id, token, holder,
    current_token)."""
    sender = call.params.get("from")
    claim: dict[str, Any] | None = call.get(CLAIMS, task_id)
    live = claim is not None and claim["expires_ms"] > now
    if live and claim is not None and claim["token"] == token and claim["holder"] == sender:
        return claim
    rec = record(call, task_id)
    current = rec["token"] if rec else None
    if type(token) is not int:
        why = "no fencing token given (send the token x-chapline.work.claim answered)"
    elif claim is None or not live:
        why = "the claim it belonged to has ended (lease expired, released or reported)"
    elif claim["token"] != token:
        why = f"the task has been claimed again since (token {claim['token']})"
    else:
        why = f"the claim is held by {claim['holder']}, not {sender}"
    raise RpcError(
        WORK_STALE_TOKEN,
        f"Stale fencing token {token!r} for task {task_id}: {why}; claim the task again "
        "before writing to it",
        {"task_id": task_id, "token": token, "current_token": current,
         "holder": claim["holder"] if claim and live else None},
    )


def sweep(call: Call, now: int) -> list[str]:
    """Reclaim every expired lease (recorded on the task and in this call's
    entry), earliest expiry first, then by task id; the ids of the tasks
    reclaimed."""
    expired = LiveClaims(call).expired(now)
    for tid, claim in expired:
        rec = record(call, tid)
        release_claim(call, tid)
        if rec is None:
            continue
        task: Task | None = call.get("tasks", tid)
        if task is None or task.state not in ("in_progress", "paused"):
            # Ended or under review by a write the scheduler did not see
            # (another coordinator on the file): follow it, not the lease.
            settle_touched(call, [tid])
            continue
        # The attempt ended with its lease, whichever call reclaims it: the
        # backoff counts from then, so a reader sees the task ready on time.
        note = f"lease of {claim['holder']} (token {claim['token']}) expired; reclaimed"
        fail_attempt(call, rec, claim, claim["expires_ms"], claim["expires_at"], "expired", note,
                     retryable=True)
    return [tid for tid, _ in expired]


def fail_attempt(call: Call, rec: dict[str, Any], claim: dict[str, Any], ended_ms: int, ended_at: str,
                 outcome: str, note: str, *, retryable: bool, error: Any = None) -> dict[str, Any]:
    """An attempt that failed at `ended_ms` (`ended_at`): back off from
    then and retry, or fail for good."""
    failures = rec["failures"] + 1
    attempts = _attempt(rec, claim, ended_at, outcome, error=error)
    if retryable and failures < rec["retry"]["max_attempts"]:
        at = ended_ms + retry_delay_ms(rec["retry"], failures)
        rec = _put(call, rec, status="retry", failures=failures, attempts=attempts, retry_at=iso_ms(at))
        to_frontier(call, rec, at)
        _note(call, rec["task_id"], f"{note}; attempt {failures} of "
              f"{rec['retry']['max_attempts']} failed, retry from {iso_ms(at)}")
        return {"status": "retry", "retry_at": iso_ms(at)}
    rec = _put(call, rec, failures=failures, attempts=attempts)
    why = "not retryable" if not retryable else f"{failures} attempts failed"
    _note(call, rec["task_id"], f"{note}; failed for good ({why})", state="declined")
    finish(call, rec["task_id"], "failed")
    return {"status": "failed"}


def finish(call: Call, task_id: str, status: str) -> None:
    """End a plan task (`status` in ENDS), once (a task already ended keeps
    its end), and decide its dependents again: a strong dependent of
    anything but success is blocked (and ends in turn); one whose
    dependencies have all ended joins the frontier."""
    rec = record(call, task_id)
    if rec is None or rec["status"] in ENDS:
        return
    _settle_dependents(call, _end(call, task_id, status))


def admit(call: Call, task_id: str) -> None:
    """Decide a newly submitted task from what its dependencies (held or
    new) have done so far; a task that an earlier new task's end already
    decided is left as it is."""
    rec = record(call, task_id)
    if rec is None or rec["status"] in ENDS:
        return
    blocker = _follow(call, rec)
    if blocker is not None:
        _note(call, task_id, f"blocked: dependency {blocker['key']} did not succeed")
        _settle_dependents(call, _end(call, task_id, "blocked"))


def _end(call: Call, task_id: str, status: str) -> dict[str, Any]:
    call.delete(FRONTIER, task_id)
    release_claim(call, task_id)
    return _put(call, call.get(WORK, task_id), status=status, retry_at=None)


def _settle_dependents(call: Call, ended: dict[str, Any]) -> None:
    """Decide again every dependent (transitively) of a task that just
    ended. A task reached by several paths is decided on each, but ends at
    most once: only a task not yet ended is looked at."""
    stack = [ended]
    while stack:
        done = stack.pop()
        for dep_id, _ in done["dependents"]:
            dep = record(call, dep_id)
            if dep is None or dep["status"] in ENDS:
                continue
            blocker = _follow(call, dep)
            if blocker is not None:
                _note(call, dep_id, f"blocked: dependency {blocker['key']} ({blocker['task_id']}) "
                      f"{blocker['status']}")
                stack.append(_end(call, dep_id, "blocked"))


def _follow(call: Call, rec: dict[str, Any]) -> dict[str, Any] | None:
    """Bring a task that has not ended in line with its dependencies'
    statuses, read afresh (never a running count, which a second path to
    the same end would decrement twice): the strong dependency that ended
    without success if there is one (the caller blocks the task); else a
    waiting task's count of dependencies not ended, and `ready` (on the
    frontier) when none is left."""
    blocker: dict[str, Any] | None = None
    waiting = 0
    for dep_id, kind in rec["deps"]:
        dep: dict[str, Any] = call.get(WORK, dep_id)
        if dep["status"] not in ENDS:
            waiting += 1
        elif kind == "strong" and dep["status"] != "completed":
            blocker = dep
    if blocker is not None:
        _put(call, rec, waiting=waiting)
        return blocker
    if rec["status"] == "waiting":
        rec = _put(call, rec, waiting=waiting, status="ready" if waiting == 0 else "waiting")
        if waiting == 0:
            to_frontier(call, rec)
    return None


def settle_touched(call: Call, task_ids: Iterable[str]) -> None:
    """Bring the scheduler in line with CHAP task states another method set
    (decide.approve, decide.reject, control.cancel, ...): run after every
    write in a workspace advertising the profile, for the tasks it staged."""
    for tid in task_ids:
        rec = record(call, tid)
        if rec is None or rec["status"] in ENDS:
            continue
        task: Task | None = call.get("tasks", tid)
        state = task.state if task is not None else "cancelled"
        if state == "completed":
            finish(call, tid, "completed")
        elif state in _CHAP_FAILED:
            finish(call, tid, _CHAP_FAILED[state])
        elif state == "review_requested" and rec["status"] != "review":
            release_claim(call, tid)
            call.delete(FRONTIER, tid)
            _put(call, rec, status="review")
        elif state == "in_progress" and rec["status"] == "review":
            to_frontier(call, _put(call, rec, status="ready"))  # revision asked: claim it again
