"""Who may act as whom: `chapline serve --auth` and `chapline token`.

Over real HTTP on 127.0.0.1 against a Coordinator on a SQLite file, with
tokens made and revoked by the `chapline token` command in a subprocess, as
an operator would. Every refusal is checked against the log: nothing refused
is recorded.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chap_analytics
import httpx
import pytest
from chap_coordinator.storage.sqlite import SqliteStore as ReferenceStore
from client import Client, Http, refused
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from joserfc import jwt
from joserfc.jwk import RSAKey
from servers import LiveServer, Serve

from coordinator import Coordinator, public_jwk, sign_envelope
from coordinator.cli import DEFAULT_PROFILES, _loopback_address
from coordinator.security.identity_verifiers import OidcVerifier
from coordinator.server import create_app
from coordinator.server.auth import (
    AUTHENTICATION_REQUIRED,
    TABLE,
    Authenticator,
    TokenStore,
    bearer,
)
from storage import SqliteStore

ROOT = Path(__file__).resolve().parents[1]
WS = "wsp_auth"
ALICE = "human:alice"
BOB = "human:bob"
BOT = "agent:drafter"


def chapline(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def new_token(db: Path, principal: str) -> tuple[str, str]:
    """(token, id) from `chapline token create`."""
    # What every token could do before scopes: these tests are about
    # authentication (test_authz.py holds the scopes).
    done = chapline("token", "create", "--db", str(db), "--as", principal, "--all-workspaces", "--max-role", "admin", "--may-create")
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert token.count("\n") == 0 and token.startswith("chl_")
    token_id = done.stderr.split("token ", 1)[1].split()[0]
    return token, token_id


class Server:
    """A coordinator with tokens behind `create_app`, in a thread, and one
    client of it whose calls carry the token they are given."""

    def __init__(self, db: Path, oidc: OidcVerifier | None = None) -> None:
        self.coord = Coordinator(store=SqliteStore(db), default_profiles=DEFAULT_PROFILES)
        self.tokens = TokenStore(str(db))
        self.live = LiveServer(create_app(self.coord, auth=Authenticator(self.tokens, oidc=oidc)))
        self.http = httpx.Client(base_url=self.live.url, timeout=60)
        self.chap = Client(Http(self.http), WS, prefix="c")

    def post(self, token: str | None, method: str, **params: Any) -> httpx.Response:
        """The raw reply: the refusals checked here (401, 403) come before the
        coordinator, so their status does not mirror the body as `ok`'s does."""
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return self.http.post("/chap", json=self.chap.envelope(method, **params), headers=headers)

    def ok(self, token: str, method: str, **params: Any) -> Any:
        self.chap.target.headers = {"Authorization": f"Bearer {token}"}
        return self.chap.ok(method, **params)

    def close(self) -> None:
        self.http.close()
        self.live.stop()
        self.tokens.close()
        self.coord.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "chap.db"


@pytest.fixture
def server(db: Path) -> Iterator[Server]:
    s = Server(db)
    try:
        yield s
    finally:
        s.close()


def stored_entries(db: Path) -> list[dict[str, Any]]:
    """The log as it is in the file, read with sqlite3 (not through chapline)."""
    import json

    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT data FROM chap_entries WHERE workspace = ? ORDER BY seq", (WS,)
        ).fetchall()
    return [json.loads(r[0]) for r in rows]


def joined(server: Server, db: Path) -> dict[str, str]:
    tokens = {who: new_token(db, who)[0] for who in (ALICE, BOB, BOT)}
    for who, kind in ((ALICE, "human"), (BOB, "human"), (BOT, "agent")):
        server.ok(tokens[who], "participant.join", frm=who, type=kind, role="reviewer")
    return tokens


def test_a_token_cannot_act_as_another_participant(server: Server, db: Path) -> None:
    tokens = joined(server, db)
    before = stored_entries(db)
    reply = server.post(
        tokens[ALICE], "task.create", frm=BOB, assignee=BOT, kind="k", input={}
    )
    assert reply.status_code == 403
    body = reply.json()
    assert body["id"] == f"c{server.chap.n}"
    refused(body, -32011)
    assert body["error"]["data"] == {"from": BOB, "principal": ALICE}
    assert BOB in body["error"]["message"] and ALICE in body["error"]["message"]
    # A non-string `from` is not the principal either.
    reply = server.post(tokens[ALICE], "task.create", frm=[ALICE], assignee=BOT, kind="k")
    assert reply.status_code == 403
    assert stored_entries(db) == before
    # The same call as herself goes through and is recorded.
    server.ok(tokens[ALICE], "task.create", frm=ALICE, assignee=BOT, kind="k", input={})
    after = stored_entries(db)
    assert len(after) == len(before) + 1
    assert after[-1]["envelope"]["params"]["from"] == ALICE


