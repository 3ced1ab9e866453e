"""Event streams and sessions under pressure, over real sockets against a
real server on a free loopback port: streams never read never slow a write,
fall behind and are told so, resume from the store with Last-Event-ID, are
capped; a revoked or expired token ends its streams and MCP sessions within
a second; MCP sessions need authentication, are capped and expire when idle
(SPECIFICATION.md, "Review desk" and "MCP and A2A")."""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import test_desk_browser as desk_browser
from a2a.server.context import ServerCallContext
from a2a.types import Task
from client import Client, Http, refused
from hypothesis import given
from hypothesis import strategies as st
from servers import ROOT, LiveServer, env
from starlette.authentication import SimpleUser
from support import eventually

from coordinator import Coordinator
from coordinator.cli import DEFAULT_PROFILES
from coordinator.server import create_app
from coordinator.server.a2a_tasks import BoundedTaskStore
from coordinator.server.auth import Authenticator, TokenStore
from coordinator.server.desk.events import (
    CHUNK_BYTES,
    STREAM_BYTES,
    EventHub,
    _chunks,
    resume_points,
)
from coordinator.server.scopes import Grant
from coordinator.server.sessions import SessionLimits
from storage import SqliteStore

# The desk's browser harness (Debian's Chromium through Selenium), for the last test.
browser, size = desk_browser.browser, desk_browser.size  # at both sizes
wait = desk_browser.wait

WS = "wsp_streams"
ALICE = "human:alice"
BOB = "human:bob"
BOT = "agent:drafter"
OPEN_LIMIT_REACHED = -32904
WAIT = 60.0  # seconds: a generous deadline for a loaded machine, never a timing assertion


class Served:
    """A coordinator on a SQLite file behind `create_app` in a thread, with
    tokens when `auth`, and an HTTP client of it."""

    def __init__(self, db: Path, *, auth: bool = False, oidc: Any = None, **options: Any) -> None:
        self.db = db
        self.coord = Coordinator(store=SqliteStore(db), default_profiles=DEFAULT_PROFILES)
        self.tokens = TokenStore(str(db)) if auth else None
        authenticator = Authenticator(self.tokens, oidc=oidc) if self.tokens is not None else None
        self.app = create_app(self.coord, auth=authenticator, **options)
        self.live = LiveServer(self.app)
        self.url = self.live.url
        self.port = int(self.url.rsplit(":", 1)[1])
        self.http = httpx.Client(base_url=self.url, timeout=WAIT)

    def token(self, who: str) -> tuple[str, str]:
        assert self.tokens is not None
        secret, info = self.tokens.create(who, Grant.everything())
        return secret, info.id

    def chap(self, who: str, token: str | None = None) -> Client:
        transport = Http(self.http)
        if token is not None:
            transport.headers = {"Authorization": f"Bearer {token}"}
        return Client(transport, WS, who, prefix=f"{who}-")

    def close(self) -> None:
        self.http.close()
        self.live.stop()
        if self.tokens is not None:
            self.tokens.close()
        self.coord.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "chap.db"


# -- reading streams ------------------------------------------------------------


