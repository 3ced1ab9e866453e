"""handoff/1.0: handoff.propose, handoff.accept, handoff.decline.

A handoff offers a member's tasks to another member (or to any member of a
group). Behaviour follows chap-coordinator 0.3.3: ownership moves only on
accept, when every accepted task is assigned to the acceptor (its state
unchanged, a history entry added); a paused acceptor is refused; only the
named recipient's decline closes a handoff. Where the reference accepts
malformed input or crashes on it, chapline answers -32602 before looking at
any state. SPECIFICATION.md, "Interaction profiles", states both.
"""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace

from coordinator.engine.call import Call
from coordinator.engine.registry import ANY, ARRAY, OBJECT, STRING, Profile, schema
from coordinator.engine.wire import (
    HANDOFF_NOT_PROPOSED,
    NOT_RECIPIENT,
    NOT_TASK_OWNER,
    WORKSPACE_PAUSED,
    invalid_params,
)
from coordinator.errors import RpcError
from coordinator.model import Handoff, HandoffTask

__all__ = ["PROFILE"]

PROFILE = Profile("handoff/1.0")

_GROUP = "group:"


def _optional_list(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_params(f"{name} must be an array")
    return value


def _entries(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise invalid_params("tasks must be a non-empty list of {task_id, title?, ...} objects")
    for entry in value:
        if not isinstance(entry, dict) or not isinstance(entry.get("task_id"), str):
            raise invalid_params(
                f"Unknown task in handoff: each entry of tasks needs a string task_id; got {entry!r}"
            )
        _optional_list(entry.get("blockers"), "blockers")
    return value


_TASK_ENTRY = {
    **OBJECT,
    "required": ["task_id"],
    "properties": {
        "task_id": STRING,
        "title": STRING,
        "status_summary": STRING,
        "next_action": STRING,
        "blockers": {**ARRAY, "items": STRING},
    },
}
_HANDOFF = schema(["workspace", "from", "handoff_id"], handoff_id=STRING)


@PROFILE.method(
    "handoff.propose",
    floor=True,
    params=schema(
        ["workspace", "from", "to", "tasks"],
        to={**STRING, "description": "A member's URI, or group:... for any member."},
        tasks={**ARRAY, "items": _TASK_ENTRY},
        handoff_id=STRING,
        summary=STRING,
        context_links={**ARRAY, "items": STRING},
        rationale=ANY,
    ),
    title="Propose a handoff",
    description="Offer your tasks to another member, or to any member of a group.",
)
def handoff_propose(call: Call) -> dict[str, Any]:
    p = call.params
    recipient = call.require("to")
    call.require("tasks")
    if not isinstance(recipient, str):
        raise invalid_params("to must be one participant URI or a group: address")
    chosen = p.get("handoff_id")
    if chosen is not None and not isinstance(chosen, str):
        raise invalid_params("handoff_id must be a string")
    links = _optional_list(p.get("context_links"), "context_links")
    call.workspace()
    if not recipient.startswith(_GROUP) and call.member(recipient) is None:
        raise RpcError(NOT_RECIPIENT, f"Recipient {recipient} is not a member")
    entries = _entries(p["tasks"])
    proposer = p.get("from")
    for entry in entries:
        task = call.get("tasks", entry["task_id"])
        if task is None:
            raise invalid_params(f"Unknown task in handoff: {entry['task_id']}")
        if task.assignee != proposer:
            raise RpcError(
                NOT_TASK_OWNER,
                f"Task {task.id} is not currently assigned to {proposer} "
                f"(its assignee is {task.assignee}); only the assignee can hand it off",
            )
    if chosen is None:
        chosen = call.new_id("hnd", "handoffs")
    elif call.get("handoffs", chosen) is not None:
        raise invalid_params(
            f"handoff_id {chosen!r} is already in use in this workspace; "
            "choose another id or omit it to have one generated"
        )
    tasks = [
        HandoffTask(
            task_id=e["task_id"],
            title=e.get("title"),
            status_summary=e.get("status_summary"),
            next_action=e.get("next_action"),
            blockers=e.get("blockers") or [],
        )
        for e in entries
    ]
    call.put(
        "handoffs",
        chosen,
        Handoff(
            id=chosen,
            proposer=proposer,
            recipient=recipient,
            proposed_at=call.arrived,
            tasks=tasks,
            summary=p.get("summary"),
            context_links=links,
        ),
    )
    return {"handoff_id": chosen, "state": "proposed", "task_ids": [t.task_id for t in tasks]}


def _proposed(call: Call) -> Handoff:
    """The named handoff, still awaiting an answer."""
    key = call.require("handoff_id")
    call.workspace()
    handoff: Handoff | None = call.get("handoffs", key) if isinstance(key, str) else None
    if handoff is None:
        raise invalid_params(f"Unknown handoff: {key!r}")
    if handoff.state != "proposed":
        raise RpcError(HANDOFF_NOT_PROPOSED, f"Handoff already {handoff.state}")
    return handoff


@PROFILE.method(
    "handoff.accept",
    floor=True,
    params=schema(
        ["workspace", "from", "handoff_id"],
        handoff_id=STRING,
        accepted_task_ids={**ARRAY, "items": STRING},
        comment=STRING,
    ),
    title="Accept a handoff",
    description="Take over the tasks of a handoff offered to you (all, or those you name).",
)
def handoff_accept(call: Call) -> dict[str, Any]:
    handoff = _proposed(call)
    acceptor = call.actor()
    recipient = handoff.recipient
    if not (isinstance(recipient, str) and recipient.startswith(_GROUP)) and acceptor.uri != recipient:
        raise RpcError(
            NOT_RECIPIENT, f"Acceptor is not the named recipient: the handoff is to {recipient}"
        )
    if acceptor.paused:
        raise RpcError(
            WORKSPACE_PAUSED, f"{acceptor.uri} is paused; resume the member before accepting"
        )
    offered = [t.task_id for t in handoff.tasks]
    chosen = call.params.get("accepted_task_ids")
    if chosen is None:
        chosen = offered
    elif not isinstance(chosen, list):
        raise invalid_params("accepted_task_ids must be an array of task ids from the handoff")
    elif not chosen:
        raise invalid_params("accepted_task_ids must not be empty (omit it to accept every task)")
    for task_id in chosen:
        if task_id not in offered:
            raise invalid_params(f"Task {task_id} not in this handoff")
    note = f"handoff accepted from {handoff.proposer}"
    for task_id in chosen:
        task = call.task(task_id)
        call.put("tasks", task.id, call.advance(task, task.state, note, assignee=acceptor.uri))
    call.put(
        "handoffs",
        handoff.id,
        replace(
            handoff,
            state="accepted",
            resolved_at=call.arrived,
            accepted_by=acceptor.uri,
            accepted_task_ids=list(chosen),
            accept_comment=call.params.get("comment"),
        ),
    )
    return {"accepted": True, "task_ids": list(chosen), "assignee": acceptor.uri}


@PROFILE.method(
    "handoff.decline",
    floor=True,
    params={
        **_HANDOFF,
        "properties": {**_HANDOFF["properties"], "reason": STRING, "suggested_target": STRING},
    },
    title="Decline a handoff",
    description="Decline a handoff offered to you, with a reason and a suggested target.",
)
def handoff_decline(call: Call) -> dict[str, Any]:
    handoff = _proposed(call)
    p = call.params
    # Only the named recipient closes it; anyone else's decline (a group
    # member's included) is noted and the handoff stays open.
    closes = not str(handoff.recipient).startswith(_GROUP) and p.get("from") == handoff.recipient
    state = "declined" if closes else handoff.state
    call.put(
        "handoffs",
        handoff.id,
        replace(
            handoff,
            state=state,
            resolved_at=call.arrived if closes else handoff.resolved_at,
            decline_reason=p.get("reason"),
            decline_suggested_target=p.get("suggested_target"),
        ),
    )
    return {"recorded": True, "state": state}

