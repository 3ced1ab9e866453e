"""The live claims of one workspace, indexed in memory beside it, so that a
claim, heartbeat, report or sweep costs what it touches, not the number of
live claims.

`ClaimIndex` is derived from the stored `x_chapline_claims` objects only: it
is built from them on first need (after a load, a reload or a restore, the
workspace is new and so is its index) and then told every value the
workspace takes, which happens only once the store has taken the write (or,
inside a batch, with the batch's provisional values and their undo). It never
changes while a call runs; `LiveClaims` lays what the call has staged over it.

It keeps: the claims by task id; how many each holder has; the resources
they hold (counts per path and per enclosing path, the root included, so
that an overlap is found in O(path depth)); and a heap of lease expiries,
with stale entries (a lease extended or ended) skipped when read and
dropped when they reach the top or outnumber the live ones.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from coordinator.engine.call import Call

__all__ = ["CLAIMS", "ClaimIndex", "LiveClaims", "overlaps", "resource"]

CLAIMS = "x_chapline_claims"

Claim = dict[str, Any]


def resource(path: str) -> str:
    """A resource path as claims compare it: its non-empty segments joined
    by `/`, so that a leading, trailing or doubled `/` names the same
    resource; the root `/` is "", which holds every path."""
    return "/".join(part for part in path.split("/") if part)


def overlaps(p: str, q: str) -> bool:
    """Two resource paths overlap when equal or one is inside the other
    (everything is inside the root)."""
    a, b = resource(p), resource(q)
    return a == b or not a or not b or b.startswith(a + "/") or a.startswith(b + "/")


def _ancestors(key: str) -> Iterator[str]:
    """The resources a resource (as `resource` gives it) is inside, the
    root last."""
    if not key:
        return
    i = key.rfind("/")
    while i > 0:
        key = key[:i]
        yield key
        i = key.rfind("/")
    yield ""


class _Resources:
    """How many held claims write, and read or write, each path and each
    proper ancestor of such a path (a multiset: reads may be shared)."""

    __slots__ = ("writes", "writes_under", "touched", "touched_under")

    def __init__(self) -> None:
        self.writes: Counter[str] = Counter()
        self.writes_under: Counter[str] = Counter()
        self.touched: Counter[str] = Counter()
        self.touched_under: Counter[str] = Counter()

    def add(self, claim: Claim, step: int = 1) -> None:
        for p in map(resource, claim["writes"]):
            _bump(self.writes, p, step)
            for a in _ancestors(p):
                _bump(self.writes_under, a, step)
        for p in map(resource, (*claim["reads"], *claim["writes"])):
            _bump(self.touched, p, step)
            for a in _ancestors(p):
                _bump(self.touched_under, a, step)

    def facts(self) -> tuple[dict[str, int], ...]:
        return dict(self.writes), dict(self.writes_under), dict(self.touched), dict(self.touched_under)


def _bump(counts: Counter[str], key: str, step: int) -> None:
    n = counts[key] + step
    if n:
        counts[key] = n
    else:
        del counts[key]


def _holds(path: str, exact: Counter[str], under: Counter[str], minus_exact: Counter[str],
           minus_under: Counter[str]) -> bool:
    """Whether a claim (not among those subtracted) holds `path`, something
    inside it, or something it is inside."""
    path = resource(path)
    if exact[path] > minus_exact[path] or under[path] > minus_under[path]:
        return True
    return any(exact[a] > minus_exact[a] for a in _ancestors(path))


class ClaimIndex:
    """What the held claims of one workspace hold (see the module's doc)."""

    __slots__ = ("claims", "holders", "resources", "_expiries")

    def __init__(self) -> None:
        self.claims: dict[str, Claim] = {}
        self.holders: Counter[str] = Counter()
        self.resources = _Resources()
        self._expiries: list[tuple[int, str]] = []  # a heap; entries may be stale

    @classmethod
    def of(cls, items: Iterable[tuple[str, Claim]]) -> ClaimIndex:
        index = cls()
        for key, claim in items:
            index._add(key, claim)
        index._expiries = [(c["expires_ms"], k) for k, c in index.claims.items()]
        heapq.heapify(index._expiries)
        return index

    def update(self, key: str, value: Claim | None) -> None:
        """The stored claim of task `key` is now `value` (None: no claim)."""
        old = self.claims.pop(key, None)
        if old is not None:
            _bump(self.holders, old["holder"], -1)
            self.resources.add(old, -1)
        if value is not None:
            self._add(key, value)
            heapq.heappush(self._expiries, (value["expires_ms"], key))
        heap = self._expiries
        while heap and not self._live(heap[0]):
            heapq.heappop(heap)
        if len(heap) > 2 * len(self.claims) + 64:  # mostly stale: start again
            self._expiries = [(c["expires_ms"], k) for k, c in self.claims.items()]
            heapq.heapify(self._expiries)

    def _add(self, key: str, claim: Claim) -> None:
        self.claims[key] = claim
        _bump(self.holders, claim["holder"], 1)
        self.resources.add(claim)

    def _live(self, entry: tuple[int, str]) -> bool:
        claim = self.claims.get(entry[1])
        return claim is not None and claim["expires_ms"] == entry[0]

    def earliest(self) -> int | None:
        """The earliest lease expiry (epoch ms), or None without claims."""
        return self._expiries[0][0] if self._expiries else None

    def expired(self, now: int) -> set[str]:
        """The tasks whose held lease has ended by `now`: the heap's entries
        at or before `now`, found without popping (a node's subtree is never
        earlier than the node)."""
        heap, out = self._expiries, set()
        stack = [0] if heap else []
        while stack:
            i = stack.pop()
            if heap[i][0] > now:
                continue
            if self._live(heap[i]):
                out.add(heap[i][1])
            stack.extend(j for j in (2 * i + 1, 2 * i + 2) if j < len(heap))
        return out

    def facts(self) -> tuple[Any, ...]:
        """Everything the index says, comparable with a recomputation."""
        live = sorted(e for e in set(self._expiries) if self._live(e))
        return dict(self.claims), dict(self.holders), self.resources.facts(), live


class LiveClaims:
    """The live claims as one call sees them: the held index, with the
    claims the call has staged (put or deleted) laid over it. Each query
    costs what the call staged plus what it asks about."""

    def __init__(self, call: Call) -> None:
        self._call = call
        self.index = call.workspace().index(CLAIMS, ClaimIndex.of)

    def _staged(self) -> dict[str, Claim | None]:
        staged: dict[str, Claim | None] = self._call.staged.get(CLAIMS, {})
        return staged

    def count(self, holder: str | None = None) -> int:
        """How many live claims (held by `holder` if given)."""
        def counted(claim: Claim | None) -> int:
            return int(claim is not None and (holder is None or claim["holder"] == holder))

        held = self.index.claims
        n = len(held) if holder is None else self.index.holders[holder]
        for key, new in self._staged().items():
            n += counted(new) - counted(held.get(key))
        return n

    def expired(self, now: int) -> list[tuple[str, Claim]]:
        """The claims whose lease has ended by `now`, earliest first, then by task id."""
        out = []
        for key in self.index.expired(now) | set(self._staged()):
            claim: Claim | None = self._call.get(CLAIMS, key)
            if claim is not None and claim["expires_ms"] <= now:
                out.append((key, claim))
        out.sort(key=lambda item: (item[1]["expires_ms"], item[0]))
        return out

    def conflicts(self) -> Callable[[list[str], list[str]], str | None]:
        """A check of (reads, writes) against the live claims: the first
        resource that conflicts (a write against anything held, a read
        against a held write), or None. Staged claims are taken as of now."""
        res = self.index.resources
        minus, added = _Resources(), []
        for key, new in self._staged().items():
            old = self.index.claims.get(key)
            if old is not None:
                minus.add(old)
            if new is not None:
                added.append(new)

        def check(reads: list[str], writes: list[str]) -> str | None:
            for p in writes:
                if _holds(p, res.touched, res.touched_under, minus.touched, minus.touched_under):
                    return p
                if any(overlaps(p, q) for c in added for q in (*c["reads"], *c["writes"])):
                    return p
            for p in reads:
                if _holds(p, res.writes, res.writes_under, minus.writes, minus.writes_under):
                    return p
                if any(overlaps(p, q) for c in added for q in c["writes"]):
                    return p
            return None

        return check
