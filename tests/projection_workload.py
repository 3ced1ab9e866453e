"""Workloads for the projection tests: a review desk driven by a list of
operations, so hypothesis can draw them and a subprocess can replay them.
Most calls state their own `ts`, in the forms analytics dates by and others."""

from __future__ import annotations

from typing import Any

from tests.client import env

WS = "wsp_desk"
ALICE = "human:alice"
BOB = "human:bob"
CAROL = "human:carol"
BOT = "agent:bot"
HUMANS = (ALICE, BOB, CAROL)

# What an operation does to the task it names (by index into the tasks made).
ACTIONS = (
    "create",
    "create_reviewed",
    "start",
    "complete",
    "request_any",
    "request_all",
    "request_quorum",
    "approve",
    "reject",
    "revise",
    "override",
    "abstain",
    "escalate",
    "cancel",
    "bystander_approve",
)


def stated_time(t: int, h: int, n: int) -> Any:
    """The `ts` a call states (`_ABSENT`: none at all): ISO text in the forms
    analytics reads, text it does not, or null, picked by the operation's
    numbers so a workload is the same every run."""
    minute = (n * 37 + t * 11 + h) % 600
    hh, mm = divmod(minute, 60)
    forms = (
        _ABSENT,
        f"2026-03-01T{10 + hh:02d}:{mm:02d}:07.250Z",
        f"2026-03-01T{12 + hh:02d}:{mm:02d}:07+02:00",
        f"2026-03-01T{10 + hh:02d}:{mm:02d}:07.5",
        f"2026-03-01T{10 + hh:02d}:{mm:02d}:07Z",
        "2026-03-01",
        f"2026-03-01 {10 + hh:02d}:{mm:02d}:07.123456",
        "soon",
        None,
    )
    return forms[(t * 3 + h + n) % len(forms)]


_ABSENT = object()


def setup(coord: Any, ws: str = WS) -> None:
    coord.dispatch(env("workspace.create", {"workspace": ws}))
    for who in HUMANS:
        coord.dispatch(env("participant.join", {"workspace": ws, "from": who, "type": "human"}))
    coord.dispatch(env("participant.join", {"workspace": ws, "from": BOT, "type": "agent"}))


def run(coord: Any, ops: list[tuple[str, int, int]], ws: str = WS) -> list[str]:
    """Apply each (action, task index, human index); returns the task ids made.
    Many operations are refused in the state they find; that is part of it."""
    tasks: list[str] = []
    for action, t, h in ops:
        run_one(coord, ws, tasks, action, t, h)
    return tasks


def run_one(coord: Any, ws: str, tasks: list[str], action: str, t: int, h: int) -> None:
    human = HUMANS[h % len(HUMANS)]
    stated = stated_time(t, h, len(tasks))
    ts = {} if stated is _ABSENT else {"ts": stated}
    if action in ("create", "create_reviewed"):
        params: dict[str, Any] = {
            "workspace": ws, "from": human, "assignee": BOT, "kind": f"kind{t % 2}",
            "input": {"n": len(tasks)}, **ts,
        }
        if action == "create_reviewed":
            params["review_required"] = True
        res = coord.dispatch(env("task.create", params))
        if "result" in res:
            tasks.append(res["result"]["task_id"])
        return
    if not tasks:
        return
    task = tasks[t % len(tasks)]
    base = {"workspace": ws, "task_id": task}
    artefact = {"draft": t % 3}
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "start": ("task.update", {"from": BOT, "state": "in_progress"}),
        "complete": ("task.complete", {"from": BOT, "output": artefact}),
        "request_any": ("review.request", {"from": BOT, "artefact": artefact, "to": [human]}),
        "request_all": (
            "review.request",
            {"from": BOT, "artefact": artefact, "to": [ALICE, BOB], "rule": "all_approve"},
        ),
        "request_quorum": (
            "review.request",
            {"from": BOT, "artefact": artefact, "to": list(HUMANS), "rule": "quorum:2"},
        ),
        "approve": ("decide.approve", {"from": human, "comment": "ok"}),
        "reject": ("decide.reject", {"from": human, "comment": "no"}),
        "revise": ("decide.reject", {"from": human, "comment": "again", "request_revision": True}),
        "override": (
            "decide.override",
            {"from": human, "diff": [{"op": "add", "path": "/fixed", "value": True}],
             "rationale": "fixed it"},
        ),
        "abstain": ("abstain.declare", {"from": human, "reason": "not mine", "category": "out_of_scope"}),
        "escalate": (
            "escalate.raise",
            {"from": BOT, "reason": "stuck", "new_task": {"kind": "senior", "input": {}, "assignee": human}},
        ),
        "cancel": ("task.update", {"from": BOT, "state": "cancelled"}),
        "bystander_approve": ("decide.approve", {"from": BOT}),
    }
    method, extra = calls[action]
    if method == "escalate.raise":
        base = {"workspace": ws, "original_task_id": task}
    res = coord.dispatch(env(method, {**base, **extra, **ts}))
    if method == "escalate.raise" and "result" in res:
        tasks.append(res["result"]["new_task_id"])


def desk(coord: Any, ws: str = WS) -> list[str]:
    """A fixed workload touching every kind of decision."""
    setup(coord, ws)
    return run(coord, DESK_OPS, ws)


# A fixed workload touching every kind of decision.
DESK_OPS = [
    ("create", 0, 0), ("start", 0, 0), ("complete", 0, 0), ("request_any", 0, 0),
    ("bystander_approve", 0, 0), ("approve", 0, 0),
    ("create", 1, 0), ("complete", 1, 0), ("request_any", 1, 1), ("reject", 1, 1),
    ("create", 2, 0), ("complete", 2, 0), ("request_any", 2, 2), ("revise", 2, 2),
    ("complete", 2, 0), ("request_any", 2, 0), ("override", 2, 0),
    ("create", 3, 0), ("complete", 3, 0), ("request_quorum", 3, 0), ("approve", 3, 0),
    ("approve", 3, 1),
    ("create", 4, 1), ("complete", 4, 0), ("request_all", 4, 0), ("abstain", 4, 1),
    ("create", 5, 2), ("start", 5, 0), ("escalate", 5, 0),
    ("create_reviewed", 7, 0), ("start", 7, 0), ("complete", 7, 0), ("approve", 7, 1),
    ("create", 8, 0), ("cancel", 8, 0), ("create", 9, 0),
]
