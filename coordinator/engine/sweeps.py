"""`Coordinator.sweep()`: the decisions that fall due with time alone.

Some decisions are made by the clock, not by a call: a work lease expires
(x-chapline-work/1.0), a whisper lapses (whisper/1.0). A profile that has
such decisions declares an `on_sweep` hook (`registry.Profile.on_sweep`);
a sweep runs every hook in every held workspace, in id order, each on a
`Sweep` it reads and writes through. `chapline serve` runs it on a timer
(`--sweep-interval`); embedders call it when they like.

What a sweep decides is recorded as a call's decisions are: a hook either
dispatches a call (the work profile sends `x-chapline.work.sweep`) or
appends entries through the one append path (`HeldWorkspaces.append`),
write-ahead under the store's compare-and-swap. Several processes may sweep
one store: the one whose write loses the race reloads, finds the work done
and writes nothing, so nothing is recorded twice (SPECIFICATION.md,
"x-chapline-work/1.0", "Sweeps").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from coordinator.engine.clock import Clock
from coordinator.engine.held import HeldWorkspaces
from coordinator.engine.workspace import Workspace
from coordinator.engine.writes import WorkspaceWrite
from storage import StoreConflictError

__all__ = ["Sweep", "Swept", "sweep_all"]

log = logging.getLogger("chapline")

_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode  # keeps key order, as envelopes are shown


@dataclass(frozen=True)
class Swept:
    """What one sweep did in one workspace: the plan tasks whose expired
    leases it reclaimed, and the whispers it lapsed (their ids)."""

    workspace: str
    reclaimed: list[str]
    lapsed: list[str]


class Sweep:
    """One workspace being swept, as an `on_sweep` hook sees it.

    `at` is the time the caller sweeps at (ISO 8601 with a zone, as
    `check_whisper_lapses` takes it), or None: the clock's (`now()`). A hook
    reports what it did in `reclaimed` and `lapsed` (what `Swept` says);
    `recorded` collects a copy of each call its writes appended.
    """

    __slots__ = (
        "workspace_id", "at", "reclaimed", "lapsed", "recorded", "_held", "_clock", "_dispatch"
    )

    def __init__(
        self,
        held: HeldWorkspaces,
        clock: Clock,
        dispatch: Callable[[Any], dict[str, Any]],
        workspace_id: str,
        at: str | None,
    ) -> None:
        self.workspace_id = workspace_id
        self.at = at
        self.reclaimed: list[str] = []
        self.lapsed: list[str] = []
        self.recorded: list[dict[str, Any]] = []
        self._held = held
        self._clock = clock
        self._dispatch = dispatch

    def workspace(self) -> Workspace | None:
        """The workspace as the store has it now (reloaded if another writer
        changed it), or None if it is not held."""
        return self._held.find(self.workspace_id)

    def now(self) -> int:
        """A fresh reading of the coordinator's clock (epoch ms)."""
        return int(self._clock())

    def dispatch(self, envelope: Any) -> dict[str, Any]:
        """Answer a call, as `Coordinator.dispatch` does."""
        return self._dispatch(envelope)

    def reload(self) -> bool:
        """Reload the workspace from the store (after a lost race); False if
        the store's copy cannot be read."""
        return self._held.reload(self.workspace_id)

    def write(self, write: WorkspaceWrite) -> Exception | None:
        """Append `write` as a call's write is appended (a sweep answers no
        caller, so its listeners' changes carry no result); what the store
        raised when it refused the write, memory unchanged, else None."""
        refused = self._held.append(write, {})
        if refused is None:
            self.recorded.extend(_decode(_encode(e.envelope)) for e in write.entries)
        return refused


def sweep_all(
    held: HeldWorkspaces,
    hooks: Iterable[Callable[[Sweep], None]],
    clock: Clock,
    dispatch: Callable[[Any], dict[str, Any]],
) -> list[Swept]:
    """The body of `Coordinator.sweep`: every hook in every held workspace,
    workspaces in id order, hooks in the registry's order."""
    if held.batch is not None:
        raise RuntimeError("sweep() cannot run inside batch(): finish the batch first")
    held.note_changes()
    hooks = list(hooks)
    done = []
    for wid in sorted(held.ids()):
        sweep = Sweep(held, clock, dispatch, wid, None)
        for hook in hooks:
            try:
                hook(sweep)
            except StoreConflictError:
                # Lost twice to other writers (other processes sweeping too):
                # whatever they left due is decided by the next sweep.
                log.info("a sweep in %s was not written (the store moved twice); next sweep", wid)
        if sweep.reclaimed or sweep.lapsed:
            done.append(Swept(wid, sweep.reclaimed, sweep.lapsed))
    return done
