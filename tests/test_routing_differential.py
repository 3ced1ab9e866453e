"""routing/1.0 against chap-coordinator 0.3.3: task.route, review.depth and
escalate.auto with the default policies and with the three hooks, compared
step by step, then the log, chain, describe and stored route decisions."""

from __future__ import annotations

from typing import Any

import pytest
from client import Client, refused
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profile_diff import Run, ours, reference, stored_objects

W = "wsp_d"
A, BOT, B2, GHOST = "human:alice", "agent:bot", "agent:b2", "human:ghost"


def f(sender: str, /, **params: Any) -> dict[str, Any]:
    return {"workspace": W, "from": sender, **params}


SETUP = [
    ("workspace.create", {"workspace": W}),
    ("participant.join", f(A, type="human", role="admin")),
    ("participant.join", f(BOT, type="agent")),
    ("participant.join", f(B2, type="agent", role="drafter")),
    ("task.create", f(A, assignee=BOT, kind="k", input={}), ("task_id", "$T")),
    ("task.create", f(A, assignee=BOT, kind="k", input={},
                      routing_hints={"criticality": "high", "confidence": "0.5", "model_id": "m"}),
     ("task_id", "$H")),
    ("task.create", f(A, assignee=BOT, kind="k", input={}, routing_hints={"criticality": "critical"}),
     ("task_id", "$C")),
]

ROUTE = [
    *SETUP,
    ("task.route", f(A, task_id="$T", candidates=[B2, BOT])),
    ("task.route", f(A, task_id="$T", candidates=["agent:none", A, BOT], policy_id="p1", extra=1)),
    ("task.route", f(A, task_id="$T", candidates=[])),
    ("task.route", f(A, task_id="$T")),
    ("task.route", f(A, task_id="$T", candidates=None)),
    ("task.route", f(A, task_id="$T", candidates="agent:bot")),
    ("task.route", f(A, task_id="$T", candidates={"a": BOT})),
    ("task.route", f(A, task_id="$T", candidates=["agent:none"])),
    ("task.route", f(A, task_id="$T", candidates=[5, None, [BOT]])),
    ("task.route", f(A, task_id="nope", candidates=[BOT])),
    ("task.route", f(A, task_id="nope", candidates=[])),
    ("task.route", f(A, task_id="nope", candidates="x")),
    ("task.route", f(A, candidates=[BOT])),
    ("task.route", f(GHOST, task_id="$T", candidates=[BOT])),
    ("task.route", {"workspace": W, "task_id": "$T", "candidates": [BOT]}),
    ("control.pause", f(A, scope="participant", participant_uri=B2)),
    ("task.route", f(A, task_id="$T", candidates=[B2, BOT, A, "agent:nobody"])),
    ("task.route", f(A, task_id="$T", candidates=[B2])),
    ("task.route", f(A, task_id="$T", candidates=[B2, B2])),
    ("task.route", f(A, task_id="$T", candidates=[BOT, BOT])),
    ("task.route", f(A, task_id="$H", candidates=[BOT])),
    ("task.update", f(BOT, task_id="$H", state="declined")),
    ("task.route", f(A, task_id="$H", candidates=[A])),
    ("control.pause", f(A, task_id="$T")),
    ("task.route", f(A, task_id="$T", candidates=[A])),
    ("control.pause", f(A, scope="workspace")),
    ("task.route", f(A, task_id="$T", candidates=[A])),
    ("control.resume", f(A, scope="workspace")),
]

