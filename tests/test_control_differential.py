"""control/1.0 against chap-coordinator 0.3.3: the same scripts through both,
compared step by step (results, codes, error data), then the log, the chain
(modulo generated ids), describe and the stored objects (profile_diff.py)."""

from __future__ import annotations

from typing import Any

import pytest
from client import Client
from profile_diff import Run, ours, reference

W = "wsp_d"
A, BOT, B2, BOB, GHOST = "human:alice", "agent:bot", "agent:b2", "human:bob", "human:ghost"


def f(sender: str, /, **params: Any) -> dict[str, Any]:
    return {"workspace": W, "from": sender, **params}


def setup(*, profiles: list[str] | None = None) -> list[tuple]:
    create: dict[str, Any] = {"workspace": W}
    if profiles is not None:
        create["profiles"] = profiles
    return [
        ("workspace.create", create),
        ("participant.join", f(A, type="human", role="admin")),
        ("participant.join", f(BOT, type="agent")),
        ("participant.join", f(B2, type="agent", role="drafter", scopes=["x"])),
        ("participant.join", f(BOB, type="human", scopes=[])),
        ("task.create", f(A, assignee=BOT, kind="k", input={}), ("task_id", "$T")),
    ]


def task(name: str, **params: Any) -> tuple:
    params.setdefault("assignee", BOT)
    return ("task.create", f(A, kind="k", input={}, **params), ("task_id", name))


PAUSE_RESUME = [
    *setup(),
    # task scope: the default; pausing twice keeps the state to go back to
    ("control.pause", f(A, task_id="$T")),
    ("control.pause", f(A, scope="task", task_id="$T", in_flight_policy="cancel", reason="x")),
    ("task.update", f(BOT, task_id="$T", state="in_progress")),  # paused: illegal
    ("task.complete", f(BOT, task_id="$T")),
    ("control.resume", f(A, scope="task", task_id="$T")),  # back to created
    ("control.resume", f(A, task_id="$T")),  # not paused: -32061, recorded
    ("task.update", f(BOT, task_id="$T", state="in_progress")),
    ("control.pause", f(A, task_id="$T")),
    ("control.resume", f(A, task_id="$T")),  # back to in_progress
    # review_requested comes back as it was, review and all
    task("$R"),
    ("review.request", f(BOT, task_id="$R", to=[A], artefact={"a": 1})),
    ("control.pause", f(A, task_id="$R")),
    ("decide.approve", f(A, task_id="$R")),  # -32010 while paused
    ("review.request", f(BOT, task_id="$R", to=[A], artefact={"a": 1})),  # -32010
    ("control.resume", f(A, task_id="$R")),
    ("decide.approve", f(A, task_id="$R")),
    # refusals of pause/resume
    ("control.pause", f(A)),
    ("control.pause", f(A, scope="task")),
    ("control.pause", f(A, task_id="nope")),
    ("control.pause", f(A, task_id=5)),
    ("control.pause", f(A, scope="bogus", task_id="$T")),
    ("control.pause", f(A, scope=5)),
    ("control.pause", f(A, scope=None, task_id="$T")),
    ("control.resume", f(A, scope=None, task_id="$T")),
    ("control.pause", f(GHOST, task_id="$T")),
    ("control.pause", {"workspace": W, "task_id": "$T"}),
    ("control.pause", f(A, task_id="$R")),  # completed: -32061
    ("control.resume", f(A, task_id="$R")),
    ("control.pause", {"workspace": "nope", "from": A, "task_id": "$T"}),
    # participant scope
    ("control.pause", f(A, scope="participant")),
    ("control.pause", f(A, scope="participant", participant_uri="agent:none")),
    ("control.pause", f(A, scope="participant", participant_uri=5)),
    ("control.pause", f(A, scope="participant", uri=B2)),
    ("control.pause", f(A, scope="participant", participant_uri=B2, in_flight_policy="cancel")),
    ("control.pause", f(A, scope="participant", participant_uri=None, uri=B2, in_flight_policy=None)),
    ("task.create", f(A, assignee=B2, kind="k", input={})),  # paused assignee: -32063
    ("workspace.describe", {"workspace": W}),
    ("control.resume", f(A, scope="participant", participant_uri=B2)),
    ("control.resume", f(A, scope="participant", participant_uri=B2)),
    ("control.resume", f(A, scope="participant", participant_uri="agent:none")),
    ("control.resume", f(A, scope="participant")),
    ("control.resume", f(A, scope="bogus")),
    # workspace scope and the paused gate
    ("control.resume", f(A, scope="workspace")),
    ("control.pause", f(A, scope="workspace", reason="r")),
    ("control.pause", f(A, scope="workspace")),
    ("task.create", f(A, assignee=BOT, kind="k", input={})),
    ("task.update", f(BOT, task_id="$T", state="completed")),
    ("task.complete", f(BOT, task_id="$T")),
    ("review.request", f(BOT, task_id="$T", to=[A], artefact={})),
    ("decide.approve", f(A, task_id="$T")),
    ("workspace.set_profiles", f(A, profiles=["core/1.0"])),
    ("control.cancel", f(A, task_id="$T")),
    ("control.snapshot", f(A)),
    ("control.rollback", f(A, to_snapshot_artefact_id="art_x")),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k"})),
    ("control.set_mode_ceiling", f(A, new_ceiling="trial")),
    ("task.route", f(A, task_id="$T", candidates=[BOT])),
    ("review.depth", f(A, task_id="$T")),
    ("escalate.auto", f(A, task_id="$T")),
    ("does.not_exist", f(A)),
    ("task.create", f(A, assignee=BOT, kind="k", input={"x": 0.5})),  # -32602 first
    ("workspace.describe", {"workspace": W}),
    ("audit.read", {"workspace": W, "range": {"from_seq": 0, "to_seq": 2}}),
    ("participant.join", f("human:zed", type="human")),
    ("participant.leave", f("human:zed")),
    ("control.resume", f(GHOST, scope="workspace")),
    ("control.resume", f(A, scope="task", task_id="$T")),  # gate passes: -32061
    ("control.resume", f(A, scope="workspace")),
    ("control.resume", f(A, scope="workspace")),
    ("control.resume", f(A)),
    ("task.update", f(BOT, task_id="$T", state="completed")),
]


