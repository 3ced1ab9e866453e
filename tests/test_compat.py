"""Code written against chap-coordinator 0.3.3 runs on chapline with only the
import changed: `CoordinatorOptions`, `coord.workspaces`, `coord.get_workspace`.

Each of the five framework bridges (0.3.3, installed without its framework:
they read the frameworks' objects structurally) is driven through its whole
human-in-the-loop cycle against a chapline `Coordinator` built from
`CoordinatorOptions` on a real SQLite file: opened on a new workspace, opened
again on it (the path that needs `coord.workspaces`), opened after a restart,
each task seen in review just before the decision, then approved, rejected
and overridden, and everything read back through `coord.workspaces`. The same
driver runs against 0.3.3 itself, and what both show readers must be equal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chap_analytics
import chap_coordinator
import msgspec
import pandas as pd
import pytest
from chap_ag2 import ChapTurnBridge
from chap_google_adk import ChapConfirmationBridge
from chap_langgraph import ChapBridge, hil_review
from chap_llama_index import ChapHitlBridge
from chap_pydantic_ai import ChapApprovalBridge
from client import Client, env, refused

from coordinator import (
    Coordinator,
    CoordinatorOptions,
    CounterIds,
    RestoreError,
    StepClock,
    UnsupportedOptionError,
    WorkspaceState,
)
from storage import MemoryStore, SqliteStore

AGENT = "agent:drafter#v1"
ALICE = "human:alice@example.org"
BOB = "human:bob@example.org"

DRAFT = {"subject": "Refund", "body": "We will refund you.", "amount": 40}
EDITED = {"subject": "Refund", "body": "We will refund you in full.", "amount": 45}


# -- one driver per bridge: (open, decide) ---------------------------------
#
# decide(bridge, decision) records one decision the bridge's way and returns
# the task id; EXPECTED_OVERRIDE is what each override leaves as its result.


def _lg_open(coord: Any, ws: str) -> Any:
    return ChapBridge(coord, workspace=ws, agent=AGENT, reviewer=ALICE)


def _lg_decide(bridge: Any, decision: str) -> str:
    state = hil_review(bridge, DRAFT, kind="draft_response", input_={"ticket": 7})
    task_id = state["chap_task_id"]
    payload: Any = decision
    if decision == "override":
        payload = {"action": "override", "diff": [
            {"op": "replace", "path": "/body", "value": EDITED["body"]},
            {"op": "replace", "path": "/amount", "value": EDITED["amount"]},
        ], "rationale": "full refund"}
    elif decision == "reject":
        payload = {"action": "reject", "rationale": "wrong customer"}
    bridge.apply_decision(task_id, payload)
    return task_id


class _ToolCall:
    """A Pydantic AI ToolCallPart as the bridge reads it."""

    def __init__(self, n: int) -> None:
        self.tool_name = "send_refund"
        self.args = dict(DRAFT)
        self.tool_call_id = f"call_{n}"


class _Approved:
    """A Pydantic AI ToolApproved."""

    def __init__(self, override_args: dict[str, Any] | None = None) -> None:
        self.override_args = override_args


class _Denied:
    """A Pydantic AI ToolDenied."""

    message = "not this customer"


def _pai_open(coord: Any, ws: str) -> Any:
    return ChapApprovalBridge(coord, workspace=ws, agent=AGENT, reviewer=ALICE)


def _pai_decide(bridge: Any, decision: str) -> str:
    bridge.n = getattr(bridge, "n", 0) + 1
    resolution = {"approve": True, "reject": _Denied(), "override": _Approved(dict(EDITED))}
    return bridge.record_decision(_ToolCall(bridge.n), resolution[decision], rationale="checked")


def _ag2_open(coord: Any, ws: str) -> Any:
    return ChapTurnBridge(coord, workspace=ws, agent=AGENT, reviewer=ALICE)


def _ag2_decide(bridge: Any, decision: str) -> str:
    message = {"role": "assistant", "content": dict(DRAFT)}
    reply = {"approve": "", "reject": "wrong customer", "override": dict(EDITED)}[decision]
    task_id = bridge.record_turn(message, reply, decision=decision)
    assert task_id is not None
    return task_id


def _adk_open(coord: Any, ws: str) -> Any:
    return ChapConfirmationBridge(coord, workspace=ws, agent=AGENT, reviewer=ALICE)


def _adk_decide(bridge: Any, decision: str) -> str:
    call = {"name": "send_refund", "args": dict(DRAFT), "id": "adk-1"}
    if decision == "override":
        return bridge.record_decision(
            call, {"confirmed": True}, decision="override", returned=dict(EDITED)
        )
    return bridge.record_decision(call, {"confirmed": decision == "approve"}, rationale="checked")


class _Event(dict):  # a Workflows event: a DictLikeModel read with .get()
    pass


def _li_open(coord: Any, ws: str) -> Any:
    return ChapHitlBridge(coord, workspace=ws, agent=AGENT, reviewer=ALICE)


def _li_decide(bridge: Any, decision: str) -> str:
    asked = _Event(proposed=dict(DRAFT))
    answer = _Event(response=dict(EDITED) if decision == "override" else "wrong customer")
    return bridge.record_decision(asked, answer, decision=decision)


_TOOL = {"tool": "send_refund", "tool_call_id": None}
BRIDGES: dict[str, tuple[Callable[[Any, str], Any], Callable[[Any, str], str], Any]] = {
    "langgraph": (_lg_open, _lg_decide, EDITED),
    "pydantic-ai": (_pai_open, _pai_decide, {**_TOOL, "args": EDITED, "tool_call_id": "call_3"}),
    "ag2": (_ag2_open, _ag2_decide, EDITED),
    "google-adk": (_adk_open, _adk_decide, {**_TOOL, "args": EDITED, "tool_call_id": "adk-1"}),
    "llama-index": (_li_open, _li_decide, EDITED),
}


def _options(store: Any = None) -> dict[str, Any]:
    return {
        "deterministic_ids": True,
        "deterministic_clock": True,
        "enable_chain": True,
        "store": store,
    }


def _cycle(
    coord: Any, name: str, ws: str, seen_in_review: list[tuple[str, str, list[str]]]
) -> dict[str, str]:
    """Open the bridge twice on `ws` and record approve, reject, override.
    Before each decision, the task as `coord.workspaces` shows it is noted."""
    open_, decide, _ = BRIDGES[name]

    def watch(method: str, params: dict[str, Any]) -> None:
        if method.startswith("decide."):
            task = coord.workspaces[ws].tasks[params["task_id"]]
            seen_in_review.append((task.state, task.review.rule, list(task.review.requested_to)))

    open_(coord, ws)
    bridge = open_(coord, ws)  # the workspace exists now: 0.3.3 bridges ask coord.workspaces
    bridge.on_envelope = watch
    return {d: decide(bridge, d) for d in ("approve", "reject", "override")}


@pytest.mark.parametrize("name", list(BRIDGES))
def test_each_bridge_runs_its_whole_cycle_on_chapline(name: str, tmp_path: Path) -> None:
    path = tmp_path / "chap.db"
    ws = f"wsp_{name.replace('-', '_')}"
    coord = Coordinator(CoordinatorOptions(**_options(SqliteStore(str(path)))))
    seen: list[tuple[str, str, list[str]]] = []
    tasks = _cycle(coord, name, ws, seen)

    assert seen == [("review_requested", "any_one_approves", [ALICE])] * 3
    view = coord.workspaces[ws]
    assert view.id == ws and view.profiles == ["core/1.0", "review/1.0"]
    assert (view.mode, view.mode_ceiling, view.state) == ("trial", "production", "active")
    assert set(view.members) == {AGENT, ALICE} and len(view.members) == 2
    assert view.members[AGENT].type == "agent" and view.members[ALICE].type == "human"
    assert view.members[ALICE].role == "participant" and view.members[ALICE].joined
    assert list(view.tasks) == list(tasks.values())
    assert view.tasks[tasks["approve"]].state == "completed"
    assert view.tasks[tasks["reject"]].state == "declined"
    overridden = view.tasks[tasks["override"]]
    assert overridden.state == "completed" and overridden.kind
    assert [h.state for h in overridden.history][-1] == "completed"
    (override,) = view.overrides.values()
    assert override.task_id == tasks["override"] and override.reviewer == ALICE
    assert override.result == BRIDGES[name][2]
    assert view.chain_enabled and view.chain_head.startswith("sha256:")
    coord.close()

    # After a restart on the same file: the bridge opens on the existing
    # workspace and carries on.
    again = Coordinator(CoordinatorOptions(**_options(SqliteStore(str(path)))))
    bridge = BRIDGES[name][0](again, ws)
    more = BRIDGES[name][1](bridge, "approve")
    assert again.workspaces[ws].tasks[more].state == "completed"
    assert len(again.workspaces[ws].tasks) == 4
    assert again.workspaces[ws].chain_head != view.chain_head
    again.close()


def _reader_fields(value: Any) -> Any:
    """What a reader sees in a 0.3.3 dataclass or a chapline Struct, as JSON."""
    if dataclasses.is_dataclass(value):
        return msgspec.to_builtins(dataclasses.asdict(value))  # type: ignore[arg-type]
    return msgspec.to_builtins(value)


@pytest.mark.parametrize("name", list(BRIDGES))
def test_readers_see_what_they_see_on_the_reference(name: str) -> None:
    """The same bridge cycle on 0.3.3 and on chapline, both deterministic:
    every member, task and override, and the log, read the same once the
    generated ids (which the two mint differently) are paired up."""
    ws = "wsp_same"
    ours = Coordinator(CoordinatorOptions(**_options()))
    ref = chap_coordinator.Coordinator(chap_coordinator.CoordinatorOptions(**_options()))
    seen_ours: list[Any] = []
    seen_ref: list[Any] = []
    mine_ids = _cycle(ours, name, ws, seen_ours)
    their_ids = _cycle(ref, name, ws, seen_ref)
    assert seen_ours == seen_ref
    a, b = ours.workspaces[ws], ref.workspaces[ws]
    pairs = dict(zip(their_ids.values(), mine_ids.values(), strict=True))
    pairs.update(zip(b.overrides, a.overrides, strict=True))
    assert len(pairs) == 4

    def same(theirs: Any) -> Any:
        text = msgspec.json.encode(theirs).decode()
        for old, new in pairs.items():
            text = text.replace(old, new)
        return msgspec.json.decode(text)

    for collection in ("members", "tasks", "overrides"):
        mine, theirs = getattr(a, collection), getattr(b, collection)
        assert list(mine) == same(list(theirs))
        for key in theirs:
            assert _reader_fields(mine[pairs.get(key, key)]) == same(_reader_fields(theirs[key]))
    for field in ("id", "created", "state", "profiles", "mode", "mode_ceiling", "chain_enabled"):
        assert getattr(a, field) == getattr(b, field), field
    # 0.3.3 keeps None fields on its entries; the wire shape drops them
    log = [{k: v for k, v in dataclasses.asdict(e).items() if v is not None} for e in b.audit]
    assert [
        {k: v for k, v in e.to_dict().items() if k != "prev_hash"} for e in a.audit
    ] == [{k: v for k, v in e.items() if k != "prev_hash"} for e in same(log)]


# -- coord.workspaces as a mapping ------------------------------------------


def _desk() -> Coordinator:
    coord = Coordinator(clock=StepClock(), ids=CounterIds())
    a = Client(coord, "wsp_a")
    a.ok("workspace.create")
    for uri, kind in ((ALICE, "human"), (AGENT, "agent")):
        a.ok("participant.join", frm=uri, type=kind)
    Client(coord, "wsp_b").ok("participant.join", frm=BOB, type="human")
    return coord


def test_workspaces_behaves_as_a_read_only_dict() -> None:
    coord = _desk()
    views = coord.workspaces
    assert "wsp_a" in views and "wsp_nope" not in views and ["x"] not in views
    assert len(views) == 2 and list(views) == ["wsp_a", "wsp_b"] == sorted(views.keys())
    assert views.get("wsp_nope") is None and views.get("wsp_nope", 1) == 1
    assert views.get("wsp_a").id == "wsp_a"
    assert dict(views.items())["wsp_b"].members[BOB].type == "human"
    with pytest.raises(KeyError):
        views["wsp_nope"]
    with pytest.raises(TypeError):
        views["wsp_c"] = views["wsp_a"]  # type: ignore[index]
    members = views["wsp_a"].members
    with pytest.raises(TypeError):
        members[BOB] = members[ALICE]  # type: ignore[index]
    with pytest.raises(KeyError):
        members[BOB]
    assert members.get(BOB) is None and len(members) == 2
    with pytest.raises(AttributeError):
        _ = views["wsp_a"].no_such_field


def test_views_are_current_and_nothing_read_changes_the_coordinator() -> None:
    coord = _desk()
    view = coord.workspaces["wsp_a"]
    tasks = view.tasks
    assert len(tasks) == 0
    a = Client(coord, "wsp_a")
    task_id = a.ok("task.create", frm=ALICE, assignee=AGENT, kind="k", input={"q": [1]})["task_id"]
    assert list(tasks) == [task_id] and tasks[task_id].state == "created"
    task = tasks[task_id]
    task.input["q"].append(2)
    task.history.clear()
    with pytest.raises(AttributeError):
        task.state = "completed"  # type: ignore[misc]
    profiles = view.profiles
    profiles.append("x/1.0")
    assert tasks[task_id].input == {"q": [1]} and len(tasks[task_id].history) == 1
    assert view.profiles == ["core/1.0", "review/1.0"]
    assert a.describe()["profiles"] == ["core/1.0", "review/1.0"]
    a.ok("task.update", frm=AGENT, task_id=task_id, state="in_progress")
    assert task.state == "created" and tasks[task_id].state == "in_progress"
    assert [e.envelope["method"] for e in view.audit][-2:] == ["task.create", "task.update"]


def test_get_workspace_takes_asdict_and_reads_the_whole_log() -> None:
    coord = _desk()
    assert coord.get_workspace("wsp_nope") is None
    state = coord.get_workspace("wsp_a")
    assert isinstance(state, WorkspaceState)
    data = dataclasses.asdict(state)
    assert data == {**coord.snapshot("wsp_a")}
    assert [e["envelope"]["method"] for e in data["audit"]] == ["workspace.create"] + ["participant.join"] * 2
    assert data["members"][AGENT]["type"] == "agent"


def test_asdict_of_a_view_points_to_get_workspace() -> None:
    """0.3.3's `workspaces` holds dataclasses; ours holds views, so code that
    passes one to `dataclasses.asdict` is told what to call instead. Every
    other look at a view still sees no dataclass."""
    coord = _desk()
    view = coord.workspaces["wsp_a"]
    for convert in (dataclasses.asdict, dataclasses.astuple):
        with pytest.raises(TypeError, match=r"coord\.get_workspace\('wsp_a'\)"):
            convert(view)
    assert not dataclasses.is_dataclass(view) and not hasattr(view, "__dataclass_fields__")
    assert dataclasses.asdict(coord.get_workspace("wsp_a"))["id"] == "wsp_a"  # type: ignore[arg-type]


@pytest.mark.parametrize("data", ["nope", 5, None, ["x", {"id": "w"}], {"workspaces": "x"}, {"no": "id"}])
def test_restore_says_what_shape_it_takes(data: Any) -> None:
    coord = Coordinator()
    with pytest.raises(RestoreError) as raised:
        coord.restore(data)
    message = str(raised.value)
    assert "snapshot(" in message and '{"workspaces": [...]}' in message, message
    assert coord.workspace_ids() == []


# -- chap-analytics: from_coordinator equals from_sqlite ----------------------


def _frames_equal(a: chap_analytics.Frames, b: chap_analytics.Frames) -> None:
    names = [name for name, _ in a]
    assert names == [name for name, _ in b]
    for name in names:
        pd.testing.assert_frame_equal(a[name], b[name], obj=name)


def test_from_coordinator_equals_from_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "chap.db"
    coord = Coordinator(CoordinatorOptions(**_options(SqliteStore(str(path)))))
    for name in BRIDGES:
        _cycle(coord, name, f"wsp_{name.replace('-', '_')}", [])
    # a refusal that is recorded, and an abstention, beside the decisions
    ws = "wsp_langgraph"
    bridge = _lg_open(coord, ws)
    state = hil_review(bridge, DRAFT, kind="draft_response")
    chap = Client(coord, ws)
    chap.fail(-32011, "decide.approve", frm=AGENT, task_id=state["chap_task_id"])
    chap.ok("abstain.declare", frm=ALICE, task_id=state["chap_task_id"], reason="conflict")
    for name in BRIDGES:
        wid = f"wsp_{name.replace('-', '_')}"
        live = chap_analytics.frames(chap_analytics.from_coordinator(coord, wid))
        filed = chap_analytics.frames(chap_analytics.from_sqlite(str(path), workspace=wid))
        _frames_equal(live, filed)
        assert len(live.decisions) >= 3
    assert len(live.refusals) == 0
    lg = chap_analytics.frames(chap_analytics.from_coordinator(coord, ws))
    assert list(lg.refusals["code"]) == [-32011]
    with pytest.raises(ValueError, match="unknown to this coordinator"):
        chap_analytics.from_coordinator(coord, "wsp_nope")
    coord.close()


# -- CoordinatorOptions -----------------------------------------------------


def test_options_have_the_reference_names_and_defaults() -> None:
    theirs = {f.name: f for f in dataclasses.fields(chap_coordinator.CoordinatorOptions)}
    ours = {f.name: f for f in dataclasses.fields(CoordinatorOptions)}
    assert list(ours) == list(theirs)
    assert dataclasses.asdict(CoordinatorOptions()) == dataclasses.asdict(
        chap_coordinator.CoordinatorOptions()
    )


UNSUPPORTED = [
    ("on_auto_escalate", print),
    ("on_store_error", print),
]


@pytest.mark.parametrize(("field", "value"), UNSUPPORTED)
def test_an_unsupported_option_is_refused_by_name(field: str, value: Any) -> None:
    with pytest.raises(UnsupportedOptionError, match=f"CoordinatorOptions.{field} ") as caught:
        Coordinator(CoordinatorOptions(**{field: value}))
    assert caught.value.field == field and "Leave" in str(caught.value)
    with pytest.raises(UnsupportedOptionError):
        Coordinator(**{field: value})
    # the default value of the same field is accepted
    Coordinator(CoordinatorOptions(**{field: getattr(CoordinatorOptions(), field)}))


def test_options_map_to_chapline_arguments_as_the_reference_reads_them() -> None:
    heard: list[tuple[str, int]] = []
    opts = CoordinatorOptions(
        deterministic_ids=True,
        deterministic_clock=True,
        require_read_membership=True,
        max_envelope_bytes=2000,
        on_audit=lambda w, e: heard.append((w, e.seq)),
        default_profiles=["core/1.0"],
    )
    for coord, ref in (
        (Coordinator(opts), chap_coordinator.Coordinator(dataclasses.replace(opts))),
        (Coordinator(options=opts), chap_coordinator.Coordinator(options=dataclasses.replace(opts))),
    ):
        heard.clear()
        calls = [
            env("workspace.create", {"workspace": "wsp_o"}),
            env("participant.join", {"workspace": "wsp_o", "from": ALICE, "type": "human"}),
            env("workspace.describe", {"workspace": "wsp_o"}),
            env("workspace.describe", {"workspace": "wsp_o", "from": ALICE}),
            env("task.create", {"workspace": "wsp_o", "from": ALICE, "assignee": ALICE,
                                "kind": "k", "input": {"x": "y" * 3000}}),
        ]
        mine = [coord.dispatch(c) for c in calls]
        theirs = [ref.dispatch(c) for c in calls]
        assert [_codes(r) for r in mine] == [_codes(r) for r in theirs]
        refused(mine[2], -32011)
        refused(mine[4], -32600)
        assert mine[3]["result"]["profiles"] == ["core/1.0"] and "evidence_head" not in mine[3]["result"]
        assert heard == [("wsp_o", 0), ("wsp_o", 1)] * 2  # ours, then the reference
        assert isinstance(coord.store, MemoryStore)


def _codes(response: dict[str, Any]) -> Any:
    """A response with its error message left out (the wording differs)."""
    error = response.get("error")
    return {**response, "error": error["code"]} if error else response


def test_chain_is_off_with_options_as_in_the_reference_and_on_without() -> None:
    join = env("participant.join", {"workspace": "wsp_c", "from": ALICE, "type": "human"})
    plain = Coordinator()
    plain.dispatch(join)
    assert plain.workspaces["wsp_c"].chain_enabled
    for coord in (Coordinator(CoordinatorOptions()), Coordinator(options=CoordinatorOptions())):
        coord.dispatch(join)
        assert not coord.workspaces["wsp_c"].chain_enabled
    # keyword overrides on top of options, as 0.3.3 takes them
    on = Coordinator(CoordinatorOptions(), enable_chain=True, deterministic_ids=True)
    on.dispatch(join)
    assert on.workspaces["wsp_c"].chain_enabled
    # deterministic ids: CounterIds (the same run mints the same ids)
    assert on.dispatch(env("workspace.create", {}))["result"]["workspace"] == CounterIds()("wsp")


def test_bad_construction_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['bogus'\\]"):
        Coordinator(bogus=1)
    with pytest.raises(TypeError, match="options twice"):
        Coordinator(CoordinatorOptions(), options=CoordinatorOptions())
    with pytest.raises(TypeError, match="both ids= and the option deterministic_ids"):
        Coordinator(CoordinatorOptions(deterministic_ids=True), ids=CounterIds())
    with pytest.raises(TypeError, match="both store= and the option store"):
        Coordinator(MemoryStore(), options=CoordinatorOptions(store=MemoryStore()))
    from chap_coordinator.storage.sqlite import SqliteStore as ReferenceStore

    with pytest.raises(TypeError, match="open it with storage.SqliteStore\\(path\\)"):
        Coordinator(CoordinatorOptions(store=ReferenceStore(str(tmp_path / "ref.db"))))
