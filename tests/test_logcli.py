"""The log commands on real SQLite files: verify catches each kind of damage
precisely, inspect lists, export/import round-trip (chain included), migrate
upgrades an old-layout file with a backup."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from client import Client, refused
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support import ALICE, BOB, BOT

from coordinator import Coordinator, CounterIds, StepClock, public_jwk, sign_envelope
from coordinator.cli import main
from storage import SqliteStore

WS = "wsp_t"


def workload(path: Path) -> dict[str, Any]:
    """A review workload on a real file: approvals, an override, a rejection,
    recorded refusals, and a second workspace created with a generated id.
    Returns what the test needs to find again."""
    coord = Coordinator(SqliteStore(path), clock=StepClock(), ids=CounterIds())
    c = Client(coord)
    c.setup()
    approved = c.new_task()
    c.ok("task.update", frm=BOT, task_id=approved, state="in_progress")
    c.ok("review.request", frm=BOT, task_id=approved, artefact={"text": "draft"}, to=[ALICE])
    c.ok("decide.approve", frm=ALICE, task_id=approved)
    overridden = c.new_task()
    c.ok("review.request", frm=BOT, task_id=overridden, artefact={"text": "draft", "n": 1}, to=[ALICE])
    c.ok(
        "decide.override",
        frm=ALICE,
        task_id=overridden,
        diff=[{"op": "replace", "path": "/text", "value": "better"}],
        rationale="tone",
    )
    rejected = c.new_task()
    c.ok("review.request", frm=BOT, task_id=rejected, artefact={"text": "no"}, to=[ALICE])
    c.ok("decide.reject", frm=ALICE, task_id=rejected)
    c.fail(-32010, "decide.approve", frm=ALICE, task_id=rejected)  # recorded refusal
    other = coord.dispatch(
        {"jsonrpc": "2.0", "id": 1, "method": "workspace.create", "params": {}}
    )["result"]["workspace"]
    Client(coord, other).ok("participant.join", frm=ALICE, type="human", role="admin")
    count = c.count()
    coord.close()
    return {"count": count, "approved": approved, "overridden": overridden, "other": other}


@pytest.fixture
def workload_db(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A database file the workload wrote, and what `workload` says of it."""
    path = tmp_path / "chap.db"
    return path, workload(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def verify_json(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, dict[str, Any], str]:
    code, out, err = run(capsys, "verify", str(path), "--json")
    return code, json.loads(out), err


def sql(path: Path, statement: str, *args: Any) -> None:
    with sqlite3.connect(path) as workload_db:
        workload_db.execute(statement, args)


def entry(path: Path, seq: int, workspace: str = WS) -> dict[str, Any]:
    with sqlite3.connect(path) as workload_db:
        (text,) = workload_db.execute(
            "SELECT data FROM chap_entries WHERE workspace = ? AND seq = ?", (workspace, seq)
        ).fetchone()
    return json.loads(text)


def test_verify_passes_a_sound_file(workload_db, capsys) -> None:
    path, facts = workload_db
    code, report, err = verify_json(capsys, path)
    assert code == 0, err
    assert report["ok"] is True
    by_id = {w["workspace"]: w for w in report["workspaces"]}
    assert set(by_id) == {WS, facts["other"]}
    assert by_id[WS]["entries"] == facts["count"]
    assert by_id[WS]["head"].startswith("sha256:") and by_id[WS]["findings"] == []
    code, out, _ = run(capsys, "verify", str(path))
    assert code == 0 and WS in out and "ok" in out


def test_verify_names_a_tampered_entry(workload_db, capsys) -> None:
    path, facts = workload_db
    tampered = entry(path, 6)
    tampered["envelope"]["params"]["artefact"] = {"text": "forged"}
    sql(path, "UPDATE chap_entries SET data = ? WHERE workspace = ? AND seq = 6",
        json.dumps(tampered), WS)
    code, report, err = verify_json(capsys, path)
    assert code == 1
    broken = {w["workspace"]: w for w in report["workspaces"]}[WS]
    assert broken["ok"] is False
    # Named at the forged entry, whose link the next one no longer records.
    assert [f["seq"] for f in broken["findings"]] == [6]
    assert f"workspace '{WS}', seq 6: changed after it was chained" in err
    assert {w["workspace"]: w for w in report["workspaces"]}[facts["other"]]["ok"] is True


def test_verify_names_a_tampered_object(workload_db, capsys) -> None:
    path, facts = workload_db
    with sqlite3.connect(path) as con:
        (text,) = con.execute(
            "SELECT data FROM chap_objects WHERE workspace = ? AND collection = 'tasks' AND id = ?",
            (WS, facts["approved"]),
        ).fetchone()
        task = json.loads(text)
        assert task["state"] == "completed"
        task["state"] = "rejected"
        con.execute(
            "UPDATE chap_objects SET data = ? WHERE workspace = ? AND collection = 'tasks' AND id = ?",
            (json.dumps(task), WS, facts["approved"]),
        )
    code, report, err = verify_json(capsys, path)
    assert code == 1
    findings = {w["workspace"]: w for w in report["workspaces"]}[WS]["findings"]
    assert findings == [
        {
            "seq": None,
            "where": f"tasks/{facts['approved']}",
            "detail": "field 'state' is \"rejected\" in the store but \"completed\" by the log",
            "expected": None,
            "actual": None,
        }
    ]
    assert f"tasks/{facts['approved']}" in err


def test_verify_names_an_object_the_log_never_made(workload_db, capsys) -> None:
    path, facts = workload_db
    with sqlite3.connect(path) as con:
        (text,) = con.execute(
            "SELECT data FROM chap_objects WHERE workspace = ? AND collection = 'tasks' AND id = ?",
            (WS, facts["approved"]),
        ).fetchone()
        con.execute(
            "INSERT INTO chap_objects VALUES (?, 'tasks', 'tsk_planted', ?)",
            (WS, json.dumps({**json.loads(text), "id": "tsk_planted"})),
        )
    code, report, _ = verify_json(capsys, path)
    assert code == 1
    findings = {w["workspace"]: w for w in report["workspaces"]}[WS]["findings"]
    assert {"seq": None, "where": "tasks/tsk_planted", "detail": "stored, but no entry of the log creates it",
            "expected": None, "actual": None} in findings


def test_verify_names_a_truncated_log(workload_db, capsys) -> None:
    path, facts = workload_db
    last = facts["count"] - 1
    sql(path, "DELETE FROM chap_entries WHERE workspace = ? AND seq >= ?", WS, last - 1)
    code, report, err = verify_json(capsys, path)
    assert code == 1
    findings = {w["workspace"]: w for w in report["workspaces"]}[WS]["findings"]
    heads = [f for f in findings if f["where"] == "head"]
    assert heads and heads[0]["seq"] == last - 2
    assert "truncated" in heads[0]["detail"]
    assert "Traceback" not in err


def test_verify_names_a_corrupt_entry_row(workload_db, capsys) -> None:
    path, _ = workload_db
    sql(path, "UPDATE chap_entries SET data = '{\"seq\": 3, oops' WHERE workspace = ? AND seq = 3", WS)
    code, report, err = verify_json(capsys, path)
    assert code == 1
    findings = {w["workspace"]: w for w in report["workspaces"]}[WS]["findings"]
    assert findings[0]["seq"] == 3 and findings[0]["where"] == "entry"
    assert "not JSON" in findings[0]["detail"]
    assert f"workspace '{WS}', seq 3: the stored row is not JSON" in err


def test_verify_names_a_gap_in_the_log(workload_db, capsys) -> None:
    path, _ = workload_db
    sql(path, "DELETE FROM chap_entries WHERE workspace = ? AND seq = 4", WS)
    code, report, _ = verify_json(capsys, path)
    assert code == 1
    findings = {w["workspace"]: w for w in report["workspaces"]}[WS]["findings"]
    assert any(f["seq"] == 4 and "gap" in f["detail"] for f in findings)


def test_verify_names_a_corrupt_meta_row(workload_db, capsys) -> None:
    path, facts = workload_db
    sql(path, "UPDATE chap_meta SET data = 'not json' WHERE workspace = ?", facts["other"])
    code, report, err = verify_json(capsys, path)
    assert code == 1
    by_id = {w["workspace"]: w for w in report["workspaces"]}
    assert by_id[WS]["ok"] is True
    (finding,) = by_id[facts["other"]]["findings"]
    assert finding["where"] == "meta" and "meta row" in finding["detail"]
    assert "Traceback" not in err


def test_verify_one_workspace_and_an_unknown_one(workload_db, capsys) -> None:
    path, facts = workload_db
    code, report, _ = run(capsys, "verify", str(path), "--workspace", facts["other"], "--json")
    assert code == 0
    assert [w["workspace"] for w in json.loads(report)["workspaces"]] == [facts["other"]]
    code, _, err = run(capsys, "verify", str(path), "--workspace", "wsp_nope")
    assert code == 1 and "holds no workspace 'wsp_nope'" in err


def test_verify_refuses_a_missing_file_and_a_non_database(tmp_path: Path, capsys) -> None:
    code, _, err = run(capsys, "verify", str(tmp_path / "absent.db"))
    assert code == 1 and "no such database file" in err
    assert not (tmp_path / "absent.db").exists()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all, not even close" * 10)
    code, _, err = run(capsys, "verify", str(junk))
    assert code == 1 and "not a SQLite database" in err


def test_verify_as_a_process_exits_1_without_a_traceback(workload_db) -> None:
    path, _ = workload_db
    sql(path, "UPDATE chap_entries SET data = 'garbage' WHERE workspace = ? AND seq = 2", WS)
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "verify", str(path)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1
    assert "seq 2" in done.stderr and "Traceback" not in done.stderr


def test_inspect_lists_each_workspace(workload_db, capsys) -> None:
    path, facts = workload_db
    code, out, _ = run(capsys, "inspect", str(path), "--json")
    assert code == 0
    rows = {r["workspace"]: r for r in json.loads(out)["workspaces"]}
    assert rows[WS]["members"] == 4 and rows[WS]["tasks"] == 3
    assert rows[WS]["entries"] == facts["count"]
    assert rows[WS]["profiles"] == ["core/1.0", "review/1.0"]
    assert rows[WS]["head"].startswith("sha256:") and rows[WS]["last_activity"]
    assert rows[facts["other"]]["members"] == 1
    code, out, _ = run(capsys, "inspect", str(path))
    assert code == 0 and WS in out and facts["other"] in out


def _heads(path: Path) -> dict[str, Any]:
    store = SqliteStore(path)
    try:
        return {h.id: (h.version, h.meta.get("chain_head")) for h in store.load_held()}
    finally:
        store.close()


def test_export_snapshot_then_import_gives_the_same_workspaces(workload_db, tmp_path, capsys) -> None:
    path, _ = workload_db
    code, out, _ = run(capsys, "export", str(path))
    assert code == 0
    dump = tmp_path / "dump.json"
    dump.write_text(out)
    assert {w["id"] for w in json.loads(out)["workspaces"]} == set(_heads(path))
    copy = tmp_path / "copy.db"
    code, out, err = run(capsys, "import", str(dump), str(copy))
    assert code == 0, err
    assert _heads(copy) == _heads(path)
    assert run(capsys, "verify", str(copy))[0] == 0
    # A second import would overwrite: refused unless asked.
    code, _, err = run(capsys, "import", str(dump), str(copy))
    assert code == 1 and "--overwrite" in err
    assert run(capsys, "import", str(dump), str(copy), "--overwrite")[0] == 0


def test_export_jsonl_then_import_rebuilds_the_same_log(workload_db, tmp_path, capsys) -> None:
    path, facts = workload_db
    code, out, _ = run(capsys, "export", str(path), "--workspace", WS, "--format", "jsonl")
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["seq"] for line in lines] == list(range(facts["count"]))
    assert all(line["workspace"] == WS for line in lines)
    dump = tmp_path / "log.jsonl"
    dump.write_text(out)
    copy = tmp_path / "rebuilt.db"
    code, _, err = run(capsys, "import", str(dump), str(copy))
    assert code == 0, err
    assert _heads(copy)[WS] == _heads(path)[WS]
    original, rebuilt = SqliteStore(path), SqliteStore(copy)
    try:
        assert rebuilt.read_entries(WS) == original.read_entries(WS)
    finally:
        original.close()
        rebuilt.close()
    assert run(capsys, "verify", str(copy))[0] == 0


