"""`Coordinator.sweep()`: the decisions that fall due with time alone.

Two things happen without a call: a work lease expires
(x-chapline-work/1.0) and a whisper lapses (whisper/1.0). Every write that
touches a task reclaims expired leases first, so correctness needs no timer;
a sweep makes them visible (and recorded) without waiting for the next
write, and is the only thing that lapses whispers. `chapline serve` runs it
on a timer (`--sweep-interval`); embedders call it when they like.

Each decision is written like a call's, write-ahead under the store's
compare-and-swap: leases through the pipeline as one `x-chapline.work.sweep`
call per workspace, whispers by `check_whisper_lapses`. Several processes
may sweep one store: the one whose write loses the race reloads, finds the
work done and writes nothing, so nothing is recorded twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator.engine.registry import profile_name, profile_names
from coordinator.profiles import work
from storage import StoreConflictError

if TYPE_CHECKING:
    from coordinator.engine.pipeline import Pipeline

__all__ = ["Swept", "sweep_all"]

log = logging.getLogger("chapline")


@dataclass(frozen=True)
class Swept:
    """What one sweep did in one workspace: the plan tasks whose expired
    leases it reclaimed, and the whispers it lapsed (their ids)."""

    workspace: str
    reclaimed: list[str]
    lapsed: list[str]


def sweep_all(coord: Pipeline) -> list[Swept]:
    """The body of `Coordinator.sweep`: every held workspace, in id order."""
    if coord._batch is not None:
        raise RuntimeError("sweep() cannot run inside batch(): finish the batch first")
    if coord._changed is not None:
        coord._note_changes(coord._changed)
    done = []
    for wid in sorted(coord._workspaces):
        reclaimed = _reclaim(coord, wid)
        try:
            notices = coord.check_whisper_lapses(wid)
        except StoreConflictError:
            # Lost twice to other writers (other processes sweeping too):
            # whatever they left due is lapsed by the next sweep.
            log.info("whisper lapses in %s were not written (the store moved twice); next sweep", wid)
            notices = []
        lapsed = [n["params"]["whisper_id"] for n in notices]
        if reclaimed or lapsed:
            done.append(Swept(wid, reclaimed, lapsed))
    return done


def _reclaim(coord: Pipeline, wid: str) -> list[str]:
    """Reclaim the workspace's expired leases, if it has any."""
    ws = coord._workspace(wid)
    if ws is None or ws.meta.state == "paused":
        return []  # a paused workspace takes no writes: its leases wait for the resume
    if profile_name(work.PROFILE.name) not in profile_names(ws.meta.profiles):
        return []
    expiry = work.next_expiry(ws)
    if expiry is None or expiry > int(coord._clock()):
        return []
    envelope = {"jsonrpc": "2.0", "method": "x-chapline.work.sweep",
                "params": {"workspace": wid, "from": work.SWEEPER}}
    response: dict[str, Any] = coord.dispatch(envelope)
    if "error" in response:
        # A write the store refused (another writer won twice in a row):
        # nothing was applied, and the next sweep or write reclaims them.
        log.info("expired leases in %s were not reclaimed: %s", wid, response["error"]["message"])
        return []
    reclaimed: list[str] = response["result"]["reclaimed"]
    return reclaimed
