"""x-chapline-work/1.0 plans: the canonical descriptor of each task, its
hash, and the checks a plan passes before anything of it is staged.

A task's descriptor is what a submitter says about it, with every default
filled in and every set sorted, so that two submissions meaning the same
task hash the same whatever their order. Runtime state (claims, attempts,
the CHAP task id) is never part of it. A task's incoming edges are part of
its descriptor: changing what a task waits for redefines it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator.engine.canonical import digest
from coordinator.engine.wire import WORK_PLAN_CYCLE, invalid_params
from coordinator.errors import CanonicalError, RpcError

__all__ = ["EDGE_TYPES", "PlanTask", "SubmittedPlan", "parse_plan", "retry_delay_ms"]

EDGE_TYPES = ("strong", "weak")  # strong: wait for success; weak: wait for any end
MAX_PLAN_TASKS = 100_000
DEFAULT_RETRY = {"max_attempts": 3, "backoff_ms": 1_000, "max_backoff_ms": 300_000}


@dataclass(frozen=True)
class PlanTask:
    """One task of a submitted plan: its canonical descriptor and hash."""

    key: str
    descriptor: dict[str, Any]
    hash: str

    @property
    def after(self) -> list[list[str]]:
        """[[key, edge type], ...] this task waits for, sorted."""
        after: list[list[str]] = self.descriptor["after"]
        return after


@dataclass(frozen=True)
class SubmittedPlan:
    name: str
    tasks: dict[str, PlanTask]  # by key, in submission order
    hash: str


def retry_delay_ms(retry: dict[str, int], failures: int) -> int:
    """Exponential backoff after the `failures`-th failed attempt, capped."""
    base = retry["backoff_ms"] * (2 ** min(failures - 1, 40))
    return int(min(base, retry["max_backoff_ms"]))


def _paths(task: str, name: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise invalid_params(
            f"task {task!r}: {name} must be an array of resource paths such as \"repo/src/app.py\""
        )
    for p in value:
        if {".", ".."} & set(p.split("/")):
            # Paths are names, compared segment by segment: "a/../b" is not
            # "b", so a claim on it would not conflict with one on "b".
            raise invalid_params(
                f"task {task!r}: {name} path {p!r} has a '.' or '..' segment; give the path "
                "it names without them"
            )
    return sorted({p.rstrip("/") or "/" for p in value})


def _int(task: str, name: str, value: Any, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    if type(value) is not int or not low <= value <= high:
        raise invalid_params(f"task {task!r}: {name} must be an integer from {low} to {high}")
    return value


def _retry(task: str, value: Any) -> dict[str, int]:
    if value is None:
        return dict(DEFAULT_RETRY)
    if not isinstance(value, dict) or set(value) - set(DEFAULT_RETRY):
        raise invalid_params(
            f"task {task!r}: retry must be an object with max_attempts, backoff_ms, max_backoff_ms"
        )
    return {
        "max_attempts": _int(task, "retry.max_attempts", value.get("max_attempts"), 3, 1, 1000),
        "backoff_ms": _int(task, "retry.backoff_ms", value.get("backoff_ms"), 1_000, 0, 86_400_000),
        "max_backoff_ms": _int(
            task, "retry.max_backoff_ms", value.get("max_backoff_ms"), 300_000, 0, 86_400_000
        ),
    }


_TASK_FIELDS = {"key", "kind", "input", "assignee", "role", "priority", "reads", "writes",
                "review", "retry"}


def _descriptor(raw: Any, index: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise invalid_params(f"tasks[{index}] must be an object with key, kind and input")
    key = raw.get("key")
    if not isinstance(key, str) or not key:
        raise invalid_params(f"tasks[{index}].key must be a non-empty string (the task's name in the plan)")
    unknown = sorted(set(raw) - _TASK_FIELDS)
    if unknown:
        raise invalid_params(f"task {key!r}: unknown fields {unknown}; known: {sorted(_TASK_FIELDS)}")
    if not isinstance(raw.get("kind"), str):
        raise invalid_params(f"task {key!r}: kind must be a string")
    if raw.get("input") is None:
        raise invalid_params(f"task {key!r}: input is required (any JSON value but null)")
    assignee, role = raw.get("assignee"), raw.get("role")
    if (assignee is None) == (role is None) or not isinstance(assignee or role, str):
        raise invalid_params(
            f"task {key!r}: give exactly one of assignee (a member URI) or role (a member role)"
        )
    review = raw.get("review", False)
    if not isinstance(review, bool):
        raise invalid_params(f"task {key!r}: review must be true (a human reviews it) or false")
    return {
        "key": key,
        "kind": raw["kind"],
        "input": raw["input"],
        "assignee": assignee,
        "role": role,
        "priority": _int(key, "priority", raw.get("priority"), 0, -1_000_000, 1_000_000),
        "reads": _paths(key, "reads", raw.get("reads")),
        "writes": _paths(key, "writes", raw.get("writes")),
        "review": review,
        "retry": _retry(key, raw.get("retry")),
        "after": [],
    }


def _edges(raw: Any, keys: dict[str, dict[str, Any]]) -> None:
    """Put each edge on its target's descriptor (`after`), checked."""
    if raw is None:
        return
    if not isinstance(raw, list):
        raise invalid_params('edges must be an array of {"from": key, "to": key, "type": "strong"|"weak"}')
    seen: dict[tuple[str, str], str] = {}
    for i, edge in enumerate(raw):
        if not isinstance(edge, dict) or set(edge) - {"from", "to", "type"}:
            raise invalid_params(f'edges[{i}] must be {{"from": key, "to": key, "type": "strong"|"weak"}}')
        src, dst, kind = edge.get("from"), edge.get("to"), edge.get("type", "strong")
        for end in (src, dst):
            if not isinstance(end, str) or end not in keys:
                raise invalid_params(f"edges[{i}] names {end!r}, which is not a task key of this plan")
        assert isinstance(src, str) and isinstance(dst, str)
        if kind not in EDGE_TYPES:
            raise invalid_params(f'edges[{i}].type must be "strong" (wait for success) or "weak" (any end)')
        if seen.get((src, dst), kind) != kind:
            raise invalid_params(f"edges[{i}]: {src} -> {dst} given as both strong and weak")
        seen[(src, dst)] = kind
    for (src, dst), kind in seen.items():
        keys[dst]["after"].append([src, kind])
    for descriptor in keys.values():
        descriptor["after"].sort()


