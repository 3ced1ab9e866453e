"""The benchmark workload: a review workflow driven through `dispatch` only.

One workspace (profiles core/1.0 + review/1.0) with a human (`human:alice`,
admin) and an agent (`agent:bot`). Then cycles, one task each, drawn from a
fixed 20-cycle pattern so that every run sends the same calls in the same
order:

  approve   create(review_required) -> update in_progress -> complete(output)
            [opens the review] -> decide.approve (with approved_artefact_digest)
  override  create -> update in_progress -> review.request -> decide.override
  revise    create -> update in_progress -> review.request
            -> decide.reject(request_revision) -> review.request (revised)
            -> decide.approve
  posthoc   create -> update in_progress -> complete [completes: no review
            required] -> review.request -> decide.approve
  decline   create(review_required) -> update in_progress -> complete
            -> decide.reject
  direct    create -> update in_progress -> complete

and, every `READ_EVERY` cycles, an `audit.read` filtered by the cycle's task.

The envelopes are identical for every implementation except for the task id,
which the coordinator generates and the harness copies from the
`task.create` response into the calls that follow. Every envelope is built
before the clock starts (`plan`), so timing covers `dispatch` and nothing of
the harness but a dict store and a loop.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable
from typing import Any

WORKSPACE = "wsp_bench"
HUMAN = "human:alice"
AGENT = "agent:bot"
PROFILES = ["core/1.0", "review/1.0"]
READ_EVERY = 20

# op codes of a planned call
CREATE = 0  # task.create: capture result.task_id
TASK = 1  # set params.task_id to the cycle's task
READ = 2  # set params.filter.task_id to the cycle's task

PATTERN = (
    "approve", "override", "revise", "approve", "direct",
    "override", "approve", "decline", "revise", "approve",
    "override", "posthoc", "approve", "override", "revise",
    "approve", "direct", "override", "approve", "decline",
)  # fmt: skip

_LOREM = (
    "The quarterly figures show steady growth in the northern region, "
    "driven mostly by renewals; churn in the southern accounts is flat. "
    "Recommend holding the current pricing and revisiting in Q3 once the "
    "new onboarding flow has a full quarter of data behind it."
)


def _jcs_digest(value: Any) -> str:
    # The artefacts below hold only ASCII strings, integers, lists and objects,
    # for which sorted-key compact JSON is the JCS form.
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _ts(n: int) -> str:
    s, ms = divmod(n, 1000)
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    d, h = divmod(h, 24)
    return f"2025-01-{1 + d % 28:02d}T{h:02d}:{m:02d}:{s:02d}.{ms:03d}Z"


def setup_envelopes(prefix: str = "s") -> list[dict[str, Any]]:
    """workspace.create and the two joins."""
    return [
        {
            "jsonrpc": "2.0",
            "id": f"{prefix}-1",
            "method": "workspace.create",
            "params": {"workspace": WORKSPACE, "profiles": list(PROFILES)},
        },
        {
            "jsonrpc": "2.0",
            "id": f"{prefix}-2",
            "method": "participant.join",
            "params": {
                "workspace": WORKSPACE,
                "from": HUMAN,
                "to": f"workspace:{WORKSPACE}",
                "ts": _ts(1),
                "type": "human",
                "role": "admin",
                "display_name": "Alice",
            },
        },
        {
            "jsonrpc": "2.0",
            "id": f"{prefix}-3",
            "method": "participant.join",
            "params": {
                "workspace": WORKSPACE,
                "from": AGENT,
                "to": f"workspace:{WORKSPACE}",
                "ts": _ts(2),
                "type": "agent",
                "display_name": "Report bot",
                "capabilities": {"kinds": ["draft_report"]},
            },
        },
    ]


# One planned call: (envelope, op, expected result.state or None).
Call = tuple[dict[str, Any], int, Any]


def _cycle(kind: str, i: int, read: bool) -> list[tuple[str, str, dict[str, Any], int, Any]]:
    """(method, sender, params, op, expected state) for cycle `i` of `kind`."""
    artefact = {
        "kind": "report",
        "title": f"Weekly report {i}",
        "body": _LOREM,
        "sections": [{"heading": "Summary", "n": i % 97}, {"heading": "Risks", "n": 3}],
    }
    create = {
        "kind": "draft_report",
        "assignee": AGENT,
        "input": {"topic": f"report {i}", "sources": ["crm", "billing"], "max_words": 400},
        "routing_hints": {"criticality": "medium"},
    }
    review_required = kind in ("approve", "decline")
    if review_required:
        create["review_required"] = True
    out: list[tuple[str, str, dict[str, Any], int, Any]] = [
        ("task.create", HUMAN, create, CREATE, "created"),
        ("task.update", AGENT, {"state": "in_progress", "progress_note": "drafting"}, TASK, "in_progress"),
    ]
    request = {"to": [HUMAN], "artefact": artefact, "summary": "please review"}
    if kind == "approve":
        out += [
            ("task.complete", AGENT, {"output": artefact, "confidence": 80}, TASK, "review_requested"),
            ("decide.approve", HUMAN, {"comment": "looks good", "approved_artefact_digest": _jcs_digest(artefact)}, TASK, "completed"),
        ]  # fmt: skip
    elif kind == "override":
        diff = [
            {"op": "replace", "path": "/title", "value": f"Weekly report {i} (edited)"},
            {"op": "add", "path": "/sections/-", "value": {"heading": "Next steps", "n": 1}},
        ]
        out += [
            ("review.request", AGENT, request, TASK, "review_requested"),
            ("decide.override", HUMAN, {"diff": diff, "rationale": "clearer title, add next steps", "tags": ["edit"]}, TASK, "completed"),
        ]  # fmt: skip
    elif kind == "revise":
        revised = dict(artefact, title=f"Weekly report {i} v2")
        out += [
            ("review.request", AGENT, request, TASK, "review_requested"),
            ("decide.reject", HUMAN, {"comment": "cite the billing source", "request_revision": True}, TASK, "in_progress"),
            ("review.request", AGENT, dict(request, artefact=revised), TASK, "review_requested"),
            ("decide.approve", HUMAN, {"comment": "thanks"}, TASK, "completed"),
        ]  # fmt: skip
    elif kind == "posthoc":
        out += [
            ("task.complete", AGENT, {"output": artefact}, TASK, "completed"),
            ("review.request", HUMAN, dict(request, summary="post-hoc spot check"), TASK, "review_requested"),
            ("decide.approve", HUMAN, {}, TASK, "completed"),
        ]  # fmt: skip
    elif kind == "decline":
        out += [
            ("task.complete", AGENT, {"output": artefact, "confidence": 40}, TASK, "review_requested"),
            ("decide.reject", HUMAN, {"comment": "out of scope"}, TASK, "declined"),
        ]  # fmt: skip
    elif kind == "direct":
        out += [("task.complete", AGENT, {"output": artefact}, TASK, "completed")]
    else:  # pragma: no cover
        raise ValueError(kind)
    if read:
        out.append(("audit.read", HUMAN, {"filter": {}}, READ, None))
    return out


def plan(
    start: int, count: int, prefix: str, *, reads: bool = True, pattern: tuple[str, ...] | None = None
) -> list[Call]:
    """The calls of cycles `start .. start+count-1`, envelopes fully built,
    the cycles' kinds drawn from `pattern` (default `PATTERN`).

    `prefix` keeps envelope ids unique across runs on one workspace.
    """
    kinds = PATTERN if pattern is None else pattern
    calls: list[Call] = []
    n = 0
    for i in range(start, start + count):
        kind = kinds[i % len(kinds)]
        read = reads and i % READ_EVERY == READ_EVERY - 1
        for method, sender, params, op, state in _cycle(kind, i, read):
            n += 1
            p = {
                "workspace": WORKSPACE,
                "from": sender,
                "to": AGENT if sender == HUMAN else HUMAN,
                "ts": _ts(1000 * i + n % 1000),
            }
            if method == "audit.read":
                p = {"workspace": WORKSPACE, "from": sender, "filter": {}}
            else:
                p.update(params)
            if op == TASK:
                p["task_id"] = None  # filled in by `drive`
            calls.append(({"jsonrpc": "2.0", "id": f"{prefix}-{n}", "method": method, "params": p}, op, state))
    return calls


def calls_per_cycle(reads: bool = True) -> float:
    total = sum(len(_cycle(k, i, reads and i % READ_EVERY == READ_EVERY - 1)) for i, k in enumerate(PATTERN))
    return total / len(PATTERN)


class WorkloadError(AssertionError):
    pass


def _bind(env: dict[str, Any], op: int, tid: str | None) -> dict[str, Any]:
    """`env` with the cycle's task id put where `op` says."""
    if op == TASK:
        env["params"]["task_id"] = tid
    elif op == READ:
        env["params"]["filter"]["task_id"] = tid
    return env


