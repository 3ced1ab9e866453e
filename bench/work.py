"""`python -m bench.work`: x-chapline-work/1.0 speed, in memory and on SQLite.

    python -m bench.work            a 10,000-task plan, 1,000 held (~1-3 min)
    python -m bench.work --quick    a 2,000-task plan, 200 held

Figures: submitting the plan (and resubmitting it, a no-op); ready-work reads
while `--held` tasks are claimed; claims, heartbeats and reports per second.
Every call goes through `dispatch` and must succeed (a bench never times
error answers). bench/README.md, "x-chapline-work", has the method.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from coordinator import Coordinator
from storage import SqliteStore

__all__ = ["WorkBench", "main"]

WS = "wsp_bench"
HUMAN = "human:lead"
AGENTS = tuple(f"agent:w{i}" for i in range(10))
PROFILES = ["core/1.0", "review/1.0", "x-chapline-work/1.0"]


def plan_params(n: int) -> dict[str, Any]:
    """n tasks on their own resources; every tenth waits for the one before it."""
    tasks = [{"key": f"t{i}", "kind": "build", "input": {"target": f"mod{i}"}, "role": "worker",
              "priority": i % 10, "reads": [f"src/{i % 100}"], "writes": [f"out/{i}"]}
             for i in range(n)]
    edges = [{"from": f"t{i - 1}", "to": f"t{i}"} for i in range(10, n, 10)]
    return {"plan": "bench", "tasks": tasks, "edges": edges}


class WorkBench:
    """One coordinator, one workspace, one big plan."""

    def __init__(self, store: Any = None) -> None:
        self.coord = Coordinator(store, max_envelope_bytes=64 * 1024 * 1024)
        self.n = 0
        self.call("workspace.create", profiles=PROFILES, mode="production")
        self.call("participant.join", **{"from": HUMAN}, type="human", role="lead")
        for agent in AGENTS:
            self.call("participant.join", **{"from": agent}, type="agent", role="worker")

    def call(self, method: str, **params: Any) -> Any:
        self.n += 1
        params.setdefault("workspace", WS)
        reply = self.coord.dispatch({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def submit(self, n: int) -> dict[str, str]:
        result = self.call("x-chapline.plan.submit", **{"from": HUMAN}, **plan_params(n))
        return dict(result["tasks"])

    def claim(self, agent: str, task_id: str) -> int:
        got = self.call("x-chapline.work.claim", **{"from": agent}, task_id=task_id, lease_ms=3_600_000)
        if got["outcome"] != "claimed":
            raise RuntimeError(f"claim {task_id}: {got}")
        return int(got["token"])


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s ({seconds * 1e3 / count:.2f} ms each)"


def measure(kind: str, store: Any, tasks: int, held: int, ops: int,
            out: Callable[[str], None] = print) -> dict[str, float]:
    figures: dict[str, float] = {}
    b = WorkBench(store)
    t0 = time.perf_counter()
    ids = b.submit(tasks)
    figures["submit_s"] = time.perf_counter() - t0
    out(f"{kind:7} submit {tasks:,}-task plan: {figures['submit_s']:.2f} s")
    t0 = time.perf_counter()
    b.submit(tasks)
    figures["resubmit_s"] = time.perf_counter() - t0
    out(f"{kind:7} resubmit it (no-op): {figures['resubmit_s']:.2f} s")
    ready = [r["task_id"] for r in b.call("x-chapline.work.ready", limit=tasks)["ready"]]
    holding: list[tuple[str, str, int]] = []
    for i, tid in enumerate(ready[:held]):
        agent = AGENTS[i % len(AGENTS)]
        holding.append((agent, tid, b.claim(agent, tid)))
    reads = 20
    t0 = time.perf_counter()
    for _ in range(reads):
        result = b.call("x-chapline.work.ready", limit=50)
    seconds = time.perf_counter() - t0
    figures["ready_ms"] = seconds * 1e3 / reads
    out(f"{kind:7} ready-work read, {result['count']:,} ready, {result['held']:,} held: "
        f"{figures['ready_ms']:.1f} ms")
    free = ready[held:held + ops]
    t0 = time.perf_counter()
    claimed = [(AGENTS[i % len(AGENTS)], tid) for i, tid in enumerate(free)]
    tokens = [b.claim(agent, tid) for agent, tid in claimed]
    seconds = time.perf_counter() - t0
    figures["claims_per_s"] = len(free) / seconds
    out(f"{kind:7} claims: {_rate(len(free), seconds)}")
    t0 = time.perf_counter()
    for (agent, tid), token in zip(claimed, tokens, strict=True):
        b.call("x-chapline.work.heartbeat", **{"from": agent}, task_id=tid, token=token, lease_ms=3_600_000)
    seconds = time.perf_counter() - t0
    figures["heartbeats_per_s"] = len(free) / seconds
    out(f"{kind:7} heartbeats: {_rate(len(free), seconds)}")
    t0 = time.perf_counter()
    for (agent, tid), token in zip(claimed, tokens, strict=True):
        b.call("x-chapline.work.report", **{"from": agent}, task_id=tid, token=token,
               outcome="completed", output={"ok": True})
    seconds = time.perf_counter() - t0
    figures["reports_per_s"] = len(free) / seconds
    out(f"{kind:7} reports (completed): {_rate(len(free), seconds)}")
    b.coord.close()
    assert len(ids) == tasks
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.work", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2,000 tasks, 200 held, 200 of each call")
    ap.add_argument("--tasks", type=int, default=None, help="plan size (10,000)")
    ap.add_argument("--held", type=int, default=None, help="claims held during the ready reads (1,000)")
    ap.add_argument("--ops", type=int, default=None, help="claims, heartbeats and reports timed (1,000)")
    ap.add_argument("--kinds", default="memory,sqlite", help="memory, sqlite or both")
    args = ap.parse_args(argv)
    tasks = args.tasks or (2_000 if args.quick else 10_000)
    held = args.held if args.held is not None else (200 if args.quick else 1_000)
    ops = args.ops or (200 if args.quick else 1_000)
    for kind in args.kinds.split(","):
        with tempfile.TemporaryDirectory(prefix="chapline-work-bench-") as tmp:
            store = SqliteStore(os.path.join(tmp, "work.db")) if kind == "sqlite" else None
            measure(kind, store, tasks, held, ops)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
