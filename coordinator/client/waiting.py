"""Waiting for people: block until a review is decided or a whisper answered,
following the server's event stream (GET /chap/events) instead of polling.
SPECIFICATION.md, "Waiting for people".

The state is always read, never inferred: at the start, and whenever an entry
that names the subject (a task or whisper id) arrives, the workspace's
snapshot says whether it is settled. A dropped stream (the server
restarting, a stream ended as `lagged`) is reopened with `Last-Event-ID` set
to the last seq seen, and the snapshot read again once it is open, so an
entry missed in between (a server that keeps no ids, one that restarted) is
never missed: the snapshot holds its effect. A stream quiet for
RECHECK_SECONDS is reopened after the same read (several workers each stream
their own writes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import msgspec

from coordinator.client.refusals import refusal
from coordinator.errors import WaitTimedOut
from coordinator.extras import needs

with needs("client"):
    import httpx

__all__ = ["Decision", "Server", "WhisperAnswer", "decision_of", "follow", "whisper_answer_of"]

T = TypeVar("T")
# How long to wait before reopening a dropped stream (the server restarting).
_REOPEN_PAUSE = 0.2
# After this long without an event the snapshot is read again: with several
# workers (`serve --workers N`) a stream carries its own worker's entries only.
RECHECK_SECONDS = 5.0
# The task states a decision leaves a review in (declined: rejected;
# in_progress: rejected with a revision asked for; abstained; escalated:
# handed to another task; cancelled).
_DECIDED = frozenset({"completed", "declined", "abstained", "escalated", "cancelled", "in_progress"})


class Server(Protocol):
    """What following needs of a RemoteCoordinator: its snapshot read and its
    pooled HTTP client."""

    http: httpx.Client

    def snapshot(self, workspace_id: str) -> dict[str, Any]: ...


class Decision(msgspec.Struct, frozen=True):
    """How a review ended. `kind`: "approve", "override" (a person changed
    the artefact: `output` is the patched one), "reject" (`reason` is the
    reviewer's comment; `revision_requested` when they asked for another
    draft), "abstain", "escalate" (`escalated_to` is the new task it was
    handed to, whose own decision `wait_for_decision` waits for in turn), or
    "cancelled". `output` is what the task delivers (None unless approved or
    overridden)."""

    task_id: str
    kind: str
    state: str
    reviewer: str | None = None
    output: Any = None
    reason: str | None = None
    revision_requested: bool = False
    escalated_to: str | None = None

    @property
    def approved(self) -> bool:
        """Whether the task's output may be used (approved or overridden)."""
        return self.kind in ("approve", "override")


class WhisperAnswer(msgspec.Struct, frozen=True):
    """How a whisper ended: `state` "answered" (by `answered_by`, with
    `option` and/or `text`) or "lapsed" (`default_applied`)."""

    whisper_id: str
    state: str
    answered_by: str | None = None
    option: Any = None
    text: Any = None
    comment: Any = None
    default_applied: Any = None


def decision_of(snapshot: dict[str, Any], task_id: str) -> Decision | None:
    """The decision on `task_id`'s review, or None while it is still open."""
    task = snapshot.get("tasks", {}).get(task_id)
    if not isinstance(task, dict) or task.get("state") not in _DECIDED:
        return None
    state = task["state"]
    review = task.get("review") or {}
    decisions = review.get("decisions") or []
    last = decisions[-1] if decisions else {}
    kind = last.get("kind")
    if state == "cancelled":
        return Decision(task_id, "cancelled", state)
    if state == "escalated":
        # escalate.raise records no decision on the original: who escalated
        # is the new task's delegator.
        successor = task.get("superseded_by")
        delegator = snapshot.get("tasks", {}).get(successor, {}).get("delegator")
        return Decision(task_id, "escalate", state, reviewer=delegator, escalated_to=successor)
    if state == "in_progress" and kind != "reject":
        return None  # being drafted, not decided
    if kind is None:
        return None
    reason = last.get("comment")
    if kind == "override":
        override = snapshot.get("overrides", {}).get(last.get("override_artefact_id"), {})
        reason = override.get("rationale")
    output = task.get("output") if kind in ("approve", "override") else None
    return Decision(
        task_id,
        kind,
        state,
        reviewer=last.get("reviewer"),
        output=output,
        reason=reason,
        revision_requested=kind == "reject" and state == "in_progress",
    )


