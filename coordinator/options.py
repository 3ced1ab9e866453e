"""The behaviour switches a coordinator is built with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

__all__ = ["EscalationPolicy", "Options", "ReviewDepthPolicy", "RoutingPolicy"]

# routing/1.0 policy hooks; each gets the held task (an immutable model.Task).
RoutingPolicy = Callable[[Any, list[Any]], dict[str, Any]]
"""`(task, candidates) -> {"selected": uri, "rationale": {...}}`"""
ReviewDepthPolicy = Callable[[Any, dict[str, Any]], dict[str, Any]]
"""`(task, hints) -> {"depth": ..., "sampling_probability"?: p, "rationale"?: {...}}`"""
EscalationPolicy = Callable[[Any, dict[str, Any]], dict[str, Any]]
"""`(task, hints) -> {"escalate": bool, "to"?: uri, "triggered_rule"?: {...}}`"""


class Options(msgspec.Struct, frozen=True):
    """Behaviour switches a handler may consult (see `Coordinator`)."""

    enable_chain: bool = True
    default_profiles: tuple[str, ...] = ("core/1.0", "review/1.0")
    max_envelope_bytes: int = 1_048_576
    require_read_membership: bool = False
    # routing/1.0 policy hooks (None: the default policies).
    routing_policy: RoutingPolicy | None = None
    review_depth_policy: ReviewDepthPolicy | None = None
    escalation_policy: EscalationPolicy | None = None
