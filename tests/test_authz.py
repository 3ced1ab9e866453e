"""What a token may do: `chapline token create --workspace --max-role --may-create`.

Over real HTTP on 127.0.0.1 against a Coordinator on a SQLite file, tokens
in the serve database (a SQLite file or PostgreSQL). Every refusal is
checked against the log, as the coordinator records CHAP refusals: a current
member's recordable call is on the log with its -32011, anything else leaves
the log as it was (SPECIFICATION.md, "Authorisation").
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest
from client import refused
from hypothesis import given
from hypothesis import strategies as st
from joserfc import jwt
from joserfc.jwk import RSAKey
from pgserver import PgServer
from servers import LiveServer, Serve

from coordinator import Coordinator
from coordinator.cli import DEFAULT_PROFILES
from coordinator.engine.idempotent_calls import IDEMPOTENCY_FIELD
from coordinator.engine.registry import Method, refusal_is_recorded
from coordinator.errors import ScopeError
from coordinator.security.identity_verifiers import OidcVerifier
from coordinator.server import create_app
from coordinator.server.auth import TABLE, Authenticator, Identity, TokenStore
from coordinator.server.scopes import Grant
from storage import SqliteStore

ROOT = Path(__file__).resolve().parents[1]
MINE = "wsp_mine"  # the reviewer token's one workspace
OTHER = "wsp_other"  # another workspace its principal is a member of
ALICE = "human:alice"
BOB = "human:bob"
OWNER = "human:owner"

# Params that would be privileged, were the call let through.
PRIVILEGED = {
    "role": "admin", "target_uri": BOB, "kid": "k1", "old_kid": "k1", "profiles": ["core/1.0"],
    "type": "human", "task_id": "tsk_x", "state": "in_progress", "kind": "k", "input": {},
    "assignee": ALICE, "mode_ceiling": "shadow", "reason": "r", "to_snapshot_artefact_id": "art_x",
}


def chapline(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *args], cwd=ROOT, capture_output=True, text=True,
        timeout=120,
    )


class Server:
    """A coordinator behind `create_app` with tokens at `tokens_at`, in a thread."""

    def __init__(self, db: Path, tokens_at: str, oidc: OidcVerifier | None = None,
                 scope_claim: str = "chapline_scope") -> None:
        self.db = db
        self.coord = Coordinator(store=SqliteStore(db), default_profiles=DEFAULT_PROFILES)
        self.tokens = TokenStore(tokens_at)
        auth = Authenticator(self.tokens, oidc=oidc, scope_claim=scope_claim)
        self.live = LiveServer(create_app(self.coord, auth=auth))
        self.http = httpx.Client(base_url=self.live.url, timeout=60)
        self.n = 0

    def token(self, who: str, grant: Grant) -> str:
        return self.tokens.create(who, grant)[0]

    def call(self, token: str, method: str, **params: Any) -> dict[str, Any]:
        self.n += 1
        envelope = {"jsonrpc": "2.0", "id": f"z{self.n}", "method": method, "params": params}
        reply = self.http.post("/chap", json=envelope, headers={"Authorization": f"Bearer {token}"})
        body: dict[str, Any] = reply.json()
        assert reply.status_code == (200 if "result" in body else 400), (reply.status_code, body)
        return body

    def ok(self, token: str, method: str, **params: Any) -> Any:
        body = self.call(token, method, **params)
        assert "result" in body, body
        return body["result"]

    def get(self, token: str, path: str) -> httpx.Response:
        return self.http.get(path, headers={"Authorization": f"Bearer {token}"})

    def entries(self, workspace: str) -> list[dict[str, Any]]:
        """The log as it is in the file (read with sqlite3, not through chapline)."""
        with sqlite3.connect(self.db) as conn:
            rows = conn.execute(
                "SELECT data FROM chap_entries WHERE workspace = ? ORDER BY seq", (workspace,)
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def close(self) -> None:
        self.http.close()
        self.live.stop()
        self.tokens.close()
        self.coord.close()


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    if request.param == "sqlite":
        tokens_at = str(tmp_path / "chap.db")
    else:
        pg: PgServer = request.getfixturevalue("pg_server")
        tokens_at = pg.uri(pg.new_database())
    s = Server(tmp_path / "chap.db", tokens_at)
    try:
        yield s
    finally:
        s.close()


def not_authorised(body: dict[str, Any], reason: str) -> dict[str, Any]:
    error = refused(body, -32011)
    assert error["data"]["reason"] == reason, error
    assert error["message"].startswith("Not authorised: "), error
    return error


def expect_recorded(server: Server, workspace: str, before: list[dict[str, Any]],
                    method: Method, sender_is_member: bool, envelope_id: str) -> None:
    """The log after a -32011: one refusal entry more when CHAP records it
    (coordinator.engine.registry.refusal_is_recorded, a member's call), else as it was."""
    after = server.entries(workspace)
    if sender_is_member and refusal_is_recorded(method, -32011, False):
        assert after[:-1] == before, method.name
        assert after[-1]["outcome"] == {"status": "refused", "code": -32011}, method.name
        assert after[-1]["request"]["method"] == method.name
        assert after[-1]["request"]["id"] == envelope_id
    else:
        assert after == before, method.name


def test_a_reviewer_token_for_one_workspace_can_do_nothing_else(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coordinator.server.authz")
    owner = server.token(OWNER, Grant.everything())
    admin = server.token(ALICE, Grant.everything())
    for wid in (MINE, OTHER):
        server.ok(owner, "workspace.create", workspace=wid)
        server.ok(admin, "participant.join", workspace=wid, **{"from": ALICE}, type="human",
                  role="admin")
    # The same participant, now with a token for one workspace, as reviewer.
    reviewer = server.token(ALICE, Grant.of([MINE], "reviewer"))
    methods = server.coord.registry.methods() + server.coord.registry.extension_methods()
    assert len(methods) >= 39
    for method in methods:
        # Another workspace, where she is a member (an admin, even).
        before = server.entries(OTHER)
        body = server.call(reviewer, method.name, workspace=OTHER, **{"from": ALICE}, **PRIVILEGED)
        error = not_authorised(body, "create" if method.name == "workspace.create" else "workspace")
        assert error["data"]["principal"] == ALICE and error["data"]["workspace"] == OTHER
        assert error["data"]["grant"] == {"workspaces": [MINE], "max_role": "reviewer",
                                          "may_create": False}
        expect_recorded(server, OTHER, before, method, True, body["id"])
        expect_logged(caplog, method.name)
    # Her own workspace, with privileged params: each privileged method, a
    # join as admin, a create, and revoking another member's key.
    privileged = [m for m in methods if m.privileged and m.name != "participant.rotate_key"]
    assert {m.name for m in privileged} >= {"workspace.set_profiles", "control.pause",
                                            "control.rollback", "participant.revoke_key"}
    for method in [*privileged, *(m for m in methods if m.name in ("participant.join", "workspace.create"))]:
        before = server.entries(MINE)
        wid = "wsp_new" if method.name == "workspace.create" else MINE
        body = server.call(reviewer, method.name, workspace=wid, **{"from": ALICE}, **PRIVILEGED)
        reason = {"workspace.create": "create"}.get(method.name, "role")
        not_authorised(body, reason)
        expect_recorded(server, MINE, before, method, True, body["id"])
        expect_logged(caplog, method.name)
    assert "wsp_new" not in server.coord.workspace_ids()
    # What a reviewer may do in her own workspace goes through.
    assert server.ok(reviewer, "workspace.describe", workspace=MINE, **{"from": ALICE})["id"] == MINE
    server.ok(reviewer, "task.create", workspace=MINE, **{"from": ALICE}, assignee=ALICE, kind="k",
              input={})
    # Her admin token still administers both: the token, not the member, is limited.
    server.ok(admin, "workspace.set_profiles", workspace=OTHER, **{"from": ALICE},
              profiles=list(DEFAULT_PROFILES))


def expect_logged(caplog: pytest.LogCaptureFixture, method: str) -> None:
    """Every refusal, recorded on a workspace's log or not, is in the server's log."""
    [record] = [r for r in caplog.records if r.name == "coordinator.server.authz"]
    assert record.getMessage().startswith(f"refused {method} by {ALICE}: Not authorised: ")
    caplog.clear()


def test_a_join_above_the_tokens_role_is_refused(server: Server) -> None:
    owner = server.token(OWNER, Grant.everything())
    server.ok(owner, "workspace.create", workspace=MINE)
    bob = server.token(BOB, Grant.of([MINE], "reviewer"))
    before = server.entries(MINE)
    for role in ("admin", "coordinator", "drafter"):
        body = server.call(bob, "participant.join", workspace=MINE, **{"from": BOB}, type="human",
                           role=role)
        error = not_authorised(body, "role")
        assert error["data"]["role"] == role and "--max-role" in error["message"]
    assert server.entries(MINE) == before  # a join's refusal is never recorded
    assert BOB not in server.coord.snapshot(MINE)["members"]
    for role in ("observer", "participant", "reviewer"):
        other = server.token(f"human:{role}", Grant.of([MINE], "reviewer"))
        server.ok(other, "participant.join", workspace=MINE, **{"from": f"human:{role}"},
                  type="human", role=role)
    # No role named is CHAP's default, participant: below reviewer.
    server.ok(bob, "participant.join", workspace=MINE, **{"from": BOB}, type="human")
    # A role off the ladder is taken by a token that names it.
    drafter = server.token("agent:bot", Grant.of([MINE], "drafter"))
    server.ok(drafter, "participant.join", workspace=MINE, **{"from": "agent:bot"}, type="agent",
              role="drafter")
    not_authorised(server.call(drafter, "participant.join", workspace=MINE, **{"from": "agent:bot"},
                               type="agent", role="reviewer"), "role")


def test_creating_needs_the_right_to(server: Server) -> None:
    plain = server.token(ALICE, Grant.of(None, "admin"))
    for method, params in (("workspace.create", {"workspace": "wsp_a"}),
                           ("workspace.create", {}),
                           ("participant.join", {"workspace": "wsp_a", "from": ALICE, "type": "human"})):
        error = not_authorised(server.call(plain, method, **params), "create")
        assert "--may-create" in error["message"]
    assert server.coord.workspace_ids() == []
    # A token that may create reaches only the workspaces it names.
    named = server.token(BOB, Grant.of(["wsp_b"], "participant", may_create=True))
    not_authorised(server.call(named, "workspace.create", workspace="wsp_c"), "workspace")
    error = not_authorised(server.call(named, "workspace.create"), "workspace")
    assert "params.workspace" in error["message"]
    assert server.coord.workspace_ids() == []
    server.ok(named, "workspace.create", workspace="wsp_b")
    # A join that creates is a create: the joiner is its creator.
    joiner = server.token("human:carol", Grant.of(None, "observer", may_create=True))
    server.ok(joiner, "participant.join", workspace="wsp_d", **{"from": "human:carol"}, type="human",
              role="admin")
    assert server.coord.snapshot("wsp_d")["members"]["human:carol"]["role"] == "admin"


def test_a_resent_create_is_answered_as_the_first_was(server: Server) -> None:
    """A create resent with its idempotency key (its first answer lost) gets
    that answer again: the creator's join is not tried twice, nothing more
    is written (SPECIFICATION.md, "Authorisation" and "Idempotency keys")."""
    creator = server.token(ALICE, Grant.of([MINE], "admin", may_create=True))
    envelope = {"jsonrpc": "2.0", "id": "c1", "method": "workspace.create", "params": {"workspace": MINE},
                IDEMPOTENCY_FIELD: "create-once"}
    answers = [server.http.post("/chap", json=envelope, headers={"Authorization": f"Bearer {creator}"})
               for _ in range(2)]
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].json() == answers[1].json() and answers[0].json()["result"]["workspace"] == MINE
    assert [e["envelope"]["method"] for e in server.entries(MINE)] == ["workspace.create", "participant.join"]


def test_the_first_admin_of_a_workspace_is_its_creator(server: Server) -> None:
    creator = server.token(ALICE, Grant.of([MINE, "wsp_gen"], "reviewer", may_create=True))
    # The envelope names nobody (workspace.create takes no `from`)...
    server.ok(creator, "workspace.create", workspace=MINE)
    log = server.entries(MINE)
    assert [e["envelope"]["method"] for e in log] == ["workspace.create", "participant.join"]
    assert log[1]["envelope"]["params"] == {"workspace": MINE, "from": ALICE, "type": "human",
                                            "role": "admin"}
    members = server.ok(creator, "workspace.describe", workspace=MINE)["members"]
    assert [(m["uri"], m["role"]) for m in members] == [(ALICE, "admin")]
    # ...or somebody else: refused before the coordinator, nothing written.
    reply = server.http.post("/chap", json={
        "jsonrpc": "2.0", "id": 1, "method": "workspace.create",
        "params": {"workspace": "wsp_gen", "from": "human:mallory"}},
        headers={"Authorization": f"Bearer {creator}"})
    assert reply.status_code == 403
    assert "wsp_gen" not in server.coord.workspace_ids()
    # Her reviewer token is still a reviewer's: a member's role does not lift a token.
    not_authorised(server.call(creator, "workspace.set_profiles", workspace=MINE, **{"from": ALICE},
                               profiles=["core/1.0"]), "role")
    # An admin token of hers administers what she created.
    admin = server.token(ALICE, Grant.of([MINE], "admin"))
    server.ok(admin, "workspace.set_profiles", workspace=MINE, **{"from": ALICE},
              profiles=list(DEFAULT_PROFILES))
    # Nobody else becomes admin of it without a token that allows it.
    bob = server.token(BOB, Grant.of([MINE], "reviewer"))
    not_authorised(server.call(bob, "participant.join", workspace=MINE, **{"from": BOB}, type="human",
                               role="admin"), "role")


def test_reads_are_the_members(server: Server) -> None:
    owner = server.token(OWNER, Grant.everything())
    server.ok(owner, "workspace.create", workspace=MINE)
    server.ok(owner, "workspace.create", workspace=OTHER)
    bob = server.token(BOB, Grant.of(None, "reviewer"))
    before = server.entries(MINE)
    # In reach, but not a member: no CHAP read, with `from` or without.
    for method in ("workspace.describe", "audit.read", "audit.verify_chain", "x-chapline.plan.describe"):
        for params in ({}, {"from": BOB}):
            not_authorised(server.call(bob, method, workspace=MINE, **params), "member")
    # Nor the desk's: the list shows none, the snapshot and a stream are 403.
    assert server.get(bob, "/desk/api/workspaces").json() == {"workspaces": []}
    for path in (f"/desk/api/snapshot?workspace={MINE}", f"/chap/events?workspace={MINE}",
                 "/desk/api/snapshot?workspace=wsp_unknown"):
        reply = server.get(bob, path)
        assert reply.status_code == 403, path
        not_authorised(reply.json(), "member")
    assert server.entries(MINE) == before
    # A member reads what is in reach.
    server.ok(bob, "participant.join", workspace=MINE, **{"from": BOB}, type="human", role="reviewer")
    assert server.ok(bob, "audit.read", workspace=MINE)["entries"]
    assert server.get(bob, "/desk/api/workspaces").json() == {"workspaces": [MINE]}
    assert server.get(bob, f"/desk/api/snapshot?workspace={MINE}").status_code == 200
    # A stream of every workspace carries only the ones it may read.
    seen: list[str] = []
    with server.http.stream("GET", "/chap/events", headers={"Authorization": f"Bearer {bob}"}) as s:
        lines = s.iter_lines()
        assert next(lines) == "event: ready"
        server.ok(owner, "participant.join", workspace=OTHER, **{"from": OWNER}, type="human")
        server.ok(owner, "participant.join", workspace=MINE, **{"from": OWNER}, type="human")
        for line in lines:
            if line.startswith("id: "):
                seen.append(line[4:])
                break
    assert seen == [f"{MINE}:3"]  # create, its admin, bob; then the owner again


def test_mcp_and_a2a_reads_are_the_members(tmp_path: Path) -> None:
    """The tools and skills are held to the same grant as POST /chap."""
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    s = Server(tmp_path / "chap.db", str(tmp_path / "chap.db"))
    try:
        owner = s.token(OWNER, Grant.everything())
        s.ok(owner, "workspace.create", workspace=MINE)
        bob = s.token(BOB, Grant.of([MINE], "reviewer"))

        async def tool(name: str, arguments: dict[str, Any]) -> Any:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {bob}"}) as http:
                transport = streamable_http_client(s.live.url + "/mcp", http_client=http)
                async with Client(transport, mode="legacy") as client:
                    result = await client.call_tool(f"chap.{name}", arguments)
                    return json.loads(result.content[0].text)

        answer = anyio.run(tool, "audit.read", {"workspace": MINE})
        assert answer["chap_error"] == -32011 and "not a member" in answer["message"]
        answer = anyio.run(tool, "participant.join",
                           {"workspace": MINE, "from": BOB, "type": "human", "role": "admin"})
        assert answer["chap_error"] == -32011 and "--max-role" in answer["message"]
        # A2A, as 0.3 clients send a message.
        message = {"role": "user", "kind": "message", "messageId": "m-1",
                   "parts": [{"kind": "data", "data": {"skill": "chap.workspace.describe",
                                                       "params": {"workspace": MINE}}}]}
        reply = s.http.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "message/send",
                                          "params": {"message": message}},
                            headers={"Authorization": f"Bearer {bob}"})
        [part] = reply.json()["result"]["parts"]
        assert part["data"]["chap_error"] == -32011 and "not a member" in part["data"]["message"]
    finally:
        s.close()


