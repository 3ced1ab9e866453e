"""control/1.0: pause, resume, cancel, snapshot, rollback, supersede and the
mode ceiling, as chap-coordinator 0.3.3 answers them.

Every method stages new values on the call; a rollback is one more call (a
new entry and a new change that puts the snapshot's parts back), so history
is never rewritten.
"""

from __future__ import annotations

import copy
from typing import Any

from msgspec.structs import replace

from coordinator.engine.call import Call
from coordinator.engine.canonical import digest
from coordinator.engine.registry import STRING, Profile, schema
from coordinator.engine.wire import (
    CONTROL_NOT_AUTHORISED,
    MODE_CEILING_EXCEEDED,
    SNAPSHOT_NOT_FOUND,
    WORKSPACE_PAUSED,
    invalid_params,
)
from coordinator.errors import RpcError
from coordinator.model import (
    MODES,
    HistoryEntry,
    Member,
    Snapshot,
    Task,
    mode_le,
    trial_forces_review,
)

__all__ = ["PROFILE"]

PROFILE = Profile("control/1.0")

_SCOPES = ("task", "participant", "workspace")
# States a task never leaves: pause and cancel refuse them, and a snapshot's
# open tasks leave them out.
_ENDED = ("completed", "declined", "cancelled", "superseded")
_DEFAULT_INCLUDE = ("members", "open_tasks", "mode_ceiling")

SCOPE = {
    "type": "string",
    "enum": list(_SCOPES),
    "default": "task",
    "description": "What to act on.",
}
TARGETS = {
    "scope": SCOPE,
    "task_id": STRING,
    "participant_uri": {"type": "string", "description": "The member, for scope participant."},
    "uri": {"type": "string", "description": "Alias of participant_uri."},
    "reason": STRING,
}
MODE = {"type": "string", "enum": list(MODES)}


def _scope(call: Call) -> str:
    scope = call.params.get("scope", "task")
    if not isinstance(scope, str) or scope not in _SCOPES:
        raise invalid_params("scope must be one of task, participant or workspace (default task)")
    return scope


def _wrong_state(action: str, task: Task) -> RpcError:
    return RpcError(CONTROL_NOT_AUTHORISED, f"Cannot {action} {task.state} task")


def _participant(call: Call) -> Member:
    uri = call.params.get("participant_uri") or call.params.get("uri")
    member = call.member(uri)
    if member is None:
        raise invalid_params(f"Unknown participant: {uri} (participant_uri must name a member)")
    return member


@PROFILE.method(
    "control.pause",
    floor=True,
    params=schema(
        ["workspace", "from"],
        **TARGETS,
        in_flight_policy={
            "type": "string",
            "enum": ["allow_to_complete", "interrupt"],
            "description": "allow_to_complete (default) or interrupt.",
        },
    ),
    annotations={"idempotentHint": True},
    title="Pause",
    description="Pause a task (it resumes to the state it was in), a member (no new work "
    "for them) or the whole workspace (most methods answer -32063 until it resumes).",
)
def control_pause(call: Call) -> dict[str, Any]:
    ws = call.workspace()
    scope = _scope(call)
    p = call.params
    if scope == "task":
        task = call.task(p.get("task_id"))
        if task.state in _ENDED:
            raise _wrong_state("pause", task)
        # Pausing a paused task keeps the state to resume to.
        prior = task.paused_from if task.state == "paused" else task.state
        paused = call.advance(task, "paused", f"was {task.state}", paused=True, paused_from=prior)
        call.put("tasks", task.id, paused)
        return {"scope": "task", "task_id": task.id, "state": "paused"}
    if scope == "participant":
        member = _participant(call)
        call.put("members", member.uri, replace(member, paused=True))
        return {
            "scope": "participant",
            "participant_uri": member.uri,
            "paused": True,
            "in_flight_policy": p.get("in_flight_policy", "allow_to_complete"),
        }
    call.set_meta(replace(ws.meta, state="paused"))
    return {"scope": "workspace", "workspace": ws.id, "state": "paused"}


@PROFILE.method(
    "control.resume",
    floor=True,
    pause_exempt=True,
    params=schema(["workspace", "from"], **TARGETS),
    title="Resume",
    description="Resume a paused task (back to its prior state), member or workspace.",
)
def control_resume(call: Call) -> dict[str, Any]:
    ws = call.workspace()
    scope = _scope(call)
    if scope == "task":
        task = call.task(call.params.get("task_id"))
        if task.state != "paused":
            raise _wrong_state("resume", task)
        back = task.paused_from or "in_progress"
        call.put("tasks", task.id, call.advance(task, back, paused=False, paused_from=None))
        return {"scope": "task", "task_id": task.id, "state": back}
    if scope == "participant":
        member = _participant(call)
        call.put("members", member.uri, replace(member, paused=False))
        return {"scope": "participant", "participant_uri": member.uri, "paused": False}
    call.set_meta(replace(ws.meta, state="active"))
    return {"scope": "workspace", "workspace": ws.id, "state": "active"}