def raw_stream(port: int, path: str, headers: dict[str, str] | None = None, rcvbuf: int | None = None) -> socket.socket:
    """GET `path` on a raw socket (with a small receive buffer when `rcvbuf`), request sent, nothing read."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(WAIT)
    sock.connect(("127.0.0.1", port))
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Accept: text/event-stream"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return sock


def read_to_end(sock: socket.socket) -> tuple[int, list[tuple[str, str | None, Any]]]:
    """Everything the server sends until it closes: (status, events)."""
    chunks = []
    while data := sock.recv(1 << 16):
        chunks.append(data)
    sock.close()
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    plain = b""
    while body:  # chunked transfer coding
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        plain += rest[:size]
        body = rest[size + 2:]
    return status, parse_events(plain.decode())


def parse_events(text: str) -> list[tuple[str, str | None, Any]]:
    """(name, id, data) of each event in SSE text; comments skipped."""
    out = []
    for block in text.split("\n\n"):
        name, ident, data = "message", None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("id: "):
                ident = line[4:]
            elif line.startswith("data: "):
                data.append(line[6:])
        if data:
            out.append((name, ident, json.loads("\n".join(data))))
    return out


class Reader:
    """A stream read as it arrives, in a thread: events on `events`, then ("closed", None, None)."""

    def __init__(self, served: Served, path: str, headers: dict[str, str] | None = None) -> None:
        self.events: queue.Queue[tuple[str, str | None, Any]] = queue.Queue()
        self.status: queue.Queue[int] = queue.Queue()
        self._client = httpx.Client(base_url=served.url, timeout=httpx.Timeout(WAIT, read=None))
        threading.Thread(target=self._run, args=(path, headers or {}), daemon=True).start()
        assert self.status.get(timeout=WAIT) == 200
        assert self.next() == ("ready", None, {})

    def _run(self, path: str, headers: dict[str, str]) -> None:
        try:
            with self._client.stream("GET", path, headers=headers) as reply:
                self.status.put(reply.status_code)
                name, ident, data = "message", None, []
                for line in reply.iter_lines():
                    if line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("id: "):
                        ident = line[4:]
                    elif line.startswith("data: "):
                        data.append(line[6:])
                    elif not line and data:
                        self.events.put((name, ident, json.loads("\n".join(data))))
                        name, ident, data = "message", None, []
        except httpx.HTTPError:
            pass
        finally:
            self.events.put(("closed", None, None))
            self._client.close()

    def next(self, timeout: float = WAIT) -> tuple[str, str | None, Any]:
        return self.events.get(timeout=timeout)


# -- streams never slow the writer ------------------------------------------------

STALLED = 520
PAD = "x" * 4000


def test_stalled_streams_never_hold_a_write_and_are_ended_once_behind(db: Path) -> None:
    """520 streams opened and never read, on sockets with small buffers:
    every write returns; each stalled stream is ended (lagged) once its small
    buffer fills, holding no more than that buffer; a stream that reads
    gets everything; a stalled one, read at last, was told why it ended and
    resumes with Last-Event-ID from exactly the next entry."""
    # A budget per connection no stream reaches here: they end as they fall behind.
    served = Served(db, events=EventHub(max_buffered=16, stream_bytes=1 << 30))
    # Small buffers on the server's side too (accepted sockets inherit them),
    # so a stream that is not read stops taking bytes after a few entries.
    served.live.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    hub = served.app.state.events
    stalled: list[socket.socket] = []
    try:
        alice, bot = served.chap(ALICE), served.chap(BOT)
        alice.ok("participant.join", type="human", role="reviewer")
        bot.ok("participant.join", type="agent")
        healthy = Reader(served, f"/chap/events?workspace={WS}")
        stalled = [raw_stream(served.port, "/chap/events", rcvbuf=2048) for _ in range(STALLED)]
        eventually(lambda: hub.open_streams() == STALLED + 1, "every stream open")
        writes = 0
        while hub.ended["lagged"] < STALLED:
            assert writes < 2000, f"only {hub.ended['lagged']} of {STALLED} stalled streams ended"
            # Each write returns (httpx would raise after WAIT s): publishing never waits.
            alice.ok("task.create", assignee=BOT, kind="k", input={"n": writes, "pad": PAD})
            writes += 1
            assert hub.most_buffered <= hub.max_buffered
        assert hub.ended["lagged"] == STALLED and hub.open_streams() == 1
        assert hub.most_buffered <= 16
        log = alice.ok("audit.read")["entries"]
        # The reader that reads got every entry written since it opened, in order.
        got = [healthy.next() for _ in range(writes)]
        assert [data["entry"] for _, _, data in got] == log[-writes:]
        assert [ident for _, ident, _ in got] == [f"{WS}:{e['seq']}" for e in log[-writes:]]

        # A stalled stream, read at last: what was sent before it fell
        # behind, in order, then the reason it ended, then the connection closes.
        for sock in stalled[:3]:
            status, events = read_to_end(sock)
            assert status == 200 and events[0] == ("ready", None, {})
            audit = [e for e in events if e[0] == "audit"]
            seqs = [data["entry"]["seq"] for _, _, data in audit]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
            assert all(data["entry"] == log[data["entry"]["seq"]] for _, _, data in audit)
            name, _, end = events[-1]
            assert name == "end" and end["reason"] == "lagged" and "Last-Event-ID" in end["message"]
        last_id = audit[-1][1]
        assert last_id == f"{WS}:{seqs[-1]}"
        del stalled[:3]

        # It resumes after the last id it saw: exactly the entries it missed, then live ones.
        resumed = Reader(served, "/chap/events", {"Last-Event-ID": last_id})
        missed = log[seqs[-1] + 1:]
        assert missed
        assert [resumed.next()[2]["entry"] for _ in missed] == missed
        alice.ok("task.create", assignee=BOT, kind="k", input={"n": "after"})
        name, ident, data = resumed.next()
        assert name == "audit" and ident == f"{WS}:{len(log)}" and data["entry"]["seq"] == len(log)
        assert data["entry"]["envelope"]["params"]["input"] == {"n": "after"}
    finally:
        for sock in stalled:
            sock.close()
        served.close()


def test_last_event_id_resumes_each_workspace_named(db: Path) -> None:
    """A bare seq on the stream of one workspace; a list of WORKSPACE:SEQ on
    the stream of all; anything else is refused with a clear 400."""
    served = Served(db)
    try:
        alice = served.chap(ALICE)
        other = Client(Http(served.http), "wsp_other", ALICE, prefix="o-")
        for c in (alice, other):
            c.ok("participant.join", type="human")
            for n in range(3):
                c.ok("task.create", assignee=ALICE, kind="k", input={"n": n})
        log = alice.ok("audit.read")["entries"]
        other_log = other.ok("audit.read")["entries"]

        one = Reader(served, f"/chap/events?workspace={WS}", {"Last-Event-ID": "1"})
        assert [one.next()[2]["entry"] for _ in log[2:]] == log[2:]
        both = Reader(served, "/chap/events", {"Last-Event-ID": f"{WS}:2, wsp_other:0"})
        got = [both.next() for _ in range(len(log) - 3 + len(other_log) - 1)]
        assert [(d["workspace"], d["entry"]) for _, _, d in got] == (
            [(WS, e) for e in log[3:]] + [("wsp_other", e) for e in other_log[1:]]
        )
        # Nothing more was replayed: the next event is a new entry.
        alice.ok("task.create", assignee=ALICE, kind="k", input={"n": "new"})
        assert both.next()[1] == f"{WS}:{len(log)}"

        for bad in ("yesterday", "wsp_x:", "3", "a:1;b:2"):
            reply = served.http.get("/chap/events", headers={"Last-Event-ID": bad})
            assert reply.status_code == 400, bad
            refused(reply.json(), -32602)
            assert "Last-Event-ID" in reply.json()["error"]["message"]
        assert served.app.state.events.open_streams() == 2
    finally:
        served.close()


def test_a_stream_ends_rotated_after_its_bytes_and_resumes_without_a_gap(db: Path) -> None:
    """A connection carries STREAM_BYTES of live entries, then ends with
    `end/rotated`; its reader reconnects with Last-Event-ID and gets every
    later entry, none twice (a reader that never reads costs no more)."""
    served = Served(db)
    try:
        alice = served.chap(ALICE)
        alice.ok("participant.join", type="human")
        first = Reader(served, f"/chap/events?workspace={WS}")
        pad = "x" * 20_000
        calls = STREAM_BYTES // len(pad) + 4
        for n in range(calls):
            alice.ok("task.create", assignee=ALICE, kind="k", input={"n": n, "pad": pad})
        got: list[tuple[str, str | None, Any]] = []
        while (event := first.next())[0] == "audit":
            got.append(event)
        assert event[0] == "end" and event[2]["reason"] == "rotated", event
        assert first.next()[0] == "closed"
        carried = sum(len(json.dumps(d)) for _, _, d in got)
        assert carried >= STREAM_BYTES * 0.9 and len(got) < calls + 1
        second = Reader(served, f"/chap/events?workspace={WS}", {"Last-Event-ID": got[-1][1] or ""})
        log = alice.ok("audit.read")["entries"]
        rest = [second.next() for _ in log[len(got) + 1:]]
        assert [d["entry"] for _, _, d in got + rest] == log[1:]
        assert served.app.state.events.ended["rotated"] == 1
    finally:
        served.close()


# -- caps -----------------------------------------------------------------------------


def test_streams_are_capped_per_principal_and_in_all(db: Path) -> None:
    served = Served(db, auth=True, events=EventHub(max_streams=3, max_streams_per_principal=2))
    hub = served.app.state.events
    socks: list[socket.socket] = []
    try:
        alice, _ = served.token(ALICE)
        bob, _ = served.token(BOB)

        def open_as(token: str) -> socket.socket:
            sock = raw_stream(served.port, "/chap/events", {"Authorization": f"Bearer {token}"})
            socks.append(sock)
            return sock

        open_as(alice), open_as(alice)
        eventually(lambda: hub.open_streams(ALICE) == 2, "alice's two streams")
        third = served.http.get("/chap/events", headers={"Authorization": f"Bearer {alice}"})
        assert third.status_code == 429
        refused(third.json(), OPEN_LIMIT_REACHED)
        assert third.json()["error"]["data"] == {"limit": 2, "open": 2, "principal": ALICE}
        assert ALICE in third.json()["error"]["message"]

        open_as(bob)
        eventually(lambda: hub.open_streams() == 3, "three streams")
        full = served.http.get("/chap/events", headers={"Authorization": f"Bearer {bob}"})
        assert full.status_code == 429
        assert full.json()["error"]["data"] == {"limit": 3, "open": 3}

        # A stream closed by its reader frees its place.
        socks.pop(0).close()
        eventually(lambda: hub.open_streams(ALICE) == 1, "alice's closed stream released")
        open_as(alice)
        eventually(lambda: hub.open_streams(ALICE) == 2, "alice's new stream")
    finally:
        for sock in socks:
            sock.close()
        served.close()


# -- rights re-checked ---------------------------------------------------------------

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


def mcp(served: Served, body: dict[str, Any], token: str | None = None, session: str | None = None) -> httpx.Response:
    headers = dict(MCP_HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return served.http.post("/mcp", json=body, headers=headers)


def mcp_session(served: Served, token: str | None = None) -> str:
    opened = mcp(served, INITIALIZE, token)
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    ready = mcp(served, {"jsonrpc": "2.0", "method": "notifications/initialized"}, token, session)
    assert ready.status_code == 202, ready.text
    # The SDK finishes with a request a moment after it has answered it.
    gate = served.app.state.sessions
    eventually(lambda: not any(s.busy for s in gate._sessions if s.id == session), "the session idle")
    return session


def tools_list(served: Served, token: str | None, session: str) -> httpx.Response:
    return mcp(served, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, token, session)


def test_revoking_a_token_from_another_process_ends_its_stream_and_session(db: Path) -> None:
    served = Served(db, auth=True)
    try:
        token, token_id = served.token(ALICE)
        other, _ = served.token(ALICE)
        auth = {"Authorization": f"Bearer {token}"}
        stream = Reader(served, "/chap/events", auth)
        kept = Reader(served, "/chap/events", {"Authorization": f"Bearer {other}"})
        session = mcp_session(served, token)
        assert "chap.task.create" in tools_list(served, token, session).text
        gate = served.app.state.sessions
        assert gate.open_sessions(ALICE) == 1

        done = subprocess.run(
            [sys.executable, "-m", "coordinator", "token", "revoke", "--db", str(db), token_id],
            cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120,
        )
        assert done.returncode == 0, done.stderr
        name, _, data = stream.next(timeout=1.0)
        assert name == "end" and data["reason"] == "token_revoked"
        assert "sign in again" in data["message"]
        assert stream.next() == ("closed", None, None)
        eventually(lambda: gate.open_sessions() == 0, "the session ended", timeout=1.0)

        # The session's next call is refused, with the revoked token or another.
        again = tools_list(served, token, session)
        assert again.status_code == 401
        refused(again.json(), -32902)
        assert tools_list(served, other, session).status_code == 404
        # The stream of another token of the same person goes on.
        assert kept.events.empty()
        assert served.app.state.events.open_streams(ALICE) == 1
    finally:
        served.close()


def test_an_expired_oidc_token_ends_its_stream(db: Path) -> None:
    from joserfc import jwt
    from joserfc.jwk import RSAKey

    from coordinator.security.identity_verifiers import OidcVerifier

    idp = RSAKey.generate_key(2048, parameters={"kid": "idp-1"})
    verifier = OidcVerifier({"keys": [idp.as_dict(private=False)]}, issuer="https://id.example.org",
                            audience="chapline", leeway=0)
    served = Served(db, auth=True, oidc=verifier)
    try:
        exp = int(time.time()) + 2
        claims = {"iss": "https://id.example.org", "aud": "chapline", "sub": "carol-7", "iat": exp - 60,
                  "exp": exp, "chap_participant_uri": "human:carol"}
        token = jwt.encode({"alg": "RS256", "kid": "idp-1"}, claims, idp, algorithms=["RS256"])
        stream = Reader(served, "/chap/events", {"Authorization": f"Bearer {token}"})
        name, _, data = stream.next(timeout=exp - time.time() + 2.0)
        assert time.time() > exp
        assert name == "end" and data["reason"] == "token_expired"
        assert "expired" in data["message"]
    finally:
        served.close()


# -- MCP sessions ----------------------------------------------------------------------


def test_unauthenticated_mcp_initialize_opens_no_session(db: Path) -> None:
    served = Served(db, auth=True)
    try:
        for n in range(300):
            reply = mcp(served, INITIALIZE, "not-a-token" if n % 2 else None)
            assert reply.status_code == 401
            refused(reply.json(), -32902)
            assert reply.headers["www-authenticate"].startswith("Bearer")
            assert "mcp-session-id" not in reply.headers
        gate = served.app.state.sessions
        assert gate.open_sessions() == 0
        assert gate._sdk.session_manager._server_instances == {}
        # With a token, a session opens.
        token, _ = served.token(ALICE)
        mcp_session(served, token)
        assert len(gate._sdk.session_manager._server_instances) == 1
    finally:
        served.close()


def test_a_token_that_cannot_be_checked_opens_nothing(db: Path) -> None:
    """The token table unreadable (here: dropped by another process): MCP
    and A2A fail closed with 503 -32900 and a log id, as POST /chap does."""
    import sqlite3

    served = Served(db, auth=True)
    try:
        token, _ = served.token(ALICE)
        with sqlite3.connect(db) as other:
            other.execute("DROP TABLE chapline_tokens")
        reply = mcp(served, INITIALIZE, token)
        assert reply.status_code == 503 and "mcp-session-id" not in reply.headers
        refused(reply.json(), -32900)
        assert "log_id" in reply.json()["error"]["data"]
        assert served.app.state.sessions.open_sessions() == 0
        a2a = served.http.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}},
                               headers={"Authorization": f"Bearer {token}"})
        assert a2a.status_code == 503
        refused(a2a.json(), -32900)
    finally:
        served.close()


def test_mcp_sessions_are_capped_and_the_oldest_idle_one_makes_room(db: Path) -> None:
    served = Served(db, auth=True, sessions=SessionLimits(max_sessions=3, max_sessions_per_principal=2))
    gate = served.app.state.sessions
    socks: list[socket.socket] = []
    try:
        alice, _ = served.token(ALICE)
        bob, _ = served.token(BOB)
        first, second = mcp_session(served, alice), mcp_session(served, alice)
        third = mcp_session(served, alice)  # the oldest idle of alice's makes room
        assert tools_list(served, alice, first).status_code == 404
        assert tools_list(served, alice, second).status_code == 200
        assert gate.open_sessions(ALICE) == 2

        # Busy sessions (a GET stream open on each) are not ended for a new one.
        for session in (second, third):
            socks.append(raw_stream(served.port, "/mcp", {
                "Authorization": f"Bearer {alice}", "Mcp-Session-Id": session,
                "Mcp-Protocol-Version": "2025-11-25"}))
        eventually(lambda: all(s.busy for s in gate._sessions), "both sessions busy")
        busy = mcp(served, INITIALIZE, alice)
        assert busy.status_code == 429
        refused(busy.json(), OPEN_LIMIT_REACHED)
        assert busy.json()["error"]["data"] == {"limit": 2, "open": 2, "principal": ALICE}
        # The cap in all: bob's first session fits, his second does not (all busy but his own).
        mcp_session(served, bob)
        assert gate.open_sessions() == 3
        fourth = mcp_session(served, bob)  # his own idle one makes room
        assert gate.open_sessions() == 3 and gate.open_sessions(BOB) == 1
        assert tools_list(served, bob, fourth).status_code == 200
    finally:
        for sock in socks:
            sock.close()
        served.close()


def test_stateless_mcp_requests_open_no_session_and_pass_a_full_cap(db: Path) -> None:
    """The 2026-07-28 era keeps no session: at a cap full of busy sessions
    its calls are still served, and nothing is counted or ended for them."""
    import httpx2
    from mcp import Client as McpClient
    from mcp.client.streamable_http import streamable_http_client

    served = Served(db, sessions=SessionLimits(max_sessions=1, max_sessions_per_principal=1))
    gate = served.app.state.sessions
    sock = None
    try:
        session = mcp_session(served)
        sock = raw_stream(served.port, "/mcp", {"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"})
        eventually(lambda: all(s.busy for s in gate._sessions), "the session busy")
        refused(mcp(served, INITIALIZE).json(), OPEN_LIMIT_REACHED)

        async def run() -> list[str]:
            async with httpx2.AsyncClient() as http:
                transport = streamable_http_client(served.url + "/mcp", http_client=http)
                async with McpClient(transport, mode="2026-07-28") as client:
                    return [t.name for t in (await client.list_tools()).tools]

        assert "chap.task.create" in anyio.run(run)
        assert gate.open_sessions() == 1 and gate._sessions[0].id == session
    finally:
        if sock is not None:
            sock.close()
        served.close()


def test_an_idle_mcp_session_expires(db: Path) -> None:
    served = Served(db, sessions=SessionLimits(idle_seconds=0.3))
    try:
        session = mcp_session(served)
        gate = served.app.state.sessions
        eventually(lambda: gate.open_sessions() == 0, "the idle session ended", timeout=10)
        assert tools_list(served, None, session).status_code == 404
        assert gate._sdk.session_manager._server_instances == {}
    finally:
        served.close()


# -- A2A tasks -----------------------------------------------------------------------


def test_a2a_tasks_are_kept_with_a_bound_per_owner_and_in_all() -> None:
    store = BoundedTaskStore(max_tasks=5, max_per_owner=3)

    def context(owner: str) -> ServerCallContext:
        from a2a.server.routes.common import StarletteUser

        return ServerCallContext(user=StarletteUser(SimpleUser(owner)))

    async def run() -> list[bool]:
        for n in range(4):
            await store.save(Task(id=f"a{n}", context_id="c"), context(ALICE))
        for n in range(3):
            await store.save(Task(id=f"b{n}", context_id="c"), context(BOB))
        kept = [await store.get(f"a{n}", context(ALICE)) is not None for n in range(4)]
        kept += [await store.get(f"b{n}", context(BOB)) is not None for n in range(3)]
        # Another owner cannot read them.
        kept.append(await store.get("b2", context(ALICE)) is not None)
        return kept

    # Alice's oldest went at her cap (3), then her next oldest at the cap in all (5).
    assert anyio.run(run) == [False, False, True, True, True, True, True, False]
    assert len(store) == 5


# -- the desk in a real browser ----------------------------------------------------------


def test_the_desk_signs_out_saying_why_when_its_token_is_revoked(db: Path, browser: Any) -> None:
    """A stream ended as lagged is reopened (the desk stays signed in and
    live); one ended because the token was revoked signs the desk out, and
    the page says why."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    served = Served(db, auth=True)
    hub = served.app.state.events
    try:
        token, token_id = served.token(ALICE)
        served.chap(ALICE, token).ok("participant.join", type="human", role="reviewer")
        browser.get(served.url + "/")
        field = wait(browser, lambda d: d.find_element(By.ID, "token").is_displayed()
                     and d.find_element(By.ID, "token"), "the sign-in form")
        field.send_keys(token, Keys.ENTER)
        wait(browser, lambda d: d.find_element(By.ID, "principal").text == ALICE, "signed in")
        live = lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live")  # noqa: E731
        wait(browser, lambda d: live(d) == "on", "the live event stream")
        eventually(lambda: hub.open_streams(ALICE) == 1, "the desk's stream")

        assert hub.end_credential(f"Bearer {token}", "lagged") == 1
        wait(browser, lambda d: live(d) == "off", "the stream seen ended")
        wait(browser, lambda d: live(d) == "on", "the stream reopened")
        assert browser.find_element(By.ID, "principal").text == ALICE

        served.tokens.revoke(token_id)  # type: ignore[union-attr]
        wait(browser, lambda d: d.find_element(By.ID, "sign-in").is_displayed(), "signed out")
        said = browser.find_element(By.ID, "sign-in-error").text
        assert said.startswith("Signed out:") and "revoked" in said
        assert not browser.find_element(By.ID, "principal").is_displayed()
        assert browser.execute_script("return sessionStorage.getItem('chapline-desk')") is None
        eventually(lambda: hub.open_streams() == 0, "no stream left open")
    finally:
        served.close()


# -- properties -------------------------------------------------------------------------

_WORKSPACE = st.from_regex(r"wsp_[a-z0-9_]{1,12}", fullmatch=True)


@given(st.lists(st.tuples(_WORKSPACE, st.integers(0, 10**12)), min_size=1, max_size=6))
def test_last_event_id_lists_read_back_as_their_points(points: list[tuple[str, int]]) -> None:
    """What a reader of every workspace sends back is what it saw: the last
    point named for each workspace, whatever the spacing."""
    header = " , ".join(f"{w}:{seq}" for w, seq in points)
    assert resume_points(header, None) == dict(points)
    # On one workspace's stream, only that workspace's point counts; a bare seq names it.
    w, seq = points[-1]
    assert resume_points(header, w) == {w: seq}
    assert resume_points(str(seq), w) == {w: seq}


@given(st.lists(st.binary(min_size=1, max_size=3 * CHUNK_BYTES // 2), max_size=20))
def test_events_are_sent_whole_in_bounded_chunks(events: list[bytes]) -> None:
    chunks = list(_chunks(events))
    assert b"".join(chunks) == b"".join(events)
    # A chunk is one event, or events that together fit the bound.
    for chunk in chunks:
        assert len(chunk) <= CHUNK_BYTES or chunk in events
