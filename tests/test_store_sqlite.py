"""SqliteStore beyond the shared contract: file layout, settings, damaged
rows, the pre-0.3.2 migration, and writers in separate processes."""

from __future__ import annotations

import json
import logging
import multiprocessing
import re
import sqlite3
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import (
    EntryFilter,
    SqliteStore,
    StoreChange,
    StoreConflictError,
    StoreError,
)
from storage import sqlite as sqlite_store
from storage._rows import entries_query
from storage.contract import COLLECTIONS, IDEMPOTENCY_KEYS, change, entry
from storage.match import entry_matches
from storage.sqlite import _DIALECT, _FILTER_SQL, _REFUSED, KEYS_LAG

SHARED_TABLES = {
    "chap_meta": [("workspace", "TEXT", 0, 1), ("data", "TEXT", 1, 0),
                  ("version", "INTEGER", 1, 0), ("updated_at", "TEXT", 1, 0)],
    "chap_entries": [("workspace", "TEXT", 1, 1), ("seq", "INTEGER", 1, 2),
                     ("data", "TEXT", 1, 0)],
    "chap_objects": [("workspace", "TEXT", 1, 1), ("collection", "TEXT", 1, 2),
                     ("id", "TEXT", 1, 3), ("data", "TEXT", 1, 0)],
}


def columns(db: sqlite3.Connection, table: str) -> list[tuple]:
    # (name, type, notnull, position in the primary key)
    return [(r[1], r[2], r[3], r[5]) for r in db.execute(f"PRAGMA table_info({table})")]


def objects_of(db: sqlite3.Connection) -> dict[str, str]:
    return {name: kind for kind, name in db.execute("SELECT type, name FROM sqlite_master")}


def test_schema_is_the_shared_one(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "a.db").close()
    db = sqlite3.connect(tmp_path / "a.db")
    for table, expected in SHARED_TABLES.items():
        assert columns(db, table) == expected
    kinds = objects_of(db)
    assert kinds["chap_workspaces"] == "view"
    assert [r[1] for r in db.execute("PRAGMA table_info(chap_workspaces)")] == [
        "id", "data", "version", "updated_at"]
    ours = {n: k for n, k in kinds.items() if not n.startswith(("sqlite_autoindex", "chap_"))}
    assert ours == {
        "chapline_entry_keys": "table",
        **{f"chapline_keys_{c}": "index" for c in ("method", "sender", "task_id", "refused")},
        **{f"chapline_entry_{t}": "trigger" for t in ("deleted", "rewritten", "inserted_below")},
    }
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_durable_settings(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "a.db")
    assert store._db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    assert store._db.isolation_level is None
    store.close()
    SqliteStore(tmp_path / "b.db", wal=False).close()
    db = sqlite3.connect(tmp_path / "b.db")
    assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)


FILTERS = {
    "method": EntryFilter(method="task.create"),
    "sender": EntryFilter(sender="human:alice"),
    "task_id": EntryFilter(task_id="T1"),
    "refused": EntryFilter(outcome="refused"),
}


@pytest.mark.parametrize("field", list(FILTERS))
@pytest.mark.parametrize("stop", [None, 10])
def test_filtered_reads_use_an_index(tmp_path: Path, field: str, stop: int | None) -> None:
    """The keyed entries come from the field's index, the tail is scanned
    from past the keys, and the entries are fetched by seq: no read scans
    the workspace's log."""
    store = SqliteStore(tmp_path / "a.db")
    store.apply(change("w", 0, 3))
    store.close()
    sql, args = entries_query(_DIALECT, "seq, data", "w", 0, stop, FILTERS[field])
    db = sqlite3.connect(tmp_path / "a.db")
    plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, args)]
    assert plan[0] == "SEARCH chap_entries USING INDEX sqlite_autoindex_chap_entries_1 (workspace=? AND seq=?)"
    assert any(re.fullmatch(f"SEARCH chapline_entry_keys USING (COVERING )?INDEX chapline_keys_{field} "
                            rf"\(workspace=\? AND {field}=\? AND seq>\?( AND seq<\?)?\)", step)
               for step in plan), plan
    bound = "(workspace=? AND seq>?)" if stop is None else "(workspace=? AND seq>? AND seq<?)"
    tail = [step for step in plan if step.startswith("SEARCH chap_entries USING INDEX") and "seq=?" not in step]
    assert tail == [f"SEARCH chap_entries USING INDEX sqlite_autoindex_chap_entries_1 {bound}"]
    # The tail's one lower bound is past the keys: its scan parses no keyed entry.
    assert "max(coalesce(max(seq), -1), ?)" in sql


