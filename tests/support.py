"""Shared test helpers: deterministic coordinators, the standard setup, the
recorded-refusal assertion, a bounded wait for another process, the
differential runner, and real store subclasses (the client, and the refusal
assertion, are in client.py)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import Any, TypeVar

import chap_coordinator
import msgspec
from client import WS, Client

from coordinator import Coordinator, CounterIds, StepClock
from storage import MemoryStore, StoreChange

ALICE = "human:alice"
BOT = "agent:bot"
BOB = "human:bob"

T = TypeVar("T")


def make(store: Any = None, **kw: Any) -> Coordinator:
    """A deterministic coordinator: StepClock and CounterIds, as the reference's
    deterministic mode."""
    kw.setdefault("clock", StepClock())
    kw.setdefault("ids", CounterIds())
    return Coordinator(store, **kw)


def eventually(check: Callable[[], T], what: str, timeout: float = 60) -> T:
    """The first true value `check()` returns, asked every 20 ms for up to
    `timeout` seconds: for what another process or thread does in its own
    time (a server's timer, PostgreSQL's asynchronous notification, a
    worker's first output). A test that asserts that nothing happens drives
    the clock instead (tests/test_suite_shape.py)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.02)


def recorded_refusal(c: Client, before: int, code: int) -> dict[str, Any]:
    """The entry a refused call added to a log of `before` entries, asserting
    that it is the only one and records the refusal with `code` as 0.3.3
    does: the request and the outcome, no envelope (SPECIFICATION.md,
    "Audit entries and the chain")."""
    log = c.log()
    assert len(log) == before + 1, log[before:]
    entry: dict[str, Any] = log[-1]
    assert entry["seq"] == before and "envelope" not in entry, entry
    assert entry["outcome"] == {"status": "refused", "code": code}, entry
    return entry


def s0(c: Client, *, profiles: list[str] | None = None, extra_humans: tuple[str, ...] = ()) -> str:
    """The usual start: workspace, alice (human, admin reviewer), bot
    (agent), then task T (alice -> bot). Returns T's id."""
    params: dict[str, Any] = {}
    if profiles is not None:
        params["profiles"] = profiles
    c.ok("workspace.create", **params)
    c.ok("participant.join", frm=ALICE, type="human", role="admin")
    c.ok("participant.join", frm=BOT, type="agent", role="drafter")
    for h in extra_humans:
        c.ok("participant.join", frm=h, type="human", role="reviewer")
    return c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={})["task_id"]


class FailingStore(MemoryStore):
    """A MemoryStore whose `apply` raises while `failing` is set (or for the
    next `fail_next` writes), without writing anything."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.fail_next = 0
        self.applied: list[StoreChange] = []

    def apply(self, change: StoreChange) -> None:
        if self.failing or self.fail_next > 0:
            self.fail_next = max(self.fail_next - 1, 0)
            raise OSError("disk full (injected by FailingStore)")
        super().apply(change)
        self.applied.append(change)


def stored(store: Any) -> list[Any]:
    """Everything a store holds, as plain data (comparable across stores)."""
    return msgspec.to_builtins(store.load())


# -- the differential runner ------------------------------------------------------
#
# `run_both` drives chapline and chap-coordinator 0.3.3 (used only by calling
# it) with the same script and returns both runs in a comparable form.

# Generated ids: a prefix and a ULID. Both coordinators make them, differently.
ID_PATTERN = re.compile(r"\b(?:tsk|art|lgl|wsp)_[0-9A-HJKMNP-TV-Z]{26}\b")
REVIEW_PROFILES = ("core/1.0", "review/1.0")


def ours(profiles: tuple[str, ...] = REVIEW_PROFILES, **options: Any) -> Coordinator:
    """A deterministic chapline coordinator (same timestamps as `reference`)."""
    return make(enable_chain=True, default_profiles=profiles, **options)


def reference(profiles: tuple[str, ...] = REVIEW_PROFILES) -> Any:
    """The 0.3.3 reference with deterministic ids and clock, chain on."""
    return chap_coordinator.Coordinator(
        deterministic_ids=True,
        deterministic_clock=True,
        enable_chain=True,
        default_profiles=list(profiles),
    )


# A script is a list of (method, params) steps. A string "$<n>" anywhere in
# params is replaced by the first generated id in the result of step n.
Script = list[tuple[str, dict[str, Any]]]


def run_script(coord: Any, steps: Script) -> dict[str, Any]:
    workspace = steps[0][1].get("workspace", WS)
    c = Client(coord, workspace, prefix="s")
    for index, step in enumerate(steps):
        found = ID_PATTERN.findall(repr(c.run(step).get("result")))
        if found:
            c.names[f"${index}"] = found[0]
    return {"responses": c.responses, "log": c.log(), "tasks": _tasks(coord, workspace)}


def _tasks(coord: Any, workspace: str) -> dict[str, Any]:
    """Stored tasks, comparable across both (history notes are free text)."""
    if isinstance(coord, Coordinator):
        tasks = coord.snapshot(workspace)["tasks"]
    else:
        held = coord.get_workspace(workspace).tasks
        tasks = {k: asdict(v) if is_dataclass(v) else v for k, v in held.items()}
    out = {}
    for key, task in tasks.items():
        task = dict(task)
        task["history"] = [{k: v for k, v in h.items() if k != "note"} for h in task["history"]]
        out[key] = task
    return out


def normalise(value: Any) -> Any:
    """`value` with generated ids renamed <1>, <2>, ... by first appearance."""
    names: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        return names.setdefault(match.group(0), f"<{len(names) + 1}>")

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return ID_PATTERN.sub(rename, node)
        if isinstance(node, dict):
            return {walk(k): walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(value)


def _comparable(run: dict[str, Any]) -> dict[str, Any]:
    """Results, error codes and data, the log and describe without hashes (the
    ids differ, so the hashes do), and the stored tasks."""
    responses = []
    for response in run["responses"]:
        if "error" in response:
            error = response["error"]
            responses.append({"code": error["code"], "data": error.get("data")})
        else:
            result = response["result"]
            if isinstance(result, dict) and "evidence_head" in result:
                result = {**result, "evidence_head": "<hash>"}
            responses.append({"result": result})
    log = [{k: v for k, v in e.items() if k != "prev_hash"} for e in run["log"]]
    return normalise({"responses": responses, "log": log, "tasks": run["tasks"]})


def run_both(steps: Script, profiles: tuple[str, ...] = REVIEW_PROFILES) -> tuple[Any, Any]:
    """`steps` run on chapline and on the reference, each in comparable form.

    An error's `data` is compared only where the reference gives one: chapline
    may say more (where a patch failed, say) but never less.
    """
    mine = _comparable(run_script(ours(profiles), steps))
    theirs = _comparable(run_script(reference(profiles), steps))
    for m, t in zip(mine["responses"], theirs["responses"], strict=True):
        if "code" in m and "code" in t and t["data"] is None:
            m["data"] = None
    return mine, theirs


# -- core/persistence helpers ---------------------------------------------------


def edit_workspace(coord: Coordinator, workspace: str, fn: Any) -> None:
    """Change a workspace through snapshot() -> fn(data) -> restore(): the way
    the core tests reach states no core method can (paused workspace, paused
    task or member) without touching internals."""
    data = coord.snapshot(workspace)
    fn(data)
    coord.restore(data)