@PROFILE.method(
    "control.cancel",
    floor=True,
    params=schema(["workspace", "from", "task_id"], task_id=STRING, reason=STRING),
    annotations={"destructiveHint": True},
    title="Cancel a task",
    description="Cancel a task that is not completed, declined, cancelled or superseded.",
)
def control_cancel(call: Call) -> dict[str, Any]:
    call.workspace()
    task = call.task(call.params.get("task_id"))
    if task.state in _ENDED:
        raise _wrong_state("cancel", task)
    call.put("tasks", task.id, call.advance(task, "cancelled", call.params.get("reason")))
    return {"state": "cancelled"}


def _parts(call: Call, name: str, default: tuple[str, ...] | list[Any]) -> list[Any]:
    """`include` / `what_to_restore`: absent or null means `default`."""
    value = call.params.get(name)
    if value is None:
        return list(default)
    if not isinstance(value, list):
        raise invalid_params(f'{name} must be an array such as ["members", "mode_ceiling"]')
    if not value:
        raise invalid_params(f"{name} must not be empty")
    return value


def _member_part(m: Member) -> dict[str, Any]:
    out: dict[str, Any] = {"uri": m.uri, "type": m.type}
    if m.role:
        out["role"] = m.role
    if m.scopes:
        out["scopes"] = m.scopes
    return out


def _task_part(t: Task) -> dict[str, Any]:
    out: dict[str, Any] = {"id": t.id, "kind": t.kind, "state": t.state}
    if t.assignee:
        out["assignee"] = t.assignee
    return out


@PROFILE.method(
    "control.snapshot",
    floor=True,
    params=schema(
        ["workspace", "from"],
        label=STRING,
        include={
            "type": "array",
            "items": STRING,
            "description": "Parts to record: members, open_tasks, mode_ceiling (the default), "
            "policy, audit.",
        },
    ),
    title="Snapshot",
    description="Record the workspace's members, open tasks and mode ceiling as a snapshot "
    "artefact with a content hash, for control.rollback.",
)
def control_snapshot(call: Call) -> dict[str, Any]:
    ws = call.workspace()
    include = _parts(call, "include", _DEFAULT_INCLUDE)
    meta = call.meta or ws.meta
    state: dict[str, Any] = {}
    if "members" in include:
        members = [_member_part(m) for _, m in call.items("members")]
        if members:
            state["members"] = members
    if "open_tasks" in include:
        tasks = [_task_part(t) for _, t in call.items("tasks") if t.state not in _ENDED]
        if tasks:
            state["open_tasks"] = tasks
    if "mode_ceiling" in include:
        state["mode_ceiling"] = meta.mode_ceiling
    if "policy" in include and meta.routing_policy_uri is not None:
        state["routing_policy_uri"] = meta.routing_policy_uri
    if "all" in include or "audit" in include:
        state["audit_seq"] = ws.count
    content: dict[str, Any] = {
        "workspace": ws.id,
        "audit_seq": ws.count,
        "include": include,
        "state": state,
    }
    label = call.params.get("label")
    if label is not None:
        content["label"] = label
    snap = Snapshot(
        id=call.new_id("art", "snapshots"),
        produced_by=call.params.get("from"),
        produced_at=call.arrived,
        content_hash=digest(content),
        content=content,
    )
    call.put("snapshots", snap.id, snap)
    artefact = {
        "id": snap.id,
        "kind": snap.kind,
        "produced_by": snap.produced_by,
        "produced_at": snap.produced_at,
        "content_hash": snap.content_hash,
        "content": content,
    }
    return {"snapshot_artefact_id": snap.id, "audit_seq": ws.count, "artefact": artefact}