def test_import_refuses_a_tampered_snapshot_and_writes_nothing(workload_db, tmp_path, capsys) -> None:
    path, _ = workload_db
    _, out, _ = run(capsys, "export", str(path), "--workspace", WS)
    snapshot = json.loads(out)
    snapshot["audit"][3]["envelope"]["params"]["type"] = "agent"
    dump = tmp_path / "bad.json"
    dump.write_text(json.dumps(snapshot))
    target = tmp_path / "target.db"
    code, _, err = run(capsys, "import", str(dump), str(target))
    assert code == 1 and "hash chain does not verify" in err
    assert _heads(target) == {}


def test_import_jsonl_of_a_generated_id_workspace_says_to_use_a_snapshot(workload_db, tmp_path, capsys) -> None:
    path, facts = workload_db
    _, out, _ = run(capsys, "export", str(path), "--workspace", facts["other"], "--format", "jsonl")
    dump = tmp_path / "other.jsonl"
    dump.write_text(out)
    code, _, err = run(capsys, "import", str(dump), str(tmp_path / "t.db"))
    assert code == 1 and "import it as a snapshot" in err


def test_import_of_a_non_json_file_is_a_clear_error(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"workspace": "w", "seq": 0}\nnot json\n')
    code, _, err = run(capsys, "import", str(bad), str(tmp_path / "t.db"))
    assert code == 1 and "line 2: not JSON" in err


