"""x-chapline-work/1.0 by example: the registry's extension rules, plans,
claims, fencing, capacity, retries, CHAP methods on plan tasks, restarts,
and chap-coordinator 0.3.3 opening a file that holds such workspaces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chap_coordinator import Coordinator as Reference
from chap_coordinator.storage.sqlite import SqliteStore as ReferenceStore
from client import Client, refused
from support import ALICE, BOT, make

from coordinator import Coordinator, CounterIds
from coordinator.engine.clock import iso_ms
from coordinator.engine.registry import CHAP_0_3, Profile, Registry
from coordinator.errors import RegistryError
from coordinator.profiles import REGISTRY
from storage import SqliteStore

WORK = ["core/1.0", "review/1.0", "control/1.0", "x-chapline-work/1.0"]
BOT2 = "agent:bot2"


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def setup(store: Any = None, clock: ManualClock | None = None) -> tuple[Client, ManualClock]:
    clock = clock or ManualClock()
    c = Client(make(store, clock=clock))
    c.ok("workspace.create", profiles=WORK, mode="production")
    c.ok("participant.join", frm=ALICE, type="human", role="admin")
    c.ok("participant.join", frm=BOT, type="agent", role="writer")
    c.ok("participant.join", frm=BOT2, type="agent", role="writer")
    return c, clock


def submit(c: Client, tasks: list[dict[str, Any]], edges: list[dict[str, Any]] | None = None,
           plan: str = "p") -> dict[str, str]:
    result = c.ok("x-chapline.plan.submit", frm=ALICE, plan=plan, tasks=tasks, edges=edges or [])
    return dict(result["tasks"])


def task(key: str, **more: Any) -> dict[str, Any]:
    return {"key": key, "kind": "k", "input": {"key": key}, "role": "writer", **more}


def claim(c: Client, who: str, tid: str | None = None, **more: Any) -> dict[str, Any]:
    params = {"from": who, **more}
    if tid is not None:
        params["task_id"] = tid
    return dict(c.ok("x-chapline.work.claim", **params))


# -- the registry -------------------------------------------------------------


def test_extension_profiles_and_methods_are_namespaced_and_checked() -> None:
    names = {m.name for m in REGISTRY.extension_methods()}
    assert names == {
        "x-chapline.plan.submit", "x-chapline.plan.describe", "x-chapline.work.ready",
        "x-chapline.work.claim", "x-chapline.work.heartbeat", "x-chapline.work.release",
        "x-chapline.work.report", "x-chapline.work.unblock", "x-chapline.work.set_capacity",
        "x-chapline.work.sweep",
    }
    assert not names & set(CHAP_0_3)
    assert all(m.extension and m.profile == "x-chapline-work/1.0" for m in REGISTRY.extension_methods())
    assert not any(m.extension for m in REGISTRY.methods())  # CHAP's list stays CHAP's
    # The MCP tools and A2A skills are CHAP's implemented methods (not these, yet).
    assert not names & {m.name for m in REGISTRY.implemented()}
    assert "x-chapline-work/1.0" in REGISTRY.advertisable
    with pytest.raises(RegistryError, match="extension profile is named"):
        Profile("x-chapline-Work")
    with pytest.raises(RegistryError, match="not a CHAP 0.3 profile"):
        Profile("x-other/1.0")
    ext = Profile("x-chapline-demo/1.0")
    with pytest.raises(RegistryError, match="extension method is named"):
        ext.method("task.create", title="t", description="d")
    with pytest.raises(RegistryError, match="extension method is named"):
        ext.method("x-chapline.Shout", title="t", description="d")
    with pytest.raises(RegistryError, match="not a CHAP 0.3 method"):
        Profile("whisper/1.0").method("x-chapline.demo.shout", title="t", description="d")
    ext.method("x-chapline.demo.shout", title="t", description="d")(lambda call: {})
    other = Profile("x-chapline-other/1.0")
    other.method("x-chapline.demo.shout", title="t", description="d")(lambda call: {})
    with pytest.raises(RegistryError, match="declared twice"):
        Registry([ext, other])


def test_the_profile_answers_only_where_advertised() -> None:
    c = Client(make())
    c.ok("workspace.create", profiles=["core/1.0"])
    c.ok("participant.join", frm=ALICE, type="human", role="admin")
    err = c.fail(-32601, "x-chapline.plan.submit", frm=ALICE, plan="p", tasks=[task("a")])
    assert err["data"]["profile"] == "x-chapline-work/1.0"


# -- plans --------------------------------------------------------------------


def test_resubmission_is_a_no_op_and_a_redefinition_or_a_cycle_is_refused() -> None:
    c, _ = setup()
    tasks = [task("a", writes=["repo/a"]), task("b", reads=["repo"], priority=3)]
    ids = submit(c, tasks, [{"from": "a", "to": "b"}])
    count = c.describe()["task_count"]
    # Same plan, tasks and edges in another order: same ids, nothing created.
    again = c.ok("x-chapline.plan.submit", frm=ALICE, plan="p",
                 tasks=[{**tasks[1], "reads": ["repo", "repo"]}, tasks[0]],
                 edges=[{"to": "b", "from": "a", "type": "strong"}])
    assert again["tasks"] == ids and again["added"] == []
    assert c.describe()["task_count"] == count
    # A new key is added; it may wait for held tasks.
    grown = c.ok("x-chapline.plan.submit", frm=ALICE, plan="p",
                 tasks=[*tasks, task("c")], edges=[{"from": "a", "to": "b"}, {"from": "b", "to": "c"}])
    assert grown["added"] == ["c"] and {k: grown["tasks"][k] for k in ids} == ids
    before = c.describe()["audit_count"]
    err = c.fail(-32961, "x-chapline.plan.submit", frm=ALICE, plan="p",
                tasks=[tasks[0], {**tasks[1], "priority": 4}], edges=[{"from": "a", "to": "b"}])
    assert err["data"] == {"plan": "p", "key": "b", "task_id": ids["b"]}
    # A changed edge redefines the task it points at.
    err = c.fail(-32961, "x-chapline.plan.submit", frm=ALICE, plan="p", tasks=tasks,
                edges=[{"from": "a", "to": "b", "type": "weak"}])
    assert err["data"]["key"] == "b"
    err = c.fail(-32962, "x-chapline.plan.submit", frm=ALICE, plan="q",
                tasks=[task("x"), task("y"), task("z")],
                edges=[{"from": "x", "to": "y"}, {"from": "y", "to": "z"}, {"from": "z", "to": "x"}])
    assert err["data"]["cycle"] == ["x", "y", "z", "x"]
    assert "x -> y -> z -> x" in err["message"]
    # Refusals are recorded and change nothing else.
    assert c.describe()["task_count"] == count + 1
    assert c.describe()["audit_count"] == before + 3
    assert [e["outcome"]["code"] for e in c.log()[-3:]] == [-32961, -32961, -32962]


@pytest.mark.parametrize(("tasks", "edges", "words"), [
    ([{"key": "a", "kind": "k", "input": {}}], [], "exactly one of assignee"),
    ([task("a"), task("a")], [], "given twice"),
    ([task("a")], [{"from": "a", "to": "nope"}], "'nope', which is not a task key"),
    ([task("a", reads="repo")], [], "reads must be an array"),
    ([task("a", retry={"max_attempts": 0})], [], "retry.max_attempts must be an integer"),
    ([task("a", assignee=BOT)], [], "exactly one of assignee"),
    ([task("a", colour="red")], [], "unknown fields"),
    ([task("a", input=None)], [], "input is required"),
])
def test_bad_plans_are_invalid_params_and_change_nothing(
    tasks: list[dict[str, Any]], edges: list[dict[str, Any]], words: str
) -> None:
    c, _ = setup()
    before = c.describe()
    err = c.fail(-32602, "x-chapline.plan.submit", frm=ALICE, plan="p", tasks=tasks, edges=edges)
    assert words in err["message"], err
    assert c.describe() == before


# -- claims, leases, fencing ----------------------------------------------------


def test_ready_work_respects_dependencies_conflicts_and_priority() -> None:
    c, _ = setup()
    ids = submit(c, [
        task("low", writes=["repo/docs"]),
        task("high", priority=9, writes=["repo/docs/a.md"]),
        task("reader", priority=5, reads=["repo"]),
        task("after", writes=["other"]),
        task("weakly", writes=["elsewhere"]),
    ], [{"from": "low", "to": "after"}, {"from": "high", "to": "weakly", "type": "weak"}])
    ready = c.ok("x-chapline.work.ready")
    assert [r["key"] for r in ready["ready"]] == ["high", "reader", "low"]
    got = claim(c, BOT)  # the best ready task
    assert (got["outcome"], got["task_id"], got["token"]) == ("claimed", ids["high"], 1)
    # high writes repo/docs/a.md: low (writes its parent) and reader (reads repo) conflict.
    assert c.ok("x-chapline.work.ready")["ready"] == []
    blocked = claim(c, BOT2, ids["reader"])
    assert blocked["outcome"] == "blocked" and "repo" in blocked["reason"]
    assert claim(c, BOT2, ids["after"])["outcome"] == "blocked"  # waits for low
    assert claim(c, BOT2, ids["high"]) == {
        "outcome": "held", "task_id": ids["high"], "held_by": BOT,
        "lease_expires_at": got["lease_expires_at"],
    }
    assert claim(c, BOT2, "tsk_nothing")["outcome"] == "unknown"
    again = claim(c, BOT, ids["high"], lease_ms=120_000)
    assert again["outcome"] == "refreshed" and again["token"] == 1
    c.ok("x-chapline.work.report", frm=BOT, task_id=ids["high"], token=1,
         outcome="failed", retryable=False, error="boom")
    # high failed for good; weakly waited for any end of it and is ready.
    keys = [r["key"] for r in c.ok("x-chapline.work.ready")["ready"]]
    assert keys == ["reader", "low", "weakly"]


def test_a_stale_token_is_refused_after_expiry_and_reclaim() -> None:
    c, clock = setup()
    ids = submit(c, [task("a", retry={"max_attempts": 3, "backoff_ms": 1000})])
    first = claim(c, BOT, ids["a"], lease_ms=10_000)
    clock.now += 10_000
    # The lease is over: the holder's heartbeat is refused, nothing changes.
    err = c.fail(-32960, "x-chapline.work.heartbeat", frm=BOT, task_id=ids["a"], token=first["token"])
    assert err["data"]["task_id"] == ids["a"]
    # Reclaimed on the next write (recorded), then after the backoff by another.
    assert claim(c, BOT2, ids["a"])["outcome"] == "blocked"
    clock.now += 1_000
    second = claim(c, BOT2, ids["a"])
    assert second["outcome"] == "claimed" and second["token"] == first["token"] + 1
    for method, extra in (("x-chapline.work.report", {"outcome": "completed"}),
                          ("x-chapline.work.heartbeat", {}), ("x-chapline.work.release", {})):
        err = c.fail(-32960, method, frm=BOT, task_id=ids["a"], token=first["token"], **extra)
        assert err["data"]["current_token"] == second["token"]
        assert "claimed again since" in err["message"]
    # CHAP's own writes to a plan task are fenced too.
    c.fail(-32960, "task.update", frm=BOT, task_id=ids["a"], state="in_progress", token=first["token"])
    c.ok("task.update", frm=BOT2, task_id=ids["a"], state="in_progress", token=second["token"])
    c.ok("task.complete", frm=BOT2, task_id=ids["a"], token=second["token"], output=1)
    described = c.ok("x-chapline.plan.describe", plan="p")["tasks"][0]
    assert described["status"] == "completed" and described["holder"] is None
    assert [a["outcome"] for a in described["attempts"]] == ["expired"]
    history = c.ok("x-chapline.plan.describe", plan="p")
    assert history["tasks"][0]["state"] == "completed"


def test_a_plan_task_needs_its_claim_for_chap_writes() -> None:
    c, _ = setup()
    ids = submit(c, [task("a")])
    err = c.fail(-32963, "task.update", frm=BOT, task_id=ids["a"], state="in_progress")
    assert "x-chapline.work.claim" in err["message"]


def test_retries_back_off_then_fail_for_good_and_block_strong_dependents() -> None:
    c, clock = setup()
    ids = submit(c, [task("a", retry={"max_attempts": 3, "backoff_ms": 1000, "max_backoff_ms": 1500}),
                     task("b"), task("c")],
                 [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}])
    waits = []
    for attempt in range(3):
        got = claim(c, BOT, ids["a"])
        assert got["outcome"] == "claimed" and got["token"] == attempt + 1
        result = c.ok("x-chapline.work.report", frm=BOT, task_id=ids["a"],
                      token=got["token"], outcome="failed", error=f"e{attempt}")
        if attempt < 2:
            waits.append(result["retry_at"])
            assert claim(c, BOT, ids["a"])["outcome"] == "blocked"
            clock.now += 1500
    assert result["status"] == "failed"
    tasks = {t["key"]: t for t in c.ok("x-chapline.plan.describe", plan="p")["tasks"]}
    assert [a["error"] for a in tasks["a"]["attempts"]] == ["e0", "e1", "e2"]
    assert (tasks["a"]["status"], tasks["a"]["state"]) == ("failed", "declined")
    assert tasks["b"]["status"] == tasks["c"]["status"] == "blocked"
    assert c.ok("x-chapline.work.ready")["ready"] == []
    assert waits == ["2023-11-14T22:13:21.000Z", "2023-11-14T22:13:23.000Z"]  # 1000, then 2000 capped at 1500


def test_a_claim_sees_the_leases_its_own_sweep_just_ended() -> None:
    """The claim index holds what the store holds; a call lays its own
    staged sweep over it: an expired holder's resources and capacity are
    free for the claim in the same write."""
    c, clock = setup()
    ids = submit(c, [task("a", writes=["repo/docs"]), task("b", writes=["repo"]),
                     task("c", reads=["repo/docs/x.md"])])
    c.ok("x-chapline.work.set_capacity", frm=ALICE, workspace_max=1, agent_max=1)
    assert claim(c, BOT, ids["a"], lease_ms=1_000)["outcome"] == "claimed"
    blocked = claim(c, BOT2, ids["b"])
    assert blocked["outcome"] == "blocked" and "repo" in blocked["reason"]
    assert claim(c, BOT2, ids["c"])["outcome"] == "blocked"
    clock.now += 1_000
    # a's lease ends in this very write: its resource and its place under
    # both caps are free for b.
    assert claim(c, BOT, ids["b"])["outcome"] == "claimed"
    assert claim(c, BOT2, ids["a"])["outcome"] == "blocked"  # retry wait, and b holds repo
    described = {t["key"]: t for t in c.ok("x-chapline.plan.describe", plan="p")["tasks"]}
    assert described["b"]["holder"] == BOT and described["a"]["holder"] is None
    reason = claim(c, BOT2, ids["c"])["reason"]
    assert reason == "resource repo/docs/x.md conflicts with a held task"


def test_capacity_is_counted_in_the_write_and_never_refuses_a_refresh() -> None:
    c, _ = setup()
    ids = submit(c, [task(k) for k in "abcd"])
    c.fail(-32011, "x-chapline.work.set_capacity", frm=BOT, workspace_max=1)
    c.ok("x-chapline.work.set_capacity", frm=ALICE, workspace_max=2, agent_max=1)
    assert claim(c, BOT, ids["a"])["outcome"] == "claimed"
    full = claim(c, BOT, ids["b"])
    assert full["outcome"] == "full" and "agent:bot holds 1" in full["reason"]
    assert claim(c, BOT2, ids["b"])["outcome"] == "claimed"
    c.ok("participant.join", frm="agent:three", type="agent", role="writer")
    assert claim(c, "agent:three", ids["c"])["outcome"] == "full"
    c.ok("x-chapline.work.set_capacity", frm=ALICE, workspace_max=0)
    assert claim(c, BOT, ids["a"])["outcome"] == "refreshed"


def test_blocked_on_a_human_then_unblocked() -> None:
    c, _ = setup()
    ids = submit(c, [task("a")])
    got = claim(c, BOT, ids["a"])
    c.ok("x-chapline.work.report", frm=BOT, task_id=ids["a"], token=got["token"],
         outcome="blocked", question="which licence?")
    assert claim(c, BOT, ids["a"])["reason"].startswith("it waits for a human")
    c.fail(-32011, "x-chapline.work.unblock", frm=BOT, task_id=ids["a"])
    c.ok("x-chapline.work.unblock", frm=ALICE, task_id=ids["a"], answer="MIT")
    assert claim(c, BOT2, ids["a"])["token"] == 2


def test_cancel_ends_a_held_task_and_its_token() -> None:
    c, _ = setup()
    ids = submit(c, [task("a"), task("b")], [{"from": "a", "to": "b", "type": "weak"}])
    got = claim(c, BOT, ids["a"])
    c.ok("control.cancel", frm=ALICE, task_id=ids["a"], reason="not needed")
    c.fail(-32960, "x-chapline.work.report", frm=BOT, task_id=ids["a"], token=got["token"], outcome="completed")
    assert [r["key"] for r in c.ok("x-chapline.work.ready")["ready"]] == ["b"]


def test_state_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    clock = ManualClock()
    c, _ = setup(SqliteStore(path), clock)
    ids = submit(c, [task("a"), task("b")], [{"from": "a", "to": "b"}])
    got = claim(c, BOT, ids["a"])
    c.target.close()
    restarted = Client(Coordinator(SqliteStore(path), clock=clock, ids=CounterIds()))
    assert restarted.ok("x-chapline.plan.submit", frm=ALICE, plan="p",
                        tasks=[task("a"), task("b")], edges=[{"from": "a", "to": "b"}])["tasks"] == ids
    assert claim(restarted, BOT2, ids["a"])["outcome"] == "held"
    restarted.ok("x-chapline.work.report", frm=BOT, task_id=ids["a"], token=got["token"],
                 outcome="completed")
    assert claim(restarted, BOT2)["task_id"] == ids["b"]
    assert restarted.ok("audit.verify_chain")["ok"] is True
    restarted.target.close()


# -- chap-coordinator 0.3.3 and these workspaces -------------------------------------


def test_the_reference_opens_a_file_holding_work_workspaces(tmp_path: Path) -> None:
    path = tmp_path / "mixed.db"
    ours = make(SqliteStore(path))
    plain = Client(ours, "plain")
    plain.ok("workspace.create", profiles=["core/1.0", "review/1.0"])
    plain.ok("participant.join", frm=ALICE, type="human", role="admin")
    plain.ok("task.create", frm=ALICE, assignee=ALICE, kind="k", input={})
    work = Client(ours, "work")
    work.ok("workspace.create", profiles=WORK)
    work.ok("participant.join", frm=ALICE, type="human", role="admin")
    work.ok("participant.join", frm=BOT, type="agent", role="writer")
    ids = submit(work, [task("a"), task("b")], [{"from": "a", "to": "b"}])
    got = claim(work, BOT, ids["a"])
    # A timed sweep's entry (no id, from service:coordinator) on the log too.
    other = submit(work, [task("x")], plan="q")
    claim(work, BOT, other["x"], lease_ms=1)
    assert ours.sweep()  # the step clock's next reading is past the 1 ms lease
    assert work.log()[-1]["envelope"]["method"] == "x-chapline.work.sweep"
    probes = {ws: {m: ours.dispatch({"jsonrpc": "2.0", "id": "q", "method": m, "params": {"workspace": ws}})
                   for m in ("workspace.describe", "audit.read", "audit.verify_chain")}
              for ws in ("plain", "work")}
    ours.close()

    ref_store = ReferenceStore(str(path))
    ref = Reference(store=ref_store, enable_chain=True)
    assert sorted(ref.workspaces) == ["plain", "work"]
    for ws, answers in probes.items():
        for method, answer in answers.items():
            got_ref = ref.dispatch({"jsonrpc": "2.0", "id": "q", "method": method, "params": {"workspace": ws}})
            assert got_ref == answer, (ws, method)
    # 0.3.3 does not know the extension's methods, and does not fence plan tasks.
    unknown = ref.dispatch({"jsonrpc": "2.0", "id": "q", "method": "x-chapline.work.ready",
                            "params": {"workspace": "work"}})
    refused(unknown, -32601)
    done = ref.dispatch({"jsonrpc": "2.0", "id": "q", "method": "task.update", "params": {
        "workspace": "work", "from": BOT, "task_id": ids["a"], "state": "completed"}})
    assert done["result"] == {"state": "completed"}
    ref_store.close()
    # Reopened here, the scheduler follows what 0.3.3 did once the lease ends.
    clock = ManualClock()
    clock.now = 1_800_000_000_000
    back = Client(Coordinator(SqliteStore(path), clock=clock), "work")
    assert back.ok("audit.verify_chain")["ok"] is True
    assert claim(back, BOT)["task_id"] == ids["b"]
    assert c_status(back, "a") == "completed" and got["token"] == 1
    back.target.close()


def c_status(c: Client, key: str) -> str:
    return next(str(t["status"]) for t in c.ok("x-chapline.plan.describe", plan="p")["tasks"] if t["key"] == key)


def test_the_readmes_work_example_runs() -> None:
    import re

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme[readme.index("## Work that schedules itself"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    scope: dict[str, Any] = {}
    exec(code.group(1), scope)  # noqa: S102 - the README's own example
    coord = scope["coord"]
    entries = coord.dispatch({"jsonrpc": "2.0", "id": "x", "method": "audit.read",
                              "params": {"workspace": "wsp_release"}})["result"]["entries"]
    methods = [e["envelope"]["method"] for e in entries]
    assert methods.count("x-chapline.work.claim") == 3 and "decide.approve" in methods


def test_chapline_inspect_and_verify_show_work_workspaces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from coordinator.cli import main

    path = tmp_path / "inspect.db"
    c, _ = setup(SqliteStore(path))
    ids = submit(c, [task("a"), task("b"), task("c")], [{"from": "a", "to": "c"}])
    claim(c, BOT, ids["a"])
    c.target.close()
    assert main(["inspect", str(path), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["workspaces"][0]
    assert row["work"] == {"plans": 1, "claims": 1, "frontier": 1}
    assert main(["inspect", str(path)]) == 0
    assert "1 plans, 1 claims, 1 on the frontier" in capsys.readouterr().out
    assert main(["verify", str(path)]) == 0  # replaying the log gives the stored objects


# -- edges of plans, failures and leases (SPECIFICATION.md, "x-chapline-work/1.0")


def statuses(c: Client, plan: str = "p") -> dict[str, str]:
    return {t["key"]: t["status"] for t in c.ok("x-chapline.plan.describe", plan=plan)["tasks"]}


def ready_keys(c: Client) -> list[str]:
    return [r["key"] for r in c.ok("x-chapline.work.ready")["ready"]]


def fail_for_good(c: Client, tid: str) -> None:
    got = claim(c, BOT, tid)
    assert got["outcome"] == "claimed", got
    result = c.ok("x-chapline.work.report", frm=BOT, task_id=tid, token=got["token"],
                  outcome="failed", error="boom")
    assert result["status"] == "failed"


def test_a_task_reached_twice_from_a_failure_ends_once() -> None:
    """J is reached from the failed F directly and through M: it is blocked
    once, so W (weakly after J, strongly after G) still waits for G."""
    c, _ = setup()
    ids = submit(c, [task("F", retry={"max_attempts": 1}), task("J"), task("M"), task("G"), task("W")],
                 [{"from": "F", "to": "J"}, {"from": "F", "to": "M"}, {"from": "M", "to": "J"},
                  {"from": "J", "to": "W", "type": "weak"}, {"from": "G", "to": "W"}])
    fail_for_good(c, ids["F"])
    assert statuses(c) == {"F": "failed", "J": "blocked", "M": "blocked", "G": "ready", "W": "waiting"}
    assert ready_keys(c) == ["G"]
    assert claim(c, BOT2, ids["W"])["outcome"] == "blocked"
    blocked_notes = [h for h in c.task(ids["J"])["history"] if str(h["note"]).startswith("blocked")]
    assert len(blocked_notes) == 1
    got = claim(c, BOT, ids["G"])
    c.ok("x-chapline.work.report", frm=BOT, task_id=ids["G"], token=got["token"], outcome="completed")
    assert ready_keys(c) == ["W"]


def test_keys_added_below_a_failed_task_end_once() -> None:
    c, _ = setup()
    f = task("F", retry={"max_attempts": 1})
    ids = submit(c, [f])
    fail_for_good(c, ids["F"])
    ids = submit(c, [f, task("Z"), task("G"), task("X"), task("Y")],
                 [{"from": "F", "to": "X"}, {"from": "X", "to": "Y"},
                  {"from": "Y", "to": "Z", "type": "weak"}, {"from": "G", "to": "Z"}])
    assert statuses(c) == {"F": "failed", "Z": "waiting", "G": "ready", "X": "blocked", "Y": "blocked"}
    assert ready_keys(c) == ["G"]
    assert claim(c, BOT2, ids["Z"])["outcome"] == "blocked"


@pytest.mark.parametrize(("held", "wanted"), [
    ({"reads": ["/etc"]}, {"writes": ["/"]}),
    ({"writes": ["/"]}, {"reads": ["/etc"]}),
    ({"writes": ["/"]}, {"reads": ["repo/a.md"]}),
    ({"writes": ["etc"]}, {"reads": ["/etc/passwd"]}),
    ({"writes": ["/etc//passwd"]}, {"reads": ["etc/passwd/"]}),
])
def test_the_root_holds_every_path_and_slashes_do_not_hide_a_path(
    held: dict[str, list[str]], wanted: dict[str, list[str]]
) -> None:
    c, _ = setup()
    ids = submit(c, [task("held", **held), task("wanted", **wanted)])
    assert claim(c, BOT, ids["held"])["outcome"] == "claimed"
    assert ready_keys(c) == []
    got = claim(c, BOT2, ids["wanted"])
    assert got["outcome"] == "blocked" and "conflicts with a held task" in got["reason"], got


@pytest.mark.parametrize("path", ["repo/../etc", "./repo", "repo/."])
def test_a_dot_segment_in_a_resource_path_is_refused(path: str) -> None:
    c, _ = setup()
    before = c.describe()
    err = c.fail(-32602, "x-chapline.plan.submit", frm=ALICE, plan="p", tasks=[task("a", writes=[path])])
    assert "'.' or '..'" in err["message"], err
    assert c.describe()["task_count"] == before["task_count"]


def test_a_self_edge_is_a_cycle_of_the_named_plan() -> None:
    c, _ = setup()
    err = c.fail(-32962, "x-chapline.plan.submit", frm=ALICE, plan="p", tasks=[task("a"), task("b")],
                edges=[{"from": "a", "to": "b"}, {"from": "b", "to": "b"}])
    assert err["data"] == {"plan": "p", "cycle": ["b", "b"]}
    assert "Plan 'p'" in err["message"] and "b -> b" in err["message"]


def test_describe_keeps_submission_order_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    clock = ManualClock()
    c, _ = setup(SqliteStore(path), clock)
    first = [task("zeta"), task("alpha"), task("mid")]
    submit(c, first)
    submit(c, [*first, task("beta"), task("aardvark")])
    order = ["zeta", "alpha", "mid", "beta", "aardvark"]
    assert [t["key"] for t in c.ok("x-chapline.plan.describe", plan="p")["tasks"]] == order
    c.target.close()
    restarted = Client(Coordinator(SqliteStore(path), clock=clock, ids=CounterIds()))
    assert [t["key"] for t in restarted.ok("x-chapline.plan.describe", plan="p")["tasks"]] == order
    restarted.ok("x-chapline.plan.submit", frm=ALICE, plan="p", tasks=[*first, task("b2")])
    assert [t["key"] for t in restarted.ok("x-chapline.plan.describe", plan="p")["tasks"]] == [*order, "b2"]
    restarted.target.close()


def test_the_backoff_after_an_expired_lease_counts_from_the_lease_end() -> None:
    """Nothing but reads after the lease ends: once the backoff has passed
    since the lease's end, a read sees the task ready."""
    c, clock = setup()
    ids = submit(c, [task("a", retry={"max_attempts": 3, "backoff_ms": 1000})])
    got = claim(c, BOT, ids["a"], lease_ms=10_000)
    lease_end = clock.now + 10_000
    clock.now = lease_end + 1_000
    assert ready_keys(c) == ["a"]
    described = c.ok("x-chapline.plan.describe", plan="p")["tasks"][0]
    assert described["retry_at"] == iso_ms(lease_end + 1_000)
    assert described["attempts"][0]["ended_at"] == iso_ms(lease_end)
    # A write long after records the same retry time, and the claim is granted.
    clock.now += 50_000
    again = claim(c, BOT2, ids["a"])
    assert again["outcome"] == "claimed" and again["token"] == got["token"] + 1
    expired = c.ok("x-chapline.plan.describe", plan="p")["tasks"][0]["attempts"][0]
    assert (expired["outcome"], expired["ended_at"]) == ("expired", iso_ms(lease_end))


