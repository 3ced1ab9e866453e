"""core/1.0, tasks: task.create, task.update and task.complete."""

from __future__ import annotations

from typing import Any

from coordinator.engine.call import Call
from coordinator.engine.registry import (
    BOOLEAN,
    JSON_VALUE,
    OPEN_OBJECT,
    STRING,
    Profile,
    schema,
)
from coordinator.engine.wire import (
    INVALID_PARAMS,
    MODE_CEILING_EXCEEDED,
    NOT_AUTHORISED,
    WORKSPACE_PAUSED,
    invalid_params,
)
from coordinator.errors import RpcError
from coordinator.model import (
    IDEMPOTENCY_KEYS,
    HistoryEntry,
    Review,
    Task,
    mode_le,
    trial_forces_review,
)

__all__ = ["PROFILE"]

PROFILE = Profile("core/1.0")
MODE = {"type": "string", "enum": ["shadow", "trial", "production"]}
ROUTING_HINTS = {
    "type": "object",
    "properties": {
        "criticality": {"type": "string", "enum": ["low", "medium", "high", "critical"]},
        "deadline": STRING,
        "risk_tier": STRING,
        "max_cost_usd": {"type": "string", "description": "A decimal as a string, e.g. \"2.50\"."},
    },
    "additionalProperties": True,
}
IDEMPOTENCY_CAP = 10_000

@PROFILE.method(
    "task.create",
    params=schema(
        ["workspace", "from", "kind", "assignee", "input"],
        kind=STRING,
        input=OPEN_OBJECT,
        assignee=STRING,
        to={"type": "string", "description": "Another name for assignee."},
        mode=MODE,
        review_required=BOOLEAN,
        deadline=STRING,
        routing_hints=ROUTING_HINTS,
        idempotency_key=STRING,
    ),
    title="Create a task",
    description="Give a member a task; an idempotency_key seen before answers the "
    "task it created.",
)
def task_create(call: Call) -> dict[str, Any]:
    p = call.params
    key = p.get("idempotency_key")
    if isinstance(key, str):
        # A key seen before answers the task it created, and records nothing.
        known = call.get(IDEMPOTENCY_KEYS, key)
        task = call.get("tasks", known) if known is not None else None
        if task is not None:
            call.answer_without_recording()
            return {"task_id": task.id, "state": task.state}
    call.require("workspace")
    kind = call.require("kind")
    if "input" not in p or p["input"] is None:
        raise RpcError(INVALID_PARAMS, "Missing field: input")
    ws = call.workspace()
    actor = call.actor()
    assignee = p.get("assignee", p.get("to"))
    if assignee is None:
        raise invalid_params(
            "Missing field: assignee (the URI of the member to do the task, e.g. \"agent:writer\")"
        )
    target = call.member(assignee)
    if target is None:
        raise invalid_params(
            f"Assignee not in workspace: {assignee!r} is not a member; "
            "join it with participant.join first, or assign a current member"
        )
    if target.paused:
        raise RpcError(WORKSPACE_PAUSED, f"Assignee {assignee} is paused")
    mode = p.get("mode")
    if mode is not None and not isinstance(mode, str):
        raise invalid_params("mode must be a string: shadow, trial or production")
    meta = ws.meta
    mode = mode or meta.mode
    if not mode_le(mode, meta.mode_ceiling):
        raise RpcError(
            MODE_CEILING_EXCEEDED, f"Requested mode {mode} exceeds ceiling {meta.mode_ceiling}"
        )
    review_required = p.get("review_required")
    if review_required is not None and not isinstance(review_required, bool):
        raise invalid_params("review_required must be a boolean")
    if trial_forces_review(meta, mode):
        review_required = True
    task_id = call.new_id("tsk", "tasks")
    task = Task(
        id=task_id,
        kind=kind,
        state="created",
        assignee=assignee,
        delegator=actor.uri,
        input=p["input"],
        created_at=call.arrived,
        updated_at=call.arrived,
        mode=mode,
        history=[HistoryEntry(ts=call.arrived, from_=actor.uri, state="created")],
        deadline=p.get("deadline"),
        routing_hints=p.get("routing_hints"),
        review_required=review_required,
    )
    call.put("tasks", task_id, task)
    if isinstance(key, str):
        if call.count(IDEMPOTENCY_KEYS) >= IDEMPOTENCY_CAP:
            oldest = call.oldest(IDEMPOTENCY_KEYS)
            if oldest is not None:
                call.delete(IDEMPOTENCY_KEYS, oldest)  # the oldest goes
        call.put(IDEMPOTENCY_KEYS, key, task_id)
    call.result_is_fresh()  # strings only: nothing shared with held values
    return {"task_id": task_id, "state": "created"}