def keyed(path: Path, workspace: str = "w") -> int:
    """How many of the workspace's entries the filter index holds."""
    db = sqlite3.connect(path)
    try:
        (n,) = db.execute("SELECT count(*) FROM chapline_entry_keys WHERE workspace = ?", (workspace,)).fetchone()
        return int(n)
    finally:
        db.close()


def test_the_filter_index_is_written_a_group_of_entries_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = SqliteStore(path)
    seen = []
    for seq in range(3 * KEYS_LAG):
        store.apply(change("w", seq))
        seen.append(keyed(path))
    # Nothing is indexed until KEYS_LAG entries are unindexed; then all of them are.
    assert seen[: KEYS_LAG - 1] == [0] * (KEYS_LAG - 1)
    assert seen[KEYS_LAG - 1] == KEYS_LAG
    assert all(n - k < KEYS_LAG for n, k in enumerate(seen, 1))
    assert set(seen) == {0, KEYS_LAG, 2 * KEYS_LAG, 3 * KEYS_LAG}
    store.close()
    # Opening indexes whatever is left.
    SqliteStore(path).close()
    assert keyed(path) == 3 * KEYS_LAG


def foreign(path: Path, *statements: tuple[str, tuple]) -> None:
    """Statements run by another program on the file (no chapline)."""
    db = sqlite3.connect(path)
    for sql, args in statements:
        db.execute(sql, args)
    db.commit()
    db.close()


def insert(seq: int, **fields: Any) -> tuple[str, tuple]:
    return ("INSERT INTO chap_entries (workspace, seq, data) VALUES ('w', ?, ?)",
            (seq, json.dumps(entry(seq, **fields), sort_keys=True)))


def filtered(store: SqliteStore, where: EntryFilter, start: int = 0, stop: int | None = None) -> list[int]:
    return [e["seq"] for e in store.read_entries("w", start, stop, where)]


def expected(store: SqliteStore, where: EntryFilter, start: int = 0, stop: int | None = None) -> list[int]:
    """The oracle: the whole log read unfiltered, filtered in Python."""
    return [e["seq"] for e in store.read_entries("w", start, stop) if entry_matches(e, where)]