def test_a_chap_write_meets_a_plan_task_as_its_expired_lease_left_it() -> None:
    """The lease ended before the write: its reclaim comes first, in the
    write's own entry, whoever sends it (a read already showed it)."""
    c, clock = setup()
    ids = submit(c, [task("last", retry={"max_attempts": 1}), task("again"), task("after")],
                 [{"from": "last", "to": "after", "type": "weak"}])
    claim(c, BOT, ids["last"], lease_ms=1_000)
    claim(c, BOT2, ids["again"], lease_ms=1_000)
    clock.now += 1_000
    assert statuses(c)["last"] == "failed"  # what a read shows, a write finds
    err = c.fail(-32061, "control.cancel", frm=ALICE, task_id=ids["last"], reason="late")
    assert "declined" in err["message"], err
    assert statuses(c)["last"] == "failed"
    # Reclaimed by the cancel itself: the expired attempt, then the cancel.
    c.ok("control.cancel", frm=ALICE, task_id=ids["again"], reason="not needed")
    described = {t["key"]: t for t in c.ok("x-chapline.plan.describe", plan="p")["tasks"]}
    assert (described["last"]["status"], described["last"]["state"]) == ("failed", "declined")
    assert (described["again"]["status"], described["again"]["state"]) == ("cancelled", "cancelled")
    assert [a["outcome"] for a in described["again"]["attempts"]] == ["expired"]
    assert ready_keys(c) == ["after"]


def test_a_token_whose_lease_was_reclaimed_is_stale_not_absent() -> None:
    c, clock = setup()
    ids = submit(c, [task("a")])
    gone = claim(c, BOT, ids["a"], lease_ms=1_000)
    clock.now += 1_000
    assert c.ok("x-chapline.work.sweep")["reclaimed"] == [ids["a"]]
    err = c.fail(-32960, "task.update", frm=BOT, task_id=ids["a"], state="in_progress", token=gone["token"])
    assert "has ended" in err["message"], err
    c.fail(-32963, "task.update", frm=BOT, task_id=ids["a"], state="in_progress")
