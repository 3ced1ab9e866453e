"""review/1.0: review.request, decide.approve/reject/override, abstain.declare,
escalate.raise.

Behaviour follows chap-coordinator 0.3.3, except where the reference accepts
malformed input or crashes on it:
there chapline answers -32602 before looking at any state, so a malformed
call is never recorded (see SPECIFICATION.md, "Review").
"""

from __future__ import annotations

import re
from typing import Any

from msgspec.structs import replace

from coordinator.engine.call import Call
from coordinator.engine.canonical import canonical_bytes, digest
from coordinator.engine.patch import apply_patch
from coordinator.engine.registry import ANY, BOOLEAN, JSON_VALUE, STRING, Profile, schema
from coordinator.engine.wire import (
    DIGEST_MISMATCH,
    INVALID_PARAMS,
    MODE_CEILING_EXCEEDED,
    NOT_AUTHORISED,
    NOT_REVIEWABLE,
    PATCH_FAILED,
    REVIEW_ALREADY_OPEN,
    WORKSPACE_PAUSED,
    invalid_params,
)
from coordinator.errors import CanonicalError, PatchError, PatchLimitError, RpcError
from coordinator.model import Override, Review, Task, mode_le, trial_forces_review

__all__ = ["PROFILE"]

PROFILE = Profile("review/1.0")

RULES_HELP = "any_one_approves, all_approve or quorum:<n> with n >= 1"
_QUORUM = re.compile(r"quorum:([0-9]+)")
ABSTAIN_CATEGORIES = (
    "out_of_authority",
    "out_of_scope",
    "conflict_of_interest",
    "insufficient_context",
    "other",
)
TAGS = {"type": "array", "items": STRING}
PATCH_OPERATION = {
    "type": "object",
    "properties": {
        "op": {
            "type": "string",
            "enum": ["add", "replace", "remove", "copy", "move", "test"],
            "description": "The operation.",
        },
        "path": {"type": "string", "description": "A JSON Pointer into the artefact, e.g. /text or /items/0."},
        "value": {**JSON_VALUE, "description": "The value to add, replace with, or test for."},
        "from": {"type": "string", "description": "The JSON Pointer copied or moved from."},
    },
    "required": ["op", "path"],
}
DIGEST = {
    "type": "string",
    "pattern": "^sha256:[0-9a-f]{64}$",
    "description": "sha256:<64 lowercase hex> of the artefact decided on.",
}
# A review cannot be (re)opened on a task someone stopped.
_STOPPED = ("cancelled", "superseded", "paused")
# An escalation needs a task that is still someone's work.
_FINISHED = ("completed", "cancelled", "superseded")
# Addresses that stand for "any member" rather than one reviewer.
_ANY_MEMBER = ("workspace:", "group:")


def _str_list(call: Call, name: str) -> list[str]:
    """An optional array-of-strings param (absent or null gives [])."""
    value = call.params.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid_params(f"{name} must be a list of strings")
    return value


def _optional_str(call: Call, name: str) -> None:
    value = call.params.get(name)
    if value is not None and not isinstance(value, str):
        raise invalid_params(f"{name} must be a string")


# -- review.request -----------------------------------------------------------


def _reviewers(value: Any) -> list[str]:
    """`to` as a list of URIs, as given (0.3.3 stores repeats as sent)."""
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, str) and v for v in value)
    ):
        raise invalid_params(
            "review.request needs 'to': a reviewer URI or a non-empty array of them "
            '(e.g. ["human:alice"]; "group:..." or "workspace:..." lets any member decide)'
        )
    return list(value)


def _rule(value: Any) -> str:
    if value == "any_one_approves" or value == "all_approve":
        return str(value)
    if isinstance(value, str):
        quorum = _QUORUM.fullmatch(value)
        if quorum and int(quorum.group(1)) >= 1:
            return value
    raise invalid_params(f"Unsupported review rule {value!r}: review/1.0 supports {RULES_HELP}")


def _same_json(a: Any, b: Any) -> bool:
    """JCS-identical: key order and 1 vs 1.0 do not matter, types do."""
    try:
        return canonical_bytes(a) == canonical_bytes(b)
    except CanonicalError:
        return False


