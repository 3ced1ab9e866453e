"""core/1.0, the audit reads: audit.read, and audit.verify_chain (which
belongs to audit-scitt/1.0 but answers whatever a workspace advertises)."""

from __future__ import annotations

from typing import Any

import msgspec

from coordinator.audit import ChainVerifier
from coordinator.engine.call import Call
from coordinator.engine.canonical import ZERO_HASH
from coordinator.engine.registry import (
    FROM,
    INTEGER,
    STRING,
    Profile,
    schema,
)
from coordinator.engine.wire import (
    invalid_params,
)
from storage import EntryFilter

__all__ = ["PROFILE"]

PROFILE = Profile("core/1.0")
VERIFY_CHUNK = 10_000
# audit.read's first store read, in entries, and its largest.
_FIRST_CHUNK = 16
_MAX_CHUNK = 10_000

_encode = msgspec.json.encode

def _int_param(value: Any, name: str, default: int) -> int:
    if value is None:
        return default
    if type(value) is not int:
        raise invalid_params(f"{name} must be an integer")
    return value


@PROFILE.method(
    "audit.read",
    read=True,
    pause_exempt=True,
    params=schema(
        ["workspace"],
        from_=FROM,
        range={
            "type": "object",
            "properties": {"from_seq": INTEGER, "to_seq": INTEGER},
        },
        filter={
            "type": "object",
            "properties": {
                "method": STRING,
                "from": STRING,
                "task_id": STRING,
                "outcome": {"type": "string", "enum": ["accepted", "refused"]},
            },
        },
    ),
    title="Read the audit log",
    description="Entries of the workspace's log in a seq range, optionally filtered.",
)
def audit_read(call: Call) -> dict[str, Any]:
    call.require("workspace")
    ws = call.workspace()
    if call.options.require_read_membership:
        call.actor()
    rng = call.params.get("range") or {}
    if not isinstance(rng, dict):
        raise invalid_params("range must be an object {from_seq, to_seq}")
    start = max(_int_param(rng.get("from_seq"), "range.from_seq", 0), 0)
    stop = min(_int_param(rng.get("to_seq"), "range.to_seq", ws.count), ws.count)
    where = None
    flt = call.params.get("filter")
    if isinstance(flt, dict):
        outcome = flt.get("outcome")
        if outcome is not None and outcome not in ("accepted", "refused"):
            raise invalid_params('filter.outcome must be "accepted" or "refused"')
        where = EntryFilter(
            method=flt.get("method"),
            sender=flt.get("from"),
            task_id=flt.get("task_id"),
            outcome=outcome,
        )
        if where == EntryFilter():
            where = None
    budget = call.options.max_read_bytes
    if start >= stop:
        entries: list[dict[str, Any]] = []
        next_seq = stop
    elif where is not None and isinstance(where.task_id, str) and call.count("whispers"):
        entries, next_seq = _within(_by_task_with_answers(call, start, stop, where), budget, stop)
    else:
        entries, next_seq = _read_within(call, start, stop, where, budget)
    call.result_is_fresh()  # the entries are decoded afresh from the store
    return {"entries": entries, "next_seq": max(next_seq, 0)}


def _within(
    entries: list[dict[str, Any]], budget: int, stop: int
) -> tuple[list[dict[str, Any]], int]:
    """The leading entries whose JSON fits `budget` bytes (at least one), and
    the seq a reader goes on from: the first entry left out, else `stop`."""
    used = 0
    for at, entry in enumerate(entries):
        used += len(_encode(entry))
        if used > budget and at > 0:
            return entries[:at], int(entry["seq"])
    return entries, stop