def _old_layout(path: Path, snapshots: list[dict[str, Any]]) -> None:
    """A file as pre-0.3.2 coordinators wrote it: one row per workspace."""
    with sqlite3.connect(path) as con:
        con.execute(
            "CREATE TABLE chap_workspaces (id TEXT PRIMARY KEY, data TEXT NOT NULL, "
            "version INTEGER NOT NULL, updated_at TEXT NOT NULL)"
        )
        for snap in snapshots:
            con.execute(
                "INSERT INTO chap_workspaces VALUES (?, ?, ?, ?)",
                (snap["id"], json.dumps(snap), len(snap["audit"]), snap["audit"][-1]["arrived"]),
            )


def test_migrate_upgrades_an_old_file_with_a_backup(workload_db, tmp_path, capsys) -> None:
    path, _ = workload_db
    _, out, _ = run(capsys, "export", str(path))
    old = tmp_path / "old.db"
    _old_layout(old, [w for w in json.loads(out)["workspaces"] if w["audit"]])
    code, _, err = run(capsys, "verify", str(old))
    assert code == 1 and "chapline migrate" in err
    code, out, err = run(capsys, "migrate", str(old), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["migrated"] is True
    backup = Path(result["backup"])
    with sqlite3.connect(backup) as con:
        tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"chap_workspaces"}
    assert _heads(old)[WS] == _heads(path)[WS]
    assert all(w["ok"] for w in result["workspaces"])
    code, out, _ = run(capsys, "migrate", str(old))
    assert code == 0 and "already in the current layout" in out