@PROFILE.method(
    "review.request",
    params=schema(
        ["workspace", "from", "task_id", "to", "artefact"],
        task_id=STRING,
        artefact=JSON_VALUE,
        to={"oneOf": [STRING, {"type": "array", "items": STRING}]},
        rule={
            "type": "string",
            "enum": ["any_one_approves", "all_approve", "quorum:2", "quorum:3"],
            "default": "any_one_approves",
            "description": RULES_HELP,
        },
        deadline=STRING,
    ),
    title="Request a review",
    description="Open a review of a task's artefact by the members named in `to`.",
)
def review_request(call: Call) -> dict[str, Any]:
    p = call.params
    call.require("workspace")
    call.require("from")
    task_id = call.require("task_id")
    if "artefact" not in p:
        raise invalid_params("Missing field: artefact")
    call.workspace()
    call.actor()
    task = call.task(task_id)
    if task.state in _STOPPED:
        raise RpcError(
            NOT_REVIEWABLE,
            f"Cannot request review for task in state: {task.state}; "
            "a stopped task must be resumed or replaced first",
        )
    to = _reviewers(p.get("to"))
    rule = p.get("rule")
    if rule is not None:
        rule = _rule(rule)
    deadline = p.get("deadline")
    artefact = p["artefact"]

    review = task.review
    if task.state == "review_requested" and review is not None:
        if not _same_json(artefact, task.pending_artefact):
            raise RpcError(
                REVIEW_ALREADY_OPEN,
                "A review is already open on this task with different content. Decide, "
                "abstain, escalate or cancel it before requesting review of a new artefact.",
            )
        if rule is not None and rule != review.rule:
            raise RpcError(
                REVIEW_ALREADY_OPEN,
                f"Cannot change the decision rule of an open review (currently {review.rule}); "
                "omit 'rule' to add reviewers",
            )
        widened = list(review.requested_to)
        widened += [r for r in dict.fromkeys(to) if r not in widened]
        amended = Review(
            requested_at=review.requested_at,
            requested_to=widened,
            rule=review.rule,
            deadline=deadline if deadline is not None else review.deadline,
            decisions=review.decisions,
        )
        # As 0.3.3: an amendment touches the task but adds no history entry.
        call.put("tasks", task.id, replace(task, review=amended, updated_at=call.arrived))
        return {
            "state": "review_requested",
            "review_id": task.id,
            "amended": True,
            "requested_to": widened,
        }

    opened = Review(
        requested_at=call.arrived,
        requested_to=to,
        rule=rule or "any_one_approves",
        deadline=deadline,
        decisions=[],
    )
    call.put(
        "tasks",
        task.id,
        call.advance(task, "review_requested", review=opened, pending_artefact=artefact),
    )
    call.result_is_fresh()  # strings only: nothing shared with held values
    return {"state": "review_requested", "review_id": task.id}


# -- the checks every decision shares ---------------------------------------


def _decision_target(call: Call, *, digest_bound: bool) -> tuple[Task, str]:
    """The task under review and the deciding reviewer, after the shared checks.

    In order: unknown workspace -32602, non-member -32011, unknown task
    -32602, no open review -32010, not an addressed reviewer -32011, and for
    decide.* a given `approved_artefact_digest` that is not the sha256 of the
    JCS of the artefact under review -32074 (data: declared, actual).
    """
    call.workspace()
    actor = call.actor()
    task = call.task(call.params["task_id"])
    if task.state != "review_requested":
        raise RpcError(NOT_REVIEWABLE, f"Task not awaiting review: {task.state}")
    review = task.review
    named = review.requested_to if review is not None else []
    if named and not any(r.startswith(_ANY_MEMBER) for r in named) and actor.uri not in named:
        raise RpcError(
            NOT_AUTHORISED,
            f"Not an addressed reviewer for this task: {actor.uri}; "
            f"it was sent to {', '.join(named)}",
        )
    declared = call.params.get("approved_artefact_digest")
    if digest_bound and declared is not None:
        if task.pending_artefact is None:
            raise invalid_params("No artefact under review to bind approved_artefact_digest to")
        actual = digest(task.pending_artefact)
        if declared != actual:
            raise RpcError(
                DIGEST_MISMATCH,
                "approved_artefact_digest does not match the artefact under review; "
                "fetch the artefact again and decide on what is actually under review",
                {"declared": declared, "actual": actual},
            )
    return task, actor.uri


def _decide_params(call: Call) -> list[str]:
    """Param checks of decide.*, before any state is read. Returns the tags."""
    call.require("workspace")
    call.require("from")
    call.require("task_id")
    tags = _str_list(call, "tags")
    value = call.params.get("approved_artefact_digest")
    if value is not None and not isinstance(value, str):
        raise invalid_params("approved_artefact_digest must be a string: sha256:<64 lowercase hex>")
    _optional_str(call, "comment")
    return tags


def _decision(call: Call, reviewer: str, kind: str, **fields: Any) -> dict[str, Any]:
    return {"reviewer": reviewer, "kind": kind, "ts": call.arrived, **fields}


