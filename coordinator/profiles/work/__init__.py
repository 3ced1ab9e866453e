"""x-chapline-work/1.0: plans of dependent tasks, claims with leases and
fencing tokens, capacity, retries (SPECIFICATION.md, "x-chapline-work/1.0").

chapline's own extension profile, never a CHAP one. Plan tasks are CHAP
tasks (in `tasks`: review, override, control and audit apply to them); the
scheduler's state is in the collections `_state` describes. Every
write sweeps expired leases first and decides inside its own write, so the
log records each decision and two coordinators on one store never both
grant what only one may have.
"""

from __future__ import annotations

import logging
from typing import Any

from coordinator.engine.call import Call
from coordinator.engine.canonical import digest
from coordinator.engine.clock import iso_ms
from coordinator.engine.registry import (
    ANY,
    BOOLEAN,
    FROM,
    INTEGER,
    JSON_VALUE,
    STRING,
    Profile,
    profile_name,
    profile_names,
    schema,
)
from coordinator.engine.sweeps import Sweep
from coordinator.engine.wire import (
    NOT_AUTHORISED,
    WORK_CLAIM_REQUIRED,
    WORK_TASK_REDEFINED,
    invalid_params,
)
from coordinator.engine.workspace import Workspace
from coordinator.errors import RpcError
from coordinator.model import HistoryEntry, Member, Review, Task, trial_forces_review
from coordinator.profiles.work._index import ClaimIndex, LiveClaims
from coordinator.profiles.work._plan import SubmittedPlan, parse_plan
from coordinator.profiles.work._state import (
    CLAIMS,
    ENDS,
    FRONTIER,
    WORK,
    admit,
    check_token,
    fail_attempt,
    finish,
    now_ms,
    record,
    release_claim,
    settle_touched,
    sweep,
    to_frontier,
)

__all__ = ["PROFILE", "SWEEPER", "next_expiry", "reclaim_expired"]

log = logging.getLogger("chapline")

PROFILE = Profile("x-chapline-work/1.0")

DEFAULT_LEASE_MS = 60_000
MAX_LEASE_MS = 86_400_000
TOKEN = {"type": "integer", "description": "The fencing token x-chapline.work.claim answered."}
TASK_ID = {"type": "string", "description": "The CHAP task id of a plan task."}
LEASE = {"type": "integer", "description": f"Lease length in ms (default {DEFAULT_LEASE_MS})."}


def _lease_ms(call: Call) -> int:
    value = call.params.get("lease_ms")
    if value is None:
        return DEFAULT_LEASE_MS
    if type(value) is not int or not 1 <= value <= MAX_LEASE_MS:
        raise invalid_params(f"lease_ms must be an integer from 1 to {MAX_LEASE_MS}")
    return value


def _human(call: Call, what: str) -> Member:
    actor = call.actor()
    if actor.type != "human":
        raise RpcError(NOT_AUTHORISED, f"Only a human member may {what}; {actor.uri} is {actor.type}")
    return actor


# -- plans ------------------------------------------------------------------


def _ingest(call: Call, plan: SubmittedPlan, held: dict[str, Any] | None) -> dict[str, str]:
    """Stage the plan's new tasks; task ids by key (old and new)."""
    actor = call.actor()
    ids: dict[str, str] = dict(held["tasks"]) if held else {}
    meta = call.workspace().meta
    new = [t for k, t in plan.tasks.items() if k not in ids]
    for t in new:
        d = t.descriptor
        if d["assignee"] is not None and call.member(d["assignee"]) is None:
            raise invalid_params(
                f"task {t.key!r}: assignee {d['assignee']!r} is not a member; join it first "
                "or give a role"
            )
        ids[t.key] = call.new_id("tsk", "tasks")
    order = len(held["tasks"]) if held else 0
    records: dict[str, dict[str, Any]] = {}
    for t in new:
        d, tid = t.descriptor, ids[t.key]
        review = d["review"] or trial_forces_review(meta, meta.mode)
        call.put("tasks", tid, Task(
            id=tid, kind=d["kind"], state="created", assignee=d["assignee"], delegator=actor.uri,
            input=d["input"], created_at=call.arrived, updated_at=call.arrived, mode=meta.mode,
            history=[HistoryEntry(ts=call.arrived, from_=actor.uri, state="created",
                                  note=f"plan {plan.name}, task {t.key}")],
            review_required=review,
        ))
        records[tid] = {
            "task_id": tid, "plan": plan.name, "key": t.key, "hash": t.hash, "order": order,
            "priority": d["priority"], "reads": d["reads"], "writes": d["writes"],
            "assignee": d["assignee"], "role": d["role"], "retry": d["retry"],
            "deps": [[ids[k], kind] for k, kind in t.after], "dependents": [],
            "waiting": 0, "status": "waiting", "token": 0, "failures": 0, "attempts": [],
            "retry_at": None,
        }
        order += 1
    for tid in list(records):  # dependents, on new and on already held tasks
        for dep_id, kind in records[tid]["deps"]:
            dep = records.get(dep_id) or record(call, dep_id)
            assert dep is not None
            dep = {**dep, "dependents": [*dep["dependents"], [tid, kind]]}
            if dep_id in records:
                records[dep_id] = dep
            else:
                call.put(WORK, dep_id, dep)
    for tid, rec in records.items():
        call.put(WORK, tid, rec)
    for tid in records:  # what each new task waits for, given held ends
        admit(call, tid)
    return ids


