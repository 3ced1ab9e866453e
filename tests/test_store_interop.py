"""Files move both ways between our SqliteStore and the reference's
(chap-coordinator 0.3.3), which is driven here as a black box."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from chap_coordinator import Coordinator
from chap_coordinator.storage.sqlite import SqliteStore as ReferenceStore
from client import Client

from storage import EntryFilter, SqliteStore


def session(coord: Coordinator) -> None:
    """A short review session with a recorded refusal, in two workspaces."""
    chap = Client(coord, None)
    for ws in ("wsp_a", "wsp_b"):
        chap.ok("workspace.create", workspace=ws)
        chap.ok("participant.join", frm="human:alice", workspace=ws, type="human", role="reviewer")
        chap.ok("participant.join", frm="human:carol", workspace=ws, type="human", role="reviewer")
        chap.ok("participant.join", frm="agent:bot", workspace=ws, type="agent", role="drafter")
        task = chap.ok("task.create", frm="human:alice", workspace=ws, assignee="agent:bot", kind="k",
                       input={"n": 1}, idempotency_key=f"ik-{ws}")["task_id"]
        chap.ok("task.update", frm="agent:bot", workspace=ws, task_id=task, state="in_progress")
        chap.ok("review.request", frm="agent:bot", workspace=ws, task_id=task, to=["human:alice"],
                artefact={"a": 1})
        chap.fail(-32011, "decide.approve", frm="human:carol", workspace=ws, task_id=task)  # recorded
        chap.ok("decide.approve", frm="human:alice", workspace=ws, task_id=task)


def options() -> dict:
    return {"deterministic_ids": True, "deterministic_clock": True, "enable_chain": True}


def records(store) -> dict:
    return {r.id: (r.data, r.version, r.updated_at) for r in store.load()}


def test_ours_loads_what_the_reference_wrote(tmp_path: Path) -> None:
    path = tmp_path / "ref.db"
    ref = ReferenceStore(str(path))
    session(Coordinator(store=ref, **options()))
    expected = records(ref)
    ref.close()
    assert sorted(expected) == ["wsp_a", "wsp_b"] and expected["wsp_a"][1] == 9

    ours = SqliteStore(path)  # adds our indexes to the reference's file
    assert records(ours) == expected
    refused = ours.read_entries("wsp_a", where=EntryFilter(outcome="refused"))
    assert [(e["seq"], e["outcome"]["code"]) for e in refused] == [(7, -32011)]
    ours.close()
    # The reference still reads and writes the file after we opened it.
    ref = ReferenceStore(str(path))
    coord = Coordinator(store=ref, **options())
    Client(coord, "wsp_a").ok("participant.join", frm="human:dan", type="human", role="reviewer")
    ref.close()
    ours = SqliteStore(path)
    joins = ours.read_entries("wsp_a", 9, where=EntryFilter(sender="human:dan"))
    assert [e["seq"] for e in joins] == [9]
    ours.close()


def test_the_reference_loads_what_ours_wrote(tmp_path: Path) -> None:
    path = tmp_path / "ours.db"
    ours = SqliteStore(path)
    # The reference coordinator writes through our store (its StoreChange
    # objects), so the file holds exactly what a coordinator sends.
    original = Coordinator(store=ours, **options())
    session(original)
    written = records(ours)
    ours.close()

    ref = ReferenceStore(str(path))
    assert records(ref) == written
    restored = Coordinator(store=ref, **options())
    assert sorted(restored.workspaces) == ["wsp_a", "wsp_b"]
    for ws in ("wsp_a", "wsp_b"):
        for method in ("workspace.describe", "audit.read", "audit.verify_chain"):
            envelope = {"jsonrpc": "2.0", "id": "q", "method": method,
                        "params": {"workspace": ws}}
            assert restored.dispatch(envelope) == original.dispatch(envelope), (ws, method)
    ref.close()


def test_ours_opens_a_file_the_reference_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE chap_workspaces (id TEXT PRIMARY KEY, data TEXT NOT NULL, "
               "version INTEGER NOT NULL, updated_at TEXT NOT NULL)")
    db.execute("CREATE INDEX idx_chap_workspaces_updated_at ON chap_workspaces (updated_at)")
    data = ('{"id": "w", "state": "active", "members": {}, "tasks": {"t": {"id": "t"}}, '
            '"audit": [{"seq": 0, "arrived": "t0", "envelope": {"method": "workspace.create", '
            '"params": {"workspace": "w"}}}]}')
    db.execute("INSERT INTO chap_workspaces VALUES ('w', ?, 1, 't0')", (data,))
    db.commit()
    db.close()
    ref = ReferenceStore(str(path))
    expected = records(ref)
    ref.close()
    ours = SqliteStore(path)
    assert records(ours) == expected
    ours.close()
    names = {n for (n,) in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert "chap_workspaces_v1" in names and "chap_workspaces_v1_2" not in names
