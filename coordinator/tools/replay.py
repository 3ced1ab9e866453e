"""Replaying a workspace's audit log through a fresh coordinator.

The log is the truth and the stored objects are what it leads to. Replaying
every recorded call, at the time it arrived, on an empty in-memory
coordinator must give back the same entries (byte for byte, so the same chain)
and the same objects; anything stored that the log does not produce was
written some other way.
"""

from __future__ import annotations

import calendar
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from coordinator.engine.canonical import ZERO_HASH, canonical_bytes
from coordinator.engine.clock import iso_ms
from coordinator.engine.registry import profile_names
from coordinator.errors import CanonicalError, Unreplayable

__all__ = ["Divergence", "rebuild_workspace", "replay_workspace"]

# The fields that date an object's creation, by which a generated id is
# matched back to the stored object it named.
_CREATION_FIELDS = ("created_at", "created", "ts", "opened_at", "asked_at", "proposed_at", "produced_at")
# What the replay may not compare: bookkeeping, not what the log decides.
_META_IGNORED = frozenset({"updated_at"})


@dataclass(frozen=True)
class Divergence:
    """Where the stored workspace differs from what its log produces."""

    seq: int | None  # the entry where replay first differs; None for objects
    where: str  # "entry", "meta" or "collection/key"
    detail: str


@dataclass
class _Clock:
    now_ms: int = 0

    def __call__(self) -> int:
        return self.now_ms


class _StoredIds:
    """Generated ids as the stored objects name them.

    A replayed call that generates an id gets the first unused stored id of
    that prefix (in stored order) whose object was created at the call's
    arrival time, else the first unused one of that prefix at all, so the
    replay names objects as the original run did. When none is left, a fresh
    id is made, and the object shows up as a difference.

    Both orders are indexed once, and a used id is dropped from the front of
    a queue when it gets there, so a replay costs linear time in the number
    of objects (a scan per call made `verify` quadratic).
    """

    def __init__(self, clock: _Clock, objects: dict[str, dict[str, Any]]) -> None:
        self.clock = clock
        self.used: set[str] = set()
        self.fresh = 0
        self._by_prefix: dict[str, deque[str]] = {}
        self._by_moment: dict[tuple[str, str], deque[str]] = {}
        for items in objects.values():
            for key, value in items.items():
                if not (isinstance(key, str) and "_" in key):
                    continue
                prefix = key.split("_", 1)[0]
                self._by_prefix.setdefault(prefix, deque()).append(key)
                if isinstance(value, dict):
                    created = next((value[f] for f in _CREATION_FIELDS if f in value), None)
                    # Only a string can equal an arrival time.
                    if isinstance(created, str):
                        self._by_moment.setdefault((prefix, created), deque()).append(key)

    def __call__(self, prefix: str) -> str:
        arrived = iso_ms(self.clock.now_ms)
        for queue in (self._by_moment.get((prefix, arrived)), self._by_prefix.get(prefix)):
            while queue:
                key = queue.popleft()
                if key not in self.used:
                    self.used.add(key)
                    return key
        self.fresh += 1
        return f"{prefix}_replay{self.fresh}"