@PROFILE.method(
    "control.rollback",
    floor=True,
    params=schema(
        ["workspace", "from", "to_snapshot_artefact_id"],
        to_snapshot_artefact_id=STRING,
        snapshot_artefact_id={"type": "string", "description": "Alias of to_snapshot_artefact_id."},
        snapshot_id={"type": "string", "description": "Alias of to_snapshot_artefact_id."},
        what_to_restore={"type": "array", "items": STRING, "description": "mode_ceiling, members."},
        reason=STRING,
    ),
    annotations={"destructiveHint": True},
    title="Roll back",
    description="Put back a snapshot's mode ceiling and members' roles and scopes, as a new "
    "entry (the log is never rewritten).",
)
def control_rollback(call: Call) -> dict[str, Any]:
    ws = call.workspace()
    p = call.params
    sid = p.get("to_snapshot_artefact_id") or p.get("snapshot_artefact_id") or p.get("snapshot_id")
    if sid is None:
        raise invalid_params("to_snapshot_artefact_id is required (the id control.snapshot returned)")
    snap = call.get("snapshots", sid) if isinstance(sid, str) else None
    if snap is None:
        raise RpcError(SNAPSHOT_NOT_FOUND, f"Unknown snapshot: {sid}")
    content = snap.content if isinstance(snap.content, dict) else {}
    included = content.get("include")
    what = _parts(call, "what_to_restore", included if isinstance(included, list) else [])
    held_state = content.get("state")
    state: dict[str, Any] = held_state if isinstance(held_state, dict) else {}
    restored = []
    if "mode_ceiling" in what and isinstance(state.get("mode_ceiling"), str):
        call.set_meta(replace(call.meta or ws.meta, mode_ceiling=state["mode_ceiling"]))
        restored.append("mode_ceiling")
    if "members" in what and isinstance(state.get("members"), list):
        # Members still present get their role and scopes back; departed
        # members stay gone and later joiners stay.
        for part in state["members"]:
            member = call.member(part.get("uri")) if isinstance(part, dict) else None
            if member is not None:
                scopes = copy.deepcopy(part.get("scopes"))
                call.put("members", member.uri, replace(member, role=part.get("role"), scopes=scopes))
        restored.append("members")
    out: dict[str, Any] = {
        "rolled_back_to": sid,
        "audit_seq": content.get("audit_seq"),
        "restored": restored,
    }
    if p.get("reason") is not None:
        out["reason"] = p["reason"]
    return out


@PROFILE.method(
    "control.supersede",
    floor=True,
    params=schema(
        ["workspace", "from", "task_id", "successor_task"],
        task_id=STRING,
        successor_task={
            "type": "object",
            "properties": {
                "kind": STRING,
                "assignee": STRING,
                "input": {"type": "object", "additionalProperties": True},
                "mode": MODE,
                "review_required": {"type": "boolean"},
            },
            "required": ["kind"],
        },
        reason=STRING,
    ),
    annotations={"destructiveHint": True},
    title="Supersede a task",
    description="Replace a task, in any state, by a new one that supersedes it.",
)
def control_supersede(call: Call) -> dict[str, Any]:
    ws = call.workspace()
    p = call.params
    old = call.task(p.get("task_id"))
    spec = p.get("successor_task")
    if not isinstance(spec, dict) or "kind" not in spec:
        raise invalid_params("successor_task must include kind (an object with kind, assignee, input, mode)")
    assignee = spec.get("assignee") or old.assignee
    target = call.member(assignee)
    if target is None:
        raise invalid_params(f"successor assignee not in workspace: {assignee}")
    if target.paused:
        raise RpcError(WORKSPACE_PAUSED, f"Assignee {assignee} is paused")
    mode = spec.get("mode")
    if mode is None:
        mode = old.mode
    elif not isinstance(mode, str):
        raise invalid_params("successor_task.mode must be a string: shadow, trial or production")
    meta = call.meta or ws.meta
    if not mode_le(mode, meta.mode_ceiling):
        raise RpcError(
            MODE_CEILING_EXCEEDED, f"Requested mode {mode} exceeds ceiling {meta.mode_ceiling}"
        )
    review_required = spec.get("review_required")
    if review_required is not None and not isinstance(review_required, bool):
        raise invalid_params("successor_task.review_required must be a boolean")
    if old.review_required or trial_forces_review(meta, mode):
        review_required = True
    reason = p.get("reason")
    why = "" if reason is None else reason
    sender = p.get("from")
    new_id = call.new_id("tsk", "tasks")
    successor = Task(
        id=new_id,
        kind=spec["kind"],
        state="created",
        assignee=assignee,
        delegator=sender,
        input={} if spec.get("input") is None else spec["input"],
        created_at=call.arrived,
        updated_at=call.arrived,
        mode=mode,
        history=[
            HistoryEntry(ts=call.arrived, from_=sender, state="created", note=f"supersedes {old.id}: {why}")
        ],
        review_required=review_required,
        supersedes=old.id,
    )
    call.put("tasks", old.id, call.advance(old, "superseded", f"-> {new_id}: {why}", superseded_by=new_id))
    call.put("tasks", new_id, successor)
    return {"superseded_task_id": old.id, "new_task_id": new_id, "reason": reason}


@PROFILE.method(
    "control.set_mode_ceiling",
    floor=True,
    params=schema(
        ["workspace", "from", "new_ceiling"],
        new_ceiling=MODE,
        mode_ceiling={"type": "string", "description": "Alias of new_ceiling."},
        reason=STRING,
    ),
    annotations={"idempotentHint": True},
    title="Set the mode ceiling",
    description="Set the highest mode tasks may run in (shadow < trial < production).",
)
def control_set_mode_ceiling(call: Call) -> dict[str, Any]:
    ws = call.workspace()
    p = call.params
    ceiling = p.get("new_ceiling") or p.get("mode_ceiling")
    if ceiling not in MODES:
        raise invalid_params("new_ceiling must be one of shadow, trial or production")
    call.set_meta(replace(call.meta or ws.meta, mode_ceiling=ceiling))
    return {"mode_ceiling": ceiling, "reason": p.get("reason")}
