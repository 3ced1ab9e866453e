"""whisper/1.0: whisper.ask, whisper.answer, and the lapse sweep.

A whisper is a private question about a task with a deadline and a default.
Behaviour follows chap-coordinator 0.3.3: only members may call (the
membership floor, SPECIFICATION.md "Dispatch", step 13); answers are checked
in its order (whisper known, caller addressed, not yet answered, not lapsed,
option in the set) and recorded as sent (the whisper's `task_id` is not
added to them); option ids are compared type-strictly; and a whisper lapses
only when a sweep runs (`Coordinator.sweep` or
`Coordinator.check_whisper_lapses`, through `lapse_overdue`), which records
one `notify.message` entry per lapsed whisper and applies its default. Where
the reference accepts malformed input or crashes on it, chapline answers
-32602 before looking at any state. SPECIFICATION.md, "Interaction
profiles", states all of it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from msgspec.structs import replace

from coordinator.engine.call import Call
from coordinator.engine.canonical import canonical_bytes
from coordinator.engine.clock import iso_ms
from coordinator.engine.registry import ANY, ARRAY, INTEGER, STRING, Profile, schema
from coordinator.engine.sweeps import Sweep
from coordinator.engine.wire import (
    NOT_AN_OPTION,
    NOT_AUTHORISED,
    WHISPER_ANSWERED,
    WHISPER_LAPSED,
    invalid_params,
)
from coordinator.engine.writes import WorkspaceWrite
from coordinator.errors import CanonicalError, RpcError
from coordinator.model import WhisperPrompt
from storage import StoreConflictError

__all__ = [
    "PROFILE",
    "instant",
    "lapse",
    "lapse_notice",
    "lapse_overdue",
    "lapsed_by",
    "parse_now",
]

PROFILE = Profile("whisper/1.0")

LAPSE_SENDER = "service:coordinator"
# Addresses that stand for "any member" rather than one askee.
_ANY_MEMBER = ("workspace:", "group:")


def _askees(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise invalid_params(
        "whisper.ask needs 'to': a participant URI or an array of them "
        '(e.g. "human:alice"; "group:..." or "workspace:..." lets any member answer)'
    )


# The schema lists URIs; the handler takes a single URI string too.
_ADDRESS = {"type": "array", "items": STRING}


@PROFILE.method(
    "whisper.ask",
    floor=True,
    params=schema(
        ["workspace", "from", "to", "task_id", "question", "deadline_ms", "default_if_lapsed"],
        to=_ADDRESS,
        task_id=STRING,
        question=STRING,
        deadline_ms={**INTEGER, "description": "Milliseconds from now until the whisper lapses."},
        default_if_lapsed={"description": "What applies if nobody answers in time."},
        options={
            **ARRAY,
            "items": {"type": "object", "properties": {"id": STRING, "label": STRING}, "required": ["id"]},
        },
        urgency={**STRING, "enum": ["low", "medium", "high"], "default": "low"},
        whisper_id=STRING,
        context_summary=ANY,
    ),
    title="Ask privately",
    description=(
        "Ask members a private question about a task, with a deadline and the default "
        "that applies if nobody answers in time."
    ),
)
def whisper_ask(call: Call) -> dict[str, Any]:
    p = call.params
    for name in ("to", "task_id", "question", "deadline_ms", "default_if_lapsed"):
        if name not in p:
            raise invalid_params(f"Missing field: {name}")
    askee = _askees(p["to"])
    deadline_ms = p["deadline_ms"]
    if type(deadline_ms) is not int:
        raise invalid_params(
            f"deadline_ms must be an integer number of milliseconds, not {deadline_ms!r}"
        )
    options = p.get("options")
    if options is not None and not isinstance(options, list):
        raise invalid_params("options must be a list of {id, label} objects")
    whisper_id = p.get("whisper_id")
    if whisper_id is not None and not isinstance(whisper_id, str):
        raise invalid_params("whisper_id must be a string")
    call.workspace()
    task = call.task(p["task_id"])
    if whisper_id is None:
        whisper_id = call.new_id("art", "whispers")
    elif call.get("whispers", whisper_id) is not None:
        raise invalid_params(
            f"whisper_id {whisper_id!r} is already in use in this workspace; "
            "choose another id or omit it to have one generated"
        )
    call.put(
        "whispers",
        whisper_id,
        WhisperPrompt(
            id=whisper_id,
            task_id=task.id,
            asker=p.get("from"),
            askee=askee,
            question=p["question"],
            options=options,
            asked_at=call.arrived,
            deadline_ms=deadline_ms,
            default_if_lapsed=p["default_if_lapsed"],
            urgency=p.get("urgency") or "low",
        ),
    )
    return {"whisper_id": whisper_id, "deadline_ms": deadline_ms}


def _same_id(option_id: Any, answer: Any) -> bool:
    """As 0.3.3 compares an answer with an option id (SPECIFICATION.md,
    "Interaction profiles", `whisper.answer`): booleans match only booleans,
    numbers match by value (1 == 1.0), strings by value; objects and arrays
    never match."""
    if isinstance(option_id, (dict, list)) or isinstance(answer, (dict, list)):
        return False
    if isinstance(option_id, bool) or isinstance(answer, bool):
        return type(option_id) is type(answer) and option_id == answer
    return bool(option_id == answer)


def _jcs_text(value: Any) -> str:
    try:
        return canonical_bytes(value).decode()
    except CanonicalError:
        return repr(value)


@PROFILE.method(
    "whisper.answer",
    floor=True,
    params=schema(
        ["workspace", "from", "whisper_id"],
        whisper_id=STRING,
        answer_option={**STRING, "description": "The id of the chosen option, when the whisper has options."},
        answer=STRING,
        answer_text=ANY,
        comment=STRING,
    ),
    title="Answer a whisper",
    description="Answer a whisper addressed to you, before it lapses.",
)
def whisper_answer(call: Call) -> dict[str, Any]:
    p = call.params
    call.require("whisper_id")
    whisper_id = p["whisper_id"]
    call.workspace()
    whisper = call.get("whispers", whisper_id) if isinstance(whisper_id, str) else None
    if whisper is None:
        raise invalid_params(f"Unknown whisper id: {whisper_id!r}")
    answerer = call.actor().uri
    askee = whisper.askee if isinstance(whisper.askee, list) else [whisper.askee]
    anyone = any(isinstance(a, str) and a.startswith(_ANY_MEMBER) for a in askee)
    if not anyone and answerer not in askee:
        raise RpcError(
            NOT_AUTHORISED,
            f"Whisper was not addressed to {answerer}; it was asked of "
            f"{', '.join(map(str, askee)) or 'nobody'}",
        )
    if whisper.state == "answered":
        raise RpcError(WHISPER_ANSWERED, f"Whisper already answered by {whisper.answered_by}")
    if whisper.state == "lapsed":
        raise RpcError(
            WHISPER_LAPSED,
            "Whisper already lapsed: its deadline passed and its default was applied",
        )
    option = p.get("answer_option")
    text = p.get("answer") or p.get("answer_text")
    if whisper.options:
        if option is None:
            raise invalid_params("answer_option is required when options are defined")
        ids = [o["id"] for o in whisper.options if isinstance(o, dict) and "id" in o]
        if not any(_same_id(i, option) for i in ids):
            raise RpcError(NOT_AN_OPTION, f"Answer option {_jcs_text(option)} not in option set")
    elif option is None and not text:
        raise invalid_params("answer or answer_option required")
    call.put(
        "whispers",
        whisper.id,
        replace(
            whisper,
            state="answered",
            answered_at=call.arrived,
            answered_by=answerer,
            answer_option=option,
            answer_text=text,
            comment=p.get("comment"),
        ),
    )
    return {"answered": True, "whisper_id": whisper.id, "task_id": whisper.task_id}


# -- lapses ---------------------------------------------------------------------


def parse_now(now: str) -> datetime:
    """The sweep's `now` (ISO 8601 with a zone, e.g. `...Z` or `+00:00`)."""
    try:
        parsed = datetime.fromisoformat(now.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        raise ValueError(
            f"now must be an ISO 8601 time with a zone, e.g. 2024-01-01T00:00:00Z; got {now!r}"
        ) from None
    if parsed.tzinfo is None:
        raise ValueError(f"now must carry a zone (Z or +hh:mm): {now!r}")
    return parsed


def instant(epoch_ms: int) -> datetime:
    """A clock reading (epoch milliseconds) as a time to compare deadlines with."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)


def lapsed_by(whisper: WhisperPrompt, cutoff: datetime) -> bool:
    """Whether a pending whisper's deadline (asked_at + deadline_ms) is at or
    before `cutoff`. A whisper whose stored fields cannot be read never lapses."""
    if whisper.state != "pending" or type(whisper.deadline_ms) is not int:
        return False
    try:
        asked = parse_now(whisper.asked_at)
    except ValueError:
        return False
    return cutoff >= asked + timedelta(milliseconds=whisper.deadline_ms)


def lapse(whisper: WhisperPrompt) -> WhisperPrompt:
    return replace(whisper, state="lapsed", default_applied=whisper.default_if_lapsed)


def lapse_notice(workspace: str, whisper: WhisperPrompt, ts: str) -> dict[str, Any]:
    """The envelope a lapse records: a notification (no id) from the
    coordinator to the asker and the askees, carrying the task id."""
    askee = whisper.askee if isinstance(whisper.askee, list) else [whisper.askee]
    return {
        "jsonrpc": "2.0",
        "method": "notify.message",
        "params": {
            "workspace": workspace,
            "from": LAPSE_SENDER,
            "to": [whisper.asker, *askee],
            "ts": ts,
            "kind": "whisper_lapsed",
            "whisper_id": whisper.id,
            "task_id": whisper.task_id,
            "default_applied": whisper.default_if_lapsed,
        },
    }


@PROFILE.on_sweep
def lapse_overdue(sweep: Sweep) -> None:
    """Lapse the workspace's pending whispers whose deadline is at or before
    the sweep's time (`sweep.at`, else the clock's): each gets its default
    applied and one `notify.message` entry on the log, all in one write.
    Reports their ids in `sweep.lapsed`. A write that loses to another
    writer is tried once more on the fresh state; a store failure is raised
    and changes nothing."""
    cutoff = parse_now(sweep.at) if sweep.at is not None else None
    retried = False
    while True:
        ws = sweep.workspace()
        if ws is None:
            return
        if cutoff is None:
            cutoff = instant(sweep.now())
        due = [w for w in ws.values("whispers") if lapsed_by(w, cutoff)]
        if not due:
            return
        lapsed: dict[str, Any] = {}
        write = WorkspaceWrite(ws, ws.meta, {"whispers": lapsed}, ws.latest)
        latest = ws.latest
        for held in due:
            # 0.3.3 reads the clock for the notice's ts, then for arrived. The
            # ts is the clock's (it is part of the recorded call, as 0.3.3
            # records it); the entry's arrived is never earlier than the
            # workspace's last write (SPECIFICATION.md, "Lapses").
            ts = iso_ms(sweep.now())
            arrived = latest = max(iso_ms(sweep.now()), latest)
            notice = lapse_notice(ws.id, held, ts)
            write.add_entry(arrived, notice, canonical_bytes(notice), recorded=notice)
            lapsed[held.id] = lapse(held)
        refused = sweep.write(write)
        if isinstance(refused, StoreConflictError) and not retried and sweep.reload():
            retried = True  # another writer appended: sweep its state once more
            continue
        if refused is not None:
            raise refused
        sweep.lapsed.extend(lapsed)
        return