def _epoch_ms(arrived: Any) -> int | None:
    """`arrived` as epoch ms, or None unless it is in the one form CHAP writes."""
    if not isinstance(arrived, str):
        return None
    try:
        moment = datetime.strptime(arrived, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return None
    ms = calendar.timegm(moment.timetuple()) * 1000 + moment.microsecond // 1000
    return ms if iso_ms(ms) == arrived else None


def _canonical(value: Any) -> bytes | None:
    try:
        return canonical_bytes(value)
    except CanonicalError:
        return None


def _first_difference(stored: Any, replayed: Any) -> str:
    if isinstance(stored, dict) and isinstance(replayed, dict):
        for name in sorted(set(stored) | set(replayed)):
            if _canonical(stored.get(name)) != _canonical(replayed.get(name)):
                return (
                    f"field {name!r} is {_brief(stored.get(name))} in the store "
                    f"but {_brief(replayed.get(name))} by the log"
                )
    return f"{_brief(stored)} in the store but {_brief(replayed)} by the log"


def _brief(value: Any) -> str:
    text = (_canonical(value) or repr(value).encode()).decode("utf-8", "replace")
    return text if len(text) <= 80 else text[:77] + "..."


class _LookAheadIds:
    """Generated ids for rebuilding from the log alone: the id a later entry
    first refers to (a task created at seq 4 is the one seq 7 names). An id
    no later entry names is not in the log at all, so any fresh one will do."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.position = 0
        self.first_seen: dict[str, int] = {}
        for index, entry in enumerate(entries):
            for text in _strings(entry):
                self.first_seen.setdefault(text, index)
        self.used: set[str] = set()
        self.fresh = 0

    def __call__(self, prefix: str) -> str:
        later = sorted(
            (at, text)
            for text, at in self.first_seen.items()
            if at > self.position and text.startswith(prefix + "_") and text not in self.used
        )
        if later:
            self.used.add(later[0][1])
            return later[0][1]
        self.fresh += 1
        return f"{prefix}_rebuilt{self.fresh}"


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _creates(entries: list[dict[str, Any]], wid: str) -> bool:
    """Whether the log starts with the workspace's own creation."""
    first = entries[0].get("envelope") if entries else None
    return (
        isinstance(first, dict)
        and first.get("method") == "workspace.create"
        and isinstance(first.get("params"), dict)
        and first["params"].get("workspace") == wid
    )


def _replay(
    coord: Any, clock: _Clock, wid: str, entries: list[dict[str, Any]], on_entry: Any = None
) -> Divergence | None:
    """Dispatch every recorded call at its arrival time; the first entry that
    comes out differently, or None."""
    for index, entry in enumerate(entries):
        seq = entry.get("seq")
        ms = _epoch_ms(entry.get("arrived"))
        if ms is None:
            return Divergence(seq, "entry", f"arrived {entry.get('arrived')!r} is not a CHAP timestamp")
        clock.now_ms = ms
        if on_entry is not None:
            on_entry(index)
        answer = coord.dispatch(entry["envelope"] if "envelope" in entry else entry.get("request"))
        produced = coord.store.read_entries(wid, index, index + 1)
        if not produced:
            error = answer.get("error")
            why = (
                f"it is refused unrecorded, {error.get('code')}: {error.get('message')}"
                if isinstance(error, dict)
                else "it is a read"
            )
            return Divergence(seq, "entry", f"replaying it records nothing ({why})")
        if _canonical(produced[0]) != _canonical(entry):
            return Divergence(
                seq, "entry", f"replaying it differs: {_first_difference(entry, produced[0])}"
            )
    return None


def _coordinator(clock: _Clock, ids: Any, chained: bool, profiles: Any) -> Any:
    from coordinator.coordinator import Coordinator  # the pipeline itself replays

    if profiles is not None and not (
        isinstance(profiles, list) and all(isinstance(p, str) for p in profiles)
    ):
        raise Unreplayable(f"its profiles {profiles!r} are not a list of profile strings")
    advertised = tuple(profiles or ("core/1.0", "review/1.0"))
    names = profile_names(list(advertised))
    if "identity-oidc" in names:
        raise Unreplayable(
            "it advertises identity-oidc/1.0, and only the deployment's OIDC verifier "
            "can check its joins' tokens again, so its log cannot be replayed here"
        )
    try:
        return Coordinator(
            clock=clock,
            ids=ids,
            enable_chain=chained,
            default_profiles=advertised,
            max_envelope_bytes=2**62,
            # A workspace kept by `serve --require-signatures` advertises
            # security-signed; its calls are checked again as they were then
            # (keys judged at each call's arrival).
            require_signatures="security-signed" in names,
        )
    except ValueError as exc:  # profiles chapline does not implement
        raise Unreplayable(f"its profiles cannot be replayed: {exc}") from None


def replay_workspace(
    meta: dict[str, Any],
    entries: list[dict[str, Any]],
    objects: dict[str, dict[str, Any]],
) -> list[Divergence]:
    """Replay `entries` (the whole, well-formed log of the workspace whose own
    fields are `meta`) and compare with the stored `objects`; [] if they agree.

    Replay stops at the first entry that comes out differently: everything
    after it would differ too.
    """
    wid = meta["id"]
    clock = _Clock()
    chained = bool(meta.get("chain_enabled"))
    try:
        coord = _coordinator(clock, _StoredIds(clock, objects), chained, meta.get("profiles"))
    except Unreplayable as exc:
        return [Divergence(None, "meta", str(exc))]
    if not _creates(entries, wid):
        # Created with a generated id, which 0.3.3 and chapline leave out of
        # the log: start from the workspace's own fields.
        seed = dict(meta, audit=[])
        if chained:
            seed["chain_head"] = ZERO_HASH
        coord.restore(seed)
    divergence = _replay(coord, clock, wid, entries)
    if divergence is not None:
        return [divergence]
    out: list[Divergence] = []
    replayed = coord.snapshot(wid)
    for name, value in meta.items():
        if name in _META_IGNORED or name == "id":
            continue
        if _canonical(value) != _canonical(replayed.get(name)):
            out.append(Divergence(None, "meta", _first_difference({name: value}, {name: replayed.get(name)})))
    produced = {c: v for c, v in replayed.items() if isinstance(v, dict) and c != "audit"}
    for collection in sorted({*objects, *produced}):
        stored = objects.get(collection, {})
        made = produced.get(collection, {})
        for key in sorted(set(stored) | set(made), key=str):
            where = f"{collection}/{key}"
            if key not in made:
                out.append(Divergence(None, where, "stored, but no entry of the log creates it"))
            elif key not in stored:
                out.append(Divergence(None, where, "the log creates it, but the store does not hold it"))
            elif _canonical(stored[key]) != _canonical(made[key]):
                out.append(Divergence(None, where, _first_difference(stored[key], made[key])))
    return out


def rebuild_workspace(wid: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The snapshot of workspace `wid` rebuilt from its log alone, whose
    replay reproduces every entry byte for byte (so the chain too).

    Raises ValueError when the log cannot rebuild it: it does not start with
    the workspace's creation, or an entry comes out differently.
    """
    if not _creates(entries, wid):
        raise ValueError(
            "its log does not start with its workspace.create (a workspace created "
            "with a generated id is not recorded), so the log alone cannot rebuild "
            "it; export and import it as a snapshot"
        )
    for seq, entry in enumerate(entries):
        if not isinstance(entry, dict) or entry.get("seq") != seq:
            raise ValueError(f"entry {seq} is missing or out of order")
    clock = _Clock()
    ids = _LookAheadIds(entries)
    chained = "prev_hash" in entries[0]
    profiles = entries[0]["envelope"]["params"].get("profiles")
    coord = _coordinator(clock, ids, chained, profiles if isinstance(profiles, list) else None)

    def at(index: int) -> None:
        ids.position = index

    divergence = _replay(coord, clock, wid, entries, at)
    if divergence is not None:
        raise ValueError(f"seq {divergence.seq}: {divergence.detail}")
    snapshot: dict[str, Any] = coord.snapshot(wid)
    return snapshot
