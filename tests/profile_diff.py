"""Differential runs of one script through chapline and chap-coordinator 0.3.3.

A step is `(method, params)` or `(method, params, ("result key", "$name"))`;
`"$name"` anywhere in later params is replaced, per side, by the id that
side generated. Generated ids never match between the two, so every
comparison first pairs them: walking both results (or logs, or stored
objects) in parallel, an id on our side at the same place as an id on
theirs is recorded as the same id. Then

- responses: the same result, or the same error code and data, per step;
- the log: the same entries once our ids are mapped to theirs, and the same
  chain: relinking our mapped records from the zero hash gives every one of
  their `prev_hash` values and their evidence head;
- stored objects: the same tasks, members, snapshots and route decisions;
- a snapshot artefact's `content_hash` is the digest of its own content on
  both sides (and so agrees once ids are mapped).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import chap_coordinator
from client import Client, env
from support import make

from coordinator import Coordinator
from coordinator.audit import record_of
from coordinator.engine.canonical import ZERO_HASH, canonical_bytes, digest, link_hash

GENERATED = re.compile(r"^(?:tsk|art|wsp)_[0-9A-HJKMNP-TV-Z]{26}$")
INSIDE = re.compile(r"\b(?:tsk|art|wsp)_[0-9A-HJKMNP-TV-Z]{26}\b")
ALL_PROFILES = ("core/1.0", "review/1.0", "control/1.0", "routing/1.0")
COLLECTIONS = ("tasks", "members", "snapshots", "route_decisions")

Step = tuple[Any, ...]


def reference(profiles: tuple[str, ...] = ALL_PROFILES, **options: Any) -> Any:
    return chap_coordinator.Coordinator(
        deterministic_ids=True,
        deterministic_clock=True,
        enable_chain=True,
        default_profiles=list(profiles),
        **options,
    )


def ours(profiles: tuple[str, ...] = ALL_PROFILES, **options: Any) -> Coordinator:
    return make(enable_chain=True, default_profiles=profiles, **options)


class IdPairs:
    """Our generated ids and the reference's, paired by where they appear."""

    def __init__(self) -> None:
        self.ours: dict[str, str] = {}

    def pair(self, mine: Any, theirs: Any) -> None:
        if isinstance(mine, str) and isinstance(theirs, str):
            if GENERATED.match(mine) and GENERATED.match(theirs):
                seen = self.ours.setdefault(mine, theirs)
                assert seen == theirs, f"{mine} paired with both {seen} and {theirs}"
        elif isinstance(mine, dict) and isinstance(theirs, dict):
            if mine.keys() == theirs.keys():
                for k in mine:
                    self.pair(mine[k], theirs[k])
            elif len(mine) == len(theirs):  # keyed by generated ids: held order
                for (km, vm), (kt, vt) in zip(mine.items(), theirs.items(), strict=True):
                    self.pair(km, kt)
                    self.pair(vm, vt)
        elif isinstance(mine, list) and isinstance(theirs, list):
            # Unequal lengths are the comparison's to report; pair what both have.
            for a, b in zip(mine, theirs, strict=False):
                self.pair(a, b)

    def map(self, value: Any) -> Any:
        if isinstance(value, str):  # ids inside text too (history notes)
            return INSIDE.sub(lambda m: self.ours.get(m.group(0), m.group(0)), value)
        if isinstance(value, dict):
            return {self.map(k): self.map(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.map(v) for v in value]
        return value


def _shape(response: dict[str, Any]) -> dict[str, Any]:
    if "error" in response:
        return {"code": response["error"]["code"], "data": response["error"].get("data")}
    return {"result": response["result"]}


def _hashes_own_content(value: Any) -> None:
    """Every artefact carrying `content_hash` hashes its own content."""
    if isinstance(value, dict):
        if "content_hash" in value and "content" in value:
            assert value["content_hash"] == digest(value["content"]), value
        for v in value.values():
            _hashes_own_content(v)
    elif isinstance(value, list):
        for v in value:
            _hashes_own_content(v)


def _rehash(value: Any) -> Any:
    """`value` with each content_hash recomputed (after mapping ids)."""
    if isinstance(value, dict):
        out = {k: _rehash(v) for k, v in value.items()}
        if "content_hash" in out and "content" in out:
            out["content_hash"] = digest(out["content"])
        return out
    if isinstance(value, list):
        return [_rehash(v) for v in value]
    return value


def _evidence_free(shape: dict[str, Any]) -> dict[str, Any]:
    """A response shape without evidence heads and links (compared through
    the chain in `check_state`)."""
    if "result" in shape:
        return {"result": _unlinked(shape["result"])}
    return shape


def _unlinked(value: Any) -> Any:
    if isinstance(value, dict) and "evidence_head" in value and "audit_count" in value:
        return {k: v for k, v in value.items() if k != "evidence_head"}
    if isinstance(value, dict) and "entries" in value and "next_seq" in value:
        return {**value, "entries": [{k: v for k, v in e.items() if k != "prev_hash"} for e in value["entries"]]}
    return value


def stored_objects(coord: Any, workspace: str) -> dict[str, dict[str, Any]]:
    """The collections this suite compares, as plain stored bodies."""
    if isinstance(coord, Coordinator):
        data = coord.snapshot(workspace)
        return {c: data.get(c, {}) for c in COLLECTIONS}
    ws = coord.get_workspace(workspace)
    return {
        c: {k: dataclasses.asdict(v) for k, v in getattr(ws, c).items()} for c in COLLECTIONS
    }


class Run:
    """A script run through both sides, compared step by step as it goes."""

    def __init__(self, mine: Any = None, theirs: Any = None, workspace: str = "wsp_d") -> None:
        self.a = Client(mine if mine is not None else ours(), workspace, prefix="s")
        self.b = Client(theirs if theirs is not None else reference(), workspace, prefix="s")
        self.ids = IdPairs()
        self.workspace = workspace

    def step(self, step: Step) -> tuple[dict[str, Any], dict[str, Any]]:
        x, y = self.a.run(step), self.b.run(step)
        sx, sy = _shape(x), _shape(y)
        _hashes_own_content(sx)
        _hashes_own_content(sy)
        self.ids.pair(sx, sy)
        sx, sy = _evidence_free(sx), _evidence_free(sy)
        assert _rehash(self.ids.map(sx)) == sy, (step, x, y)
        return x, y

    def steps(self, steps: list[Step]) -> Run:
        for s in steps:
            self.step(s)
        return self

    def check_state(self) -> None:
        """Same log, same chain (modulo ids), same stored objects, same describe."""
        w = self.workspace
        mine, theirs = self.a.log(), self.b.log()
        assert len(mine) == len(theirs)
        prev = ZERO_HASH
        for x, y in zip(mine, theirs, strict=True):
            self.ids.pair(x, y)
            mapped = self.ids.map(x)
            assert {k: v for k, v in mapped.items() if k != "prev_hash"} == {
                k: v for k, v in y.items() if k != "prev_hash"
            }, (x, y)
            assert y["prev_hash"] == prev, (x, y)
            prev = link_hash(canonical_bytes(record_of(mapped)), prev)
        dx, dy = self.a.describe(), self.b.describe()
        assert dy["evidence_head"] == prev
        assert {k: v for k, v in dx.items() if k != "evidence_head"} == {
            k: v for k, v in dy.items() if k != "evidence_head"
        }
        if dx["state"] == "active":  # verify_chain is gated while paused
            verified = self.a.target.dispatch(env("audit.verify_chain", {"workspace": w}, id="v"))
            assert verified["result"]["status"] == "verified"
        sa, sb = stored_objects(self.a.target, w), stored_objects(self.b.target, w)
        for c in COLLECTIONS:
            assert len(sa[c]) == len(sb[c]), c
            self.ids.pair(sa[c], sb[c])
            assert _rehash(self.ids.map(sa[c])) == sb[c], c

    def codes(self) -> list[Any]:
        return [r["error"]["code"] if "error" in r else "ok" for r in self.b.responses]