DEPTH_AND_ESCALATION = [
    *SETUP,
    ("review.depth", f(A, task_id="$T")),
    ("review.depth", f(A, task_id="$H")),
    ("review.depth", f(A, task_id="$C")),
    ("review.depth", f(A, task_id="$T", artefact_routing_hints={"criticality": "low", "confidence": "0.99"})),
    ("review.depth", f(A, task_id="$T", artefact_routing_hints={})),
    ("review.depth", f(A, task_id="$H", artefact_routing_hints={"confidence": "0.9", "extra": 1})),
    ("review.depth", f(A, task_id="$H", artefact_routing_hints=None)),
    ("review.depth", f(A, task_id="nope")),
    ("review.depth", f(A)),
    ("review.depth", f(GHOST, task_id="$H")),
    ("review.depth", {"workspace": W, "task_id": "$H"}),
    ("escalate.auto", f(A, task_id="$C", default_escalation_target=A)),
    ("escalate.auto", f(A, task_id="$H", default_escalation_target="group:oncall")),
    ("escalate.auto", f(A, task_id="$T", default_escalation_target=A)),
    ("escalate.auto", f(A, task_id="$T")),
    ("escalate.auto", f(A, task_id="$T", default_escalation_target="human:nobody")),
    ("escalate.auto", f(A, task_id="$C")),
    ("escalate.auto", f(A, task_id="$C", default_escalation_target="human:nobody")),
    ("escalate.auto", f(A, task_id="$C", default_escalation_target=B2, artefact_routing_hints={"criticality": "low"})),
    ("control.pause", f(A, scope="participant", participant_uri=B2)),
    ("escalate.auto", f(A, task_id="$C", default_escalation_target=B2)),  # a paused target is accepted
    ("escalate.auto", f(A, task_id="nope", default_escalation_target=B2)),
    ("escalate.auto", f(GHOST, task_id="$C", default_escalation_target=B2)),
    ("escalate.auto", {"workspace": W, "task_id": "$C"}),
    ("control.pause", f(A, scope="workspace")),
    ("review.depth", f(A, task_id="$H")),
    ("escalate.auto", f(A, task_id="$C", default_escalation_target=A)),
]


@pytest.mark.parametrize("script", [ROUTE, DEPTH_AND_ESCALATION], ids=["route", "depth_escalation"])
def test_routing_script_answers_as_the_reference(script):
    run = Run().steps(script)
    run.check_state()
    codes = run.codes()
    assert "ok" in codes and any(c != "ok" for c in codes)


def test_the_scripts_exercise_every_code_routing_gives():
    run = Run().steps(ROUTE)
    more = Run().steps(DEPTH_AND_ESCALATION)
    assert {-32510, -32513, -32514, -32516, -32011, -32063, -32602} <= set(run.codes() + more.codes())


ROUTING_CALLS = [
    ("task.route", {"task_id": "$T", "candidates": [BOT]}),
    ("review.depth", {"task_id": "$T"}),
    ("escalate.auto", {"task_id": "$T"}),
]


@pytest.mark.parametrize("method, params", ROUTING_CALLS, ids=[m for m, _ in ROUTING_CALLS])
def test_not_advertised_is_an_unrecorded_refusal(method, params):
    run = Run(ours(("core/1.0", "review/1.0")), reference(("core/1.0", "review/1.0")))
    run.steps([*SETUP, (method, f(A, **params)), (method, f(GHOST, **params))])
    run.check_state()
    assert run.codes()[-2:] == [-32601, -32601]


# -- the default policies over many hints -----------------------------------------

CRITICALITY = st.one_of(
    st.sampled_from(["low", "medium", "high", "critical", "bogus", "HIGH", ""]),
    st.integers(-3, 3),
    st.none(),
)
CONFIDENCE = st.one_of(
    st.sampled_from(["abc", "nan", "inf", "-inf", "", " 0.99 ", "1e-1", "0.6", "0.7", "0.85", "0.95"]),
    st.decimals(0, 1, places=3).map(str),
    st.integers(-1, 2),
    st.booleans(),
    st.none(),
    st.just([1]),
    st.just({}),
)


@st.composite
def hints(draw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if draw(st.booleans()):
        out["criticality"] = draw(CRITICALITY)
    if draw(st.booleans()):
        out["confidence"] = draw(CONFIDENCE)
    if draw(st.booleans()):
        out["model_id"] = "m"
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_hints=hints(), more=st.one_of(st.none(), hints()))
def test_default_depth_and_escalation_agree_for_any_hints(task_hints, more):
    depth: dict[str, Any] = {"task_id": "$X"}
    if more is not None:
        depth["artefact_routing_hints"] = more
    Run().steps([
        *SETUP[:4],
        ("task.create", f(A, assignee=BOT, kind="k", input={}, routing_hints=task_hints), ("task_id", "$X")),
        ("review.depth", f(A, **depth)),
        ("escalate.auto", f(A, task_id="$X", default_escalation_target=A)),
    ]).check_state()


# -- the hooks ---------------------------------------------------------------------


class Hook:
    """A policy hook whose answer each test sets; records what it was given."""

    def __init__(self) -> None:
        self.answer: Any = None
        self.calls: list[tuple[str, Any]] = []

    def __call__(self, task: Any, arg: Any) -> Any:
        self.calls.append((task.id, arg))
        return self.answer(task, arg) if callable(self.answer) else self.answer


def _boom(task: Any, arg: Any) -> Any:
    raise RuntimeError("policy service down")