CANCEL = [
    *setup(),
    ("control.cancel", f(A, task_id="$T", reason="because")),
    ("control.cancel", f(A, task_id="$T")),
    ("control.pause", f(A, task_id="$T")),
    ("control.resume", f(A, task_id="$T")),
    task("$P"),
    ("control.pause", f(A, task_id="$P")),
    ("control.cancel", f(A, task_id="$P", reason=5)),  # from paused; keeps paused_from
    task("$C"),
    ("task.update", f(BOT, task_id="$C", state="in_progress")),
    ("task.complete", f(BOT, task_id="$C", output={})),
    ("control.cancel", f(A, task_id="$C")),
    task("$D"),
    ("task.update", f(BOT, task_id="$D", state="declined")),
    ("control.cancel", f(A, task_id="$D")),
    ("control.pause", f(A, task_id="$D")),
    ("control.cancel", f(A)),
    ("control.cancel", f(A, task_id="zz")),
    ("control.cancel", f(GHOST, task_id="$P")),
    ("task.update", f(BOT, task_id="$P", state="in_progress")),
]


SNAPSHOT_ROLLBACK = [
    *setup(),
    task("$T2"),
    ("control.cancel", f(A, task_id="$T2")),  # not an open task
    ("control.snapshot", f(A, label="L1"), ("snapshot_artefact_id", "$S")),
    ("control.snapshot", f(A, include=[])),
    ("control.snapshot", f(A, include=None)),
    ("control.snapshot", f(A, include=["members", 5])),
    ("control.snapshot", f(A, include=["policy", "all", "audit", "bogus", "evidence_head"])),
    ("control.snapshot", f(A, include=["policy"], label=5)),
    ("control.snapshot", f(A, include=["members"], label=None), ("snapshot_artefact_id", "$SM")),
    ("control.snapshot", f(A, include=["open_tasks"])),
    ("control.snapshot", f(A, include=["audit", "policy", "mode_ceiling", "open_tasks", "members"])),
    ("control.snapshot", f(GHOST)),
    ("control.set_mode_ceiling", f(A, new_ceiling="trial", reason="lower")),
    ("participant.join", f("human:late", type="human")),
    ("participant.leave", f(BOT)),
    ("participant.leave", f(B2)),
    ("participant.join", f(B2, type="agent", role="reviewer")),  # back without scopes
    ("workspace.describe", {"workspace": W}),
    ("control.rollback", f(A, to_snapshot_artefact_id="$S")),
    ("workspace.describe", {"workspace": W}),
    ("control.rollback", f(A)),
    ("control.rollback", f(A, to_snapshot_artefact_id="art_nope")),
    ("control.rollback", f(A, to_snapshot_artefact_id=5)),
    ("control.rollback", f(A, to_snapshot_artefact_id="$T")),
    ("control.rollback", f(A, snapshot_id="$S", what_to_restore=[])),
    ("control.rollback", f(A, snapshot_artefact_id="$S", what_to_restore=["mode_ceiling"], reason="r")),
    ("control.rollback", f(A, snapshot_artefact_id="$S", what_to_restore=["open_tasks", "bogus", 5], reason=5)),
    ("control.rollback", f(A, snapshot_id="$SM", what_to_restore=["mode_ceiling", "members", "policy"])),
    ("control.rollback", f(A, to_snapshot_artefact_id="$S", what_to_restore=None)),
    ("control.rollback", f(GHOST, to_snapshot_artefact_id="$S")),
    ("workspace.describe", {"workspace": W}),
]