# -- tokens: the command, the table, its migration -----------------------------------


def test_token_create_takes_scopes_and_list_shows_them(tmp_path: Path) -> None:
    db = str(tmp_path / "chap.db")
    done = chapline("token", "create", "--db", db, "--as", ALICE)
    assert done.returncode == 2 and "--all-workspaces" in done.stderr and done.stdout == ""
    done = chapline("token", "create", "--db", db, "--as", ALICE, "--workspace", "a", "--all-workspaces")
    assert done.returncode == 2
    done = chapline("token", "create", "--db", db, "--as", ALICE, "--workspace", "wsp_x",
                    "--max-role", "two words")
    assert done.returncode == 2 and "max_role" in done.stderr
    done = chapline("token", "create", "--db", db, "--as", ALICE, "--workspace", "wsp_x",
                    "--workspace", "wsp_y", "--max-role", "reviewer")
    assert done.returncode == 0, done.stderr
    assert "workspaces=wsp_x,wsp_y max-role=reviewer no-create" in done.stderr
    done = chapline("token", "create", "--db", db, "--as", BOB, "--all-workspaces", "--may-create")
    assert done.returncode == 0, done.stderr
    listing = chapline("token", "list", "--db", db).stdout.splitlines()
    assert [line.split("  ")[1:] for line in listing] == [
        [ALICE, listing[0].split("  ")[2], "workspaces=wsp_x,wsp_y max-role=reviewer no-create", "active"],
        [BOB, listing[1].split("  ")[2], "workspaces=* max-role=participant may-create", "active"],
    ]
    # The Python API fails closed: a token made without a grant reaches nothing.
    tokens = TokenStore(db)
    try:
        secret, info = tokens.create("agent:bot")
        assert info.grant == Grant() and Grant().workspaces == frozenset()
        found = tokens.identity(secret)
        assert found is not None and found.grant == Grant()
    finally:
        tokens.close()


