"""Which profile owns each CHAP method, and which profiles chapline implements."""

from __future__ import annotations

import functools

__all__ = [
    "ALWAYS_AVAILABLE",
    "IMPLEMENTED_PROFILES",
    "OWNING_PROFILE",
    "profile_name",
    "profile_names",
    "unimplemented",
]

_OWNERS = {
    "core/1.0": (
        "workspace.create workspace.describe workspace.set_profiles participant.join "
        "participant.leave participant.rotate_key participant.revoke_key task.create "
        "task.update task.complete audit.read"
    ),
    "review/1.0": (
        "review.request decide.approve decide.reject decide.override abstain.declare escalate.raise"
    ),
    "routing/1.0": "task.route review.depth escalate.auto",
    "whisper/1.0": "whisper.ask whisper.answer",
    "deliberation/1.0": "deliberate.open deliberate.comment deliberate.vote deliberate.close",
    "handoff/1.0": "handoff.propose handoff.accept handoff.decline",
    "control/1.0": (
        "control.pause control.resume control.cancel control.snapshot control.rollback "
        "control.supersede control.set_mode_ceiling"
    ),
    "audit-scitt/1.0": "audit.verify_chain audit.verify_receipt audit.submit_to_scitt",
}

# The 39 methods of CHAP 0.3 and the profile that owns each.
OWNING_PROFILE: dict[str, str] = {
    method: profile for profile, methods in _OWNERS.items() for method in methods.split()
}

# Reads that answer whatever the workspace advertises.
ALWAYS_AVAILABLE = frozenset(
    {"workspace.describe", "audit.read", "audit.verify_chain", "audit.verify_receipt"}
)

# Profile names (any version) a workspace may advertise here.
IMPLEMENTED_PROFILES = frozenset({"core", "review", "modes"})


def profile_name(profile: str) -> str:
    """`review/1.0` -> `review`: gating matches names, any version."""
    return profile.split("/", 1)[0]


@functools.lru_cache(maxsize=256)
def _names(profiles: tuple[str, ...]) -> frozenset[str]:
    return frozenset(profile_name(p) for p in profiles)


def profile_names(profiles: list[str]) -> frozenset[str]:
    """The profile names a workspace advertises (cached: every gated call asks)."""
    return _names(tuple(profiles))


def unimplemented(profiles: list[str] | tuple[str, ...]) -> str | None:
    """What is wrong with advertising `profiles` here, or None when chapline
    implements them all."""
    missing = [p for p in profiles if profile_name(p) not in IMPLEMENTED_PROFILES]
    if not missing:
        return None
    implemented = ", ".join(sorted(n + "/1.0" for n in IMPLEMENTED_PROFILES))
    return f"{', '.join(missing)} not implemented by chapline; it implements {implemented}"
