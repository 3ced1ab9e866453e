"""x-chapline-work/1.0 across processes on one database (a SQLite file, and
PostgreSQL): four workers
drain one plan (every task completed exactly once, capacity never exceeded,
nothing acknowledged lost, checked by replaying the log), and a worker
SIGKILLed holding a claim (its lease expires, another completes the task,
its late report with the old token is refused)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from client import Client, refused
from support import ALICE, eventually, make
from test_work import ManualClock

from coordinator import Coordinator
from coordinator.engine.clock import epoch_ms
from storage.target import open_store

WORKER = str(Path(__file__).parent / "work_worker.py")
WS = "wsp_shared"
AGENTS = [f"agent:w{i}" for i in range(4)]
PROFILES = ["core/1.0", "review/1.0", "x-chapline-work/1.0"]


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database the processes share: a SQLite file, or a fresh database
    on the test suite's PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "shared.db")
    server = request.getfixturevalue("pg_server")
    return str(server.uri(server.new_database()))


def start(target: str) -> Client:
    c = Client(Coordinator(open_store(target)), WS)
    c.ok("workspace.create", profiles=PROFILES, mode="production")
    c.ok("participant.join", frm=ALICE, type="human", role="admin")
    for agent in AGENTS:
        c.ok("participant.join", frm=agent, type="agent", role="worker")
    return c


def plan_tasks(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    tasks = [{"key": f"t{i}", "kind": "k", "input": {"i": i}, "role": "worker", "priority": i % 3,
              "writes": [f"area/{i % 5}"]} for i in range(n)]
    edges = [{"from": f"t{i}", "to": f"t{i + 7}", "type": "strong" if i % 2 else "weak"}
             for i in range(0, n - 7, 3)]
    return tasks, edges


def test_four_processes_drain_one_plan_exactly_once_within_capacity(
    tmp_path: Path, shared_database: str
) -> None:
    c = start(shared_database)
    tasks, edges = plan_tasks(30)
    ids = c.ok("x-chapline.plan.submit", frm=ALICE, plan="shared", tasks=tasks, edges=edges)["tasks"]
    c.ok("x-chapline.work.set_capacity", frm=ALICE, workspace_max=3, agent_max=1)
    before = c.target.snapshot(WS)
    c.target.close()

    outs = [tmp_path / f"{agent[6:]}.json" for agent in AGENTS]
    procs = [subprocess.Popen([sys.executable, WORKER, "drain", shared_database, WS, agent, str(out)])
             for agent, out in zip(AGENTS, outs, strict=True)]
    try:
        for p in procs:
            assert p.wait(timeout=300) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    acked = [dict(d, by=agent) for agent, out in zip(AGENTS, outs, strict=True)
             for d in json.loads(out.read_text())["done"]]
    # Every task completed exactly once, by the worker whose report was acknowledged.
    assert sorted(d["task_id"] for d in acked) == sorted(ids.values())
    final = Coordinator(open_store(shared_database))
    snap = final.snapshot(WS)
    for d in acked:
        task = snap["tasks"][d["task_id"]]
        assert task["state"] == "completed" and task["output"] == {"by": d["by"]}
        attempts = snap["x_chapline_work"][d["task_id"]]["attempts"]
        assert [a["outcome"] for a in attempts] == ["completed"]
        assert attempts[0]["holder"] == d["by"] and attempts[0]["token"] == d["token"]
    assert Client(final, WS).ok("audit.verify_chain")["ok"] is True
    # Replay the log from before the workers: the same decisions, and never
    # more than three live claims (one per agent) after any entry.
    clock = ManualClock()
    replay = make(clock=clock)
    replay.restore(before)
    entries = Client(final, WS).log(range={"from_seq": len(before["audit"])})
    final.close()
    for entry in entries:
        clock.now = epoch_ms(entry["arrived"])
        replay.dispatch(entry.get("envelope") or entry["request"])
        held = replay.snapshot(WS).get("x_chapline_claims", {})
        per_agent = [sum(1 for c in held.values() if c["holder"] == a) for a in AGENTS]
        assert len(held) <= 3 and max(per_agent) <= 1, held
    replayed = replay.snapshot(WS)
    assert replayed["tasks"] == snap["tasks"]
    assert replayed["x_chapline_work"] == snap["x_chapline_work"]


def test_a_killed_holder_loses_its_task_and_its_late_report(tmp_path: Path, shared_database: str) -> None:
    c = start(shared_database)
    task = {"key": "only", "kind": "k", "input": {}, "role": "worker",
            "retry": {"max_attempts": 3, "backoff_ms": 50, "max_backoff_ms": 50}}
    tid = c.ok("x-chapline.plan.submit", frm=ALICE, plan="k", tasks=[task])["tasks"]["only"]
    c.target.close()
    out = tmp_path / "held.json"
    holder = subprocess.Popen([sys.executable, WORKER, "hold", shared_database, WS, AGENTS[0], tid, str(out)])
    try:
        held = json.loads(eventually(lambda: out.exists() and out.read_text(), "the holder's claim"))
        assert held["claim"]["outcome"] == "claimed"
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert holder.returncode == -signal.SIGKILL

    # The survivor's clock, driven: the lease has just ended, then the backoff.
    clock = ManualClock()
    clock.now = epoch_ms(held["claim"]["lease_expires_at"])
    survivor = Client(Coordinator(open_store(shared_database), clock=clock), WS)
    assert survivor.ok("x-chapline.work.claim", frm=AGENTS[1], task_id=tid)["outcome"] == "blocked"
    clock.now += 50
    got = survivor.ok("x-chapline.work.claim", frm=AGENTS[1], task_id=tid)
    assert got["outcome"] == "claimed" and got["token"] == held["claim"]["token"] + 1
    survivor.ok("x-chapline.work.report", frm=AGENTS[1], task_id=tid, token=got["token"],
                outcome="completed", output={"by": AGENTS[1]})
    late = survivor.send(held["late_report"])  # what the dead worker would have sent
    refused(late, -32960)
    assert late["error"]["data"]["token"] == held["claim"]["token"]
    snap = survivor.target.snapshot(WS)
    assert snap["tasks"][tid]["output"] == {"by": AGENTS[1]}
    outcomes = [a["outcome"] for a in snap["x_chapline_work"][tid]["attempts"]]
    assert outcomes == ["expired", "completed"]
    assert survivor.log()[-1]["outcome"]["code"] == -32960  # the refusal is on the log
    survivor.target.close()