OLD_SCHEMA = (f"CREATE TABLE {TABLE} (id TEXT PRIMARY KEY, digest TEXT NOT NULL UNIQUE,"
              " principal TEXT NOT NULL, created TEXT NOT NULL, revoked TEXT)")
OLD_ROWS = [("aaaaaaaaaaaa", "a" * 64, ALICE, "2026-01-01T00:00:00.000Z", None),
            ("bbbbbbbbbbbb", "b" * 64, BOB, "2026-01-02T00:00:00.000Z", "2026-01-03T00:00:00.000Z")]


def test_an_old_sqlite_token_table_is_migrated_in_place(tmp_path: Path) -> None:
    db = tmp_path / "chap.db"
    with sqlite3.connect(db) as conn:
        conn.execute(OLD_SCHEMA)
        conn.executemany(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?, ?)", OLD_ROWS)
    _check_migrated(str(db))
    with sqlite3.connect(db) as conn:
        columns = [r[1] for r in conn.execute(f"PRAGMA table_info({TABLE})")]
    assert columns == ["id", "digest", "principal", "created", "revoked", "workspaces", "max_role",
                       "may_create"]
    listing = chapline("token", "list", "--db", str(db)).stdout.splitlines()
    assert listing[0].endswith("workspaces=* max-role=admin may-create  active")
    # A token an older chapline adds now gets the columns' defaults: nothing.
    secret = "chl_" + "x" * 43
    with sqlite3.connect(db) as conn:
        conn.execute(f"INSERT INTO {TABLE} (id, digest, principal, created) VALUES (?, ?, ?, ?)",
                     ("cccccccccccc", hashlib.sha256(secret.encode()).hexdigest(), BOB, "2027"))
    tokens = TokenStore(str(db))
    try:
        assert tokens.identity(secret) == Identity(BOB, Grant())
    finally:
        tokens.close()


