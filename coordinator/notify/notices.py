"""What deserves a notification: a review, an escalation or a whisper
addressed to someone, read from one accepted log entry and the objects the
workspace holds after it.

A notice is decided in two steps. `candidate(entry)` reads the entry alone
(method and params): whether it may address someone. `resolve(...)` then
reads the objects the call wrote (a live call) or the workspace's objects
now (an entry replayed after a restart) and makes the notice, or None when
what the entry opened is no longer open (a review decided since, a whisper
answered): a reviewer is not told about work that is already done.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = ["KINDS", "Candidate", "Notice", "candidate", "resolve"]

# The kinds a subscription chooses among, and the calls that make each.
KINDS = ("review", "escalation", "whisper")
_METHODS = {
    "task.complete": "review",
    "review.request": "review",
    "escalate.raise": "escalation",
    "whisper.ask": "whisper",
}
# States in which an escalated task is still someone's work.
_OPEN = frozenset({"created", "assigned", "accepted", "in_progress", "review_requested"})
_TITLE_CHARS = 120


class Candidate(msgspec.Struct, frozen=True):
    """An accepted entry that may address someone."""

    workspace: str
    seq: int
    arrived: str
    kind: str
    method: str
    sender: str
    params: dict[str, Any]
    amends: bool = False  # a review.request that amended an open review (its answer says so)


class Notice(msgspec.Struct, frozen=True):
    """One notification. `id` is its idempotency key: the same for every
    delivery of it, across retries and restarts."""

    id: str
    kind: str
    workspace: str
    seq: int
    at: str
    sender: str
    task_id: str
    to: list[str]
    title: str
    detail: dict[str, Any]


def candidate(
    workspace: str, seq: int, arrived: str, envelope: Any, result: Any = None
) -> Candidate | None:
    """The entry's candidate, or None (a refusal, or a call that addresses
    nobody). `result` is the call's answer where known (a live call)."""
    if not isinstance(envelope, dict):
        return None
    kind = _METHODS.get(envelope.get("method", ""))
    params = envelope.get("params")
    if kind is None or not isinstance(params, dict):
        return None
    sender = params.get("from")
    amends = isinstance(result, dict) and result.get("amended") is True
    return Candidate(workspace, seq, arrived, kind, envelope["method"],
                     sender if isinstance(sender, str) else "", params, amends)


def resolve(c: Candidate, objects: Mapping[str, Mapping[str, Any]], *, whole: bool = False) -> Notice | None:
    """The notice, reading `objects` ({collection: {key: object}}), or None
    when nothing the entry opened is open in them. `whole`: a review's
    notice names all its reviewers, even for an amendment (a replay tells
    each open review once, from its last entry)."""
    if c.kind == "review":
        return _review(c, objects.get("tasks", {}), whole=whole)
    if c.kind == "escalation":
        return _escalation(c, objects.get("tasks", {}))
    return _whisper(c, objects.get("whispers", {}))


def _review(c: Candidate, tasks: Mapping[str, Any], *, whole: bool = False) -> Notice | None:
    task_id = c.params.get("task_id")
    task = tasks.get(task_id) if isinstance(task_id, str) else None
    review = _get(task, "review")
    if _get(task, "state") != "review_requested" or review is None:
        return None
    # The open review is this entry's when it opened at the entry's time, or
    # earlier: a task.complete after a revision reopens the review it had;
    # a review.request on an open review amends it and tells only the
    # reviewers it names. A review opened after the entry is another pass's.
    opened = _get(review, "requested_at")
    if not isinstance(opened, str) or opened > c.arrived:
        return None
    to = list(_get(review, "requested_to") or [])
    if c.method == "review.request" and (c.amends or opened != c.arrived) and not whole:
        asked = c.params.get("to")
        asked = asked if isinstance(asked, list) else [asked]
        to = [uri for uri in to if uri in asked]
        if not to:
            return None
    artefact = c.params.get("artefact", c.params.get("output"))
    summary = c.params.get("summary")
    title = _one_line(summary) if isinstance(summary, str) else ""
    title = title or _first_line(artefact) or f"{_get(task, 'kind') or 'task'} {task_id}"
    return _notice(c, task_id, to, f"Review: {title}", {
        "task_kind": _get(task, "kind"),
        "agent": _get(task, "assignee"),
        "confidence": _get(task, "confidence"),
        "deadline": _get(review, "deadline"),
    })


