"""x-chapline-work/1.0 against a small model (hypothesis stateful), on a real
SQLite file with restarts: submit, resubmit, redefine, cyclic submit, claim,
heartbeat, release, report, retry, advance the clock, cancel, approve,
unblock, capacity, restart. Invariants: never two live claims on one task;
never two conflicting tasks held; capacity never exceeded; a stale token
never accepted; nothing claimed before its strong dependencies completed
(and its weak ones ended); no cycle accepted; resubmission never duplicates;
the chain verifies after every step."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from client import Client, refused
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from coordinator import Coordinator, CounterIds
from coordinator.profiles.work._index import CLAIMS, ClaimIndex
from storage import SqliteStore

WS = "wsw"
HUMAN = "human:alice"
AGENTS = ("agent:a1", "agent:a2", "agent:a3")
PATHS = ("r", "r/x", "/r/y", "s", "s/z/q", "/", "s//z/")
PROFILES = ["core/1.0", "review/1.0", "control/1.0", "x-chapline-work/1.0"]
ENDED = {"completed", "declined", "cancelled"}


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def overlaps(p: str, q: str) -> bool:
    """By segments: one path's segments start the other's (the root has none)."""
    a, b = [x for x in p.split("/") if x], [x for x in q.split("/") if x]
    return a[:len(b)] == b or b[:len(a)] == a


def conflict(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return any(
        overlaps(p, q)
        for mine, theirs in ((a["writes"], b["writes"]), (a["writes"], b["reads"]), (a["reads"], b["writes"]))
        for p in mine
        for q in theirs
    )


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 5))
    tasks = []
    for i in range(n):
        t: dict[str, Any] = {"key": f"t{i}", "kind": "k", "input": {"i": i}}
        if draw(st.booleans()):
            t["role"] = "w"
        else:
            t["assignee"] = draw(st.sampled_from(AGENTS))
        t["priority"] = draw(st.integers(0, 3))
        t["reads"] = draw(st.lists(st.sampled_from(PATHS), max_size=2))
        t["writes"] = draw(st.lists(st.sampled_from(PATHS), max_size=2))
        t["review"] = draw(st.booleans())
        t["retry"] = {"max_attempts": draw(st.integers(1, 3)), "backoff_ms": 1000, "max_backoff_ms": 4000}
        tasks.append(t)
    edges = []
    for j in range(n):
        for i in range(j):
            if draw(st.integers(0, 3)) == 0:
                edges.append({"from": f"t{i}", "to": f"t{j}", "type": draw(st.sampled_from(["strong", "weak"]))})
    return {"tasks": tasks, "edges": edges}


class WorkMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="chapline-work-")
        self.path = os.path.join(self.dir, "w.db")
        self.clock, self.ids = ManualClock(), CounterIds()
        self.store = SqliteStore(self.path)
        self.coord = Coordinator(self.store, clock=self.clock, ids=self.ids)
        self.chap = Client(self.coord, WS)
        self.chap.ok("workspace.create", profiles=PROFILES, mode="production")
        self.chap.ok("participant.join", frm=HUMAN, type="human", role="admin")
        for a in AGENTS:
            self.chap.ok("participant.join", frm=a, type="agent", role="w")
        self.plans: dict[str, dict[str, Any]] = {}  # name -> {params, ids}
        self.deps: dict[str, list[tuple[str, str]]] = {}  # task id -> [(dep id, type)]
        self.live: dict[str, tuple[str, int, int]] = {}  # task id -> (holder, token, expires)
        self.dead: list[tuple[str, str, int]] = []  # (task, holder, token) no longer live
        self.caps: dict[str, int | None] = {"workspace_max": None, "agent_max": None}

    def teardown(self) -> None:
        if hasattr(self, "store"):
            self.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def live_now(self) -> dict[str, tuple[str, int, int]]:
        for tid, (_, _, expires) in list(self.live.items()):
            if expires <= self.clock.now:
                self.end(tid)
        return self.live

    def end(self, tid: str) -> None:
        holder, token, _ = self.live.pop(tid)
        self.dead.append((tid, holder, token))

    def task_state(self, tid: str) -> str:
        return str(self.coord.snapshot(WS)["tasks"][tid]["state"])

    def status(self, tid: str) -> str:
        return str(self.coord.snapshot(WS)["x_chapline_work"][tid]["status"])

    def all_tasks(self) -> list[str]:
        return [tid for p in self.plans.values() for tid in p["ids"].values()]

    # -- plans --------------------------------------------------------------

    @rule(name=st.sampled_from(["p1", "p2", "p3"]), plan=plans())
    def submit(self, name: str, plan: dict[str, Any]) -> None:
        if name in self.plans:  # the same name again: same ids, nothing added
            held = self.plans[name]
            before = self.chap.ok("workspace.describe")["task_count"]
            again = self.chap.ok("x-chapline.plan.submit", frm=HUMAN, plan=name, **held["params"])
            assert again["tasks"] == held["ids"] and again["added"] == []
            assert self.chap.ok("workspace.describe")["task_count"] == before
            return
        result = self.chap.ok("x-chapline.plan.submit", frm=HUMAN, plan=name, **plan)
        assert set(result["tasks"]) == {t["key"] for t in plan["tasks"]}
        self.plans[name] = {"params": plan, "ids": result["tasks"]}
        for t in plan["tasks"]:
            self.deps[result["tasks"][t["key"]]] = [
                (result["tasks"][e["from"]], e["type"]) for e in plan["edges"] if e["to"] == t["key"]
            ]

    @precondition(lambda self: self.plans)
    @rule(data=st.data())
    def redefine(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.plans)))
        params = self.plans[name]["params"]
        i = data.draw(st.integers(0, len(params["tasks"]) - 1))
        tasks = [dict(t) for t in params["tasks"]]
        tasks[i]["input"] = {"changed": True}
        before = self.chap.ok("workspace.describe")["task_count"]
        r = self.chap.call("x-chapline.plan.submit", frm=HUMAN, plan=name, tasks=tasks, edges=params["edges"])
        refused(r, -32961)
        assert r["error"]["data"]["key"] == tasks[i]["key"]
        assert self.chap.ok("workspace.describe")["task_count"] == before

    @rule(plan=plans(), name=st.sampled_from(["c1", "p1"]))
    def cyclic(self, plan: dict[str, Any], name: str) -> None:
        keys = [t["key"] for t in plan["tasks"]]
        given = {(e["from"], e["to"]) for e in plan["edges"]}
        back = [(keys[(i + 1) % len(keys)], k) for i, k in enumerate(keys)]
        edges = [*plan["edges"], *({"from": a, "to": b} for a, b in back if (a, b) not in given)]
        r = self.chap.call("x-chapline.plan.submit", frm=HUMAN, plan=name, tasks=plan["tasks"], edges=edges)
        refused(r, -32962)
        cycle = r["error"]["data"]["cycle"]
        assert cycle[0] == cycle[-1] and set(cycle) <= set(keys)

    # -- work ---------------------------------------------------------------

    @precondition(lambda self: self.plans)
    @rule(agent=st.sampled_from(AGENTS), data=st.data(), pick=st.booleans(),
          lease=st.sampled_from([5_000, 60_000]))
    def claim(self, agent: str, data: st.DataObject, pick: bool, lease: int) -> None:
        live = self.live_now()
        params: dict[str, Any] = {"from": agent, "lease_ms": lease}
        if pick:
            params["task_id"] = data.draw(st.sampled_from(self.all_tasks()))
        result = self.chap.ok("x-chapline.work.claim", **params)
        tid, outcome = result["task_id"], result["outcome"]
        event(f"claim: {outcome}")
        if outcome == "held":
            assert live[tid][0] != agent and result["held_by"] == live[tid][0]
        elif outcome == "refreshed":
            assert live[tid][:2] == (agent, result["token"])
            self.live[tid] = (agent, result["token"], self.clock.now + lease)
        elif outcome == "claimed":
            assert tid not in live  # never two live claims on one task
            for dep, kind in self.deps[tid]:
                state = self.task_state(dep)
                if kind == "strong":
                    assert state == "completed", (dep, kind, state)
                else:  # any end: a blocked task keeps its CHAP state, and ends
                    assert state in ENDED or self.status(dep) == "blocked", (dep, kind, state)
            if self.caps["workspace_max"] is not None:
                assert len(live) < self.caps["workspace_max"]
            if self.caps["agent_max"] is not None:
                assert sum(1 for h, _, _ in live.values() if h == agent) < self.caps["agent_max"]
            previous = [t for (x, _, t) in self.dead if x == tid]
            assert result["token"] > max(previous, default=0)  # fencing tokens only grow
            self.live[tid] = (agent, result["token"], self.clock.now + lease)
        else:
            assert outcome in ("blocked", "full")
            if pick:
                assert tid not in live

    def holder_call(self, method: str, data: st.DataObject, stale: bool, **params: Any) -> None:
        live = self.live_now()
        if stale and self.dead:
            tid, holder, token = data.draw(st.sampled_from(self.dead))
            if tid in live and live[tid][:2] == (holder, token):
                return
            self.chap.fail(-32960, method, frm=holder, task_id=tid, token=token, **params)
            event(f"{method}: stale token refused")
            return
        if not live:
            return
        tid = data.draw(st.sampled_from(sorted(live)))
        holder, token, _ = live[tid]
        result = self.chap.ok(method, frm=holder, task_id=tid, token=token, **params)
        event(f"{method}: {result.get('status', 'ok')}")
        if method == "x-chapline.work.heartbeat":
            self.live[tid] = (holder, token, self.clock.now + 60_000)
        else:
            self.end(tid)
            if method == "x-chapline.work.report" and params.get("outcome") == "completed":
                assert result["status"] in ("completed", "review")

    @rule(data=st.data(), stale=st.booleans())
    def heartbeat(self, data: st.DataObject, stale: bool) -> None:
        self.holder_call("x-chapline.work.heartbeat", data, stale)

    @rule(data=st.data(), stale=st.booleans())
    def release(self, data: st.DataObject, stale: bool) -> None:
        self.holder_call("x-chapline.work.release", data, stale)

    @rule(data=st.data(), stale=st.booleans(),
          outcome=st.sampled_from(["completed", "completed", "failed", "blocked"]),
          retryable=st.booleans())
    def report(self, data: st.DataObject, stale: bool, outcome: str, retryable: bool) -> None:
        self.holder_call("x-chapline.work.report", data, stale, outcome=outcome,
                         retryable=retryable, output={"by": "test"})

    @rule(ms=st.sampled_from([500, 2_000, 6_000, 61_000]))
    def advance_clock(self, ms: int) -> None:
        self.clock.now += ms

    @precondition(lambda self: self.plans)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(self.all_tasks()))
        if self.task_state(tid) in ENDED | {"superseded"}:
            return
        self.chap.ok("control.cancel", frm=HUMAN, task_id=tid, reason="test")
        if tid in self.live:
            self.end(tid)

    @precondition(lambda self: self.plans)
    @rule(data=st.data(), approve=st.booleans())
    def review(self, data: st.DataObject, approve: bool) -> None:
        waiting = [t for t in self.all_tasks() if self.task_state(t) == "review_requested"]
        if not waiting:
            return
        tid = data.draw(st.sampled_from(waiting))
        if approve:
            self.chap.ok("decide.approve", frm=HUMAN, task_id=tid)
        else:
            self.chap.ok("decide.reject", frm=HUMAN, task_id=tid, request_revision=True)

    @precondition(lambda self: self.plans)
    @rule(data=st.data())
    def unblock(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.plans)))
        waiting = [t for t in self.chap.ok("x-chapline.plan.describe", plan=name)["tasks"] if t["status"] == "human"]
        if waiting:
            self.chap.ok("x-chapline.work.unblock", frm=HUMAN, task_id=waiting[0]["task_id"], answer="go")

    @rule(total=st.none() | st.integers(0, 3), each=st.none() | st.integers(0, 2))
    def set_capacity(self, total: int | None, each: int | None) -> None:
        self.caps = self.chap.ok("x-chapline.work.set_capacity", frm=HUMAN,
                            workspace_max=total, agent_max=each)

    @rule()
    def restart(self) -> None:
        self.store.close()
        self.store = SqliteStore(self.path)
        self.coord = Coordinator(self.store, clock=self.clock, ids=self.ids)
        self.chap.target = self.coord

    # -- invariants -----------------------------------------------------------

    @invariant()
    def chain_verifies(self) -> None:
        if hasattr(self, "coord"):
            assert self.chap.ok("audit.verify_chain")["ok"] is True

    @invariant()
    def held_tasks_never_conflict_and_match_the_model(self) -> None:
        if not hasattr(self, "coord"):
            return
        snap = self.coord.snapshot(WS)
        claims = {t: c for t, c in snap.get("x_chapline_claims", {}).items() if c["expires_ms"] > self.clock.now}
        live = self.live_now()
        assert {t: (c["holder"], c["token"]) for t, c in claims.items()} == {
            t: (h, k) for t, (h, k, _) in live.items()
        }
        held = list(claims.values())
        for i, a in enumerate(held):
            for b in held[i + 1:]:
                assert not conflict(a, b), (a, b)

    @invariant()
    def the_claim_index_is_what_the_objects_say(self) -> None:
        """The index kept beside the workspace (updated as writes are
        accepted, rebuilt after a restart) equals one recomputed from the
        stored claims, and answers expiry questions as a scan would."""
        if not hasattr(self, "coord"):
            return
        ws = self.coord._pipeline._held.get(WS)
        assert ws is not None
        held = dict(self.coord.snapshot(WS).get("x_chapline_claims", {}))
        kept = ws.index(CLAIMS, ClaimIndex.of)
        assert kept.facts() == ClaimIndex.of(held.items()).facts()
        now = self.clock.now
        assert kept.expired(now) == {t for t, c in held.items() if c["expires_ms"] <= now}
        assert kept.earliest() == min((c["expires_ms"] for c in held.values()), default=None)

    @invariant()
    def no_duplicates(self) -> None:
        if hasattr(self, "coord"):
            assert self.chap.ok("workspace.describe")["task_count"] == len(self.all_tasks())


WorkMachine.TestCase.settings = settings(
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_work_machine = WorkMachine.TestCase