def test_an_old_postgresql_token_table_is_migrated_in_place(pg_server: PgServer) -> None:
    uri = pg_server.uri(pg_server.new_database())
    with psycopg.connect(uri) as conn:
        conn.execute(OLD_SCHEMA)
        for row in OLD_ROWS:
            conn.execute(f"INSERT INTO {TABLE} VALUES (%s, %s, %s, %s, %s)", row)
    _check_migrated(uri)


def _check_migrated(db: str) -> None:
    """Old rows may do what they could before; rows made now, what they are given."""
    for _ in range(2):  # opening again migrates nothing twice
        tokens = TokenStore(db)
        try:
            old = {info.principal: info for info in tokens.all()}
            assert old[ALICE].grant == old[BOB].grant == Grant.everything()
            assert old[BOB].revoked == OLD_ROWS[1][4]
        finally:
            tokens.close()
    tokens = TokenStore(db)
    try:
        secret, _ = tokens.create("human:new", Grant.of(["wsp_x"], "reviewer"))
        found = tokens.identity(secret)
        assert found is not None and found.grant == Grant(frozenset({"wsp_x"}), "reviewer", False)
        assert len(tokens.all()) == 3
    finally:
        tokens.close()


# -- OIDC access tokens --------------------------------------------------------------

ISSUER = "https://id.example.org"
AUDIENCE = "chapline"
CAROL = "human:carol"