def _read_within(
    call: Call, start: int, stop: int, where: EntryFilter | None, budget: int
) -> tuple[list[dict[str, Any]], int]:
    """`_within` over the log read in chunks sized by what the entries so far
    weighed, so a log of large entries is never read whole to answer a page
    of it (SPECIFICATION.md, "Bounds on memory and time"). Until an entry
    is kept (a filter that matches nothing yet) each chunk is twice the
    last, so a filtered read of a long log takes a few reads, not one per
    `_FIRST_CHUNK` entries."""
    out: list[dict[str, Any]] = []
    used = 0
    at = start
    blind = _FIRST_CHUNK
    while at < stop:
        average = used // len(out) if out else 0
        if average:
            size = (budget - used) // average + 1
        else:
            size, blind = blind, blind * 2
        upto = min(stop, at + max(1, min(size, _MAX_CHUNK)))
        for entry in call.log.entries(at, upto, where):
            used += len(_encode(entry))
            if used > budget and out:
                return out, int(entry["seq"])
            out.append(entry)
        at = upto
    return out, stop


def _answer_task(call: Call, entry: dict[str, Any]) -> Any:
    """The task a whisper.answer entry concerns: its whisper's, as 0.3.3
    files it (the answer's own params.task_id does not count)."""
    request = entry.get("envelope") or entry.get("request") or {}
    whisper_id = (request.get("params") or {}).get("whisper_id")
    whisper = call.get("whispers", whisper_id) if isinstance(whisper_id, str) else None
    return whisper.task_id if whisper is not None else None


def _is_answer(entry: dict[str, Any]) -> bool:
    request = entry.get("envelope") or entry.get("request") or {}
    return request.get("method") == "whisper.answer"


def _by_task_with_answers(
    call: Call, start: int, stop: int, where: EntryFilter
) -> list[dict[str, Any]]:
    """A read filtered by task where whisper answers are filed under their
    whisper's task: the indexed read, less the answers it found by their own
    params, plus the answers whose whisper belongs to the task."""
    found = [e for e in call.log.entries(start, stop, where) if not _is_answer(e)]
    if where.method in (None, "whisper.answer"):
        answers = EntryFilter(method="whisper.answer", sender=where.sender, outcome=where.outcome)
        found += [
            e
            for e in call.log.entries(start, stop, answers)
            if _answer_task(call, e) == where.task_id
        ]
        found.sort(key=lambda e: e["seq"])
    return found


# audit.verify_chain belongs to audit-scitt/1.0 but answers whatever a
# workspace advertises, so core implements it.
@PROFILE.method(
    "audit.verify_chain",
    read=True,
    params=schema(["workspace"], from_=FROM),
    title="Verify the hash chain",
    description="Recompute the workspace's hash chain and compare it with the recorded head.",
)
def audit_verify_chain(call: Call) -> dict[str, Any]:
    call.require("workspace")
    ws = call.workspace()
    if "from_seq" in call.params or "to_seq" in call.params:
        raise invalid_params(
            "Range verification is not implemented; omit from_seq and to_seq to verify the whole log."
        )
    if not ws.meta.chain_enabled:
        raise invalid_params("Chain not enabled for this workspace")
    verifier = ChainVerifier()
    for start in range(0, ws.count, VERIFY_CHUNK):
        for text in call.log.texts(start, min(start + VERIFY_CHUNK, ws.count)):
            verifier.add_text(text)
    # Nothing chained yet (a new workspace, or an unchained prefix only): the
    # chain is its genesis, as for any workspace before its first link.
    head = verifier.head() or ZERO_HASH
    breaks = verifier.breaks
    if head != ws.meta.chain_head:
        breaks.append(f"chain_head mismatch: recomputed {head}, recorded {ws.meta.chain_head}")
    if breaks:
        raise invalid_params("; ".join(breaks))
    unchecked = ws.count - verifier.entries_checked
    out: dict[str, Any] = (
        {"status": "verified", "ok": True}
        if unchecked == 0
        else {"status": "not_evaluated", "ok": False, "reason": "unchained_prefix"}
    )
    out.update(
        entries_total=ws.count,
        entries_checked=verifier.entries_checked,
        entries_unchecked=unchecked,
        checked_from_seq=verifier.checked_from_seq,
        chain_head=ws.meta.chain_head,
    )
    return out