def test_entries_another_program_appends_are_found_before_and_after_they_are_indexed(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = SqliteStore(path)
    store.apply(change("w", 0, KEYS_LAG))
    assert keyed(path) == KEYS_LAG
    # Another program appends more than a group, none of it indexed.
    foreign(path, *(insert(seq, method="task.claim" if seq % 3 else "task.create", task=f"T{seq % 5}")
                    for seq in range(KEYS_LAG, 3 * KEYS_LAG)))
    for where in [*FILTERS.values(), EntryFilter(method="task.claim", task_id="T2")]:
        assert filtered(store, where) == expected(store, where)
        assert filtered(store, where, KEYS_LAG + 7, 2 * KEYS_LAG + 3) == expected(
            store, where, KEYS_LAG + 7, 2 * KEYS_LAG + 3)
    assert keyed(path) == KEYS_LAG
    # Our next write indexes them all.
    store.apply(change("w", 3 * KEYS_LAG))
    assert keyed(path) == 3 * KEYS_LAG + 1
    for where in FILTERS.values():
        assert filtered(store, where) == expected(store, where)
    store.close()


def test_entries_another_program_rewrites_deletes_or_reinserts_are_found_as_they_are_now(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = SqliteStore(path)
    store.apply(change("w", 0, 2 * KEYS_LAG))
    assert keyed(path) == 2 * KEYS_LAG
    claim = EntryFilter(method="task.claim")
    # Deleted, then inserted again below the last keyed seq.
    foreign(path, ("DELETE FROM chap_entries WHERE workspace = 'w' AND seq = 20", ()))
    assert keyed(path) == 2 * KEYS_LAG - 1
    assert 20 not in filtered(store, FILTERS["method"])
    foreign(path, insert(20, method="task.claim"))
    assert filtered(store, claim) == expected(store, claim) == [20]
    # Rewritten in place.
    store.apply(change("w", 2 * KEYS_LAG))  # keys the log again
    foreign(path, ("UPDATE chap_entries SET data = ? WHERE workspace = 'w' AND seq = 10",
                   (json.dumps(entry(10, method="task.claim"), sort_keys=True),)))
    assert filtered(store, claim) == expected(store, claim) == [10, 20]
    # The whole workspace replaced by another program: its keys go with it.
    foreign(path, ("DELETE FROM chap_entries WHERE workspace = 'w'", ()),
            *(insert(seq, method="task.claim") for seq in range(5)))
    assert keyed(path) == 0
    assert filtered(store, claim) == expected(store, claim) == [0, 1, 2, 3, 4]
    assert filtered(store, FILTERS["method"]) == []
    store.close()


_FIELDS = st.fixed_dictionaries({
    "method": st.sampled_from(["task.create", "task.claim", "review.decide"]),
    "task": st.sampled_from(["T1", "T2", 7, None]),
    "sender": st.sampled_from(["human:alice", "agent:bot", None]),
    "refused": st.booleans(),
})
_OPS = st.one_of(
    st.tuples(st.just("ours"), st.lists(_FIELDS, min_size=1, max_size=40)),
    st.tuples(st.just("append"), st.lists(_FIELDS, min_size=1, max_size=40)),
    st.tuples(st.just("rewrite"), st.floats(0, 1), _FIELDS),
    st.tuples(st.just("delete"), st.floats(0, 1)),
    st.tuples(st.just("refill"), st.floats(0, 1), _FIELDS),
)
_WHERE = st.builds(
    EntryFilter,
    method=st.sampled_from([None, "task.create", "task.claim", "review.decide"]),
    sender=st.sampled_from([None, "human:alice", "agent:bot"]),
    task_id=st.sampled_from([None, "T1", "T2"]),
    outcome=st.sampled_from([None, "accepted", "refused"]),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_OPS, min_size=1, max_size=12), reads=st.lists(
    st.tuples(_WHERE, st.one_of(st.just(0), st.integers(0, 120)), st.one_of(st.none(), st.integers(0, 160))),
    min_size=1, max_size=6),
    lag=st.sampled_from([1, 5, KEYS_LAG]))
def test_a_filtered_read_is_the_log_filtered_whoever_wrote_it(ops: list, reads: list, lag: int) -> None:
    """Against an oracle that reads the whole range unfiltered and filters in
    Python: chapline's writes (keyed a group at a time; `lag` entries, so
    that keys are often written) mixed with another program's appends,
    rewrites, deletions and re-insertions into the gaps."""
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(sqlite_store, "KEYS_LAG", lag):
        path = Path(tmp, "a.db")
        store = SqliteStore(path)
        try:
            for op in ops:
                db = sqlite3.connect(path)
                seqs = [seq for (seq,) in db.execute("SELECT seq FROM chap_entries WHERE workspace = 'w' ORDER BY seq")]
                top = seqs[-1] + 1 if seqs else 0
                gaps = sorted(set(range(top)) - set(seqs))
                db.close()
                kind = op[0]
                if kind == "ours":
                    store.apply(StoreChange(
                        id="w", base=top, version=top + len(op[1]), updated_at="t", meta={"id": "w"},
                        entries=[entry(top + i, **f) for i, f in enumerate(op[1])]))
                elif kind == "append":
                    foreign(path, *(insert(top + i, **f) for i, f in enumerate(op[1])))
                elif kind in ("rewrite", "delete") and seqs:
                    seq = seqs[min(int(op[1] * len(seqs)), len(seqs) - 1)]
                    if kind == "delete":
                        foreign(path, ("DELETE FROM chap_entries WHERE workspace = 'w' AND seq = ?", (seq,)))
                    else:
                        foreign(path, ("UPDATE chap_entries SET data = ? WHERE workspace = 'w' AND seq = ?",
                                       (json.dumps(entry(seq, **op[2]), sort_keys=True), seq)))
                elif kind == "refill" and gaps:
                    foreign(path, insert(gaps[min(int(op[1] * len(gaps)), len(gaps) - 1)], **op[2]))
                for where, start, stop in reads:
                    assert filtered(store, where, start, stop) == expected(store, where, start, stop)
        finally:
            store.close()


def test_a_file_with_the_old_expression_indexes_drops_them_and_indexes_its_log(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = SqliteStore(path)
    store.apply(change("w", 0, 5))
    store.close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE chapline_entry_keys")
    for name, expr in [*_FILTER_SQL.items(), ("outcome", _REFUSED)]:
        db.execute(f"CREATE INDEX chapline_entries_{name} ON chap_entries (workspace, {expr}, seq)")
    db.commit()
    db.close()
    store = SqliteStore(path)
    kinds = objects_of(sqlite3.connect(path))
    assert not [n for n in kinds if n.startswith("chapline_entries_")]
    assert keyed(path) == 5
    assert filtered(store, FILTERS["task_id"]) == [0, 1, 2, 3, 4]
    store.close()


def damaged_file(path: Path) -> None:
    store = SqliteStore(path)
    for wid in ("bad_entry", "gap", "bad_meta", "bad_object", "utf8", "good"):
        store.apply(change(wid, 0, 3, {"tasks": {"T1": {"id": "T1"}}}))
    store.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE chap_entries SET data = '{broken' WHERE workspace = 'bad_entry' AND seq = 1")
    db.execute("DELETE FROM chap_entries WHERE workspace = 'gap' AND seq = 1")
    db.execute("UPDATE chap_meta SET data = '[1]' WHERE workspace = 'bad_meta'")
    db.execute("UPDATE chap_objects SET data = 'nope' WHERE workspace = 'bad_object'")
    db.execute("UPDATE chap_entries SET data = CAST(x'7bff7d' AS TEXT) "
               "WHERE workspace = 'utf8' AND seq = 2")
    db.commit()
    db.close()


def test_damaged_workspaces_in_a_sqlite_file_are_skipped_whole(tmp_path: Path, caplog) -> None:
    damaged_file(tmp_path / "a.db")
    store = SqliteStore(tmp_path / "a.db")
    with caplog.at_level(logging.WARNING, logger="storage"):
        loaded = store.load()
    assert [r.id for r in loaded] == ["good"]
    assert loaded[0].data["audit"] == [entry(0), entry(1), entry(2)]
    warned = {r.args[0]: r.getMessage() for r in caplog.records if r.name == "storage.sqlite"}
    assert set(warned) == {"bad_entry", "gap", "bad_meta", "bad_object", "utf8"}
    assert "seq 1" in warned["bad_entry"] and "seq 1 is missing" in warned["gap"]
    assert "meta" in warned["bad_meta"] and "tasks/T1" in warned["bad_object"]

    # Without entries the log is not read, so only damage outside entry
    # bodies is seen; a workspace with a damaged entry body loads and its
    # damage surfaces when that range is read.
    light = [r.id for r in store.load(entries=False)]
    assert light == ["bad_entry", "good", "utf8"]
    with pytest.raises(StoreError, match=r"'bad_entry'.*seq 1"):
        store.read_entries("bad_entry")
    assert store.read_entries("bad_entry", 2) == [entry(2)]
    store.close()


# -- the pre-0.3.2 layout ----------------------------------------------------

def old_workspace(wid: str, keyed: bool = True) -> dict:
    """A workspace as 0.2.x saved it: every collection, `audit` inline."""
    members = [{"uri": "human:alice", "type": "human", "role": "reviewer"},
               {"uri": "agent:bot", "type": "agent", "role": "drafter"}]
    tasks = [{"id": "tsk_1", "state": "created", "assignee": "agent:bot"}]
    return {
        "id": wid, "created": "2023-11-14T22:13:20.000Z", "state": "active",
        "profiles": ["core/1.0", "review/1.0"], "mode": "trial", "chain_head": None,
        "members": {m["uri"]: m for m in members} if keyed else members,
        "tasks": {t["id"]: t for t in tasks} if keyed else tasks,
        "overrides": {}, "whispers": {}, "deliberations": {}, "handoffs": {},
        "snapshots": {}, "route_decisions": {}, "idempotency_keys": {"ik": "tsk_1"},
        "audit": [dict(entry(i), prev_hash=None) for i in range(4)],
    }


def old_file(path: Path, extra_tables: tuple[str, ...] = ()) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE chap_workspaces (id TEXT PRIMARY KEY, data TEXT NOT NULL, "
               "version INTEGER NOT NULL, updated_at TEXT NOT NULL)")
    db.execute("CREATE INDEX idx_chap_workspaces_updated_at ON chap_workspaces (updated_at)")
    rows = [("keyed", json.dumps(old_workspace("keyed"))),
            ("arrays", json.dumps(old_workspace("arrays", keyed=False))),
            ("unreadable", "{not json"),
            ("nokey", json.dumps({**old_workspace("nokey"), "tasks": [{"state": "x"}]}))]
    for wid, text in rows:
        db.execute("INSERT INTO chap_workspaces VALUES (?, ?, 4, '2023-11-14T22:13:24.000Z')",
                   (wid, text))
    for name in extra_tables:
        db.execute(f"CREATE TABLE {name} (x)")
    db.commit()
    db.close()


def test_migration_from_the_old_layout(tmp_path: Path, caplog) -> None:
    path = tmp_path / "old.db"
    old_file(path)
    with caplog.at_level(logging.WARNING, logger="storage"):
        store = SqliteStore(path)
    loaded = {r.id: r for r in store.load()}
    assert sorted(loaded) == ["arrays", "keyed"]
    for wid in loaded:
        expected = old_workspace(wid)
        assert loaded[wid].data == expected
        assert (loaded[wid].version, loaded[wid].updated_at) == (4, "2023-11-14T22:13:24.000Z")
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "'unreadable'" in warned and "'nokey'" in warned
    store.apply(change("keyed", 4, 1))
    store.close()

    db = sqlite3.connect(path)
    kinds = objects_of(db)
    assert kinds["chap_workspaces"] == "view" and kinds["chap_workspaces_v1"] == "table"
    assert "idx_chap_workspaces_updated_at" not in kinds
    kept = dict(db.execute("SELECT id, data FROM chap_workspaces_v1"))
    assert sorted(kept) == ["arrays", "keyed", "nokey", "unreadable"]
    assert kept["unreadable"] == "{not json"
    # The view shows the workspace in the old shape, log in order.
    (view,) = db.execute("SELECT data, version FROM chap_workspaces WHERE id = 'arrays'")
    assert json.loads(view[0]) == old_workspace("arrays") and view[1] == 4
    assert db.execute("SELECT COUNT(*) FROM chap_entries").fetchone() == (9,)
    db.close()
    # Opening again migrates nothing more.
    store = SqliteStore(path)
    assert sorted(r.id for r in store.load()) == ["arrays", "keyed"]
    store.close()
    assert "chap_workspaces_v1_2" not in objects_of(sqlite3.connect(path))


def test_migration_picks_a_free_name(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_file(path, extra_tables=("chap_workspaces_v1",))
    SqliteStore(path).close()
    kinds = objects_of(sqlite3.connect(path))
    assert kinds["chap_workspaces_v1_2"] == "table"
    assert kinds["chap_workspaces"] == "view"


def _open_and_load(path: str, start, results) -> None:
    start.wait()
    store = SqliteStore(path)
    results.put(sorted((r.id, r.version, json.dumps(r.data, sort_keys=True))
                       for r in store.load()))
    store.close()


def test_two_processes_open_one_old_file(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_file(path)
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_open_and_load, args=(str(path), start, results))
             for _ in range(2)]
    for p in procs:
        p.start()
    seen = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert seen[0] == seen[1] and [s[0] for s in seen[0]] == ["arrays", "keyed"]
    db = sqlite3.connect(path)
    kinds = objects_of(db)
    assert [n for n in kinds if n.startswith("chap_workspaces_v1")] == ["chap_workspaces_v1"]
    assert db.execute("SELECT COUNT(*) FROM chap_entries").fetchone() == (8,)


# -- writers in two processes -------------------------------------------------

def _race(path: str, who: str, rounds: int, start, results) -> None:
    store = SqliteStore(path)
    won = []
    for r in range(rounds):
        start.wait()
        try:
            store.apply(StoreChange("w", r, r + 1, "t", {"id": "w"}, [{"seq": r, "by": who}],
                                    {"tasks": {f"{who}{r}": {"id": who}}}))
            won.append(r)
        except StoreConflictError as exc:
            assert (exc.held, exc.base) == (r + 1, r)
    store.close()
    results.put((who, won))


def test_two_processes_same_base_one_wins(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    SqliteStore(path).close()
    rounds = 20
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(path), who, rounds, start, results))
             for who in "ab"]
    for p in procs:
        p.start()
    won = dict(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(won["a"] + won["b"]) == list(range(rounds))
    store = SqliteStore(path)
    log = store.read_entries("w")
    assert [e["seq"] for e in log] == list(range(rounds))
    winner = {r: who for who in "ab" for r in won[who]}
    assert [e["by"] for e in log] == [winner[r] for r in range(rounds)]
    (record,) = store.load()
    assert sorted(record.data["tasks"]) == sorted(f"{winner[r]}{r}" for r in range(rounds))
    store.close()


def test_filter_after_another_writer(tmp_path: Path) -> None:
    """Rows written by another connection are found through the indexes."""
    path = tmp_path / "a.db"
    first, second = SqliteStore(path), SqliteStore(path)
    first.apply(StoreChange("w", 0, 2, "t", {}, [entry(0, task="A"), entry(1, task="B")]))
    second.apply(StoreChange("w", 2, 3, "t", {}, [entry(2, task="A", refused=True)]))
    assert first.read_entries("w", where=EntryFilter(task_id="A")) == [
        entry(0, task="A"), entry(2, task="A", refused=True)]
    assert [e["seq"] for e in first.read_entries("w", where=EntryFilter(outcome="refused"))] == [2]
    first.close()
    second.close()


def test_closed_store_says_so(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "a.db")
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.load()
    with pytest.raises(StoreError, match="closed"):
        store.read_entries("w")


def test_view_matches_load(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "a.db")
    store.apply(change("w", 0, 3, {c: {"k": {"id": "k", "c": c}} for c in COLLECTIONS}
                       | {IDEMPOTENCY_KEYS: {"ik": "k"}}))
    (record,) = store.load()
    store.close()
    db = sqlite3.connect(tmp_path / "a.db")
    (text,) = db.execute("SELECT data FROM chap_workspaces WHERE id = 'w'").fetchone()
    assert json.loads(text) == record.data


def test_workspace_ids_list_a_workspace_whose_meta_row_is_lost(tmp_path: Path) -> None:
    """A verifier must be able to name a damaged workspace, not only skip it."""
    store = SqliteStore(tmp_path / "d.db")
    store.apply(StoreChange("w", 0, 1, "t", {"id": "w"}, [{"seq": 0, "arrived": "t", "envelope": {}}]))
    store.apply(StoreChange("v", 0, 0, "t", {"id": "v"}))
    with sqlite3.connect(tmp_path / "d.db") as db:
        db.execute("DELETE FROM chap_meta WHERE workspace = 'w'")
    assert store.workspace_ids() == ["v", "w"]
    assert [h.id for h in store.load_held()] == ["v"]
    store.close()