@pytest.fixture(scope="module")
def idp() -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": "idp-1"})


def access_token(idp: RSAKey, **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol-7", "iat": now, "exp": now + 600,
            "chap_participant_uri": CAROL, **claims}
    return jwt.encode({"alg": "RS256", "kid": "idp-1"}, body, idp, algorithms=["RS256"])


def test_oidc_claims_map_to_the_same_scopes(tmp_path: Path, idp: RSAKey) -> None:
    verifier = OidcVerifier({"keys": [idp.as_dict(private=False)]}, issuer=ISSUER, audience=AUDIENCE)
    s = Server(tmp_path / "chap.db", str(tmp_path / "chap.db"), oidc=verifier, scope_claim="chap")
    try:
        owner = s.token(OWNER, Grant.everything())
        for wid in (MINE, OTHER):
            s.ok(owner, "workspace.create", workspace=wid)
        join = {"workspace": MINE, "from": CAROL, "type": "human"}
        # No claim: authenticated, but reaching no workspace.
        bare = access_token(idp)
        assert s.get(bare, "/desk/api/session").json() == {"auth": True, "principal": CAROL}
        not_authorised(s.call(bare, "participant.join", **join), "workspace")
        # The claim as an object...
        scoped = access_token(idp, chap={"workspaces": [MINE], "max_role": "reviewer"})
        not_authorised(s.call(scoped, "participant.join", **join, role="admin"), "role")
        not_authorised(s.call(scoped, "participant.join", **{**join, "workspace": OTHER}), "workspace")
        s.ok(scoped, "participant.join", **join, role="reviewer")
        not_authorised(s.call(scoped, "workspace.create", workspace="wsp_new"), "create")
        # ...or as OAuth scope words.
        words = access_token(idp, chap=f"openid workspace:{OTHER} workspace:wsp_new role:admin create")
        s.ok(words, "workspace.create", workspace="wsp_new")
        assert s.entries("wsp_new")[1]["envelope"]["params"]["from"] == CAROL  # its first admin
        s.ok(words, "participant.join", **{**join, "workspace": OTHER}, role="admin")
        not_authorised(s.call(words, "audit.read", workspace=MINE), "workspace")
        # A claim that cannot be read is a token that cannot be accepted.
        for bad in (["wsp"], {"workspaces": "wsp"}, {"may_create": "yes"}, "role:a role:b"):
            reply = s.http.post("/chap", json={"jsonrpc": "2.0", "id": 1, "method": "audit.read",
                                               "params": {"workspace": MINE}},
                                headers={"Authorization": f"Bearer {access_token(idp, chap=bad)}"})
            assert reply.status_code == 401, bad
            error = refused(reply.json(), -32403)
            assert "chap claim" in error["message"] and error["data"]["claim"] == "chap"
    finally:
        s.close()