def test_an_unauthenticated_call_is_refused_when_auth_is_on(server: Server, db: Path) -> None:
    joined(server, db)
    before = stored_entries(db)
    for headers in ({}, {"Authorization": "Bearer chl_not-a-token"}, {"Authorization": "Basic x"}):
        envelope = {
            "jsonrpc": "2.0",
            "id": "u1",
            "method": "participant.join",
            "params": {"workspace": WS, "from": "human:mallory", "type": "human"},
        }
        reply = server.http.post("/chap", json=envelope, headers=headers)
        assert reply.status_code == 401
        assert reply.headers["www-authenticate"].startswith("Bearer")
        body = reply.json()
        assert body["jsonrpc"] == "2.0" and body["id"] is None
        refused(body, AUTHENTICATION_REQUIRED)
        assert "chapline token create" in body["error"]["message"]
    # Neither the log nor the members changed.
    assert stored_entries(db) == before
    assert "human:mallory" not in str(server.coord.snapshot(WS)["members"])
    # The desk's reads and the event stream are closed to them as well.
    for path in ("/desk/api/session", "/desk/api/workspaces", f"/desk/api/snapshot?workspace={WS}",
                 "/chap/events"):
        assert server.http.get(path).status_code == 401, path


def test_a_revoked_token_is_refused(server: Server, db: Path) -> None:
    tokens = joined(server, db)
    token, token_id = new_token(db, ALICE)
    assert server.http.get(
        "/desk/api/session", headers={"Authorization": f"Bearer {token}"}
    ).json() == {"auth": True, "principal": ALICE}
    done = chapline("token", "revoke", "--db", str(db), token_id)
    assert done.returncode == 0, done.stderr
    assert f"token {token_id} ({ALICE}) revoked" in done.stdout
    before = stored_entries(db)
    reply = server.post(token, "task.create", frm=ALICE, assignee=BOT, kind="k", input={})
    assert reply.status_code == 401
    refused(reply.json(), AUTHENTICATION_REQUIRED)
    assert "revoked" in reply.json()["error"]["message"]
    assert stored_entries(db) == before
    # Her other token still works: revocation is per token.
    server.ok(tokens[ALICE], "task.create", frm=ALICE, assignee=BOT, kind="k", input={})
    listing = chapline("token", "list", "--db", str(db)).stdout.splitlines()
    states = {line.split()[0]: line for line in listing}
    assert "revoked" in states[token_id]
    assert sum("active" in line for line in listing) == 3


def test_calls_without_from_and_bad_bodies_go_to_the_coordinator(server: Server, db: Path) -> None:
    tokens = joined(server, db)
    described = server.ok(tokens[BOB], "workspace.describe")
    assert described["id"] == WS
    # Malformed JSON from an authenticated caller gets the coordinator's -32700.
    reply = server.http.post(
        "/chap", content=b"{nope",
        headers={"Authorization": f"Bearer {tokens[BOB]}", "Content-Type": "application/json"},
    )
    refused(reply.json(), -32700)
    assert reply.status_code == 400


def test_tokens_are_stored_hashed_and_the_file_stays_readable(server: Server, db: Path) -> None:
    tokens = joined(server, db)
    task = server.ok(
        tokens[ALICE], "task.create", frm=ALICE, assignee=BOT, kind="k", input={"n": 1}
    )["task_id"]
    server.ok(tokens[BOT], "review.request", frm=BOT, task_id=task, to=[ALICE],
              artefact={"n": 2})
    server.ok(tokens[ALICE], "decide.approve", frm=ALICE, task_id=task)
    raw = db.read_bytes() + (db.with_name(db.name + "-wal").read_bytes()
                             if db.with_name(db.name + "-wal").exists() else b"")
    for token in tokens.values():
        assert token.encode() not in raw
    with sqlite3.connect(db) as conn:
        digests = {r[0] for r in conn.execute(f"SELECT digest FROM {TABLE}")}
    assert digests == {hashlib.sha256(t.encode()).hexdigest() for t in tokens.values()}
    # The reference and chap-analytics read the file with our table in it.
    ref = ReferenceStore(str(db))
    try:
        [record] = [r for r in ref.load() if r.id == WS]
        assert len(record.data["audit"]) == len(stored_entries(db)) == 6
    finally:
        ref.close()
    chain = chap_analytics.from_sqlite(str(db), workspace=WS)
    assert len(chap_analytics.frames(chain).events) == 6


