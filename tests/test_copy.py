"""`chapline copy`: SQLite -> PostgreSQL -> SQLite, each workspace verified on
arrival; a non-empty target refused unless --replace; the log commands read
PostgreSQL too."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from client import Client
from support import BOB, BOT, make, s0
from test_logcli import WS, chapline, signed_workload

from coordinator.cli import main
from storage import PostgresStore, SqliteStore


def _workload(path: str) -> dict[str, dict]:
    coord = make(SqliteStore(path))
    for ws in ("wsp_a", "wsp_b"):
        c = Client(coord, ws)
        T = s0(c)
        c.ok("task.update", frm=BOT, task_id=T, state="in_progress")
        c.ok("participant.join", frm=BOB, type="human")
        c.fail(-32011, "workspace.set_profiles", frm=BOT, profiles=["core/1.0"])  # a recorded refusal
        c.ok("task.complete", frm=BOT, task_id=T, output={"o": [1, "x"]})
    out = {ws: coord.snapshot(ws) for ws in ("wsp_a", "wsp_b")}
    coord.close()
    return out


def test_sqlite_to_postgres_and_back_keeps_every_workspace(tmp_path: Path, pg_server, capsys) -> None:
    source = str(tmp_path / "source.db")
    before = _workload(source)
    uri = pg_server.uri(pg_server.new_database())
    assert main(["copy", source, uri]) == 0
    assert "copied 2 of 2 workspaces" in capsys.readouterr().out
    on_pg = make(PostgresStore(uri))
    assert {ws: on_pg.snapshot(ws) for ws in before} == before
    assert Client(on_pg, "wsp_a").ok("audit.verify_chain")["status"] == "verified"
    on_pg.close()
    back = str(tmp_path / "back.db")
    assert main(["copy", uri, back]) == 0
    again = make(SqliteStore(back))
    assert {ws: again.snapshot(ws) for ws in before} == before
    again.close()
    # the log commands open a postgresql:// URI as they open a file
    capsys.readouterr()
    assert main(["verify", uri, "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["ok"] and [w["workspace"] for w in verdict["workspaces"]] == ["wsp_a", "wsp_b"]


def test_a_non_empty_target_is_refused_unless_asked(tmp_path: Path, pg_server, capsys) -> None:
    source = str(tmp_path / "source.db")
    _workload(source)
    uri = pg_server.uri(pg_server.new_database())
    store = PostgresStore(uri)
    c = Client(make(store), "wsp_other")
    s0(c)
    store.close()
    assert main(["copy", source, uri]) == 1
    err = capsys.readouterr().err
    assert "already holds 1 workspace" in err and "--replace" in err and "Traceback" not in err
    assert PostgresStore(uri).workspace_ids() == ["wsp_other"]
    assert main(["copy", source, uri, "--replace"]) == 0
    assert PostgresStore(uri).workspace_ids() == ["wsp_a", "wsp_b", "wsp_other"]


def _tamper(path: str, workspace: str, seq: int) -> None:
    """Edit one recorded call's data in place, as someone with the file could."""
    with sqlite3.connect(path) as db:
        (text,) = db.execute(
            "SELECT data FROM chap_entries WHERE workspace = ? AND seq = ?", (workspace, seq)
        ).fetchone()
        entry = json.loads(text)
        entry["envelope"]["params"]["state"] = "completed"
        db.execute("UPDATE chap_entries SET data = ? WHERE workspace = ? AND seq = ?",
                   (json.dumps(entry), workspace, seq))


def test_a_tampered_source_is_refused_and_nothing_is_written(tmp_path: Path, pg_server, capsys) -> None:
    source = str(tmp_path / "source.db")
    _workload(source)
    _tamper(source, "wsp_b", 3)
    uri = pg_server.uri(pg_server.new_database())
    assert main(["copy", source, uri]) == 1
    out, err = capsys.readouterr()
    assert "copied" not in out
    assert "wsp_b does not verify in SOURCE: seq 3: changed after it was chained" in err
    assert "nothing was copied" in err and "wsp_a" not in err and "Traceback" not in err
    target = PostgresStore(uri)
    try:
        assert target.workspace_ids() == []
    finally:
        target.close()


def test_a_tampered_source_creates_no_target_file(tmp_path: Path) -> None:
    source = str(tmp_path / "source.db")
    _workload(source)
    _tamper(source, "wsp_a", 3)
    target = tmp_path / "target.db"
    done = chapline("copy", source, str(target))
    assert done.returncode == 1 and done.stdout == ""
    assert "wsp_a does not verify in SOURCE: seq 3" in done.stderr and "Traceback" not in done.stderr
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("target")]


def test_a_database_kept_with_required_signatures_copies(tmp_path: Path, pg_server) -> None:
    source = tmp_path / "signed.db"
    snapshot = signed_workload(source)
    uri = pg_server.uri(pg_server.new_database())
    done = chapline("copy", str(source), uri)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("copied 1 of 1 workspaces") and "Traceback" not in done.stderr
    back = tmp_path / "back.db"
    assert chapline("copy", uri, str(back)).returncode == 0
    store = SqliteStore(back)
    try:
        (held,) = store.load_held()
        assert held.meta["chain_head"] == snapshot["chain_head"]
        assert store.read_entries(WS) == snapshot["audit"]
    finally:
        store.close()
    verified = chapline("verify", str(back), "--json")
    assert verified.returncode == 0 and json.loads(verified.stdout)["ok"] is True


@pytest.mark.parametrize("args", [["copy", "x.db"], ["copy", "a.db", "b.db", "--bogus"]])
def test_bad_arguments_exit_2(args: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(args)
    assert caught.value.code == 2


def test_missing_source_and_same_database_are_errors(tmp_path: Path, capsys) -> None:
    assert main(["copy", str(tmp_path / "none.db"), str(tmp_path / "t.db")]) == 1
    assert "no such database file" in capsys.readouterr().err
    path = str(tmp_path / "s.db")
    _workload(path)
    assert main(["copy", path, path]) == 1
    assert "the same database" in capsys.readouterr().err