def test_serve_takes_the_scope_claims_name(tmp_path: Path, idp: RSAKey) -> None:
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps({"keys": [idp.as_dict(private=False)]}))
    server = Serve(tmp_path / "chap.db", "--auth", "--oidc-issuer", ISSUER, "--oidc-audience",
                   AUDIENCE, "--oidc-jwks", str(keys), "--oidc-scope-claim", "groups")
    try:
        join = {"jsonrpc": "2.0", "id": 1, "method": "participant.join",
                "params": {"workspace": MINE, "from": CAROL, "type": "human"}}
        with httpx.Client(base_url=server.base, timeout=60) as http:
            for claims, answer in (({"chapline_scope": f"workspace:{MINE} create"}, "error"),
                                   ({"groups": f"workspace:{MINE} create"}, "result")):
                headers = {"Authorization": f"Bearer {access_token(idp, **claims)}"}
                assert answer in http.post("/chap", json=join, headers=headers).json(), claims
    finally:
        code, err = server.stop()
    assert code == 0, err


def test_a_grant_reads_only_what_it_can_hold() -> None:
    assert Grant.of(["wsp_a", "*"]) == Grant.of(None)
    assert Grant.of(None, "admin").may_take("anything-at-all")
    assert Grant.of(None, "reviewer").may_take("observer")
    assert not Grant.of(None, "participant").may_take("reviewer")
    assert not Grant.of(None, "drafter").may_take("observer")
    for bad in ({"max_role": ""}, {"max_role": 3}, {"workspaces": ["a b"]}):
        with pytest.raises(ScopeError):
            Grant.from_claim("c", bad)
    with pytest.raises(ScopeError, match="not \\* or a JSON array"):
        Grant.from_columns("{", "reviewer", 0)