def hooked_runs() -> tuple[Run, dict[str, Hook], dict[str, Hook]]:
    mine = {name: Hook() for name in ("routing_policy", "review_depth_policy", "escalation_policy")}
    theirs = {name: Hook() for name in mine}
    return Run(ours(**mine), reference(**theirs)), mine, theirs


# (hook, answer, method, params)
HOOK_CASES = [
    ("routing_policy", {"selected": B2, "rationale": {"policy_id": "mine", "summary": "last", "hints_used": ["x"]}},
     "task.route", {"candidates": ["agent:none", B2]}),
    ("routing_policy", {"selected": B2}, "task.route", {"candidates": [B2, "agent:none", 5]}),
    ("routing_policy", {"selected": BOT, "rationale": {"alternatives_considered": [1], "policy_id": 5}},
     "task.route", {"candidates": [B2]}),
    ("routing_policy", {"rationale": {}}, "task.route", {"candidates": [B2]}),
    ("routing_policy", {"selected": 5}, "task.route", {"candidates": [B2]}),
    ("routing_policy", {"selected": "agent:none"}, "task.route", {"candidates": [B2]}),
    ("routing_policy", _boom, "task.route", {"candidates": [B2]}),
    ("routing_policy", {"selected": B2}, "task.route", {"candidates": []}),
    ("review_depth_policy", {"depth": "full"}, "review.depth", {}),
    ("review_depth_policy", {"depth": "spot_check", "sampling_probability": "0.5", "x": 1,
                             "rationale": {"policy_id": "p", "summary": "s", "hints_used": ["a"], "more": 1}},
     "review.depth", {}),
    ("review_depth_policy", {"depth": "bogus"}, "review.depth", {}),
    ("review_depth_policy", {}, "review.depth", {}),
    ("review_depth_policy", {"depth": "skip", "sampling_probability": None}, "review.depth", {}),
    ("review_depth_policy", _boom, "review.depth", {}),
    ("review_depth_policy", {"depth": "full"}, "review.depth", {"task_id": "$T"}),  # no hints: -32514
    ("escalation_policy", {"escalate": True, "to": A}, "escalate.auto", {"default_escalation_target": B2}),
    ("escalation_policy", {"escalate": True}, "escalate.auto", {"default_escalation_target": A}),
    ("escalation_policy", {"escalate": True, "to": "agent:none"}, "escalate.auto", {}),
    ("escalation_policy", {"escalate": False, "to": A, "triggered_rule": {"rule_id": "r"}}, "escalate.auto", {}),
    ("escalation_policy", {"escalate": "yes", "to": A, "policy_id": "P",
                           "triggered_rule": {"rule_id": "r", "summary": "s", "hints_used": ["q"]}},
     "escalate.auto", {}),
    ("escalation_policy", {"escalate": True, "to": "group:x", "triggered_rule": {"summary": 5}}, "escalate.auto", {}),
    ("escalation_policy", {}, "escalate.auto", {}),
    ("escalation_policy", _boom, "escalate.auto", {}),
    ("escalation_policy", {"escalate": True, "to": B2}, "escalate.auto", {"task_id": "$T"}),
]


@pytest.mark.parametrize("hook, answer, method, params", HOOK_CASES)
def test_hooks_answer_as_the_reference(hook, answer, method, params):
    run, mine, theirs = hooked_runs()
    mine[hook].answer = theirs[hook].answer = answer
    params = {"task_id": "$H", **params}
    run.steps([*SETUP, (method, f(A, **params)), (method, f(A, **params))])
    run.check_state()
    # each hook got the same arguments (the task by id; ids mapped)
    assert [(run.ids.map(t), run.ids.map(a)) for t, a in mine[hook].calls] == theirs[hook].calls


def test_a_hook_picking_a_paused_member_is_refused_with_32063():
    run, mine, theirs = hooked_runs()
    for side in (mine, theirs):
        side["routing_policy"].answer = {"selected": B2}
    run.steps([*SETUP, ("control.pause", f(A, scope="participant", participant_uri=B2)),
               ("task.route", f(A, task_id="$T", candidates=[BOT]))])
    run.check_state()
    assert run.codes()[-1] == -32063


# -- deliberate differences -------------------------------------------------------------

