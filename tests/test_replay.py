"""Replay names each generated id as the stored objects do (coordinator/tools/replay.py):
the matching rule against its plain definition, and whole workspaces whose
objects share a millisecond or come back from the store in another order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from client import WS, Client
from hypothesis import given
from hypothesis import strategies as st
from support import ALICE, BOT

from coordinator import Coordinator
from coordinator.engine.clock import iso_ms
from coordinator.tools.replay import _Clock, _StoredIds, replay_workspace
from coordinator.tools.verification import verify_store
from storage import SqliteStore

START_MS = 1_700_000_000_000


class _Defined:
    """The matching rule as the docstring of _StoredIds states it, scanning
    every stored id on every call."""

    def __init__(self, clock: _Clock, objects: dict[str, dict[str, Any]]) -> None:
        self.clock = clock
        self.pool: list[tuple[str, str, Any]] = []
        for items in objects.values():
            for key, value in items.items():
                if isinstance(key, str) and "_" in key:
                    created = None
                    if isinstance(value, dict):
                        created = next(
                            (value[f] for f in ("created_at", "created", "ts", "opened_at",
                                                "asked_at", "proposed_at", "produced_at")
                             if f in value),
                            None,
                        )
                    self.pool.append((key.split("_", 1)[0], key, created))
        self.used: set[str] = set()
        self.fresh = 0

    def __call__(self, prefix: str) -> str:
        arrived = iso_ms(self.clock.now_ms)
        free = [(k, c) for p, k, c in self.pool if p == prefix and k not in self.used]
        for key in [k for k, c in free if c == arrived] or [k for k, _ in free]:
            self.used.add(key)
            return key
        self.fresh += 1
        return f"{prefix}_replay{self.fresh}"


_prefixes = st.sampled_from(["task", "rev", "dec"])
_moments = st.integers(0, 3)
# Keys drawn from a small set, so one id often stands in two collections
# (with different creation times); values include creation fields that can
# never equal an arrival time.
_objects = st.dictionaries(
    st.sampled_from(["tasks", "reviews", "decisions"]),
    st.dictionaries(
        st.one_of(
            st.builds(lambda p, n: f"{p}_{n}", _prefixes, st.integers(0, 12)),
            st.sampled_from(["plain", "_lead"]),
        ),
        st.one_of(
            st.builds(lambda f, m: {f: iso_ms(START_MS + m)},
                      st.sampled_from(["created_at", "ts", "produced_at"]), _moments),
            st.builds(lambda m: {"created_at": [iso_ms(START_MS + m)]}, _moments),
            st.just({"note": "no creation time"}),
            st.just("not an object"),
        ),
        max_size=12,
    ),
)


@given(_objects, st.lists(st.tuples(_moments, _prefixes), max_size=40))
def test_stored_ids_follow_the_rule(objects: dict[str, dict[str, Any]], calls: list[tuple[int, str]]) -> None:
    clock, defined_clock = _Clock(), _Clock()
    ids, defined = _StoredIds(clock, objects), _Defined(defined_clock, objects)
    for moment, prefix in calls:
        clock.now_ms = defined_clock.now_ms = START_MS + moment
        assert ids(prefix) == defined(prefix)


def _workspace(path: Path) -> None:
    """Forty tasks, each sent for review, all in one millisecond; then forty
    more in the next; ids from the real generator."""
    now = [START_MS]
    coord = Coordinator(SqliteStore(path), clock=lambda: now[0])
    c = Client(coord)
    c.setup()
    for ms in range(2):
        now[0] = START_MS + 1 + ms
        for n in range(40):
            task = c.new_task(input={"n": n, "ms": ms})
            c.ok("review.request", frm=BOT, task_id=task, artefact={"text": f"draft {n}"}, to=[ALICE])
    coord.close()


def test_objects_of_one_millisecond_verify(tmp_path: Path) -> None:
    path = tmp_path / "chap.db"
    _workspace(path)
    store = SqliteStore(path)
    try:
        (report,) = verify_store(store)
    finally:
        store.close()
    assert report.ok, report.findings
    assert report.entries == 5 + 2 * 40 * 2


def test_arrival_time_decides_over_stored_order(tmp_path: Path) -> None:
    """Objects held newest millisecond first (as an imported snapshot may
    hold them): each call still gets the id created at its arrival, and
    within one millisecond the stored order decides."""
    path = tmp_path / "chap.db"
    _workspace(path)
    store = SqliteStore(path)
    try:
        (held,) = store.load_held(WS)
        entries = store.read_entries(WS)
    finally:
        store.close()
    meta = {"id": WS, **held.meta}
    objects = {c: {k: json.loads(t) for k, t in items.items()} for c, items in held.objects.items()}
    newest_first = {}
    for collection, items in objects.items():
        moments: dict[str, list[str]] = {}
        for key, value in items.items():
            moments.setdefault(value.get("created_at", ""), []).append(key)
        newest_first[collection] = {k: items[k] for m in reversed(moments) for k in moments[m]}
    assert list(newest_first["tasks"]) != list(objects["tasks"])
    assert replay_workspace(meta, entries, newest_first) == []
    backwards = {c: dict(reversed(items.items())) for c, items in objects.items()}
    divergences = replay_workspace(meta, entries, backwards)
    assert divergences and divergences[0].where == "entry"