# A routing policy URI, and scopes that come and go through rollbacks.
POLICY_AND_SCOPES = [
    ("workspace.create", {"workspace": W, "routing_policy_uri": "https://policy.example/r1"}),
    ("participant.join", f(A, type="human", role="admin")),
    ("participant.join", f(B2, type="agent", role="drafter", scopes=["x"])),
    ("control.snapshot", f(A, include=["members", "policy", "mode_ceiling"]), ("snapshot_artefact_id", "$S1")),
    ("participant.leave", f(B2)),
    ("participant.join", f(B2, type="agent")),  # back with no scopes, role participant
    ("control.snapshot", f(A, include=["members", "policy"]), ("snapshot_artefact_id", "$S2")),
    ("control.rollback", f(A, to_snapshot_artefact_id="$S1")),
    ("workspace.describe", {"workspace": W}),
    ("control.rollback", f(A, to_snapshot_artefact_id="$S2", what_to_restore=["members", "policy"])),
    ("workspace.describe", {"workspace": W}),
    ("control.rollback", f(A, to_snapshot_artefact_id="$S1", what_to_restore=["policy", "all"])),
    ("control.rollback", f(B2, to_snapshot_artefact_id="$S1")),  # any member may
    ("control.rollback", f(GHOST, to_snapshot_artefact_id="$S1")),
]


SUPERSEDE = [
    *setup(profiles=["core/1.0", "review/1.0", "control/1.0", "modes/1.0"]),
    ("control.supersede", f(A, task_id="$T")),
    ("control.supersede", f(A, task_id="$T", successor_task={})),
    ("control.supersede", f(A, task_id="$T", successor_task="x")),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": None})),
    ("control.supersede", f(A, task_id="nope", successor_task={})),
    ("control.supersede", f(A, successor_task={"kind": "k"})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "assignee": "agent:none"})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "assignee": 5})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "assignee": "agent:none", "mode": 5})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "mode": 5})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "mode": 5, "review_required": "x"})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "mode": "bogus"})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "mode": "bogus", "review_required": "x"})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "review_required": "yes"})),
    ("control.pause", f(A, scope="participant", participant_uri=B2)),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "assignee": B2})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "assignee": B2, "mode": 5})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "assignee": B2, "review_required": "x"})),
    ("control.set_mode_ceiling", f(A, new_ceiling="shadow")),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k"})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "mode": "production"})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": 5, "mode": "shadow"}), ("new_task_id", "$N1")),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "", "mode": "shadow", "input": "notobj"})),
    ("control.supersede", f(A, task_id="$T", successor_task={"kind": "k", "mode": "shadow", "input": {"q": 1},
                                                             "extra": 1, "review_required": False,
                                                             "deadline": "2030", "routing_hints": {"c": 1}},
                            reason="new plan"), ("new_task_id", "$N")),
    # the old task is refused; its successor works
    ("task.update", f(BOT, task_id="$T", state="in_progress")),
    ("control.pause", f(A, task_id="$T")),
    ("control.cancel", f(A, task_id="$T")),
    ("control.resume", f(A, task_id="$T")),
    ("task.update", f(BOT, task_id="$N", state="in_progress")),
    ("control.supersede", f(A, task_id="$N", successor_task={"kind": "k", "assignee": None, "input": None})),
    ("control.set_mode_ceiling", f(A, new_ceiling="production")),
    task("$P", mode="production"),
    ("control.supersede", f(A, task_id="$P", successor_task={"kind": "k"})),
    task("$Q", mode="production", review_required=True),
    ("control.supersede", f(A, task_id="$Q", successor_task={"kind": "k", "review_required": False})),
    task("$U", mode="production"),
    ("control.supersede", f(A, task_id="$U", successor_task={"kind": "k", "review_required": False}),
     ("new_task_id", "$U2")),
    ("control.supersede", f(A, task_id="$U2", successor_task={"kind": "k", "mode": "trial"})),
    task("$V", mode="production"),
    ("control.supersede", f(A, task_id="$V", successor_task={"kind": "k", "review_required": True,
                                                             "assignee": A, "mode": None})),
    # from completed and from paused
    task("$X", mode="production"),
    ("task.complete", f(BOT, task_id="$X")),
    ("control.supersede", f(A, task_id="$X", successor_task={"kind": "k"})),
    task("$Y", mode="production"),
    ("control.pause", f(A, task_id="$Y")),
    ("control.supersede", f(A, task_id="$Y", successor_task={"kind": "k"})),
    ("participant.leave", f(BOT)),
    task("$Z", assignee=A, mode="production"),
    ("participant.leave", f(A)),  # the old assignee is gone, so is alice
    ("control.supersede", f(BOB, task_id="$Z", successor_task={"kind": "k"})),
    ("control.supersede", f(GHOST, task_id="$N", successor_task={"kind": "k"})),
]