def test_verify_passes_a_file_the_reference_wrote(tmp_path, capsys) -> None:
    """Replay on our pipeline reproduces 0.3.3's entries and objects exactly."""
    import chap_coordinator
    from chap_coordinator.storage.sqlite import SqliteStore as ReferenceSqlite

    path = tmp_path / "ref.db"
    theirs = chap_coordinator.Coordinator(
        deterministic_ids=True, deterministic_clock=True, enable_chain=True,
        default_profiles=["core/1.0", "review/1.0"], store=ReferenceSqlite(str(path)),
    )
    c = Client(theirs)
    c.setup()
    for verdict in ("decide.approve", "decide.reject", "decide.override"):
        task = c.new_task()
        c.ok("review.request", frm=BOT, task_id=task, artefact={"text": "draft"}, to=[ALICE])
        extra = {"diff": [{"op": "replace", "path": "/text", "value": "v"}], "rationale": "r"}
        c.ok(verdict, frm=ALICE, task_id=task, **(extra if verdict == "decide.override" else {}))
    c.fail(-32010, "decide.approve", frm=ALICE, task_id=task)
    revised = c.new_task()
    c.ok("task.update", frm=BOT, task_id=revised, state="in_progress")
    c.ok("review.request", frm=BOT, task_id=revised, artefact={"text": "v1"}, to=[ALICE, BOB])
    c.ok("decide.reject", frm=ALICE, task_id=revised, request_revision=True)
    c.ok("review.request", frm=BOT, task_id=revised, artefact={"text": "v2"}, to=[BOB])
    c.ok("abstain.declare", frm=BOB, task_id=revised, reason="conflict", category="conflict_of_interest")
    c.ok("escalate.raise", frm=ALICE, original_task_id=c.new_task(),
         new_task={"kind": "k", "assignee": BOB, "input": {}}, reason="stuck")
    c.ok("task.complete", frm=BOT, task_id=c.new_task(), artefact={"done": True})
    c.ok("participant.leave", frm="human:carol")
    code, report, err = verify_json(capsys, path)
    assert code == 0, (err, report)
    assert report["workspaces"][0]["entries"] == c.count()


