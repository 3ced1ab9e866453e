"""control/1.0 and routing/1.0 on chapline's own terms: cross-effects,
write-ahead (a failed write, also inside batch(), leaves nothing), files
both ways with chap-coordinator 0.3.3, snapshot()/restore(), and
chap-analytics reading such a file without a warning."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import chap_analytics
import chap_coordinator
import msgspec
import pytest
from chap_analytics import briefs
from chap_coordinator.storage.sqlite import SqliteStore as ReferenceStore
from client import Client, refused
from profile_diff import ALL_PROFILES
from support import FailingStore, make

from coordinator import BatchWriteError, Coordinator
from coordinator.tools.verification import verify_workspace
from storage import SqliteStore

W = "wsp_t"
A, BOT, B2, BOB = "human:alice", "agent:bot", "agent:b2", "human:bob"
PROFILES = (*ALL_PROFILES, "modes/1.0")


def client(store: Any = None, **options: Any) -> Client:
    c = Client(make(store, default_profiles=PROFILES, **options), W)
    c.setup(members=(A, BOT, B2, BOB))
    return c


def state(c: Client) -> dict[str, Any]:
    return {"describe": c.describe(), "held": c.target.snapshot(W)}


# -- cross-effects ---------------------------------------------------------------


def test_pause_refuses_updates_and_resume_returns_to_the_prior_state():
    c = client()
    t = c.new_task()
    c.ok("task.update", frm=BOT, task_id=t, state="in_progress")
    c.ok("control.pause", frm=A, task_id=t)
    assert c.task(t)["paused_from"] == "in_progress"
    c.fail(-32602, "task.update", frm=BOT, task_id=t, state="completed")
    c.fail(-32602, "task.complete", frm=BOT, task_id=t)
    assert c.ok("control.resume", frm=A, task_id=t)["state"] == "in_progress"
    assert (c.task(t)["paused"], c.task(t)["paused_from"]) == (False, None)
    assert c.ok("task.complete", frm=BOT, task_id=t, output={"o": 1})["state"] == "review_requested"


def test_a_paused_workspace_refuses_and_records_then_resumes():
    c = client()
    t = c.new_task()
    c.ok("control.pause", frm=A, scope="workspace")
    before = c.count()
    c.fail(-32063, "task.update", frm=BOT, task_id=t, state="in_progress")
    c.fail(-32063, "control.snapshot", frm=A)
    assert c.count() == before + 2 and c.last()["outcome"] == {"status": "refused", "code": -32063}
    assert c.ok("control.resume", frm=A, scope="workspace")["state"] == "active"
    assert c.ok("task.update", frm=BOT, task_id=t, state="in_progress") == {"state": "in_progress"}


def test_a_paused_member_gets_no_new_work_until_resumed():
    c = client()
    c.ok("control.pause", frm=A, scope="participant", participant_uri=B2)
    c.fail(-32063, "task.create", frm=A, assignee=B2, kind="k", input={})
    route = c.ok("task.route", frm=A, task_id=c.new_task(), candidates=[B2, BOT])
    assert route["selected"] == BOT
    c.ok("control.resume", frm=A, scope="participant", participant_uri=B2)
    c.new_task(assignee=B2)


def test_rollback_puts_back_the_snapshot_parts_as_a_new_entry():
    store = FailingStore()
    c = client(store)
    c.ok("participant.leave", frm=B2)
    c.ok("participant.join", frm=B2, type="agent", role="drafter")
    snap = c.ok("control.snapshot", frm=A, label="before")
    parts = snap["artefact"]["content"]["state"]
    c.ok("control.set_mode_ceiling", frm=A, new_ceiling="shadow")
    c.ok("participant.leave", frm=B2)
    c.ok("participant.join", frm=B2, type="agent", role="reviewer")
    c.ok("participant.join", frm="human:late", type="human")
    log_before = c.log()
    result = c.ok("control.rollback", frm=A, to_snapshot_artefact_id=snap["snapshot_artefact_id"])
    assert result["restored"] == ["mode_ceiling", "members"]
    described = c.describe()
    assert described["mode_ceiling"] == parts["mode_ceiling"]
    roles = {m["uri"]: m.get("role") for m in described["members"]}
    for member in parts["members"]:
        assert roles[member["uri"]] == member.get("role")
    assert "human:late" in roles  # later joiners stay
    # history is appended to, never rewritten, and the chain goes on
    log_after = c.log()
    assert log_after[: len(log_before)] == log_before
    assert log_after[-1]["envelope"]["method"] == "control.rollback"
    assert c.ok("audit.verify_chain")["status"] == "verified"
    change = store.applied[-1]
    assert change.base == len(log_before) and len(change.entries) == 1
    assert change.meta.mode_ceiling == parts["mode_ceiling"]
    assert set(change.objects) == {"members"}


def test_supersede_refuses_the_old_task_and_the_successor_works():
    c = client()
    t = c.new_task(mode="production")
    new = c.ok("control.supersede", frm=A, task_id=t, successor_task={"kind": "k2", "input": {"v": 2}})["new_task_id"]
    assert (c.task(t)["state"], c.task(t)["superseded_by"]) == ("superseded", new)
    assert c.task(new)["supersedes"] == t
    c.fail(-32602, "task.update", frm=BOT, task_id=t, state="in_progress")
    c.fail(-32061, "control.pause", frm=A, task_id=t)
    c.fail(-32061, "control.cancel", frm=A, task_id=t)
    c.ok("task.update", frm=BOT, task_id=new, state="in_progress")
    assert c.ok("task.complete", frm=BOT, task_id=new, output={}) == {"state": "completed"}


def test_route_sets_the_assignee_and_stores_a_decision():
    c = client()
    t = c.new_task(routing_hints={"criticality": "high"})
    out = c.ok("task.route", frm=A, task_id=t, candidates=["agent:none", B2])
    assert c.task(t)["assignee"] == B2
    decision = c.target.snapshot(W)["route_decisions"][out["decision_artefact"]]
    assert decision["outcome"] == B2 and decision["hints_observed"] == {"criticality": "high"}


# -- write-ahead -------------------------------------------------------------------

CALLS = [
    ("control.pause", {"task_id": "$T"}),
    ("control.pause", {"scope": "participant", "participant_uri": B2}),
    ("control.pause", {"scope": "workspace"}),
    ("control.resume", {"scope": "participant", "participant_uri": B2}),
    ("control.cancel", {"task_id": "$T"}),
    ("control.snapshot", {}),
    ("control.rollback", {"to_snapshot_artefact_id": "$S"}),
    ("control.supersede", {"task_id": "$T", "successor_task": {"kind": "k"}}),
    ("control.set_mode_ceiling", {"new_ceiling": "trial"}),
    ("task.route", {"task_id": "$T", "candidates": [B2]}),
    ("review.depth", {"task_id": "$T"}),
    ("escalate.auto", {"task_id": "$T", "default_escalation_target": A}),
]


def _prepared(store: Any) -> tuple[Client, dict[str, str]]:
    c = client(store)
    names = {"$T": c.new_task(mode="production", routing_hints={"criticality": "critical"})}
    names["$S"] = c.ok("control.snapshot", frm=A)["snapshot_artefact_id"]
    c.ok("control.set_mode_ceiling", frm=A, new_ceiling="production")
    return c, names


def _bind(params: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    return {k: names.get(v, v) if isinstance(v, str) else v for k, v in params.items()}


@pytest.mark.parametrize("method, params", CALLS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CALLS)])
def test_a_failed_write_answers_32900_and_changes_nothing(method, params):
    store = FailingStore()
    c, names = _prepared(store)
    before, held = state(c), msgspec.to_builtins(store.load())
    store.failing = True
    c.fail(-32900, method, frm=A, **_bind(params, names))
    store.failing = False
    assert state(c) == before
    assert msgspec.to_builtins(store.load()) == held
    # and the same call goes through once the store takes writes again
    c.ok(method, frm=A, **_bind(params, names))


def test_a_rollback_in_a_failed_batch_is_undone_with_the_rest():
    store = FailingStore()
    c, names = _prepared(store)
    c.ok("control.set_mode_ceiling", frm=A, new_ceiling="shadow")
    before = state(c)
    store.failing = True
    with pytest.raises(BatchWriteError):
        with c.target.batch():
            r1 = c.call("control.rollback", frm=A, to_snapshot_artefact_id=names["$S"])
            assert r1["result"]["restored"] == ["mode_ceiling", "members"]
            assert c.describe()["mode_ceiling"] == "production"  # seen inside the batch
            r2 = c.call("control.pause", frm=A, scope="workspace")
    store.failing = False
    refused(r1, -32900)
    refused(r2, -32900)
    assert state(c) == before
    with c.target.batch():
        c.ok("control.rollback", frm=A, to_snapshot_artefact_id=names["$S"])
        c.ok("control.supersede", frm=A, task_id=names["$T"], successor_task={"kind": "k"})
    assert c.describe()["mode_ceiling"] == "production"
    assert len(store.applied[-1].entries) == 2  # one change for the batch


def test_an_abandoned_batch_undoes_a_snapshot_and_a_route():
    c, names = _prepared(None)
    before = state(c)
    with pytest.raises(RuntimeError):
        with c.target.batch():
            c.ok("control.snapshot", frm=A)
            c.ok("task.route", frm=A, task_id=names["$T"], candidates=[B2])
            raise RuntimeError("caller gave up")
    assert state(c) == before


def test_a_hook_that_raises_changes_nothing_and_is_recorded():
    def broken(task, candidates):
        raise ConnectionError("policy service unreachable")

    c = client(routing_policy=broken)
    t = c.new_task()
    before = c.target.snapshot(W)
    error = c.fail(-32515, "task.route", frm=A, task_id=t, candidates=[BOT])
    assert "unreachable" in error["message"]
    after = c.target.snapshot(W)
    assert after["tasks"] == before["tasks"] and after["route_decisions"] == {}
    assert after["audit"][-1]["outcome"] == {"status": "refused", "code": -32515}


# -- files both ways, snapshot()/restore(), chap-analytics -------------------------


def session(coord: Any) -> dict[str, str]:
    """A control/routing session: snapshots, rollback, pause, supersede, routes."""
    c = Client(coord, W)
    c.setup(members=(A, BOT, B2, BOB), profiles=list(PROFILES))
    t = c.new_task(mode="production", routing_hints={"criticality": "critical", "confidence": "0.4"})
    u = c.new_task(mode="production")
    snap = c.ok("control.snapshot", frm=A, label="s1")["snapshot_artefact_id"]
    c.ok("task.route", frm=A, task_id=t, candidates=[B2, BOT])
    c.ok("review.depth", frm=A, task_id=t)
    c.ok("escalate.auto", frm=A, task_id=t, default_escalation_target=A)
    c.ok("task.update", frm=BOT, task_id=u, state="in_progress")
    c.ok("control.pause", frm=A, task_id=u)
    c.ok("control.pause", frm=A, scope="participant", participant_uri=BOB)
    new = c.ok("control.supersede", frm=A, task_id=t, successor_task={"kind": "k2"}, reason="r")["new_task_id"]
    c.ok("control.set_mode_ceiling", frm=A, new_ceiling="trial")
    c.fail(-32062, "control.rollback", frm=A, to_snapshot_artefact_id="art_missing")
    c.ok("control.rollback", frm=A, to_snapshot_artefact_id=snap, what_to_restore=["mode_ceiling"])
    c.ok("control.set_mode_ceiling", frm=A, new_ceiling="shadow")
    return {"t": t, "u": u, "snap": snap, "new": new}


def options() -> dict[str, Any]:
    return {"deterministic_ids": True, "deterministic_clock": True, "enable_chain": True,
            "default_profiles": list(PROFILES)}


def reads(coord: Any) -> dict[str, Any]:
    out = {}
    for method in ("workspace.describe", "audit.read", "audit.verify_chain"):
        r = coord.dispatch({"jsonrpc": "2.0", "id": "q", "method": method, "params": {"workspace": W}})
        out[method] = r
    return out


def test_ours_loads_and_continues_a_file_the_reference_wrote(tmp_path: Path):
    path = tmp_path / "ref.db"
    ref_store = ReferenceStore(str(path))
    ref = chap_coordinator.Coordinator(store=ref_store, **options())
    names = session(ref)
    expected = reads(ref)
    ref_store.close()

    ours = Coordinator(SqliteStore(path))
    assert reads(ours) == expected
    held = ours.snapshot(W)
    assert len(held["snapshots"]) == 1 and len(held["route_decisions"]) == 3
    assert held["tasks"][names["u"]]["paused_from"] == "in_progress"
    c = Client(ours, W)
    # the reference's snapshot, paused task and member work here
    assert c.ok("control.rollback", frm=A, to_snapshot_artefact_id=names["snap"])["restored"] == [
        "mode_ceiling", "members"]
    assert c.describe()["mode_ceiling"] == "production"
    assert c.ok("control.resume", frm=A, task_id=names["u"])["state"] == "in_progress"
    assert c.ok("control.resume", frm=A, scope="participant", participant_uri=BOB)["paused"] is False
    c.ok("task.route", frm=A, task_id=names["new"], candidates=[BOT])
    assert c.ok("audit.verify_chain")["status"] == "verified"
    ours.close()
    # and the reference reads what we appended
    again = chap_coordinator.Coordinator(store=ReferenceStore(str(path)), **options())
    assert reads(again)["audit.read"] == reads(Coordinator(SqliteStore(path)))["audit.read"]
    assert Client(again, W).ok("audit.verify_chain")["status"] == "verified"


def test_the_reference_loads_and_continues_a_file_we_wrote(tmp_path: Path):
    path = tmp_path / "ours.db"
    ours = make(SqliteStore(path), default_profiles=PROFILES)
    names = session(ours)
    expected = reads(ours)
    ours.close()

    ref = chap_coordinator.Coordinator(store=ReferenceStore(str(path)), **options())
    got = reads(ref)
    assert got["audit.read"] == expected["audit.read"]
    assert got["workspace.describe"] == expected["workspace.describe"]
    assert got["audit.verify_chain"]["result"]["status"] == "verified"
    live = ref.get_workspace(W)
    assert list(live.snapshots) == [names["snap"]] and len(live.route_decisions) == 3
    assert live.tasks[names["u"]].paused_from == "in_progress"
    c = Client(ref, W)
    c.n = 1000
    assert c.ok("control.rollback", frm=A, to_snapshot_artefact_id=names["snap"])["restored"] == [
        "mode_ceiling", "members"]
    assert c.ok("control.resume", frm=A, task_id=names["u"])["state"] == "in_progress"
    assert c.ok("audit.verify_chain")["status"] == "verified"


@pytest.mark.parametrize("shape", ["dict", "arrays"])
def test_snapshot_and_restore_carry_the_profile_collections(shape):
    source = make(default_profiles=PROFILES)
    names = session(source)
    data = source.snapshot(W)
    if shape == "arrays":
        for name in ("tasks", "members", "snapshots", "route_decisions"):
            data[name] = list(data[name].values())
    target = make(default_profiles=PROFILES)
    assert target.restore(data) == [W]
    assert target.snapshot(W) == source.snapshot(W)
    c = Client(target, W)
    c.n = 1000
    c.ok("control.rollback", frm=A, to_snapshot_artefact_id=names["snap"])
    assert c.describe()["mode_ceiling"] == "production"
    assert c.ok("control.resume", frm=A, task_id=names["u"])["state"] == "in_progress"


def test_chap_analytics_loads_such_a_file_without_a_warning(tmp_path: Path, caplog):
    path = tmp_path / "analytics.db"
    ours = make(SqliteStore(path), default_profiles=PROFILES)
    session(ours)
    count = Client(ours, W).count()
    ours.close()
    with caplog.at_level(logging.WARNING), warnings.catch_warnings():
        warnings.simplefilter("error")
        chain = chap_analytics.from_sqlite(str(path), workspace=W)
        frames = chap_analytics.frames(chain)
        assert briefs.everything(frames)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert chain.has_state
    assert len(Client(make(SqliteStore(path)), W).log()) == count


def test_a_hook_that_mutates_its_arguments_changes_nothing_held():
    def meddling(task, hints):
        task.history.clear()
        task.routing_hints["criticality"] = "low"
        hints["criticality"] = "low"
        return {"depth": "full"}

    c = client(review_depth_policy=meddling)
    t = c.new_task(routing_hints={"criticality": "high"})
    before = c.task(t)
    assert c.ok("review.depth", frm=A, task_id=t)["depth"] == "full"
    assert c.task(t) == before
    decision = next(iter(c.target.snapshot(W)["route_decisions"].values()))
    assert decision["hints_observed"] == {"criticality": "high"}


def test_verify_replays_snapshots_and_route_decisions_to_their_stored_ids(tmp_path: Path):
    """`chapline verify` replays the log; the artefacts these profiles make
    (art_ ids, dated by `produced_at`) are matched back to the stored ones,
    also when another workspace took ids in between."""
    path = tmp_path / "verify.db"
    coord = make(SqliteStore(path), default_profiles=PROFILES)
    names = session(coord)
    other = Client(coord, "wsp_other")
    other.setup(members=(A, BOT))
    c = Client(coord, W)
    c.n = 500
    for _ in range(2):  # interleave artefact ids of two workspaces
        x = other.new_task()
        other.ok("review.depth", frm=A, task_id=x, artefact_routing_hints={"criticality": "low"})
        c.ok("task.route", frm=A, task_id=names["new"], candidates=[BOT])
        c.ok("control.snapshot", frm=A)
    coord.close()
    store = SqliteStore(path)
    for ws in (W, "wsp_other"):
        report = verify_workspace(store, ws)
        assert report.ok, [f.describe() for f in report.findings]
    store.close()


def test_two_coordinators_on_one_file_reload_and_rerun_control_calls(tmp_path: Path):
    """A coordinator whose copy is stale (the other wrote since) reloads the
    workspace and runs its control call again on the fresh state."""
    path = tmp_path / "shared.db"
    first = make(SqliteStore(path), default_profiles=PROFILES)
    a = Client(first, W)
    a.setup(members=(A, BOT, B2, BOB))
    t = a.new_task()
    second = Coordinator(SqliteStore(path))
    b = Client(second, W)
    b.n = 1000
    snap = a.ok("control.snapshot", frm=A)["snapshot_artefact_id"]  # second has not seen it
    a.ok("control.set_mode_ceiling", frm=A, new_ceiling="shadow")
    assert b.ok("control.rollback", frm=A, to_snapshot_artefact_id=snap)["restored"] == ["mode_ceiling", "members"]
    a.n = 2000
    assert a.ok("control.pause", frm=A, task_id=t)["state"] == "paused"  # first reloads in turn
    assert b.ok("control.resume", frm=A, task_id=t)["state"] == "created"
    assert b.ok("task.route", frm=A, task_id=t, candidates=[B2])["selected"] == B2
    fresh = Client(Coordinator(SqliteStore(path)), W)
    assert fresh.describe() == b.describe()  # the second wrote last
    assert fresh.describe()["mode_ceiling"] == "production"
    assert fresh.task(t)["assignee"] == B2
    assert fresh.ok("audit.verify_chain")["status"] == "verified"
    methods = [e["envelope"]["method"] for e in fresh.log()[-5:]]
    assert methods == ["control.set_mode_ceiling", "control.rollback", "control.pause",
                       "control.resume", "task.route"]


# -- what the README says of 0.3.3's options --------------------------------------


def test_the_readme_names_exactly_the_options_that_are_refused() -> None:
    """README's list of 0.3.3 options chapline refuses is the list that
    `Coordinator(CoordinatorOptions(...))` refuses: `routing_policy` is taken,
    as 0.3.3 takes it (test_routing_differential checks it answers alike)."""
    import dataclasses
    import re

    from coordinator import CoordinatorOptions, UnsupportedOptionError

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (bullet,) = [b for b in re.split(r"\n- ", readme) if "UnsupportedOptionError" in b]
    named = set(re.findall(r"`(\w+)`", bullet.split("UnsupportedOptionError")[0]))
    refused = set()
    for field in dataclasses.fields(CoordinatorOptions):
        if field.name in ("store", "default_profiles", "max_envelope_bytes"):
            continue  # values, not switches: taken as given
        value: Any = True if field.type in (bool, "bool") else (lambda *a: None)
        try:
            Coordinator(CoordinatorOptions(**{field.name: value})).close()
        except UnsupportedOptionError:
            refused.add(field.name)
    assert refused == {"on_auto_escalate", "on_store_error"}
    assert named & {f.name for f in dataclasses.fields(CoordinatorOptions)} == refused, bullet