def _with_decision(task: Task, decision: dict[str, Any]) -> Review:
    review = task.review or Review(requested_at=task.updated_at)
    return Review(
        requested_at=review.requested_at,
        requested_to=review.requested_to,
        rule=review.rule,
        deadline=review.deadline,
        decisions=[*review.decisions, decision],
    )


def _rule_met(review: Review) -> bool:
    """Whether the approvals so far satisfy the review's rule."""
    approvers = {d["reviewer"] for d in review.decisions if d.get("kind") == "approve"}
    if review.rule == "all_approve":
        named = [r for r in review.requested_to if not r.startswith(_ANY_MEMBER)]
        return set(named) <= approvers if named else bool(approvers)
    quorum = _QUORUM.fullmatch(review.rule)
    needed = int(quorum.group(1)) if quorum else 1
    return len(approvers) >= needed


# -- decide.* and abstain.declare --------------------------------------------


@PROFILE.method(
    "decide.approve",
    params=schema(
        ["workspace", "from", "task_id"],
        task_id=STRING,
        comment=STRING,
        tags=TAGS,
        approved_artefact_digest=DIGEST,
    ),
    title="Approve",
    description="Approve the artefact under review.",
)
def decide_approve(call: Call) -> dict[str, Any]:
    tags = _decide_params(call)
    task, reviewer = _decision_target(call, digest_bound=True)
    review = _with_decision(
        task, _decision(call, reviewer, "approve", comment=call.params.get("comment"), tags=tags)
    )
    if _rule_met(review):
        done = call.advance(task, "completed", review=review, output=task.pending_artefact)
        call.put("tasks", task.id, done)
        call.result_is_fresh()  # strings only: nothing shared with held values
        return {"state": "completed"}
    call.put("tasks", task.id, call.advance(task, "review_requested", "approval recorded", review=review))
    call.result_is_fresh()  # strings only: nothing shared with held values
    return {"state": "review_requested"}


@PROFILE.method(
    "decide.reject",
    params=schema(
        ["workspace", "from", "task_id"],
        task_id=STRING,
        comment=STRING,
        tags=TAGS,
        request_revision=BOOLEAN,
        approved_artefact_digest=DIGEST,
    ),
    title="Reject",
    description="Reject the artefact under review, optionally asking for a revision.",
)
def decide_reject(call: Call) -> dict[str, Any]:
    tags = _decide_params(call)
    revise = call.params.get("request_revision")
    if revise is not None and not isinstance(revise, bool):
        raise invalid_params("request_revision must be true or false")
    task, reviewer = _decision_target(call, digest_bound=True)
    review = _with_decision(
        task, _decision(call, reviewer, "reject", comment=call.params.get("comment"), tags=tags)
    )
    state = "in_progress" if revise else "declined"
    call.put("tasks", task.id, call.advance(task, state, review=review))
    call.result_is_fresh()  # strings only: nothing shared with held values
    return {"state": state}


@PROFILE.method(
    "decide.override",
    params=schema(
        ["workspace", "from", "task_id", "rationale", "diff"],
        task_id=STRING,
        rationale=STRING,
        diff={"type": "array", "items": PATCH_OPERATION, "description": "RFC 6902 JSON Patch."},
        tags=TAGS,
        policy_refs=TAGS,
        logical_id=STRING,
        instance_id=ANY,
        intent_preserved=BOOLEAN,
        approved_artefact_digest=DIGEST,
    ),
    title="Override",
    description="Change the artefact under review with a JSON Patch and accept the result.",
)
def decide_override(call: Call) -> dict[str, Any]:
    tags = _decide_params(call)
    rationale = call.require("rationale")
    diff = call.require("diff")
    if not isinstance(rationale, str):
        raise invalid_params("rationale must be a string saying why the artefact was changed")
    if not isinstance(diff, list):
        raise invalid_params("diff must be an array of RFC 6902 JSON Patch operations")
    policy_refs = _str_list(call, "policy_refs")
    task, reviewer = _decision_target(call, digest_bound=True)
    base = task.pending_artefact
    if base is None:
        raise invalid_params("No base artefact for override: the task has no artefact under review")
    try:
        patched = apply_patch(base, diff)
    except PatchLimitError as limit:
        raise RpcError(INVALID_PARAMS, f"JSON Patch refused: {limit.message}", limit.data) from None
    except PatchError as exc:
        raise RpcError(PATCH_FAILED, f"JSON Patch failed: {exc.message}", exc.data or None) from None
    p = call.params
    override_id = call.new_id("art", "overrides")
    call.put(
        "overrides",
        override_id,
        Override(
            id=override_id,
            task_id=task.id,
            reviewer=reviewer,
            based_on_artefact=base,
            diff=diff,
            result=patched,
            rationale=rationale,
            tags=tags,
            policy_refs=policy_refs,
            ts=call.arrived,
            logical_id=p.get("logical_id"),
            instance_id=p.get("instance_id"),
            intent_preserved=p.get("intent_preserved"),
        ),
    )
    decision = _decision(call, reviewer, "override", tags=tags, override_artefact_id=override_id)
    review = _with_decision(task, decision)
    call.put("tasks", task.id, call.advance(task, "completed", "override applied", review=review, output=patched))
    return {"state": "completed", "override_artefact_id": override_id, "applied": patched}