# -- the commands as users run them --------------------------------------------


def chapline(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command as users run it: a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *argv], capture_output=True, text=True, timeout=300
    )


def link(entry: dict[str, Any]) -> str:
    """An entry's chain link from first principles (SPECIFICATION.md, "Audit
    entries and the chain"): SHA-256 over the RFC 8785 bytes of its record,
    then its prev_hash as UTF-8."""
    if "envelope" in entry:
        record = entry["envelope"]
    else:
        record = {"outcome": entry["outcome"], "request": entry["request"]}
    digest = hashlib.sha256(rfc8785.dumps(record) + entry["prev_hash"].encode())
    return "sha256:" + digest.hexdigest()


# -- databases kept with required signatures -----------------------------------


# A workspace kept by `serve --require-signatures`: every call but create and
# join signed by its sender's registered Ed25519 key.
SIGNERS = {uri: Ed25519PrivateKey.from_private_bytes(bytes([n + 1]) * 32)
           for n, uri in enumerate((ALICE, BOT, BOB))}


def sign_as_sender(envelope: dict[str, Any]) -> dict[str, Any]:
    if envelope["method"] in ("workspace.create", "participant.join"):
        return envelope
    sender = envelope["params"]["from"]
    return sign_envelope(envelope, SIGNERS[sender], sender.split(":")[1])


