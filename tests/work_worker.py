"""A worker process for tests/test_work_processes.py: its own coordinator on a
shared SQLite file, the system clock, and the x-chapline-work methods.

    python work_worker.py drain <db> <workspace> <agent> <out.json>
        claim and complete tasks until the plan has ended; write what was acknowledged
    python work_worker.py hold <db> <workspace> <agent> <task_id> <out.json>
        claim the task, write the report it would send, then wait to be killed
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client import Client  # noqa: E402

from coordinator import Coordinator  # noqa: E402
from storage.target import open_store  # noqa: E402

CONFLICT = -32901


def worker(db: str, workspace: str, agent: str) -> Client:
    """`agent`'s calls on `workspace`, through its own coordinator on `db`."""
    return Client(Coordinator(open_store(db)), workspace, agent, prefix=f"{agent}-")


def acknowledged(worker: Client, method: str, **params: Any) -> dict[str, Any]:
    """The result; a write another process won is sent again."""
    while True:
        reply = worker.call(method, **params)
        error = reply.get("error")
        if error is None:
            return dict(reply["result"])
        if error["code"] != CONFLICT:
            raise RuntimeError(f"{method}: {error}")


def drain(worker: Client, out: str) -> None:
    done: list[dict[str, Any]] = []
    outcomes: dict[str, int] = {}
    while True:
        got = acknowledged(worker, "x-chapline.work.claim", lease_ms=120_000)
        outcomes[got["outcome"]] = outcomes.get(got["outcome"], 0) + 1
        if got["outcome"] == "claimed":
            time.sleep(0.01)  # hold it a moment, so that others claim meanwhile
            result = acknowledged(worker, "x-chapline.work.report", task_id=got["task_id"], token=got["token"],
                                  outcome="completed", output={"by": worker.sender})
            done.append({"task_id": got["task_id"], "token": got["token"], "status": result["status"]})
            continue
        plan = acknowledged(worker, "x-chapline.plan.describe", plan="shared")
        if all(t["status"] == "completed" for t in plan["tasks"]):
            break
        time.sleep(0.002)
    Path(out).write_text(json.dumps({"done": done, "outcomes": outcomes}))


def hold(worker: Client, task_id: str, out: str) -> None:
    got = acknowledged(worker, "x-chapline.work.claim", task_id=task_id, lease_ms=1_000)
    late = worker.envelope("x-chapline.work.report", task_id=task_id, token=got.get("token"),
                           outcome="completed", output={"by": worker.sender, "late": True})
    Path(out).write_text(json.dumps({"claim": got, "late_report": late}))
    while True:
        signal.pause()  # until killed


if __name__ == "__main__":
    mode, db, workspace, agent, *rest = sys.argv[1:]
    w = worker(db, workspace, agent)
    if mode == "drain":
        drain(w, rest[0])
    else:
        hold(w, rest[0], rest[1])