def test_token_create_checks_the_uri(db: Path) -> None:
    done = chapline("token", "create", "--db", str(db), "--as", "alice")
    assert done.returncode == 2
    assert "human:NAME" in done.stderr and done.stdout == ""
    done = chapline("token", "revoke", "--db", str(db), "nosuchid")
    assert done.returncode == 1 and "chapline token list" in done.stderr


def test_bearer_header_parsing() -> None:
    assert bearer("Bearer abc") == "abc"
    assert bearer("bearer   abc ") == "abc"
    assert bearer("Bearer ") is None
    assert bearer("Basic abc") is None
    assert bearer(None) is None


@pytest.mark.parametrize(
    ("address", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("0.0.0.0", False),
     ("::", False), ("192.168.1.5", False)],
)
def test_which_addresses_warrant_the_warning(address: str, loopback: bool) -> None:
    assert _loopback_address(address) is loopback


def test_serve_with_auth_refuses_anonymous_calls(db: Path) -> None:
    token, _ = new_token(db, ALICE)
    server = Serve(db, "--auth")
    try:
        assert "tokens required" in server.line, server.line
        envelope = {"jsonrpc": "2.0", "id": 1, "method": "participant.join",
                    "params": {"workspace": WS, "from": ALICE, "type": "human"}}
        with httpx.Client(base_url=server.base, timeout=60) as http:
            assert http.post("/chap", json=envelope).status_code == 401
            ok = http.post("/chap", json=envelope, headers={"Authorization": f"Bearer {token}"})
            assert ok.json()["result"] == {"joined": True, "as": ALICE}
            assert http.get("/").status_code == 200
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert "warning" not in err


def test_serve_auth_needs_a_file() -> None:
    done = chapline("serve", "--db", ":memory:", "--port", "0", "--auth")
    assert done.returncode == 1
    assert "--db PATH" in done.stderr


# -- OIDC access tokens ----------------------------------------------------------

ISSUER = "https://id.example.org"
AUDIENCE = "chapline"
CAROL = "human:carol"


@pytest.fixture(scope="module")
def idp() -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": "idp-1"})


def access_token(idp: RSAKey, **claims: Any) -> str:
    now = int(time.time())
    # The scope claim grants what every token could do before scopes: these
    # tests are about authentication (test_authz.py holds the scopes).
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol-7", "iat": now, "exp": now + 600,
            "chap_participant_uri": CAROL,
            "chapline_scope": {"workspaces": "*", "max_role": "admin", "may_create": True}, **claims}
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode({"alg": "RS256", "kid": "idp-1"}, body, idp, algorithms=["RS256"])


def jwks(idp: RSAKey) -> dict[str, Any]:
    return {"keys": [idp.as_dict(private=False)]}


@pytest.fixture
def oidc_server(db: Path, idp: RSAKey) -> Iterator[Server]:
    s = Server(db, oidc=OidcVerifier(jwks(idp), issuer=ISSUER, audience=AUDIENCE))
    try:
        yield s
    finally:
        s.close()


def test_an_oidc_access_token_acts_as_its_claimed_participant(
    oidc_server: Server, db: Path, idp: RSAKey
) -> None:
    token = access_token(idp)
    assert oidc_server.ok(token, "participant.join", frm=CAROL, type="human") == {
        "joined": True, "as": CAROL}
    before = stored_entries(db)
    reply = oidc_server.post(token, "participant.join", frm=ALICE, type="human")
    assert reply.status_code == 403
    assert reply.json()["error"]["data"] == {"from": ALICE, "principal": CAROL}
    # Tokens the provider did not sign for this server, or that carry no
    # participant, are refused before the coordinator.
    other = RSAKey.generate_key(2048, parameters={"kid": "idp-1"})
    rejected = {
        "expired": access_token(idp, exp=int(time.time()) - 3600),
        "another audience": access_token(idp, aud="someone-else"),
        "another issuer": access_token(idp, iss="https://evil.example"),
        "another key": access_token(other),
        "no participant": access_token(idp, chap_participant_uri=None),
        "not a participant URI": access_token(idp, chap_participant_uri="carol"),
        "not a JWT": "opaque-token-from-elsewhere",
    }
    for why, bad in rejected.items():
        reply = oidc_server.post(bad, "task.create", frm=CAROL, assignee=CAROL, kind="k")
        assert reply.status_code == 401, why
        error = refused(reply.json(), -32403)
        if why in ("no participant", "not a participant URI"):
            assert "chap_participant_uri" in error["message"], why
    assert stored_entries(db) == before
    # chapline's own tokens keep working beside the provider's.
    own, _ = new_token(db, ALICE)
    oidc_server.ok(own, "participant.join", frm=ALICE, type="human")