def signed_workload(path: Path, *, chained: bool = True) -> dict[str, Any]:
    coord = Coordinator(SqliteStore(path), clock=StepClock(), ids=CounterIds(),
                        require_signatures=True, enable_chain=chained)
    c = Client(coord, sign=sign_as_sender)
    c.ok("workspace.create")
    for uri, role in ((ALICE, "admin"), (BOT, "drafter"), (BOB, "reviewer")):
        jwks = {"keys": [public_jwk(SIGNERS[uri], uri.split(":")[1])]}
        c.ok("participant.join", frm=uri, type=uri.split(":")[0], role=role, jwks=jwks)
    task = c.new_task()
    c.ok("task.update", frm=BOT, task_id=task, state="in_progress")
    c.ok("review.request", frm=BOT, task_id=task, artefact={"text": "draft"}, to=[ALICE])
    c.ok("decide.approve", frm=ALICE, task_id=task)
    c.fail(-32010, "decide.approve", frm=ALICE, task_id=task)  # a recorded refusal
    unsigned = c.envelope("task.create", frm=ALICE, kind="k", assignee=BOT, input={})
    refused(c.send(unsigned), -32070)  # signatures were enforced
    assert "security-signed/1.0" in c.ok("workspace.describe", frm=ALICE)["profiles"]
    snapshot = coord.snapshot(WS)
    coord.close()
    return snapshot


def test_verify_passes_a_database_kept_with_required_signatures(tmp_path) -> None:
    path = tmp_path / "signed.db"
    snapshot = signed_workload(path)
    done = chapline("verify", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    (report,) = json.loads(done.stdout)["workspaces"]
    assert report["ok"] and report["entries"] == len(snapshot["audit"])
    assert report["head"] == snapshot["chain_head"] == link(snapshot["audit"][-1])


def test_verify_checks_each_signature_again_on_replay(tmp_path) -> None:
    """Without a chain, only the signatures can show that a signed call was
    edited: replay checks them as the coordinator did when the call arrived."""
    path = tmp_path / "unchained.db"
    snapshot = signed_workload(path, chained=False)
    assert chapline("verify", str(path)).returncode == 0
    seq = next(e["seq"] for e in snapshot["audit"] if e.get("envelope", {}).get("method") == "task.update")
    forged = entry(path, seq)
    forged["envelope"]["params"]["state"] = "completed"
    sql(path, "UPDATE chap_entries SET data = ? WHERE workspace = ? AND seq = ?", json.dumps(forged), WS, seq)
    done = chapline("verify", str(path))
    assert done.returncode == 1
    assert f"workspace '{WS}', seq {seq}: replaying it records nothing" in done.stderr
    assert "-32070" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "profiles",
    [["core/1.0", "review/1.0", "bogus/1.0"], ["core/1.0", 7], "core/1.0"],
)
def test_verify_reports_profiles_it_cannot_replay_without_a_traceback(workload_db, profiles) -> None:
    path, _ = workload_db
    with sqlite3.connect(path) as con:
        (text,) = con.execute("SELECT data FROM chap_meta WHERE workspace = ?", (WS,)).fetchone()
        meta = json.loads(text)
        meta["profiles"] = profiles
        con.execute("UPDATE chap_meta SET data = ? WHERE workspace = ?", (json.dumps(meta), WS))
    done = chapline("verify", str(path))
    assert done.returncode == 1
    assert f"workspace '{WS}'" in done.stderr and "Traceback" not in done.stderr


def test_verify_says_why_it_cannot_replay_an_identity_oidc_workspace(tmp_path) -> None:
    """Its joins' tokens can be checked again only by the deployment's own
    verifier: verify does not vouch for what it could not replay."""
    path = tmp_path / "oidc.db"
    coord = Coordinator(SqliteStore(path), clock=StepClock(), ids=CounterIds(),
                        verify_oidc_token=lambda token: {"sub": token, "chap_participant_uri": ALICE},
                        default_profiles=("core/1.0", "review/1.0", "identity-oidc/1.0"))
    c = Client(coord)
    c.ok("workspace.create")
    c.ok("participant.join", frm=ALICE, type="human", role="admin", oidc_token="alice-sub")
    coord.close()
    done = chapline("verify", str(path))
    assert done.returncode == 1
    assert "identity-oidc/1.0" in done.stderr and "Traceback" not in done.stderr


# -- which entry was edited ----------------------------------------------------


def stored_head(path: Path, workspace: str = WS) -> str:
    with sqlite3.connect(path) as con:
        (text,) = con.execute("SELECT data FROM chap_meta WHERE workspace = ?", (workspace,)).fetchone()
    head: str = json.loads(text)["chain_head"]
    return head