# A hook returning something other than an object, or an object with a
# non-object rationale / triggered_rule: 0.3.3 fails inside the handler
# (-32603, not recorded); chapline answers -32515 like a hook that raised
# (recorded for a member) and names what the hook returned.
MALFORMED = [
    ("routing_policy", None, "task.route", {"candidates": [B2]}),
    ("routing_policy", {"selected": B2, "rationale": "str"}, "task.route", {"candidates": [B2]}),
    ("review_depth_policy", None, "review.depth", {}),
    ("review_depth_policy", {"depth": 5, "rationale": "str"}, "review.depth", {}),
    ("escalation_policy", None, "escalate.auto", {}),
    ("escalation_policy", {"escalate": 1, "to": A, "triggered_rule": "str"}, "escalate.auto", {}),
    ("escalation_policy", {"escalate": True, "to": 5}, "escalate.auto", {}),
]


@pytest.mark.parametrize("hook, answer, method, params", MALFORMED)
def test_a_malformed_hook_answer_is_32515_here(hook, answer, method, params):
    mine, theirs = Hook(), Hook()
    mine.answer = theirs.answer = answer
    a, b = ours(**{hook: mine}), reference(**{hook: theirs})
    run = Run(a, b)
    run.steps(SETUP)
    x = run.a.run((method, f(A, task_id="$H", **params)))
    y = run.b.run((method, f(A, task_id="$H", **params)))
    refused(y, -32603)
    refused(x, -32515)
    assert "policy" in x["error"]["message"]
    assert Client(a, W).last()["outcome"] == {"status": "refused", "code": -32515}
    assert len(a.snapshot(W)["route_decisions"]) == 0


@pytest.mark.parametrize(
    "method, params",
    [
        ("review.depth", {"task_id": "$H", "artefact_routing_hints": "x"}),
        ("review.depth", {"task_id": "$H", "artefact_routing_hints": [1]}),
        ("escalate.auto", {"task_id": "$C", "default_escalation_target": 5}),
        ("task.route", {"task_id": "$BAD", "candidates": [BOT]}),
        ("review.depth", {"task_id": "$BAD"}),
        ("escalate.auto", {"task_id": "$BAD", "default_escalation_target": A}),
    ],
)
def test_mistyped_params_are_32602_here(method, params):
    """0.3.3 fails inside the handler (-32603); chapline says what to send."""
    run = Run().steps([*SETUP, ("task.create", f(A, assignee=BOT, kind="k", input={}, routing_hints="str"),
                                ("task_id", "$BAD"))])
    x = run.a.run((method, f(A, **params)))
    y = run.b.run((method, f(A, **params)))
    assert (x["error"]["code"], y["error"]["code"]) == (-32602, -32603)
    assert run.a.count() == run.b.count()


def test_the_hooks_come_through_coordinator_options_as_in_0_3_3():
    """`Coordinator(CoordinatorOptions(routing_policy=...))` and the keyword
    forms reach the handlers, as 0.3.3's options do."""
    from coordinator import Coordinator, CoordinatorOptions

    def hooks() -> dict[str, Any]:
        return {
            "routing_policy": lambda task, candidates: {"selected": candidates[-1]},
            "review_depth_policy": lambda task, hints: {"depth": "skip"},
            "escalation_policy": lambda task, hints: {"escalate": True, "to": "group:ops"},
        }

    calls = [
        ("task.route", f(A, task_id="$H", candidates=[BOT, B2])),
        ("review.depth", f(A, task_id="$H")),
        ("escalate.auto", f(A, task_id="$H")),
    ]
    base = {"deterministic_ids": True, "deterministic_clock": True, "enable_chain": True,
            "default_profiles": ["core/1.0", "review/1.0", "routing/1.0"]}
    for mine in (Coordinator(CoordinatorOptions(**base, **hooks())), Coordinator(**base, **hooks())):
        theirs = reference(("core/1.0", "review/1.0", "routing/1.0"), **hooks())
        run = Run(mine, theirs).steps([*SETUP, *calls])
        run.check_state()
        assert [r["result"].get("selected", r["result"].get("depth", r["result"].get("to")))
                for r in run.a.responses[-3:]] == [B2, "skip", "group:ops"]


# -- hints_used: the caller's order, as 0.3.3 answers and records it ----------------------

HINT_VALUES = {"criticality": "high", "confidence": "0.5", "model_id": "m", "Zeta": 1, "alpha": [2], "é": {}}


def _ordered(names: list[str]) -> dict[str, Any]:
    return {name: HINT_VALUES[name] for name in names}


def _some_in_any_order(draw: Any) -> list[str]:
    names = draw(st.permutations(sorted(HINT_VALUES)))
    return names[: draw(st.integers(0, len(names)))]