@PROFILE.method(
    "x-chapline.plan.submit",
    params=schema(
        ["workspace", "from", "plan", "tasks"],
        plan={"type": "string", "description": "The plan's name; resubmit with the same name."},
        tasks={"type": "array", "items": {"type": "object"}, "description":
               "{key, kind, input, assignee | role, priority, reads, writes, review, retry}",
               "examples": [[{"key": "draft", "kind": "summary", "input": {"topic": "Q3"}, "role": "worker"}]]},
        edges={"type": "array", "items": {"type": "object"},
               "description": '{"from": key, "to": key, "type": "strong" | "weak"}: to waits for from.'},
    ),
    title="Submit a plan",
    description="Submit a plan of dependent tasks; resubmitting it changes nothing and answers "
    "the same task ids, new task keys are added, a changed task is refused.",
    annotations={"idempotentHint": True},
)
def plan_submit(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.workspace()
    call.actor()
    plan = parse_plan(call.params)
    held: dict[str, Any] | None = call.get(WORK, f"plan:{plan.name}")
    if held is not None:
        for key, t in plan.tasks.items():
            tid = held["tasks"].get(key)
            if tid is not None and call.get(WORK, tid)["hash"] != t.hash:
                raise RpcError(
                    WORK_TASK_REDEFINED,
                    f"Plan {plan.name!r} task {key!r} ({tid}) was submitted with a different "
                    "descriptor; resubmit it unchanged, or give the new work a new key",
                    {"plan": plan.name, "key": key, "task_id": tid},
                )
    sweep(call, now_ms(call))
    added = [k for k in plan.tasks if held is None or k not in held["tasks"]]
    if not added:
        assert held is not None
        return {"plan": plan.name, "plan_hash": held["hash"],
                "tasks": {k: held["tasks"][k] for k in plan.tasks}, "added": []}
    ids = _ingest(call, plan, held)
    plan_hash = digest({"plan": plan.name,
                        "tasks": {k: call.get(WORK, tid)["hash"] for k, tid in ids.items()}})
    call.put(WORK, f"plan:{plan.name}", {
        "plan": plan.name, "hash": plan_hash, "tasks": ids,
        "submitted_at": held["submitted_at"] if held else call.arrived,
    })
    return {"plan": plan.name, "plan_hash": plan_hash, "tasks": {k: ids[k] for k in plan.tasks},
            "added": added}


@PROFILE.method(
    "x-chapline.plan.describe",
    read=True,
    params=schema(["workspace", "plan"], from_=FROM, plan=STRING),
    title="Describe a plan",
    description="Each task of a plan: its status, CHAP state, holder, token and attempts.",
)
def plan_describe(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.workspace()
    if call.options.require_read_membership:
        call.actor()
    name = call.require("plan")
    held = call.get(WORK, f"plan:{name}") if isinstance(name, str) else None
    if held is None:
        raise invalid_params(f"Unknown plan: {name!r}; x-chapline.plan.submit it first")
    sweep(call, now_ms(call))  # a read: what a write now would find (nothing is kept)
    out = []
    # Submission order is each task's `order`: a store may give the plan's
    # key -> id object back in another key order.
    for rec in sorted((call.get(WORK, tid) for tid in held["tasks"].values()),
                      key=lambda r: r["order"]):
        tid = rec["task_id"]
        task, claim = call.get("tasks", tid), call.get(CLAIMS, tid)
        out.append({
            "key": rec["key"], "task_id": tid, "status": rec["status"],
            "state": task.state if task else None, "priority": rec["priority"],
            "token": rec["token"], "holder": claim["holder"] if claim else None,
            "lease_expires_at": claim["expires_at"] if claim else None,
            "retry_at": rec["retry_at"], "attempts": rec["attempts"],
            "after": [[call.get(WORK, d)["key"], kind] for d, kind in rec["deps"]],
        })
    return {"plan": name, "tasks": out}


# -- ready work and claims --------------------------------------------------


def _eligible(entry: dict[str, Any], member: Member | None) -> bool:
    if member is None:
        return True
    if entry["assignee"] is not None:
        return bool(entry["assignee"] == member.uri)
    return bool(entry["role"] == member.role)


def _ready(call: Call, now: int, member: Member | None) -> list[tuple[str, dict[str, Any]]]:
    """Claimable now (by `member` if given), best first: the frontier minus
    retry waits, paused tasks and conflicts with live claims."""
    conflict = LiveClaims(call).conflicts()
    out = []
    for tid, entry in call.items(FRONTIER):
        if entry["retry_at_ms"] is not None and entry["retry_at_ms"] > now:
            continue
        if not _eligible(entry, member) or conflict(entry["reads"], entry["writes"]):
            continue
        task = call.get("tasks", tid)
        if task is None or task.paused:
            continue
        out.append((tid, entry))
    out.sort(key=lambda item: (-item[1]["priority"], item[1]["plan"], item[1]["order"]))
    return out


@PROFILE.method(
    "x-chapline.work.ready",
    read=True,
    params=schema(
        ["workspace"], from_=FROM, limit=INTEGER,
        for_={"type": "string", "description": "Only what this member may claim."},
    ),
    title="Ready work",
    description="Plan tasks claimable now, by priority: dependencies met, not held, not in "
    "retry wait, no resource conflict with a held task.",
)
def work_ready(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.workspace()
    if call.options.require_read_membership:
        call.actor()
    who = call.params.get("for")
    member = call.member(who) if who is not None else None
    if who is not None and member is None:
        raise invalid_params(f"for: {who!r} is not a member of this workspace")
    limit = call.params.get("limit", 100)
    if type(limit) is not int or limit < 1:
        raise invalid_params("limit must be a positive integer")
    now = now_ms(call)
    sweep(call, now)  # a read: nothing is kept
    ready = _ready(call, now, member)
    items = [{"task_id": tid, "plan": e["plan"], "key": call.get(WORK, tid)["key"],
              "priority": e["priority"], "assignee": e["assignee"], "role": e["role"]}
             for tid, e in ready[:limit]]
    return {"ready": items, "count": len(ready), "held": LiveClaims(call).count()}


def _capacity(call: Call, holder: str) -> str | None:
    """Why a new claim by `holder` would exceed a cap, or None."""
    caps = call.get(WORK, "config") or {}
    live = LiveClaims(call)
    total = caps.get("workspace_max")
    if total is not None and live.count() >= total:
        return f"the workspace holds {live.count()} live claims of {total}"
    mine = caps.get("agent_max")
    if mine is not None:
        count = live.count(holder)
        if count >= mine:
            return f"{holder} holds {count} live claims of {mine}"
    return None


def _blocked(call: Call, rec: dict[str, Any] | None, entry: dict[str, Any] | None, now: int,
             actor: Member) -> str | None:
    """Why the task cannot be claimed now (not held by another), or None."""
    if rec is None:
        return None
    if entry is None:
        return {"waiting": "its dependencies have not all ended",
                "human": "it waits for a human (x-chapline.work.unblock)",
                "review": "its review is open"}.get(rec["status"], f"it is {rec['status']}")
    if entry["retry_at_ms"] is not None and entry["retry_at_ms"] > now:
        return f"it waits to retry until {rec['retry_at']}"
    if not _eligible(entry, actor):
        who = entry["assignee"] or f"role {entry['role']}"
        return f"it is for {who}"
    task = call.get("tasks", rec["task_id"])
    if task is not None and task.paused:
        return "it is paused"
    clash = LiveClaims(call).conflicts()(entry["reads"], entry["writes"])
    if clash is not None:
        return f"resource {clash} conflicts with a held task"
    return None


@PROFILE.method(
    "x-chapline.work.claim",
    params=schema(["workspace", "from"], task_id=TASK_ID, lease_ms=LEASE),
    title="Claim a task",
    description="Claim a plan task (or, without task_id, the best one ready for you): outcome "
    "claimed (with a lease and fencing token), refreshed, held, full, blocked or unknown.",
)
def work_claim(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.workspace()
    actor = call.actor()
    lease = _lease_ms(call)
    now = now_ms(call)
    sweep(call, now)
    tid = call.params.get("task_id")
    if tid is None:
        ready = _ready(call, now, actor)
        if not ready:
            return {"outcome": "blocked", "task_id": None, "reason": "no task is ready for you"}
        tid = ready[0][0]
    elif not isinstance(tid, str):
        raise invalid_params("task_id must be a string (a plan task's CHAP task id)")
    rec = record(call, tid)
    if rec is None:
        return {"outcome": "unknown", "task_id": tid}
    claim = call.get(CLAIMS, tid)
    expires = now + lease
    if claim is not None and claim["holder"] != actor.uri:
        return {"outcome": "held", "task_id": tid, "held_by": claim["holder"],
                "lease_expires_at": claim["expires_at"]}
    if claim is not None:  # the holder claims again: a longer lease, the same token
        call.put(CLAIMS, tid, {**claim, "expires_ms": expires, "expires_at": iso_ms(expires)})
        return {"outcome": "refreshed", "task_id": tid, "token": claim["token"],
                "lease_expires_at": iso_ms(expires)}
    reason = _blocked(call, rec, call.get(FRONTIER, tid), now, actor)
    if reason is not None:
        return {"outcome": "blocked", "task_id": tid, "reason": reason}
    reason = _capacity(call, actor.uri)
    if reason is not None:
        return {"outcome": "full", "task_id": tid, "reason": reason}
    token = rec["token"] + 1
    call.put(CLAIMS, tid, {"holder": actor.uri, "token": token, "claimed_at": call.arrived,
                           "expires_ms": expires, "expires_at": iso_ms(expires),
                           "reads": rec["reads"], "writes": rec["writes"]})
    call.delete(FRONTIER, tid)
    call.put(WORK, tid, {**rec, "status": "held", "token": token, "retry_at": None})
    task = call.task(tid)
    call.put("tasks", tid, call.advance(
        task, "in_progress", f"claimed by {actor.uri} (token {token})", assignee=actor.uri))
    return {"outcome": "claimed", "task_id": tid, "token": token,
            "lease_expires_at": iso_ms(expires)}


@PROFILE.method(
    "x-chapline.work.heartbeat",
    params=schema(["workspace", "from", "task_id", "token"], task_id=TASK_ID, token=TOKEN,
                  lease_ms=LEASE),
    title="Extend a lease",
    description="Extend the caller's live claim; a stale token is refused (-32960).",
)
def work_heartbeat(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.workspace()
    call.actor()
    tid = call.require("task_id")
    lease = _lease_ms(call)
    now = now_ms(call)
    claim = check_token(call, tid, call.params.get("token"), now)
    sweep(call, now)
    expires = now + lease
    call.put(CLAIMS, tid, {**claim, "expires_ms": expires, "expires_at": iso_ms(expires)})
    return {"task_id": tid, "token": claim["token"], "lease_expires_at": iso_ms(expires)}


@PROFILE.method(
    "x-chapline.work.release",
    params=schema(["workspace", "from", "task_id", "token"], task_id=TASK_ID, token=TOKEN),
    title="Release a claim",
    description="Give a claimed task back, ready for another (no attempt counted).",
)
def work_release(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.workspace()
    call.actor()
    tid = call.require("task_id")
    now = now_ms(call)
    claim = check_token(call, tid, call.params.get("token"), now)
    sweep(call, now)
    rec = record(call, tid)
    assert rec is not None
    release_claim(call, tid)
    entry = {"token": claim["token"], "holder": claim["holder"], "claimed_at": claim["claimed_at"],
             "ended_at": call.arrived, "outcome": "released"}
    rec = {**rec, "status": "ready", "attempts": [*rec["attempts"], entry]}
    call.put(WORK, tid, rec)
    to_frontier(call, rec)
    task = call.task(tid)
    call.put("tasks", tid, call.advance(task, task.state, f"released by {claim['holder']}"))
    return {"task_id": tid, "status": "ready"}


def _review(call: Call, task: Task, actor: Member, output: Any) -> Task:
    reviewers = [m.uri for _, m in call.items("members")
                 if m.type == "human" and m.uri not in (actor.uri, task.assignee)]
    if not reviewers:
        raise RpcError(NOT_AUTHORISED, "This task requires review but no human member other than "
                       "the caller can review it; invite a reviewer first")
    return call.advance(task, "review_requested", "review required; opened on report",
                        review=Review(requested_at=call.arrived, requested_to=reviewers),
                        pending_artefact=output)


@PROFILE.method(
    "x-chapline.work.report",
    params=schema(
        ["workspace", "from", "task_id", "token", "outcome"], task_id=TASK_ID, token=TOKEN,
        outcome={"type": "string", "enum": ["completed", "failed", "blocked"]},
        output=JSON_VALUE, confidence=ANY, error=ANY, retryable=BOOLEAN, question=ANY,
    ),
    title="Report an outcome",
    description="End the caller's claim: completed (opens the review if the task requires one), "
    "failed (retryable: backoff, up to max attempts) or blocked on a human.",
)
def work_report(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.workspace()
    actor = call.actor()
    tid = call.require("task_id")
    outcome = call.require("outcome")
    if outcome not in ("completed", "failed", "blocked"):
        raise invalid_params('outcome must be "completed", "failed" or "blocked"')
    retryable = call.params.get("retryable", True)
    if not isinstance(retryable, bool):
        raise invalid_params("retryable must be true or false")
    now = now_ms(call)
    claim = check_token(call, tid, call.params.get("token"), now)
    sweep(call, now)
    rec = record(call, tid)
    assert rec is not None
    release_claim(call, tid)
    task = call.task(tid)
    p = call.params
    if outcome == "failed":
        note = f"attempt failed ({actor.uri}, token {claim['token']})"
        return {"task_id": tid, **fail_attempt(call, rec, claim, now, call.arrived, "failed", note,
                                               retryable=retryable, error=p.get("error"))}
    entry = {"token": claim["token"], "holder": claim["holder"], "claimed_at": claim["claimed_at"],
             "ended_at": call.arrived, "outcome": outcome}
    if outcome == "blocked":
        entry["question"] = p.get("question")
        call.put(WORK, tid, {**rec, "status": "human", "attempts": [*rec["attempts"], entry]})
        call.put("tasks", tid, call.advance(task, task.state, f"blocked on a human: {p.get('question')}"))
        return {"task_id": tid, "status": "human"}
    rec = {**rec, "attempts": [*rec["attempts"], entry]}
    call.put(WORK, tid, rec)
    if task.review_required:
        call.put("tasks", tid, _review(call, task, actor, p.get("output")))
        call.put(WORK, tid, {**rec, "status": "review"})
        return {"task_id": tid, "status": "review", "state": "review_requested"}
    call.put("tasks", tid, call.advance(task, "completed", output=p.get("output"),
                                        confidence=p.get("confidence")))
    finish(call, tid, "completed")
    return {"task_id": tid, "status": "completed", "state": "completed"}


@PROFILE.method(
    "x-chapline.work.unblock",
    params=schema(["workspace", "from", "task_id"], task_id=TASK_ID, answer=ANY),
    title="Unblock a task",
    description="A human answers a task blocked on a human; it is ready to claim again.",
)
def work_unblock(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.workspace()
    human = _human(call, "unblock a task")
    tid = call.require("task_id")
    rec = record(call, tid)
    if rec is None or rec["status"] != "human":
        raise invalid_params(f"task {tid} is not a plan task blocked on a human")
    sweep(call, now_ms(call))
    rec = {**rec, "status": "ready"}
    call.put(WORK, tid, rec)
    to_frontier(call, rec)
    task = call.task(tid)
    call.put("tasks", tid, call.advance(task, task.state, {"unblocked_by": human.uri,
                                                          "answer": call.params.get("answer")}))
    return {"task_id": tid, "status": "ready"}


SWEEPER = "service:coordinator"


@PROFILE.method(
    "x-chapline.work.sweep",
    params=schema(["workspace"], from_=FROM),
    title="Reclaim expired leases",
    description="Reclaim every expired lease now, as any write would first; recorded only when "
    "one had expired. `Coordinator.sweep()` (and so `chapline serve` on its timer) sends it "
    f"from {SWEEPER}.",
)
def work_sweep(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.workspace()
    reclaimed = sweep(call, now_ms(call))
    if not reclaimed:
        call.answer_without_recording()  # nothing was due (or another writer swept first)
    return {"reclaimed": reclaimed}


def next_expiry(ws: Workspace) -> int | None:
    """The earliest lease expiry (epoch ms) among the workspace's stored
    claims, or None: whether a sweep would reclaim anything yet."""
    return ws.index(CLAIMS, ClaimIndex.of).earliest()


@PROFILE.on_sweep
def reclaim_expired(sweeping: Sweep) -> None:
    """At a sweep, reclaim the workspace's expired leases, if it has any, by
    one `x-chapline.work.sweep` call from SWEEPER (recorded as any call is).
    Reports the plan tasks reclaimed in `sweeping.reclaimed`."""
    ws = sweeping.workspace()
    if ws is None or ws.meta.state == "paused":
        return  # a paused workspace takes no writes: its leases wait for the resume
    if profile_name(PROFILE.name) not in profile_names(ws.meta.profiles):
        return
    expiry = next_expiry(ws)
    if expiry is None or expiry > sweeping.now():
        return
    envelope = {"jsonrpc": "2.0", "method": "x-chapline.work.sweep",
                "params": {"workspace": ws.id, "from": SWEEPER}}
    response = sweeping.dispatch(envelope)
    if "error" in response:
        # A write the store refused (another writer won twice in a row):
        # nothing was applied, and the next sweep or write reclaims them.
        log.info("expired leases in %s were not reclaimed: %s", ws.id, response["error"]["message"])
        return
    sweeping.reclaimed.extend(response["result"]["reclaimed"])


CAP = {"type": ["integer", "null"], "minimum": 0}


@PROFILE.method(
    "x-chapline.work.set_capacity",
    params=schema(["workspace", "from"], workspace_max=CAP, agent_max=CAP),
    title="Set capacity",
    description="Caps on live claims, per workspace and per agent (null: no cap). Lowering a cap "
    "never ends a claim; a holder may always refresh its own.",
)
def work_set_capacity(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.workspace()
    _human(call, "set capacity")
    caps = dict(call.get(WORK, "config") or {})
    for name in ("workspace_max", "agent_max"):
        if name in call.params:
            value = call.params[name]
            if value is not None and (type(value) is not int or value < 0):
                raise invalid_params(f"{name} must be a non-negative integer or null (no cap)")
            caps[name] = value
    sweep(call, now_ms(call))
    call.put(WORK, "config", caps)
    return {"workspace_max": caps.get("workspace_max"), "agent_max": caps.get("agent_max")}


_FENCED = ("task.update", "task.complete")
_OWN = frozenset(m.name for m in PROFILE.methods)  # each reclaims where it decides


@PROFILE.before_write
def _reclaim_first(call: Call) -> None:
    """Before another profile's write naming a plan task: reclaim the leases
    that have ended, so the write meets the task as the clock left it (a
    cancel finds a task whose last attempt's lease has expired failed)."""
    if call.method not in _OWN and record(call, call.params.get("task_id")) is not None:
        sweep(call, now_ms(call))


@PROFILE.after_write
def _fence_and_settle(call: Call) -> None:
    """After any write: a CHAP task.update/task.complete on a held plan task
    must carry the live claim's token; then the scheduler follows what the
    write did to plan tasks (an approval completes, a cancel ends, ...)."""
    touched = call.staged.get("tasks")
    if not touched:
        return
    if call.method in _FENCED:
        tid = call.params.get("task_id")
        rec = record(call, tid)
        if rec is not None and isinstance(tid, str):
            token = call.params.get("token")
            issued = type(token) is int and 0 < token <= rec["token"]  # stale, not absent
            if call.get(CLAIMS, tid) is None and rec["status"] not in ENDS and not issued:
                raise RpcError(
                    WORK_CLAIM_REQUIRED,
                    f"Task {tid} is a plan task: claim it with x-chapline.work.claim and send "
                    "its token (or report with x-chapline.work.report)",
                    {"task_id": tid},
                )
            check_token(call, tid, token, now_ms(call))
    settle_touched(call, list(touched))
