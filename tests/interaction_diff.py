"""The differential harness of the interaction profiles (whisper, deliberation,
handoff): chapline and chap-coordinator 0.3.3 (driven only by calling it) take
the same calls and must give the same results, error codes, audit entries,
chain heads and stored objects.

Both sides draw generated ids from the same deterministic sequence (chapline's
`ids` is fed by a second instance of the reference's public `IdFactory`), so as
long as both consume ids at the same moments the ids agree and every entry,
link and head can be compared byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import Any

import chap_coordinator
from client import Client, env, refused
from support import make

from coordinator import Coordinator

__all__ = [
    "A",
    "B",
    "BOT",
    "B2",
    "C",
    "GHOST",
    "INTERACTION",
    "MEMBERS",
    "W",
    "Lockstep",
    "pair",
    "reference_ids",
]

W = "wsp_i"
A, BOT, B, B2, C, GHOST = (
    "human:alice",
    "agent:bot",
    "human:bob",
    "agent:b2",
    "human:carol",
    "human:ghost",
)
INTERACTION = ("core/1.0", "review/1.0", "whisper/1.0", "deliberation/1.0", "handoff/1.0")


def reference_ids() -> Callable[[str], str]:
    """chapline's `ids` option giving the ids the deterministic reference gives."""
    factory = chap_coordinator.IdFactory(deterministic=True)
    return lambda prefix: f"{prefix}_{factory.ulid()}"


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value


MEMBERS = (A, BOT, B, B2, C)


def pair(
    profiles: tuple[str, ...] = INTERACTION,
    *,
    ours: Coordinator | None = None,
    theirs: Any = None,
    workspace: str = W,
) -> Client:
    """A client on one workspace of both sides (see `Lockstep`)."""
    return Client(Lockstep(profiles, ours=ours, theirs=theirs, workspace=workspace), workspace, prefix="q")


class Lockstep:
    """Both coordinators as one client's target: every envelope goes to both,
    they must answer alike (result, or code and data), and ours is returned."""

    def __init__(
        self,
        profiles: tuple[str, ...] = INTERACTION,
        *,
        ours: Coordinator | None = None,
        theirs: Any = None,
        workspace: str = W,
    ) -> None:
        self.ours = ours if ours is not None else make(
            enable_chain=True, default_profiles=profiles, ids=reference_ids()
        )
        self.theirs = theirs if theirs is not None else chap_coordinator.Coordinator(
            deterministic_ids=True,
            deterministic_clock=True,
            enable_chain=True,
            default_profiles=list(profiles),
        )
        self.workspace = workspace

    # -- calls ------------------------------------------------------------

    def both(self, envelope: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.ours.dispatch(envelope), self.theirs.dispatch(envelope)

    def dispatch(self, envelope: dict[str, Any]) -> dict[str, Any]:
        x, y = self.both(envelope)
        assert ("error" in x) == ("error" in y), (envelope, x, y)
        if "error" in y:
            refused(x, y["error"]["code"])
            assert x["error"].get("data") == y["error"].get("data"), (envelope, x, y)
        else:
            assert x["result"] == y["result"], (envelope, x, y)
        return x

    def pause(self, member: str | None = None) -> None:
        """Pause `member`, or the whole workspace, on both sides without a
        log entry (control/1.0 is not what these tests are about): chapline
        through snapshot() and restore(), the reference through the live
        workspace its public get_workspace() returns."""
        data = self.ours.snapshot(self.workspace)
        held = self.theirs.get_workspace(self.workspace)
        if member is None:
            data["state"] = "paused"
            held.state = "paused"
        else:
            data["members"][member]["paused"] = True
            held.members[member].paused = True
        self.ours.restore(data)

    def lapses(self, now: str | None = None) -> list[dict[str, Any]]:
        """Both coordinators' lapse sweeps; they must agree."""
        x = self.ours.check_whisper_lapses(self.workspace, now)
        y = self.theirs.check_whisper_lapses(self.workspace, now)
        assert x == y
        return x

    # -- state --------------------------------------------------------------

    def log(self, side: Any) -> list[dict[str, Any]]:
        r = side.dispatch(env("audit.read", {"workspace": self.workspace}, id="log"))
        return r["result"]["entries"]

    def objects(self, collection: str) -> tuple[dict[str, Any], dict[str, Any]]:
        ours = self.ours.snapshot(self.workspace)[collection]
        held = getattr(self.theirs.get_workspace(self.workspace), collection)
        return ours, {k: _plain(v) for k, v in held.items()}

    def assert_same_state(self, *collections: str) -> None:
        """Byte-identical logs (links included), describe (head included),
        and the same stored objects in `collections` and `tasks`."""
        ours, theirs = self.log(self.ours), self.log(self.theirs)
        assert len(ours) == len(theirs)
        for x, y in zip(ours, theirs, strict=True):
            assert x == y, (x, y)
        d = env("workspace.describe", {"workspace": self.workspace}, id="d")
        assert self.ours.dispatch(d)["result"] == self.theirs.dispatch(d)["result"]
        v = env("audit.verify_chain", {"workspace": self.workspace}, id="v")
        verdict = self.ours.dispatch(v)
        assert verdict == self.theirs.dispatch(v)
        if "error" in verdict:  # a paused workspace answers verify_chain -32063
            refused(verdict, -32063)
        else:
            assert verdict["result"]["status"] == "verified"
        for collection in ("tasks", *collections):
            x, y = self.objects(collection)
            assert x == y, collection