def test_a_creator_who_loses_the_race_does_not_join_the_winners_workspace(tmp_path: Path) -> None:
    """Another writer creates the workspace between the create and its write:
    the call runs again on the fresh state, the create answers that the
    workspace exists, and the creator's join refuses to make the loser an
    admin of the winner's workspace."""
    import asyncio

    from coordinator.server.authz import Gatekeeper, authoriser
    from coordinator.server.dispatcher import SerialDispatcher

    db = tmp_path / "chap.db"
    race = "wsp_race"
    winner = Coordinator(store=SqliteStore(db))

    def clock() -> int:
        # The loser's clock is read once per call: at its join's reading its
        # create is staged (not written), and the winner goes first.
        if race in loser.workspace_ids() and race not in winner.workspace_ids():
            winner.dispatch({"jsonrpc": "2.0", "id": 1, "method": "workspace.create",
                             "params": {"workspace": race}})
            winner.dispatch({"jsonrpc": "2.0", "id": 2, "method": "participant.join",
                             "params": {"workspace": race, "from": OWNER, "type": "human",
                                        "role": "admin"}})
        return int(time.time() * 1000)

    loser = Coordinator(store=SqliteStore(db), clock=clock)
    dispatcher = SerialDispatcher(loser)
    dispatcher.start()
    try:
        gate = Gatekeeper(dispatcher, loser)
        identity = Identity(ALICE, Grant.of([race], "reviewer", may_create=True))
        body = json.dumps({"jsonrpc": "2.0", "id": "c", "method": "workspace.create",
                           "params": {"workspace": race}}).encode()
        response = asyncio.run(gate(body, authoriser(identity)))
    finally:
        dispatcher.close()
    try:
        error = refused(response, -32602)
        assert "already exists" in error["message"]
        assert list(loser.snapshot(race)["members"]) == [OWNER]
        assert [e["envelope"]["method"] for e in loser.snapshot(race)["audit"]] == [
            "workspace.create", "participant.join"]
    finally:
        loser.close()
        winner.close()


