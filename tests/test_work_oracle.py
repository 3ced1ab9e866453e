"""x-chapline-work/1.0 against an oracle computed from the DAG alone
(hypothesis stateful, on a real SQLite file with restarts).

The test drives random plans of weak and strong edges through claims,
reports (completed, failed, blocked on a human), declines, lease expiry,
reviews, cancels, releases and plan growth (resubmitting a plan with new
keys below held, failed or cancelled tasks). It records only what happened
to each task itself (`Node`: its own end, or its own live state); every
status is then derived by `statuses`, a plain recursive reading of
SPECIFICATION.md's rules ("Readiness"), never from the scheduler's
counters:

- a task that ended on its own keeps that end (completed, failed, cancelled);
- otherwise it is blocked if a strong dependency's status is an end other
  than completed, waiting if some dependency has not ended, and else what
  it is doing itself (ready, held, retry, human, review).

After every step the plan descriptions (in submission order: status,
holder, token, retry time, the CHAP state of a task that ended on its own)
and the ready list (in order) must be the oracle's; a blocked task's CHAP
history says so once; the stored count of dependencies not ended is the
oracle's; and every claim's outcome (claimed, refreshed, held, blocked, and
which task when none is named) is the one the oracle predicts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from client import Client
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from coordinator import Coordinator, CounterIds
from coordinator.engine.clock import iso_ms
from storage import SqliteStore

WS = "wso"
HUMAN = "human:alice"
AGENTS = ("agent:a1", "agent:a2")
PROFILES = ["core/1.0", "review/1.0", "control/1.0", "x-chapline-work/1.0"]
PATHS = ("/", "r", "/r/x", "r//y/", "s")
BACKOFF_MS, MAX_BACKOFF_MS = 1_000, 4_000
ENDS = {"completed", "failed", "blocked", "cancelled"}
CHAP_END = {"completed": "completed", "failed": "declined", "cancelled": "cancelled"}
MAX_TASKS = 30


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@dataclass
class Node:
    """One plan task as submitted, and what happened to it itself."""

    tid: str
    plan: str
    key: str
    order: int
    priority: int
    deps: list[tuple[str, str]]  # (task id, "strong" | "weak")
    review: bool
    max_attempts: int
    reads: list[str]
    writes: list[str]
    end: str | None = None  # its own end: completed, failed, cancelled
    live: str = "ready"  # what it does once its dependencies allow: ready, held, retry, human, review
    failures: int = 0
    retry_at: int | None = None
    holder: str | None = None
    token: int = 0
    expires: int = 0


# -- the oracle ---------------------------------------------------------------


def statuses(nodes: dict[str, Node]) -> dict[str, str]:
    """Every task's status, from the DAG and each task's own history."""
    memo: dict[str, str] = {}

    def status(tid: str) -> str:
        if tid not in memo:
            node = nodes[tid]
            deps = [(status(d), kind) for d, kind in node.deps]
            if node.end is not None:
                memo[tid] = node.end
            elif any(kind == "strong" and s in ENDS and s != "completed" for s, kind in deps):
                memo[tid] = "blocked"
            elif any(s not in ENDS for s, _ in deps):
                memo[tid] = "waiting"
            else:
                memo[tid] = node.live
        return memo[tid]

    return {tid: status(tid) for tid in nodes}


def segments(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def overlap(p: str, q: str) -> bool:
    a, b = segments(p), segments(q)
    return a[:len(b)] == b or b[:len(a)] == a


def conflict(a: Node, b: Node) -> bool:
    pairs = ((a.writes, b.writes), (a.writes, b.reads), (a.reads, b.writes))
    return any(overlap(p, q) for mine, theirs in pairs for p in mine for q in theirs)


def ready(nodes: dict[str, Node], status: dict[str, str], now: int) -> list[str]:
    """Claimable now, best first: ready (or retry, its wait over), no
    resource conflict with a held task."""
    held = [n for n in nodes.values() if status[n.tid] == "held"]
    out = [n for n in nodes.values()
           if (status[n.tid] == "ready" or (status[n.tid] == "retry" and n.retry_at is not None
                                            and n.retry_at <= now))
           and not any(conflict(n, h) for h in held)]
    out.sort(key=lambda n: (-n.priority, n.plan, n.order))
    return [n.tid for n in out]


def backoff(failures: int) -> int:
    return int(min(BACKOFF_MS * 2 ** (failures - 1), MAX_BACKOFF_MS))


# -- plans --------------------------------------------------------------------


def descriptor(data: st.DataObject, key: str) -> dict[str, Any]:
    return {
        "key": key, "kind": "k", "input": {"key": key}, "role": "w",
        "priority": data.draw(st.integers(0, 2)),
        "reads": data.draw(st.lists(st.sampled_from(PATHS), max_size=1)),
        "writes": data.draw(st.lists(st.sampled_from(PATHS), max_size=1)),
        "review": data.draw(st.booleans()),
        "retry": {"max_attempts": data.draw(st.integers(1, 2)), "backoff_ms": BACKOFF_MS,
                  "max_backoff_ms": MAX_BACKOFF_MS},
    }


def edges_into(data: st.DataObject, sources: list[str], key: str) -> list[dict[str, str]]:
    """Some edges from `sources` (keys before `key`) into `key`."""
    edges = []
    for src in sources:
        kind = data.draw(st.sampled_from([None, None, "strong", "strong", "weak", "weak"]))
        if kind is not None:
            edges.append({"from": src, "to": key, "type": kind})
    return edges


class OracleMachine(RuleBasedStateMachine):
    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        # On a memory file system where there is one: each write syncs.
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = tempfile.mkdtemp(prefix="chapline-oracle-", dir=shm)
        self.path = os.path.join(self.dir, "w.db")
        self.clock, self.ids = ManualClock(), CounterIds()
        self.store = SqliteStore(self.path)
        self.chap = Client(Coordinator(self.store, clock=self.clock, ids=self.ids), WS)
        self.chap.ok("workspace.create", profiles=PROFILES, mode="production")
        self.chap.ok("participant.join", frm=HUMAN, type="human", role="admin")
        for agent in AGENTS:
            self.chap.ok("participant.join", frm=agent, type="agent", role="w")
        self.plans: dict[str, dict[str, Any]] = {}  # name -> {tasks, edges, keys: [key]}
        self.nodes: dict[str, Node] = {}
        self.by_key: dict[tuple[str, str], str] = {}
        self.fresh = 0
        self.submit("p1", data)

    def teardown(self) -> None:
        if hasattr(self, "store"):
            self.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model's own bookkeeping -------------------------------------------

    def expire(self) -> None:
        """Leases end by the clock alone: a failed attempt at the lease's end."""
        for node in self.nodes.values():
            if node.end is None and node.live == "held" and node.expires <= self.clock.now:
                node.holder = None
                self.fail(node, node.expires, retryable=True)

    def fail(self, node: Node, at: int, *, retryable: bool) -> None:
        node.failures += 1
        if retryable and node.failures < node.max_attempts:
            node.live, node.retry_at = "retry", at + backoff(node.failures)
        else:
            node.end = "failed"

    def doing(self, live: str) -> bool:
        """Whether some task is (or, lease aside, may be) doing `live` itself."""
        return any(n.end is None and n.live == live for n in self.nodes.values())

    def status(self) -> dict[str, str]:
        self.expire()
        return statuses(self.nodes)

    def held(self) -> list[str]:
        status = self.status()
        return sorted(t for t, s in status.items() if s == "held")

    # -- plans ------------------------------------------------------------------

    def send_plan(self, name: str, tasks: list[dict[str, Any]], edges: list[dict[str, str]],
                  added: list[str]) -> None:
        result = self.chap.ok("x-chapline.plan.submit", frm=HUMAN, plan=name, tasks=tasks, edges=edges)
        assert result["added"] == added
        held = self.plans.get(name, {"keys": []})
        for key in held["keys"]:
            assert result["tasks"][key] == self.by_key[(name, key)]  # the same ids
        for key in added:
            self.by_key[(name, key)] = result["tasks"][key]
        for t in tasks:
            if t["key"] not in added:
                continue
            tid = result["tasks"][t["key"]]
            self.nodes[tid] = Node(
                tid=tid, plan=name, key=t["key"], order=len(held["keys"]) + added.index(t["key"]),
                priority=t["priority"], review=t["review"], max_attempts=t["retry"]["max_attempts"],
                reads=t["reads"], writes=t["writes"],
                deps=[(self.by_key[(name, e["from"])], e["type"]) for e in edges if e["to"] == t["key"]],
            )
        self.plans[name] = {"tasks": tasks, "edges": edges, "keys": [*held["keys"], *added]}

    @precondition(lambda self: len(self.nodes) < MAX_TASKS)
    @rule(name=st.sampled_from(["p1", "p2", "p3"]), data=st.data())
    def submit(self, name: str, data: st.DataObject) -> None:
        """A new plan, or new keys below a held one's tasks (ended ones too)."""
        held = self.plans.get(name, {"tasks": [], "edges": [], "keys": []})
        n = data.draw(st.integers(2, 8) if not held["keys"] else st.integers(1, 4))
        keys = [f"k{self.fresh + i}" for i in range(n)]  # in an order the edges follow
        self.fresh += n
        edges = list(held["edges"])
        for i, key in enumerate(keys):
            edges += edges_into(data, [*held["keys"], *keys[:i]], key)
        # Submitted in any order: a task may come before what it waits for.
        keys = data.draw(st.permutations(keys))
        event("grow" if held["keys"] else "new plan")
        self.send_plan(name, [*held["tasks"], *(descriptor(data, k) for k in keys)], edges, keys)

    # -- work -------------------------------------------------------------------

    @precondition(lambda self: self.nodes)
    @rule(agent=st.sampled_from(AGENTS), data=st.data(), pick=st.booleans(),
          lease=st.sampled_from([5_000, 60_000]))
    def claim(self, agent: str, data: st.DataObject, pick: bool, lease: int) -> None:
        status = self.status()
        best = ready(self.nodes, status, self.clock.now)
        params: dict[str, Any] = {"from": agent, "lease_ms": lease}
        if pick:
            tid: str | None = data.draw(st.sampled_from(sorted(self.nodes)))
            assert tid is not None
            params["task_id"] = tid
            if status[tid] == "held":
                expected = "refreshed" if self.nodes[tid].holder == agent else "held"
            else:
                expected = "claimed" if tid in best else "blocked"
        else:
            tid = best[0] if best else None
            expected = "claimed" if best else "blocked"
        result = self.chap.ok("x-chapline.work.claim", **params)
        event(f"claim: {expected}")
        assert (result["outcome"], result["task_id"]) == (expected, tid), (result, status)
        if expected in ("claimed", "refreshed"):
            assert tid is not None
            node = self.nodes[tid]
            if expected == "claimed":
                node.token += 1
                node.live, node.holder, node.retry_at = "held", agent, None
            assert result["token"] == node.token
            node.expires = self.clock.now + lease

    @precondition(lambda self: self.doing("held"))
    @rule(data=st.data(), act=st.sampled_from(
        ["completed", "completed", "failed", "blocked", "decline", "release", "heartbeat"]),
        retryable=st.booleans())
    def holder(self, data: st.DataObject, act: str, retryable: bool) -> None:
        """The holder of a live claim reports, declines through CHAP's own
        (fenced) task.update, releases or extends it."""
        held = self.held()
        if not held:
            return
        node = self.nodes[data.draw(st.sampled_from(held))]
        who = {"from": node.holder, "task_id": node.tid, "token": node.token}
        event(f"holder: {act}")
        if act == "heartbeat":
            self.chap.ok("x-chapline.work.heartbeat", **who, lease_ms=60_000)
            node.expires = self.clock.now + 60_000
            return
        node.holder = None
        if act == "decline":
            self.chap.ok("task.update", **who, state="declined")
            node.end = "failed"
        elif act == "release":
            self.chap.ok("x-chapline.work.release", **who)
            node.live = "ready"
        else:
            self.chap.ok("x-chapline.work.report", **who, outcome=act, retryable=retryable, output=1)
            if act == "completed" and node.review:
                node.live = "review"
            elif act == "completed":
                node.end = "completed"
            elif act == "blocked":
                node.live = "human"
            else:
                self.fail(node, self.clock.now, retryable=retryable)

    @precondition(lambda self: self.nodes)
    @rule(ms=st.sampled_from([500, 2_000, 6_000, 61_000]))
    def advance_clock(self, ms: int) -> None:
        self.clock.now += ms

    @precondition(lambda self: self.nodes)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(sorted(self.nodes)))
        status = self.status()[tid]
        event(f"cancel a {status} task")
        # An own end is a final CHAP state (a lease that ran out included:
        # the cancel reclaims it first); a blocked task keeps its CHAP state.
        if status in CHAP_END or self.chap.task(tid)["state"] == "cancelled":
            self.chap.fail(-32061, "control.cancel", frm=HUMAN, task_id=tid, reason="t")
            return
        self.chap.ok("control.cancel", frm=HUMAN, task_id=tid, reason="test")
        if status != "blocked":  # an end is final: a blocked task stays blocked
            node = self.nodes[tid]
            node.end, node.holder = "cancelled", None

    @precondition(lambda self: self.doing("review") or self.doing("human"))
    @rule(data=st.data(), verdict=st.sampled_from(["approve", "revise", "reject", "unblock"]))
    def human(self, data: st.DataObject, verdict: str) -> None:
        """A human decides an open review, or answers a task blocked on a human."""
        status = self.status()
        waits = "human" if verdict == "unblock" else "review"
        asking = sorted(t for t, s in status.items() if s == waits)
        if not asking:
            return
        node = self.nodes[data.draw(st.sampled_from(asking))]
        event(f"human: {verdict}")
        if verdict == "unblock":
            self.chap.ok("x-chapline.work.unblock", frm=HUMAN, task_id=node.tid, answer="go on")
            node.live = "ready"
        elif verdict == "approve":
            self.chap.ok("decide.approve", frm=HUMAN, task_id=node.tid)
            node.end = "completed"
        else:
            self.chap.ok("decide.reject", frm=HUMAN, task_id=node.tid,
                         request_revision=verdict == "revise")
            if verdict == "revise":
                node.live = "ready"
            else:
                node.end = "failed"

    @precondition(lambda self: self.nodes)
    @rule()
    def restart(self) -> None:
        self.store.close()
        self.store = SqliteStore(self.path)
        self.chap.target = Coordinator(self.store, clock=self.clock, ids=self.ids)

    # -- checked after every step -----------------------------------------------

    @invariant()
    def plans_are_what_the_oracle_says(self) -> None:
        if not hasattr(self, "chap"):
            return
        status = self.status()
        stored = self.chap.target.snapshot(WS)
        work = stored.get("x_chapline_work", {})
        # The stored counts are as of the last write: only when no lease
        # has ended since are they the oracle's.
        swept = all(c["expires_ms"] > self.clock.now for c in stored.get("x_chapline_claims", {}).values())
        for name, plan in self.plans.items():
            described = self.chap.ok("x-chapline.plan.describe", plan=name)["tasks"]
            assert [t["key"] for t in described] == plan["keys"]  # submission order
            for t in described:
                node = self.nodes[t["task_id"]]
                want = status[node.tid]
                assert t["status"] == want, (name, t["key"], t["status"], want, status)
                assert t["holder"] == (node.holder if want == "held" else None)
                assert t["token"] == node.token
                assert t["retry_at"] == (iso_ms(node.retry_at) if want == "retry" and node.retry_at else None)
                if node.end is not None:
                    assert t["state"] == CHAP_END[node.end]
                if want == "blocked" and swept:  # ended once, however many paths led there
                    history = stored["tasks"][node.tid]["history"]
                    notes = [h for h in history if str(h["note"]).startswith("blocked")]
                    assert len(notes) == 1, notes
                if want not in ENDS and swept:  # all ended but for a task waiting
                    pending = sum(1 for d, _ in node.deps if status[d] not in ENDS)
                    assert work[node.tid]["waiting"] == pending

    @invariant()
    def ready_work_is_what_the_oracle_says(self) -> None:
        if not hasattr(self, "chap"):
            return
        status = self.status()
        got = self.chap.ok("x-chapline.work.ready", limit=1000)
        assert [r["task_id"] for r in got["ready"]] == ready(self.nodes, status, self.clock.now), status
        assert got["held"] == sum(1 for s in status.values() if s == "held")


OracleMachine.TestCase.settings = settings(
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_work_oracle = OracleMachine.TestCase
