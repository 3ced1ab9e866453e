"""PostgreSQL as users meet it: `chapline serve`, `verify` and `inspect` on a
SQL_ASCII database (what a plain `initdb --locale=C` makes) with text that
is not ASCII, the log checked against chap-coordinator 0.3.3 and against
the chain recomputed here with rfc8785; a database that cannot hold the log
and a wrong database or role refused with the reason at start."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from typing import Any

import httpx
import psycopg
import pytest
import rfc8785
from client import Http, env, refused
from pgserver import PgServer
from servers import ROOT, Serve
from servers import env as child_env
from support import _comparable, make, reference, run_script

from coordinator.cli import main
from storage.postgres import PostgresStore

WS = "wsp_café"
ZOE, ROBOT = "human:zoë", "agent:robôt-☕"

# Accepted calls and a recorded refusal, each carrying text outside ASCII
# (Latin, CJK, an emoji outside the BMP, combining marks).
SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("workspace.create", {"workspace": WS}),
    ("participant.join", {"workspace": WS, "from": ZOE, "type": "human", "role": "admin"}),
    ("participant.join", {"workspace": WS, "from": ROBOT, "type": "agent", "role": "drafter"}),
    ("task.create", {"workspace": WS, "from": ZOE, "assignee": ROBOT, "kind": "résumé",
                     "input": {"q": "日本語のテキスト", "note": "🎉 e\u0301"}}),
    ("task.update", {"workspace": WS, "from": ROBOT, "task_id": "$3", "state": "in_progress",
                     "progress_note": "ça avance ☕"}),
    # a drafter may not change the profiles: refused, and recorded
    ("workspace.set_profiles", {"workspace": WS, "from": ROBOT, "profiles": ["core/1.0"]}),
]


@pytest.fixture(scope="module")
def sql_ascii(pg_server: PgServer) -> str:
    return pg_server.new_database("SQL_ASCII")


def _chain_head(log: list[dict[str, Any]]) -> str:
    """Each entry's prev_hash is the link before it; returns the last link
    (SPECIFICATION, "Audit entries and the chain"), computed with rfc8785."""
    head = "sha256:" + "0" * 64
    for e in log:
        assert e["prev_hash"] == head, e
        record = e["envelope"] if "envelope" in e else {"outcome": e["outcome"], "request": e["request"]}
        head = "sha256:" + hashlib.sha256(rfc8785.dumps(record) + head.encode()).hexdigest()
    return head


def test_a_sql_ascii_database_keeps_what_0_3_3_records(pg_server: PgServer, sql_ascii: str) -> None:
    dsn = pg_server.dsn(sql_ascii, options="-c search_path=public")
    coord = make(PostgresStore(dsn), enable_chain=True, default_profiles=("core/1.0", "review/1.0"))
    try:
        mine = run_script(coord, SCRIPT)
    finally:
        coord.close()
    theirs = run_script(reference(), SCRIPT)
    assert _comparable(mine) == _comparable(theirs)
    assert [e["seq"] for e in mine["log"]] == list(range(6))
    assert mine["log"][-1]["outcome"] == {"status": "refused", "code": -32011}

    # read back by a store opened afresh: the same entries, a chain that links
    reopened = PostgresStore(dsn)
    try:
        stored = reopened.read_entries(WS)
        (record,) = reopened.load(workspace=WS)
    finally:
        reopened.close()
    assert stored == mine["log"]
    assert _chain_head(stored) == record.data["chain_head"]
    # the bytes in the database are the UTF-8 of the text, not escapes
    with psycopg.connect(dsn) as raw:
        (data,) = raw.execute(
            "SELECT convert_to(data, 'SQL_ASCII') FROM chap_entries WHERE workspace = %s AND seq = 3",
            (WS,),
        ).fetchone()
    assert "日本語のテキスト".encode() in data and "🎉 e\u0301".encode() in data


def test_serve_then_verify_and_inspect_on_sql_ascii(
    pg_server: PgServer, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = pg_server.uri(pg_server.new_database("SQL_ASCII"))
    task = ""
    with Serve(uri) as server, httpx.Client(base_url=server.base, timeout=60) as http:
        replies = []
        for i, (method, params) in enumerate(SCRIPT):
            params = {k: (task if v == "$3" else v) for k, v in params.items()}
            replies.append(Http(http).dispatch(env(method, params, id=i)))
            if method == "task.create":
                task = replies[-1]["result"]["task_id"]
        described = Http(http).dispatch(env("workspace.describe", {"workspace": WS}))["result"]
    assert ["result" in r for r in replies] == [True] * 5 + [False], replies
    refused(replies[-1], -32011)
    assert described["audit_count"] == 6

    assert main(["verify", uri, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and [(w["workspace"], w["entries"]) for w in report["workspaces"]] == [(WS, 6)]
    assert main(["inspect", uri, "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["workspaces"]
    assert (listed["workspace"], listed["members"], listed["tasks"]) == (WS, 2, 1)
    assert listed["head"] == described["evidence_head"]


def _serve_fails(uri: str) -> str:
    """`chapline serve --db uri` as a process: it must exit 1 before serving,
    with one message and no traceback; returns stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--port", "0", "--db", uri],
        cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # "" once it exits; its start-up line if it serves
    if first:
        proc.kill()
    _, err = proc.communicate(timeout=120)
    assert first == "" and proc.returncode == 1, (first, err)
    assert "Traceback" not in err, err
    return err


