"""The behaviour switches a coordinator is built with."""

from __future__ import annotations

import msgspec

__all__ = ["Options"]


class Options(msgspec.Struct, frozen=True):
    """Behaviour switches a handler may consult (see `Coordinator`)."""

    enable_chain: bool = True
    default_profiles: tuple[str, ...] = ("core/1.0", "review/1.0")
    max_envelope_bytes: int = 1_048_576
    require_read_membership: bool = False
