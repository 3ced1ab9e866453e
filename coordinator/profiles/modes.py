"""modes/1.0: shadow, trial and production tasks, under a mode ceiling.

The profile owns no method. Its rules live where tasks are made and reviewed:
`model.trial_forces_review` (a trial task always goes through review) and the
mode ceiling checks of task.create and escalate.raise.
"""

from __future__ import annotations

from coordinator.engine.registry import Profile

__all__ = ["PROFILE"]

PROFILE = Profile("modes/1.0")