# What task.update may move a task to, from each state.
_UPDATES = {
    "created": ("in_progress", "declined"),
    "in_progress": ("in_progress", "completed", "declined"),
    "review_requested": ("in_progress",),
    "paused": ("cancelled",),
}


def _choices(states: tuple[str, ...]) -> str:
    """What task.update may send from a state, for a message."""
    if not states:
        return "no task.update is possible"
    return "send state " + " or ".join(f"\"{s}\"" for s in states)



@PROFILE.method(
    "task.update",
    params=schema(
        ["workspace", "from", "task_id", "state"],
        task_id=STRING,
        state={"type": "string", "enum": ["in_progress", "declined", "cancelled", "completed"]},
        progress_note=STRING,
    ),
    title="Update a task",
    description="Move a task to its next state.",
)
def task_update(call: Call) -> dict[str, Any]:
    call.require("workspace")
    task_id = call.require("task_id")
    call.workspace()
    call.actor()
    task = call.task(task_id)
    state = call.params.get("state")
    allowed = _UPDATES.get(task.state, ())
    if state is None:
        raise invalid_params(f"Missing field: state (from {task.state}: {_choices(allowed)})")
    if state not in allowed:
        raise invalid_params(
            f"Illegal transition {task.state} -> {state}; from {task.state}: {_choices(allowed)}"
        )
    if state == "completed" and task.review_required:
        raise invalid_params("This task requires review; finish it with task.complete, which opens the review")
    call.put("tasks", task.id, call.advance(task, state, call.params.get("progress_note")))
    call.result_is_fresh()  # strings only: nothing shared with held values
    return {"state": state}


@PROFILE.method(
    "task.complete",
    params=schema(
        ["workspace", "from", "task_id"],
        task_id=STRING,
        output=JSON_VALUE,
        confidence={"type": "string", "description": "A decimal as a string, e.g. \"0.9\"."},
        routing_hints=ROUTING_HINTS,
    ),
    title="Complete a task",
    description="Finish a task with its output; a task that requires review opens one.",
)
def task_complete(call: Call) -> dict[str, Any]:
    call.require("workspace")
    task_id = call.require("task_id")
    call.workspace()
    actor = call.actor()
    task = call.task(task_id)
    if task.state not in ("created", "in_progress"):
        raise invalid_params(f"Cannot complete task in state: {task.state}")
    output = call.params.get("output")
    if task.review_required:
        review = task.review
        if review is None:
            reviewers = [
                m.uri
                for _, m in call.items("members")
                if m.type == "human" and m.uri not in (actor.uri, task.assignee)
            ]
            if not reviewers:
                raise RpcError(
                    NOT_AUTHORISED,
                    "This task requires review but no human member other than the caller "
                    "and the assignee can review it; invite a reviewer first",
                )
            review = Review(requested_at=call.arrived, requested_to=reviewers)
        call.put(
            "tasks",
            task.id,
            call.advance(
                task,
                "review_requested",
                "review required; opened on task.complete",
                review=review,
                pending_artefact=output,
            ),
        )
        call.result_is_fresh()  # strings only: nothing shared with held values
        return {"state": "review_requested", "review_id": task.id}
    call.put(
        "tasks",
        task.id,
        call.advance(task, "completed", output=output, confidence=call.params.get("confidence")),
    )
    call.result_is_fresh()  # strings only: nothing shared with held values
    return {"state": "completed"}