def _cycle(tasks: dict[str, dict[str, Any]]) -> list[str] | None:
    """A cycle of keys (first repeated last), or None; iterative, linear."""
    waits = {k: [src for src, _ in d["after"]] for k, d in tasks.items()}
    state: dict[str, int] = {}  # 1 on the path, 2 done
    for root in tasks:
        if state.get(root):
            continue
        path: list[str] = [root]
        iters = [iter(waits[root])]
        state[root] = 1
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                iters.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt][::-1]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(waits[nxt]))
    return None


def parse_plan(params: dict[str, Any]) -> SubmittedPlan:
    """The plan in `params`, checked and canonical; -32602 or -32962 if not."""
    name = params.get("plan")
    if not isinstance(name, str) or not name:
        raise invalid_params("plan must be a non-empty string naming the plan (resubmit with the same name)")
    raw = params.get("tasks")
    if not isinstance(raw, list) or not raw:
        raise invalid_params("tasks must be a non-empty array of task descriptors")
    if len(raw) > MAX_PLAN_TASKS:
        raise invalid_params(f"a plan holds at most {MAX_PLAN_TASKS} tasks; split it")
    descriptors: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(raw):
        d = _descriptor(item, i)
        if d["key"] in descriptors:
            raise invalid_params(f"task key {d['key']!r} given twice in the plan")
        descriptors[d["key"]] = d
    _edges(params.get("edges"), descriptors)
    cycle = _cycle(descriptors)
    if cycle is not None:
        raise RpcError(
            WORK_PLAN_CYCLE,
            f"Plan {name!r} has a dependency cycle: {' -> '.join(cycle)}; remove one of its edges",
            {"plan": name, "cycle": cycle},
        )
    tasks: dict[str, PlanTask] = {}
    for key, d in descriptors.items():
        try:
            tasks[key] = PlanTask(key, d, digest(d))
        except CanonicalError as exc:
            raise invalid_params(f"task {key!r}: input has no canonical JSON form ({exc})") from None
    plan_hash = digest({"plan": name, "tasks": {k: t.hash for k, t in tasks.items()}})
    return SubmittedPlan(name, tasks, plan_hash)
