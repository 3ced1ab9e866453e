"""The behaviour switches a coordinator is built with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

__all__ = [
    "ENFORCED_BY",
    "EscalationPolicy",
    "Options",
    "ReviewDepthPolicy",
    "RoutingPolicy",
    "unenforced",
]

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
    # security-signed, identity-oidc / identity-vc and audit-scitt (SPECIFICATION.md,
    # "Signatures, identity and transparency").
    require_signatures: bool = False
    enforce_step_up: bool = False
    verify_oidc_token: Callable[[Any], Any] | None = None
    verify_vc: Callable[[Any], Any] | None = None
    scitt_submitter: Callable[[dict[str, Any]], Any] | None = None
    verify_scitt_receipt: Callable[[Any], Any] | None = None
    scitt_issuer_key: Any = None  # an Ed25519PrivateKey: statements become real COSE_Sign1
    scitt_issuer_kid: str = "scitt-issuer"


# Profiles a workspace may advertise only when the coordinator enforces them,
# and the option that does (as 0.3.3 couples them): appended to a new
# workspace's profiles when on, refused (-32602) when off.
ENFORCED_BY = {"security-signed": "require_signatures", "identity-oidc": "verify_oidc_token"}


def unenforced(options: Options, names: frozenset[str]) -> str | None:
    """What is wrong with advertising the profile `names` under `options`, or None."""
    for name, option in ENFORCED_BY.items():
        if name in names and not getattr(options, option):
            return f"{name} is advertised but this coordinator does not enforce it (set {option})"
    return None