def forge(path: Path, seq: int, change: Callable[[dict[str, Any]], None]) -> tuple[str, str]:
    """Edit entry `seq`'s data in place; (its link before, its link after)."""
    original = entry(path, seq)
    forged = json.loads(json.dumps(original))
    change(forged)
    assert forged != original
    sql(path, "UPDATE chap_entries SET data = ? WHERE workspace = ? AND seq = ?",
        json.dumps(forged), WS, seq)
    return link(original), link(forged)


def test_verify_names_an_edited_middle_entry_with_both_hashes(workload_db) -> None:
    path, _ = workload_db
    expected, actual = forge(path, 6, lambda e: e["envelope"]["params"].update(artefact={"text": "forged"}))
    assert entry(path, 7)["prev_hash"] == expected  # what the chain recorded for seq 6
    done = chapline("verify", str(path), "--json")
    assert done.returncode == 1, done.stderr
    broken = {w["workspace"]: w for w in json.loads(done.stdout)["workspaces"]}[WS]
    first = min((f for f in broken["findings"] if f["seq"] is not None), key=lambda f: f["seq"])
    assert first["seq"] == 6 and first["where"] == "chain"
    assert first["expected"] == expected and first["actual"] == actual
    assert "seq 7" in first["detail"] and "truncated" not in first["detail"]
    assert f"workspace '{WS}', seq 6: " in done.stderr and "Traceback" not in done.stderr
    table = chapline("verify", str(path))
    assert table.returncode == 1 and f"workspace '{WS}', seq 6: " in table.stderr


def test_verify_names_an_edited_last_entry_not_a_truncation(workload_db) -> None:
    path, facts = workload_db
    last = facts["count"] - 1
    expected, actual = forge(path, last, lambda e: e["request"]["params"].update(task_id="tsk_forged"))
    assert stored_head(path) == expected
    done = chapline("verify", str(path), "--json")
    assert done.returncode == 1, done.stderr
    findings = {w["workspace"]: w for w in json.loads(done.stdout)["workspaces"]}[WS]["findings"]
    (at_last,) = [f for f in findings if f["seq"] == last]
    assert at_last["where"] == "chain"
    assert at_last["expected"] == expected and at_last["actual"] == actual
    assert "changed" in at_last["detail"] and "truncated" not in at_last["detail"]
    assert f"workspace '{WS}', seq {last}: " in done.stderr


def test_verify_still_names_a_truncated_log_with_both_hashes(workload_db) -> None:
    path, facts = workload_db
    last = facts["count"] - 1
    head = stored_head(path)
    sql(path, "DELETE FROM chap_entries WHERE workspace = ? AND seq >= ?", WS, last - 1)
    done = chapline("verify", str(path), "--json")
    assert done.returncode == 1
    findings = {w["workspace"]: w for w in json.loads(done.stdout)["workspaces"]}[WS]["findings"]
    (at_end,) = [f for f in findings if f["where"] == "head"]
    assert at_end["seq"] == last - 2 and "truncated" in at_end["detail"]
    assert at_end["expected"] == head and at_end["actual"] == link(entry(path, last - 2))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_verify_names_whichever_entry_was_edited(pristine_db, tmp_path, data) -> None:
    """Any one entry, any one field of its record changed: verify names that
    seq, with the link the chain recorded for it and the link it has now."""
    source, facts = pristine_db
    path = tmp_path / f"edited-{uuid.uuid4().hex}.db"
    shutil.copy(source, path)
    seq = data.draw(st.integers(0, facts["count"] - 1), label="seq")
    key = "envelope" if "envelope" in entry(path, seq) else "request"
    field = data.draw(st.sampled_from(["id", "method", "params"]), label="field")
    # Still a well-formed entry (a string method), and within JCS's integers.
    text = st.text(max_size=8)
    value = data.draw(text if field == "method" else st.one_of(st.integers(-(2**53) + 1, 2**53 - 1), text), label="value")
    expected, actual = forge(path, seq, lambda e: e[key].__setitem__(field, value))
    assume(expected != actual)
    report = verify_store_of(path)
    first = report.first()
    assert first is not None and first.seq == seq, report.findings
    assert (first.expected, first.actual) == (expected, actual)