def drive(
    dispatch: Callable[[dict], dict],
    calls: list[Call],
    *,
    tids: list | None = None,
    batch: Callable[[], Any] | None = None,
    group: int = 0,
) -> int:
    """Send the planned calls; returns how many were answered with an error.

    With `batch` and `group`, every `group` consecutive calls run inside one
    `with batch():` (one store write per group). Appends every created task
    id to `tids` when given.
    """
    errors = 0
    tid = None
    if batch is None or group <= 0:
        chunks = [calls]
        batch = contextlib.nullcontext
    else:
        chunks = [calls[i : i + group] for i in range(0, len(calls), group)]
    for chunk in chunks:
        with batch():
            for env, op, _ in chunk:
                r = dispatch(_bind(env, op, tid))
                if op == CREATE:
                    tid = r["result"]["task_id"]
                    if tids is not None:
                        tids.append(tid)
                elif "error" in r:
                    errors += 1
    return errors


def drive_checked(dispatch: Callable[[dict], dict], calls: Iterable[Call]) -> list[dict]:
    """Like `drive`, but check every answer: a result, and the expected state.

    Returns the responses; raises WorkloadError on the first unexpected one.
    """
    out = []
    tid = None
    for env, op, state in calls:
        r = dispatch(_bind(env, op, tid))
        out.append(r)
        if "result" not in r:
            raise WorkloadError(f"{env['method']} {env['id']}: expected a result, got {r}")
        res = r["result"]
        if op == CREATE:
            tid = res["task_id"]
        if state is not None and res.get("state") != state:
            raise WorkloadError(f"{env['method']} {env['id']}: expected state {state!r}, got {res}")
        if op == READ:
            entries = res.get("entries")
            if not entries or any(
                (e.get("envelope") or e.get("request"))["params"].get("task_id") != tid for e in entries
            ):
                raise WorkloadError(f"audit.read {env['id']}: entries do not match task {tid}: {res}")
    return out