MODE_CEILING = [
    *setup(),
    ("control.set_mode_ceiling", f(A, new_ceiling="trial", reason="lower")),
    ("control.set_mode_ceiling", f(A, mode_ceiling="shadow")),
    ("control.set_mode_ceiling", f(A, new_ceiling="bogus")),
    ("control.set_mode_ceiling", f(A)),
    ("control.set_mode_ceiling", f(A, new_ceiling=5)),
    ("control.set_mode_ceiling", f(A, new_ceiling=["trial"])),
    ("control.set_mode_ceiling", f(A, new_ceiling="trial", reason=5)),
    ("control.set_mode_ceiling", f(A, mode_ceiling="trial", new_ceiling="shadow")),
    ("control.set_mode_ceiling", f(A, mode_ceiling="production", new_ceiling=None)),
    ("task.create", f(A, assignee=BOT, kind="k", input={}, mode="production")),
    ("control.set_mode_ceiling", f(A, mode_ceiling="trial", new_ceiling="")),
    ("control.set_mode_ceiling", f(GHOST, new_ceiling="trial")),
    ("workspace.describe", {"workspace": W}),
]


@pytest.mark.parametrize(
    "script",
    [PAUSE_RESUME, CANCEL, SNAPSHOT_ROLLBACK, POLICY_AND_SCOPES, SUPERSEDE, MODE_CEILING],
    ids=["pause_resume", "cancel", "snapshot_rollback", "policy_scopes", "supersede", "mode_ceiling"],
)
def test_control_script_answers_as_the_reference(script):
    run = Run().steps(script)
    run.check_state()
    codes = run.codes()
    assert "ok" in codes and any(c != "ok" for c in codes)  # both kinds exercised


def test_the_scripts_exercise_every_code_the_profile_gives():
    seen = set()
    for script in (PAUSE_RESUME, CANCEL, SNAPSHOT_ROLLBACK, SUPERSEDE, MODE_CEILING):
        side = Client(reference())
        for step in script:
            response = side.run(step)
            if "error" in response:
                seen.add(response["error"]["code"])
    assert {-32011, -32061, -32062, -32063, -32040, -32602, -32010, -32601} <= seen


# -- profile not advertised ------------------------------------------------------

CONTROL_CALLS = [
    ("control.pause", {"task_id": "$T"}),
    ("control.resume", {"scope": "workspace"}),
    ("control.cancel", {"task_id": "$T"}),
    ("control.snapshot", {}),
    ("control.rollback", {"to_snapshot_artefact_id": "art_x"}),
    ("control.supersede", {"task_id": "$T", "successor_task": {"kind": "k"}}),
    ("control.set_mode_ceiling", {"new_ceiling": "trial"}),
]


@pytest.mark.parametrize("method, params", CONTROL_CALLS, ids=[m for m, _ in CONTROL_CALLS])
def test_not_advertised_is_a_recorded_gated_refusal(method, params):
    """-32601 with data {profile, advertised}; recorded (privileged) for a
    member, not for a non-member."""
    run = Run(ours(("core/1.0", "review/1.0")), reference(("core/1.0", "review/1.0")))
    run.steps([*setup(), (method, f(A, **params)), (method, f(GHOST, **params)),
               (method, {"workspace": W, **params})])
    run.check_state()
    assert run.codes()[-3:] == [-32601, -32601, -32601]