@pytest.fixture(scope="module")
def pristine_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("pristine") / "chap.db"
    return path, workload(path)


def verify_store_of(path: Path) -> Any:
    from coordinator.tools.verification import verify_workspace

    store = SqliteStore(path)
    try:
        return verify_workspace(store, WS)
    finally:
        store.close()


# -- no file made by mistake ---------------------------------------------------


def test_commands_given_a_missing_database_create_no_file(tmp_path) -> None:
    typo = tmp_path / "typo.db"
    for argv in (
        ["verify", str(typo)],
        ["inspect", str(typo)],
        ["export", str(typo)],
        ["migrate", str(typo)],
        ["copy", str(typo), str(tmp_path / "target.db")],
        ["token", "list", "--db", str(typo)],
        ["token", "revoke", "--db", str(typo), "tok_nope"],
    ):
        done = chapline(*argv)
        assert done.returncode == 1, (argv, done.stdout, done.stderr)
        assert str(typo) in done.stderr and "Traceback" not in done.stderr, argv
        assert sorted(p.name for p in tmp_path.iterdir()) == [], argv


def test_a_failed_import_creates_no_file(workload_db, tmp_path) -> None:
    path, facts = workload_db
    snapshot = json.loads(chapline("export", str(path), "--workspace", WS).stdout)
    snapshot["audit"][3]["envelope"]["params"]["type"] = "agent"
    bad_snapshot = tmp_path / "bad.json"
    bad_snapshot.write_text(json.dumps(snapshot))
    # A jsonl log of two workspaces whose second cannot be rebuilt: the first
    # is not written either.
    log = chapline("export", str(path), "--format", "jsonl").stdout.splitlines()
    rebuildable = [line for line in log if json.loads(line)["workspace"] == WS]
    unrebuildable = [line for line in log if json.loads(line)["workspace"] == facts["other"]]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join(rebuildable + unrebuildable) + "\n")
    for dump in (bad_snapshot, mixed):
        target = tmp_path / "target.db"
        done = chapline("import", str(dump), str(target))
        assert done.returncode == 1, done.stdout
        assert "nothing written" in done.stderr and "Traceback" not in done.stderr
        assert not target.exists(), dump
        # Into an existing database: nothing of it is written either.
        existing = tmp_path / "existing.db"
        SqliteStore(existing).close()
        assert chapline("import", str(dump), str(existing)).returncode == 1
        assert _heads(existing) == {}
        existing.unlink()


# -- the version ---------------------------------------------------------------


# setuptools < 69 calls its [tool.setuptools] table beta, whatever it holds.
@pytest.mark.filterwarnings("ignore:Support for `\\[tool.setuptools\\]`")
def test_version_comes_from_one_place() -> None:
    """`coordinator.__version__`, `chapline --version`, the installed
    metadata, what setuptools reads from pyproject.toml, and what the MCP
    server and the A2A card tell their clients all agree."""
    import importlib.metadata

    from setuptools.config.pyprojecttoml import read_configuration

    import coordinator
    from coordinator.server.a2a import agent_card
    from coordinator.server.mcp import create_mcp_server

    version = coordinator.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", version)
    done = chapline("--version")
    assert done.returncode == 0 and done.stdout == f"chapline {version}\n"
    built = read_configuration(Path(__file__).resolve().parent.parent / "pyproject.toml")
    assert built["project"]["version"] == version
    assert importlib.metadata.version("chapline") == version
    assert agent_card("http://127.0.0.1/a2a", []).version == version
    assert create_mcp_server(lambda envelope: {}, []).version == version