def _escalation(c: Candidate, tasks: Mapping[str, Any]) -> Notice | None:
    original = c.params.get("original_task_id")
    new = next((t for t in tasks.values()
                if _get(t, "supersedes") == original and _get(t, "created_at") == c.arrived), None)
    if new is None or _get(new, "state") not in _OPEN:
        return None
    spec = c.params.get("new_task")
    given = _get(spec, "input") if isinstance(spec, dict) else None
    # Where clients put it: the desk sends `context` with the call, as CHAP's
    # examples of escalate.raise do; others put it in the new task's input.
    reason = next((v for v in (c.params.get("reason"), c.params.get("context"), _get(given, "abstention_reason"),
                               _get(given, "context")) if isinstance(v, str) and v.strip()), "")
    return _notice(c, _get(new, "id"), [_get(new, "assignee")],
                   f"Escalated to you: {_first_line(reason) or original}", {
                       "escalated_from": original,
                       "reason": reason,
                       "task_kind": _get(new, "kind"),
                   })


def _whisper(c: Candidate, whispers: Mapping[str, Any]) -> Notice | None:
    wanted = c.params.get("whisper_id")
    # A generated whisper id is not in the entry: the whisper is the one
    # asked at the entry's time, of the same task and question (calls in
    # one millisecond share a time), pending if any such is.
    matching = [w for w in whispers.values()
                if _get(w, "asked_at") == c.arrived
                and _get(w, "task_id") == c.params.get("task_id")
                and _get(w, "question") == c.params.get("question")
                and (wanted is None or _get(w, "id") == wanted)]
    whisper = next((w for w in matching if _get(w, "state") == "pending"), None)
    if whisper is None:
        return None
    askee = _get(whisper, "askee")
    return _notice(c, _get(whisper, "task_id"), askee if isinstance(askee, list) else [askee],
                   f"Question: {_first_line(_get(whisper, 'question'))}", {
                       "whisper_id": _get(whisper, "id"),
                       "question": _get(whisper, "question"),
                       "options": _get(whisper, "options"),
                       "urgency": _get(whisper, "urgency"),
                       "deadline_ms": _get(whisper, "deadline_ms"),
                   })


def _notice(c: Candidate, task_id: Any, to: list[Any], title: str, detail: dict[str, Any]) -> Notice:
    digest = hashlib.sha256(f"{c.workspace}\n{c.seq}\n{c.kind}".encode()).hexdigest()
    return Notice(
        id=f"ntc_{digest[:32]}",
        kind=c.kind,
        workspace=c.workspace,
        seq=c.seq,
        at=c.arrived,
        sender=c.sender,
        task_id=str(task_id),
        to=[str(uri) for uri in to if isinstance(uri, str)],
        title=_one_line(title)[:_TITLE_CHARS],
        detail={k: v for k, v in detail.items() if v is not None},
    )


def _first_line(value: Any) -> str:
    """A title from a draft: its first non-empty line of text, or of the
    first text field of an object."""
    if isinstance(value, dict):
        value = next((v for v in value.values() if isinstance(v, str) and v.strip()), "")
    if not isinstance(value, str):
        return ""
    line = next((line for line in value.splitlines() if line.strip()), "")
    return _one_line(line.strip().lstrip("#"))


def _one_line(text: str) -> str:
    """`text` as one line of printable characters: a title goes into an
    e-mail's Subject and a Slack message's bold, where a line break or a
    control character would end it (or refuse it)."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


def _get(value: Any, name: str) -> Any:
    """A field of an object as the coordinator holds it (a Struct) or as JSON."""
    if isinstance(value, dict):
        return value.get(name)
    return getattr(value, name, None)