@PROFILE.method(
    "abstain.declare",
    params=schema(
        ["workspace", "from", "task_id", "reason"],
        task_id=STRING,
        reason=STRING,
        category={"type": "string", "enum": list(ABSTAIN_CATEGORIES)},
    ),
    title="Abstain",
    description="Decline to decide on a review, saying why.",
)
def abstain_declare(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.require("from")
    call.require("task_id")
    reason = call.require("reason")
    if not isinstance(reason, str):
        raise invalid_params("reason must be a string")
    category = call.params.get("category")
    if category is None:
        category = "other"
    elif category not in ABSTAIN_CATEGORIES:
        raise invalid_params(f"category must be one of {', '.join(ABSTAIN_CATEGORIES)}")
    task, reviewer = _decision_target(call, digest_bound=False)
    decision = _decision(call, reviewer, "abstain", comment=reason, abstain_category=category)
    call.put("tasks", task.id, call.advance(task, "abstained", reason, review=_with_decision(task, decision)))
    return {"state": "abstained"}


# -- escalate.raise -----------------------------------------------------------


@PROFILE.method(
    "escalate.raise",
    params=schema(
        ["workspace", "from", "original_task_id", "new_task"],
        original_task_id=STRING,
        new_task={
            "type": "object",
            "properties": {
                "kind": STRING,
                "assignee": STRING,
                "input": {"type": "object", "additionalProperties": True},
                "mode": {"type": "string", "enum": ["shadow", "trial", "production"]},
            },
            "required": ["assignee"],
        },
        reason=ANY,
    ),
    title="Escalate",
    description="Replace a task with a new one for another assignee.",
)
def escalate_raise(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.require("from")
    original_id = call.require("original_task_id")
    spec = call.require("new_task")
    ws = call.workspace()
    actor = call.actor()
    original = call.get("tasks", original_id) if isinstance(original_id, str) else None
    if original is None:
        raise invalid_params(f"Unknown original task: {original_id}")
    if original.state in _FINISHED:
        raise invalid_params(f"Cannot escalate a terminal task: {original.state}")
    if not isinstance(spec, dict):
        raise invalid_params("new_task must be an object {assignee, kind?, input?, mode?}")
    assignee = spec.get("assignee")
    target = call.member(assignee)
    if target is None:
        raise invalid_params(f"Escalation assignee not in workspace: {assignee!r}")
    kind = spec.get("kind")
    if kind is None:
        kind = original.kind
    elif not isinstance(kind, str):
        raise invalid_params("new_task.kind must be a string")
    task_input = spec.get("input")
    if task_input is None:
        task_input = {}
    elif not isinstance(task_input, dict):
        raise invalid_params("new_task.input must be an object")
    mode = spec.get("mode")
    if mode is not None and not isinstance(mode, str):
        raise invalid_params("new_task.mode must be a string: shadow, trial or production")
    if target.paused:
        raise RpcError(WORKSPACE_PAUSED, f"Assignee {assignee} is paused")
    meta = ws.meta
    mode = mode or original.mode
    if not mode_le(mode, meta.mode_ceiling):
        raise RpcError(
            MODE_CEILING_EXCEEDED,
            f"Requested mode {mode} exceeds ceiling {meta.mode_ceiling}; "
            "give new_task.mode at or below it",
        )
    required = True if original.review_required or trial_forces_review(meta, mode) else None
    new_id = call.new_id("tsk", "tasks")
    successor = call.advance(
        Task(
            id=new_id,
            kind=kind,
            state="created",
            assignee=assignee,
            delegator=actor.uri,
            input=task_input,
            created_at=call.arrived,
            mode=mode,
            supersedes=original.id,
            review_required=required,
        ),
        "created",
        f"escalated from {original.id}",
    )
    call.put("tasks", new_id, successor)
    call.put(
        "tasks", original.id, call.advance(original, "escalated", f"-> {new_id}", superseded_by=new_id)
    )
    return {"new_task_id": new_id, "escalated_from": original.id}