_ids = st.frozensets(st.from_regex(r"wsp_[a-z0-9]{1,8}", fullmatch=True), max_size=4)
_roles = st.sampled_from(["observer", "participant", "reviewer", "admin", "drafter", "coordinator"])


@given(workspaces=st.none() | _ids, max_role=_roles, may_create=st.booleans())
def test_a_grant_survives_its_table_row_and_its_claim(
    workspaces: frozenset[str] | None, max_role: str, may_create: bool
) -> None:
    grant = Grant(workspaces, max_role, may_create)
    assert Grant.from_columns(*grant.columns()) == grant
    assert Grant.from_claim("c", grant.as_json()) == grant


@given(max_role=_roles, role=_roles)
def test_a_token_takes_its_role_what_is_below_it_and_admin_everything(max_role: str, role: str) -> None:
    ladder = ["observer", "participant", "reviewer", "admin"]
    below = role in ladder and max_role in ladder and ladder.index(role) <= ladder.index(max_role)
    assert Grant(None, max_role).may_take(role) == (role == max_role or max_role == "admin" or below)


def test_a_call_admitted_on_its_signature_acts_as_a_participant(tmp_path: Path) -> None:
    """With --require-signatures a signed call needs no token: it acts where
    its signer is a member, as at most a participant, so a privileged call
    still needs a token that may act as admin."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from coordinator import public_jwk, sign_envelope

    db = tmp_path / "chap.db"
    key = Ed25519PrivateKey.generate()
    coord = Coordinator(store=SqliteStore(db), default_profiles=DEFAULT_PROFILES,
                        require_signatures=True)
    tokens = TokenStore(str(db))
    live = LiveServer(create_app(coord, auth=Authenticator(tokens, signatures=True)))
    admin = tokens.create(ALICE, Grant.everything())[0]
    try:
        with httpx.Client(base_url=live.url, timeout=60) as http:
            def post(method: str, token: str | None = None, **params: Any) -> dict[str, Any]:
                envelope = {"jsonrpc": "2.0", "id": method, "method": method,
                            "params": {"workspace": MINE, "from": ALICE, **params}}
                if token is None:
                    envelope = sign_envelope(envelope, key, "alice-1")
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                body: dict[str, Any] = http.post("/chap", json=envelope, headers=headers).json()
                return body

            assert "result" in post("participant.join", admin, type="human", role="admin",
                                    jwks={"keys": [public_jwk(key, "alice-1")]})
            assert "result" in post("task.create", assignee=ALICE, kind="k", input={})
            error = not_authorised(post("control.pause"), "role")
            assert error["data"]["grant"] == {"workspaces": "*", "max_role": "participant",
                                              "may_create": False}
            assert coord.snapshot(MINE)["state"] == "active"
    finally:
        live.stop()
        tokens.close()
        coord.close()