def test_serve_refuses_a_latin1_database_naming_its_encoding_and_the_fix(pg_server: PgServer) -> None:
    err = _serve_fails(pg_server.uri(pg_server.new_database("LATIN1")))
    assert "encoding is LATIN1" in err and "ENCODING 'UTF8'" in err, err


def test_serve_says_what_the_server_said_about_a_wrong_database(pg_server: PgServer) -> None:
    err = _serve_fails(pg_server.uri("no_such_db"))
    assert 'refused the connection: database "no_such_db" does not exist' in err, err
    assert "cannot be reached" not in err


# -- tokens in the PostgreSQL database ------------------------------------------


def _token(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["token", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_tokens_live_in_the_postgresql_database_and_serve_auth_uses_them(
    pg_server: PgServer, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = pg_server.uri(pg_server.new_database())
    code, secret, err = _token(capsys, "create", "--db", uri, "--as", ZOE, "--all-workspaces", "--max-role", "admin", "--may-create")
    assert code == 0, err
    secret = secret.strip()
    token_id = err.split("token ", 1)[1].split()[0]
    code, listed, _ = _token(capsys, "list", "--db", uri)
    assert code == 0 and listed.startswith(f"{token_id}  {ZOE}  created ") and listed.endswith("active\n")
    # only the digest is kept, in the database the URI names
    with psycopg.connect(uri) as conn:
        rows = conn.execute("SELECT id, digest, principal, revoked FROM chapline_tokens").fetchall()
    assert rows == [(token_id, hashlib.sha256(secret.encode()).hexdigest(), ZOE, None)]

    join = env("participant.join", {"workspace": WS, "from": ZOE, "type": "human", "role": "admin"})
    with Serve(uri, "--auth") as server, httpx.Client(base_url=server.base, timeout=60) as http:
        assert "tokens required" in server.line
        assert http.post("/chap", json=join).status_code == 401
        ok = http.post("/chap", json=join, headers={"Authorization": f"Bearer {secret}"})
        assert ok.json()["result"] == {"joined": True, "as": ZOE}
        assert _token(capsys, "revoke", "--db", uri, token_id)[0] == 0
        again = http.post("/chap", json=join, headers={"Authorization": f"Bearer {secret}"})
        assert again.status_code == 401
    assert _token(capsys, "list", "--db", uri)[1].split("  ")[-1].startswith("revoked ")


def test_a_token_check_the_database_cannot_answer_is_refused_as_retryable(
    pg_server: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Fail closed: when the token table cannot be read the call is refused
    (503, -32900, retry), not admitted and not called unauthenticated; a
    connection the server broke is replaced on the next check."""
    from coordinator.server.auth import Authenticator, TokenStore
    from coordinator.server.scopes import Grant

    dbname = pg_server.new_database()
    tokens = TokenStore(pg_server.uri(dbname))
    try:
        secret, _ = tokens.create(ZOE, Grant.everything())
        auth = Authenticator(tokens)
        body = json.dumps(env("participant.join", {"workspace": WS, "from": ZOE, "type": "human"})).encode()
        header = f"Bearer {secret}"
        assert auth.refusal(header, body) is None
        with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (dbname,)
            )
            assert auth.refusal(header, body) is None  # on a new connection
            admin.execute(f'DROP DATABASE "{dbname}" WITH (FORCE)')
        refused = auth.refusal(header, body)
        assert refused is not None
        status, _, error = refused
        assert (status, error.code) == (503, -32900), refused
        assert "retry" in error.message and dbname not in error.message
        # the server's words go to the log, under the id the caller is given
        (record,) = [r for r in caplog.records if error.data["log_id"] in r.getMessage()]
        assert f'database "{dbname}" does not exist' in str(record.exc_info[1])
    finally:
        tokens.close()