def _decisions(run: Run) -> list[list[str]]:
    """The hint names each stored route decision observed, in stored order."""
    mine = [list(d["hints_observed"]) for d in stored_objects(run.a.target, W)["route_decisions"].values()]
    theirs = [list(d["hints_observed"]) for d in stored_objects(run.b.target, W)["route_decisions"].values()]
    assert mine == theirs
    return mine


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hints_used_lists_the_hints_in_the_callers_order(data: Any) -> None:
    task_hints = _ordered(data.draw(st.composite(_some_in_any_order)()))
    more = _ordered(data.draw(st.composite(_some_in_any_order)()))
    run = Run().steps([
        *SETUP[:4],
        ("task.create", f(A, assignee=BOT, kind="k", input={}, routing_hints=task_hints), ("task_id", "$X")),
        ("task.route", f(A, task_id="$X", candidates=[BOT])),
        ("review.depth", f(A, task_id="$X", artefact_routing_hints=more)),
    ])
    used = [r["result"]["rationale"]["hints_used"] for r in run.b.responses[-2:] if "result" in r]
    assert [r["result"]["rationale"]["hints_used"] for r in run.a.responses[-2:] if "result" in r] == used
    assert used[0] == list(task_hints)
    _decisions(run)


def test_hints_used_keeps_the_order_of_a_call_sent_as_json_text() -> None:
    """Over HTTP the coordinator gets the body's text: the order written there."""
    import json

    mine, theirs = ours(), reference()
    for coord in (mine, theirs):
        for i, (method, params) in enumerate([
            ("workspace.create", {"workspace": W}),
            ("participant.join", f(A, type="human", role="admin")),
            ("participant.join", f(BOT, type="agent")),
        ]):
            coord.dispatch({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
    hints = {"model_id": "m", "criticality": "high", "confidence": "0.5"}
    create = {"jsonrpc": "2.0", "id": "c", "method": "task.create",
              "params": f(A, assignee=BOT, kind="k", input={}, routing_hints=hints)}
    answers = []
    for coord, send in ((mine, json.dumps), (theirs, lambda e: e)):
        task_id = coord.dispatch(send(create))["result"]["task_id"]
        route = {"jsonrpc": "2.0", "id": "r", "method": "task.route",
                 "params": f(A, task_id=task_id, candidates=[BOT])}
        answers.append(coord.dispatch(send(route))["result"]["rationale"]["hints_used"])
    assert answers[0] == answers[1] == ["model_id", "criticality", "confidence"]


def test_hints_used_after_a_restart_from_sqlite_is_as_0_3_3_answers(tmp_path: Any) -> None:
    """A SQL store keeps objects with sorted keys, as 0.3.3's does: a task read
    back from it lists its hints sorted, on both sides."""
    import chap_coordinator.storage.sqlite as reference_sqlite

    from storage import SqliteStore

    hints = {"criticality": "high", "confidence": "0.5"}
    script = [
        ("workspace.create", {"workspace": W}),
        ("participant.join", f(A, type="human", role="admin")),
        ("task.create", f(A, assignee=A, kind="k", input={}, routing_hints=hints), ("task_id", "$X")),
    ]
    after = [
        ("task.route", f(A, task_id="$X", candidates=[A])),
        ("review.depth", f(A, task_id="$X", artefact_routing_hints={"b": 1, "a": 2})),
    ]
    mine, theirs = tmp_path / "ours.db", str(tmp_path / "theirs.db")
    before = Run(ours(store=SqliteStore(mine)), reference(store=reference_sqlite.SqliteStore(theirs)))
    before.steps([*script, *after])
    assert before.b.responses[-2]["result"]["rationale"]["hints_used"] == ["criticality", "confidence"]
    before.a.target.close()
    task_ids = (before.a.names["$X"], before.b.names["$X"])
    used = []
    for restarted, task_id in zip(
        (ours(store=SqliteStore(mine)), reference(store=reference_sqlite.SqliteStore(theirs))), task_ids, strict=True
    ):
        c = Client(restarted, W)
        used.append([
            c.ok("task.route", frm=A, task_id=task_id, candidates=[A])["rationale"]["hints_used"],
            c.ok("review.depth", frm=A, task_id=task_id, artefact_routing_hints={"b": 1, "a": 2})["rationale"]["hints_used"],
        ])
    assert used[0] == used[1] == [["confidence", "criticality"], ["confidence", "criticality", "b", "a"]]