def test_oidc_options_go_together_and_need_auth(db: Path, tmp_path: Path, idp: RSAKey) -> None:
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(jwks(idp)))
    full = ["--oidc-issuer", ISSUER, "--oidc-audience", AUDIENCE, "--oidc-jwks", str(keys)]
    for args, message in (
        (["--auth", "--oidc-issuer", ISSUER], "go together"),
        (full, "need --auth"),
        (["--auth", *full[:-1], str(tmp_path / "missing.json")], "cannot read"),
    ):
        done = chapline("serve", "--db", str(db), "--port", "0", *args)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr
    keys.write_text(json.dumps({"keys": "nope"}))
    done = chapline("serve", "--db", str(db), "--port", "0", "--auth", *full)
    assert done.returncode == 2 and "not a usable JWKS" in done.stderr


def test_serve_accepts_oidc_access_tokens(db: Path, tmp_path: Path, idp: RSAKey) -> None:
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(jwks(idp)))
    server = Serve(db, "--auth", "--oidc-issuer", ISSUER, "--oidc-audience", AUDIENCE, "--oidc-jwks", str(keys))
    try:
        envelope = {"jsonrpc": "2.0", "id": 1, "method": "participant.join",
                    "params": {"workspace": WS, "from": CAROL, "type": "human"}}
        headers = {"Authorization": f"Bearer {access_token(idp)}"}
        with httpx.Client(base_url=server.base, timeout=60) as http:
            assert http.post("/chap", json=envelope, headers=headers).json()["result"]["as"] == CAROL
            assert http.get("/desk/api/session", headers=headers).json() == {
                "auth": True, "principal": CAROL}
    finally:
        code, err = server.stop()
    assert code == 0, err


# -- signed envelopes ---------------------------------------------------------------


def test_a_signed_call_is_admitted_on_its_signature(db: Path) -> None:
    """With --require-signatures, a call that carries no token but a `sig` goes
    to the coordinator, which checks it against the key `from` registered."""
    key = Ed25519PrivateKey.generate()
    coord = Coordinator(store=SqliteStore(db), default_profiles=DEFAULT_PROFILES,
                        require_signatures=True)
    tokens = TokenStore(str(db))
    live = LiveServer(create_app(coord, auth=Authenticator(tokens, signatures=True)))
    token, _ = new_token(db, ALICE)
    try:
        with httpx.Client(base_url=live.url, timeout=60) as http:
            def post(envelope: dict[str, Any], token: str | None = None) -> httpx.Response:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                return http.post("/chap", json=envelope, headers=headers)

            def call(method: str, **params: Any) -> dict[str, Any]:
                return {"jsonrpc": "2.0", "id": method, "method": method,
                        "params": {"workspace": WS, "from": ALICE, **params}}

            join = call("participant.join", type="human",
                        jwks={"keys": [public_jwk(key, "alice-1")]})
            # A join carries no signature the coordinator checks: it needs a token.
            assert post(sign_envelope(join, key, "alice-1")).status_code == 401
            assert post(join, token).json()["result"]["as"] == ALICE
            before = stored_entries(db)
            create = call("task.create", assignee=ALICE, kind="k", input={})
            assert post(create).status_code == 401  # neither token nor signature
            forged = sign_envelope(create, Ed25519PrivateKey.generate(), "alice-1")
            reply = post(forged)
            refused(reply.json(), -32070)
            assert reply.status_code == 400
            assert stored_entries(db) == before
            reply = post(sign_envelope(create, key, "alice-1"))
            assert reply.status_code == 200, reply.text
            assert stored_entries(db)[-1]["envelope"]["sig"].startswith("ed25519:alice-1:")
    finally:
        live.stop()
        tokens.close()
        coord.close()
