"""routing/1.0: `task.route`, `review.depth` and `escalate.auto`, each storing
a route decision, with the three policy hooks 0.3.3 offers.

A hook is a plain function given at construction (`Coordinator(routing_policy=
..., review_depth_policy=..., escalation_policy=...)`, typed in
coordinator/options.py); it receives the task
as held (an immutable `Task`) and a copy of the candidates or hints. A hook
that raises, or returns something other than the documented object, is
answered -32515 and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from msgspec.structs import replace

from coordinator.engine.call import Call
from coordinator.engine.registry import ANY, STRING, Profile, schema
from coordinator.engine.wire import (
    CANDIDATES_EMPTY,
    DEPTH_NOT_APPLICABLE,
    ESCALATION_TARGET_UNAVAILABLE,
    NO_ELIGIBLE_ASSIGNEE,
    POLICY_UNREACHABLE,
    WORKSPACE_PAUSED,
    invalid_params,
)
from coordinator.errors import RpcError
from coordinator.model import HistoryEntry, RouteDecision, Task

__all__ = ["PROFILE"]

PROFILE = Profile("routing/1.0")

COORDINATOR = "service:coordinator"
_RANK = {"low": 0, "medium": 1, "high": 2, "critical": 3}
_ESCALATION_RULE = "criticality=critical OR (criticality>=high AND confidence<0.6)"
_is_json = msgspec.json.encode


def _copy(value: Any, kind: Any) -> Any:
    return msgspec.json.decode(msgspec.json.encode(value), type=kind)

HINTS = {
    "type": "object",
    "additionalProperties": True,
    "description": "Routing hints: criticality, confidence, model_id, ...",
}


def _ask(hook: Callable[..., Any], name: str, task: Task, arg: Any) -> dict[str, Any]:
    """Call a policy hook with copies (whatever it does to them never reaches
    held state); its fault becomes -32515, never a traceback."""
    try:
        out = hook(_copy(task, Task), _copy(arg, Any))
    except Exception as exc:
        raise RpcError(POLICY_UNREACHABLE, f"{name} policy error: {exc}") from None
    if not isinstance(out, dict):
        raise RpcError(
            POLICY_UNREACHABLE,
            f"{name} policy returned {out!r}; it must return an object (SPECIFICATION.md, routing/1.0)",
        )
    try:
        _is_json(out)  # it is stored and answered: it must be JSON
    except (TypeError, ValueError, OverflowError) as exc:
        raise RpcError(POLICY_UNREACHABLE, f"{name} policy returned a value that is not JSON: {exc}") from None
    return out


def _object(out: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    value = out.get(key, {})
    if not isinstance(value, dict):
        raise RpcError(POLICY_UNREACHABLE, f"{name} policy returned a {key} that is not an object: {value!r}")
    return value


def _hints(task: Task) -> dict[str, Any]:
    hints = task.routing_hints
    if hints is None:
        return {}
    if not isinstance(hints, dict):
        raise invalid_params(f"task {task.id} has routing_hints that are not an object: {hints!r}")
    return dict(hints)


def _confidence(hints: dict[str, Any]) -> float:
    """Missing or unreadable confidence counts as 1.0."""
    raw = hints.get("confidence")
    if raw is None:
        return 1.0
    try:
        return float(raw)
    except (TypeError, ValueError, OverflowError):
        return 1.0


def _rank(hints: dict[str, Any]) -> tuple[Any, int]:
    """The criticality and its rank; anything unknown counts as medium."""
    crit = hints.get("criticality", "medium")
    return crit, _RANK.get(crit, 1) if isinstance(crit, str) else 1


def _decide(
    call: Call, kind: str, task: Task, outcome: Any, policy_id: Any, hints: dict[str, Any],
    rationale: Any, extra: dict[str, Any],
) -> str:
    decision = RouteDecision(
        id=call.new_id("art", "route_decisions"),
        decision_type=kind,
        outcome=outcome,
        produced_by=COORDINATOR,
        produced_at=call.arrived,
        task=task.id,
        policy_id=policy_id,
        hints_observed=hints,
        rationale=rationale,
        extra=extra,
    )
    call.put("route_decisions", decision.id, decision)
    return decision.id


def _first_eligible(call: Call, task: Task, candidates: list[Any]) -> tuple[Any, dict[str, Any]]:
    """The default policy: the first candidate that is a member and not paused."""
    first = None
    for i, uri in enumerate(candidates):
        m = call.member(uri)
        if m is not None and not m.paused:
            first = i
            break
    if first is None:
        raise RpcError(NO_ELIGIBLE_ASSIGNEE, "No candidate is a workspace member who is not paused")
    alternatives = []
    for i, uri in enumerate(candidates):
        m = call.member(uri)
        if m is None:
            continue
        if m.paused:
            alternatives.append({"candidate": uri, "reason_excluded": "paused"})
        elif i != first:
            alternatives.append({"candidate": uri, "reason_excluded": "not first eligible"})
    rationale = {
        "policy_id": "default",
        "hints_used": list(_hints(task)),
        "summary": "default policy: first eligible candidate",
        "alternatives_considered": alternatives,
    }
    return candidates[first], rationale


@PROFILE.method(
    "task.route",
    floor=True,
    params=schema(
        ["workspace", "from", "task_id", "candidates"],
        task_id=STRING,
        candidates={"type": "array", "items": STRING, "description": "Participant URIs, in preference order."},
        policy_id=ANY,
    ),
    title="Route a task",
    description="Pick the task's assignee among the candidates (by default the first member "
    "who is not paused) and record the decision.",
)
def task_route(call: Call) -> dict[str, Any]:
    call.workspace()
    p = call.params
    task = call.task(p.get("task_id"))
    candidates = p.get("candidates")
    if candidates is not None and not isinstance(candidates, list):
        raise invalid_params("candidates must be a list of participant URIs")
    if not candidates:
        raise RpcError(CANDIDATES_EMPTY, "candidates array was empty")
    policy = call.options.routing_policy
    if policy is None:
        selected, rationale = _first_eligible(call, task, candidates)
    else:
        out = _ask(policy, "routing", task, candidates)
        selected, rationale = out.get("selected"), _object(out, "rationale", "routing")
    member = call.member(selected)
    if member is None:
        raise RpcError(NO_ELIGIBLE_ASSIGNEE, f"Selected {selected} is not a member")
    if member.paused:
        raise RpcError(WORKSPACE_PAUSED, f"Assignee {selected} is paused")
    decision = _decide(
        call, "task.route", task, selected, rationale.get("policy_id"), _hints(task),
        rationale.get("summary", ""),
        {"alternatives_considered": rationale.get("alternatives_considered", [])},
    )
    note = HistoryEntry(ts=call.arrived, from_=COORDINATOR, state=task.state, note=f"routed to {selected}")
    routed = replace(task, assignee=selected, updated_at=call.arrived, history=[*task.history, note])
    call.put("tasks", task.id, routed)
    return {"selected": selected, "decision_artefact": decision, "rationale": rationale}


def _default_depth(hints: dict[str, Any]) -> tuple[str, float | None, str]:
    crit, rank = _rank(hints)
    conf = _confidence(hints)
    if crit == "critical":
        return "full", None, "criticality=critical: full review"
    if crit == "high" and conf < 0.7:
        return "full", None, "criticality=high and confidence<0.7: full review"
    if crit == "low" and conf >= 0.95:
        return "skip", None, "very low criticality + very high confidence: skip"
    if rank <= 1 and conf >= 0.85:
        return "spot_check", 0.1, "low criticality + high confidence: 10% sample"
    return "spot_check", 0.25, "default mid-confidence: 25% sample"


@PROFILE.method(
    "review.depth",
    floor=True,
    params=schema(["workspace", "from", "task_id"], task_id=STRING, artefact_routing_hints=HINTS),
    title="Choose a review depth",
    description="Decide how deeply a task's artefact is reviewed (skip, spot_check with a "
    "sampling probability, full) from its routing hints, and record the decision.",
)
def review_depth(call: Call) -> dict[str, Any]:
    call.workspace()
    p = call.params
    task = call.task(p.get("task_id"))
    hints = _hints(task)
    more = p.get("artefact_routing_hints")
    if more is not None:
        if not isinstance(more, dict):
            raise invalid_params("artefact_routing_hints must be an object (merged over the task's routing_hints)")
        hints.update(more)
    if not hints:
        raise RpcError(DEPTH_NOT_APPLICABLE, "No routing_hints to consult")
    policy = call.options.review_depth_policy
    if policy is None:
        depth, probability, summary = _default_depth(hints)
        rationale = {"policy_id": "default", "hints_used": list(hints), "summary": summary}
    else:
        out = _ask(policy, "depth", task, hints)
        given = _object(out, "rationale", "depth")
        depth, probability = out.get("depth", "full"), out.get("sampling_probability")
        rationale = {
            "policy_id": given.get("policy_id", "operator"),
            "hints_used": list(hints),
            "summary": given.get("summary", "operator policy"),
        }
    extra = {} if probability is None else {"sampling_probability": probability}
    decision = _decide(
        call, "review.depth", task, depth, rationale["policy_id"], hints, rationale["summary"], extra
    )
    result: dict[str, Any] = {"depth": depth, "decision_artefact": decision, "rationale": rationale}
    result.update(extra)
    return result


@PROFILE.method(
    "escalate.auto",
    floor=True,
    params=schema(
        ["workspace", "from", "task_id"],
        task_id=STRING,
        default_escalation_target={"type": "string", "description": "A member or group: URI."},
    ),
    title="Check for escalation",
    description="Decide from a task's routing hints whether it should be escalated, and to "
    "whom; records the decision (no task is created or changed).",
)
def escalate_auto(call: Call) -> dict[str, Any]:
    call.workspace()
    p = call.params
    task = call.task(p.get("task_id"))
    hints = _hints(task)
    policy = call.options.escalation_policy
    if policy is None:
        crit, rank = _rank(hints)
        escalate = crit == "critical" or (rank >= 2 and _confidence(hints) < 0.6)
        target = p.get("default_escalation_target")
        rule: dict[str, Any] = {
            "rule_id": "default-auto-esc",
            "summary": _ESCALATION_RULE,
            "hints_used": ["criticality", "confidence"],
        }
        if escalate and target is not None and not isinstance(target, str):
            raise invalid_params("default_escalation_target must be a participant URI or group: URI")
    else:
        out = _ask(policy, "escalation", task, hints)
        rule = _object(out, "triggered_rule", "escalation")
        escalate, target = bool(out.get("escalate")), out.get("to")
        if escalate and target is not None and not isinstance(target, str):
            raise RpcError(POLICY_UNREACHABLE, f"escalation policy returned a target that is not a URI: {target!r}")
    if not escalate:
        decision = _decide(
            call, "escalate.auto", task, {"escalate": False}, rule.get("rule_id"), hints,
            rule.get("summary", ""), {},
        )
        return {"escalate": False, "decision_artefact": decision}
    if target is None:
        raise RpcError(ESCALATION_TARGET_UNAVAILABLE, "Escalation triggered but no target available")
    if not target.startswith("group:") and call.member(target) is None:
        raise RpcError(ESCALATION_TARGET_UNAVAILABLE, f"Escalation target {target} is not a member or group")
    decision = _decide(
        call, "escalate.auto", task, {"escalate": True, "to": target}, rule.get("rule_id"), hints,
        rule.get("summary", ""), {"escalation_target": target},
    )
    return {"escalate": True, "to": target, "decision_artefact": decision, "triggered_rule": rule}