def whisper_answer_of(snapshot: dict[str, Any], whisper_id: str) -> WhisperAnswer | None:
    """The whisper's answer (or lapse), or None while it is pending."""
    whisper = snapshot.get("whispers", {}).get(whisper_id)
    if not isinstance(whisper, dict) or whisper.get("state") == "pending":
        return None
    return WhisperAnswer(
        whisper_id,
        whisper["state"],
        answered_by=whisper.get("answered_by"),
        option=whisper.get("answer_option"),
        text=whisper.get("answer_text"),
        comment=whisper.get("comment"),
        default_applied=whisper.get("default_applied"),
    )


def events(lines: Iterator[str]) -> Iterator[tuple[str, str | None, str]]:
    """Server-sent events as (event, id or None, data); comments skipped."""
    kind: str = "message"
    event_id: str | None = None
    data: list[str] = []
    for line in lines:
        if not line:
            if data or kind != "message":
                yield kind, event_id, "\n".join(data)
            kind, event_id, data = "message", None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            kind = value
        elif field == "id":
            event_id = value
        elif field == "data":
            data.append(value)


def _seq(event_id: str | None, data: Any) -> int | None:
    """The entry's seq: the event's id (`WORKSPACE:SEQ`, as the server sends
    it; a bare `SEQ` is read too), else the entry's own."""
    if event_id:
        tail = event_id.rpartition(":")[2]
        if tail.isdigit():
            return int(tail)
    entry = data.get("entry") if isinstance(data, dict) else None
    seq = entry.get("seq") if isinstance(entry, dict) else None
    return seq if isinstance(seq, int) else None


def follow(
    remote: Server,
    workspace: str,
    subject: str,
    settled: Callable[[dict[str, Any], str], T | None],
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """What `settled` finds in the workspace once `subject` is settled,
    following the event stream until then; WaitTimedOut after `timeout` s."""
    deadline = clock() + timeout

    def check() -> T | None:
        try:
            return settled(remote.snapshot(workspace), subject)
        except KeyError:
            return None  # not created yet

    found = check()
    if found is not None:
        return found
    last: int | None = None
    while True:
        remaining = deadline - clock()
        if remaining <= 0:
            raise WaitTimedOut(workspace, subject, timeout)
        headers = {"accept": "text/event-stream"}
        continue_at_once = False
        if last is not None:
            headers["last-event-id"] = str(last)
        try:
            with remote.http.stream(
                "GET",
                "/chap/events",
                params={"workspace": workspace},
                headers=headers,
                timeout=httpx.Timeout(min(remaining, RECHECK_SECONDS), connect=min(remaining, 5.0)),
            ) as reply:
                if reply.status_code != 200:
                    reply.read()
                    if reply.status_code != 503:
                        raise refusal(reply)
                    # 503: the server is stopping, about to restart; reopen after the
                    # pause, as after a dropped stream (SPECIFICATION.md, "Waiting for people").
                else:
                    caught_up = False
                    for kind, event_id, text in events(reply.iter_lines()):
                        if not caught_up:
                            # The stream is open: what happened before it is in the snapshot.
                            caught_up = True
                            found = check()
                            if found is not None:
                                return found
                        if kind == "end":
                            # "rotated": the connection carried its share; go on at once.
                            if msgspec.json.decode(text).get("reason") == "rotated":
                                continue_at_once = True
                            break
                        if kind != "audit":
                            continue
                        data = msgspec.json.decode(text)
                        seq = _seq(event_id, data)
                        if seq is not None:
                            if last is not None and seq <= last:
                                continue
                            last = seq
                        if subject in text:
                            found = check()
                            if found is not None:
                                return found
                        if clock() >= deadline:
                            raise WaitTimedOut(workspace, subject, timeout)
        except httpx.ReadTimeout:
            found = check()  # a quiet stream: another worker may have written
            if found is not None:
                return found
            continue
        except httpx.TransportError:
            pass  # dropped: open it again
        if not continue_at_once:
            time.sleep(max(0.0, min(_REOPEN_PAUSE, deadline - clock())))
