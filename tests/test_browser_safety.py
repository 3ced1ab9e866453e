"""Browser safety over real HTTP (server/browser.py; SPECIFICATION.md,
"Browser safety"): `chapline serve` with its defaults, and with
`--allowed-host`/`--allow-origin`, refuses what a web page in someone's
browser could make it do. What a real browser does on another site's page
is in test_browser_attack.py.

- a Host that is not a loopback name, an IP address or listed (DNS
  rebinding) is refused on every route, 421;
- a POST that is not `application/json` (what forms, `text/plain` fetches
  and `sendBeacon` send without a preflight) is refused on every write
  endpoint, 415;
- another site's Origin is refused, 403, and gets no CORS headers, unless
  listed; a listed one gets them and its preflights answered;
- every answer carries nosniff, no-referrer, X-Frame-Options and the CSP;
  the desk's files hold no inline script or style the CSP would block;
- `serve` (and `mcp --http`) beyond loopback without --auth refuses to
  start unless --insecure.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from client import refused
from hypothesis import given
from hypothesis import strategies as st
from servers import ROOT, LiveServer, Serve, Served, env

from coordinator import Coordinator
from coordinator.server import create_app
from coordinator.server.browser import CONTENT_SECURITY_POLICY, BrowserPolicy
from coordinator.server.desk.routes import STATIC
from storage import SqliteStore

WS = "wsp_browser"
ALICE = "human:alice"
MALLORY = {
    "jsonrpc": "2.0",
    "id": "evil",
    "method": "participant.join",
    "params": {"workspace": WS, "from": "human:mallory", "type": "human", "role": "admin"},
}
JSON = {"Content-Type": "application/json"}
EVIL = "evil.example"
LISTED = "http://app.example:5173"


def chap(base: str, envelope: dict[str, Any]) -> dict[str, Any]:
    """A call as a plain client makes it (no Origin, the server's own Host)."""
    answer: dict[str, Any] = httpx.post(base + "/chap", json=envelope, timeout=60).json()
    return answer


def log(base: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = chap(
        base, {"jsonrpc": "2.0", "id": "log", "method": "audit.read", "params": {"workspace": WS}}
    )["result"]["entries"]
    return entries


@pytest.fixture(scope="module")
def base(served: Served) -> str:
    chap(served.url, {"jsonrpc": "2.0", "id": 1, "method": "participant.join",
                      "params": {"workspace": WS, "from": ALICE, "type": "human", "role": "admin"}})
    return served.url


@pytest.fixture(scope="module")
def listing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server started with --allowed-host and --allow-origin."""
    db = tmp_path_factory.mktemp("listing") / "s.db"
    with Serve(db, "--allowed-host", "chap.example", "--allowed-host", "other.example:9000",
               "--allow-origin", LISTED) as server:
        yield server.base


def unchanged(base: str, before: list[dict[str, Any]]) -> None:
    after = log(base)
    assert after == before
    assert "mallory" not in json.dumps(after)


def refusal(reply: httpx.Response, status: int) -> dict[str, Any]:
    """The JSON-RPC refusal (-32600, id null) answered with `status`."""
    assert reply.status_code == status, (reply.status_code, reply.text)
    assert reply.headers["content-type"] == "application/json"
    body: dict[str, Any] = reply.json()
    assert body["id"] is None and "Traceback" not in reply.text
    return refused(body, -32600)


# -- DNS rebinding: the Host header ------------------------------------------------

ROUTES = [
    ("POST", "/chap"), ("POST", "/"), ("OPTIONS", "/chap"), ("GET", "/"), ("GET", "/desk/static/desk.js"),
    ("GET", "/desk/api/session"), ("GET", "/desk/api/workspaces"), ("GET", f"/desk/api/snapshot?workspace={WS}"),
    ("GET", "/chap/events"), ("POST", "/mcp"), ("GET", "/mcp"), ("POST", "/a2a"),
    ("GET", "/.well-known/agent-card.json"), ("GET", "/nowhere"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize("port", [True, False])
def test_a_rebound_host_is_refused_on_every_route(base: str, method: str, path: str, port: bool) -> None:
    before = log(base)
    host = EVIL + (":" + base.rsplit(":", 1)[1] if port else "")
    reply = httpx.request(method, base + path, headers={"Host": host, **JSON}, content=json.dumps(MALLORY),
                          timeout=60)
    error = refusal(reply, 421)
    assert "--allowed-host evil.example" in error["message"] and error["data"] == {"host": host}
    assert reply.headers["x-content-type-options"] == "nosniff"
    unchanged(base, before)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]", "192.0.2.7", "[2001:db8::1]"])
def test_loopback_names_and_addresses_are_served_with_any_port(base: str, host: str) -> None:
    port = base.rsplit(":", 1)[1]
    for named in (host, f"{host}:{port}", f"{host}:1"):
        reply = httpx.get(base + "/desk/api/session", headers={"Host": named}, timeout=60)
        assert reply.json() == {"auth": False, "principal": None}, named


@pytest.mark.parametrize("host", ["", "localhost.", "127.0.0.1.evil.example", "0x7f.1", "::1", "[::1", "a:b:c",
                                  "localhost:http", "192.0.2.7@evil.example"])
def test_a_malformed_or_lookalike_host_is_refused(base: str, host: str) -> None:
    refusal(httpx.get(base + "/desk/api/session", headers={"Host": host}, timeout=60), 421)


def test_allowed_host_adds_names_with_any_port_or_one(listing: str) -> None:
    def status(host: str) -> int:
        return httpx.get(listing + "/desk/api/workspaces", headers={"Host": host}, timeout=60).status_code

    assert status("chap.example") == status("chap.example:8443") == status("CHAP.example:1") == 200
    assert status("other.example:9000") == 200
    assert status("other.example:9001") == status("other.example") == status("sub.chap.example") == 421
    assert status(EVIL) == 421


NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,12}(\.[a-z][a-z0-9-]{0,12}){0,3}", fullmatch=True)


@given(name=NAMES, port=st.one_of(st.none(), st.integers(1, 65535)))
def test_no_name_but_loopback_or_listed_is_accepted(name: str, port: int | None) -> None:
    host = name if port is None else f"{name}:{port}"
    assert BrowserPolicy().host_allowed(host) is (name == "localhost")
    assert BrowserPolicy(allowed_hosts=(name,)).host_allowed(host)
    assert BrowserPolicy(allowed_hosts=(name + ".x",)).host_allowed(host) is (name == "localhost")


@given(address=st.ip_addresses(), port=st.one_of(st.none(), st.integers(1, 65535)))
def test_every_ip_address_is_accepted_as_written_in_a_url(address: Any, port: int | None) -> None:
    name = f"[{address}]" if address.version == 6 else str(address)
    assert BrowserPolicy().host_allowed(name if port is None else f"{name}:{port}")
    assert not BrowserPolicy().host_allowed(str(address) if address.version == 6 else f"[{address}]")


# -- cross-origin writes: the Content-Type -------------------------------------------

WRITES = ["/chap", "/", "/mcp", "/a2a"]
NOT_JSON = [None, "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x", "application/json-seq", "application/jsonp", "text/json"]


@pytest.mark.parametrize("path", WRITES)
@pytest.mark.parametrize("content_type", NOT_JSON)
def test_a_post_that_is_not_json_is_refused_on_every_write_endpoint(
    base: str, path: str, content_type: str | None
) -> None:
    before = log(base)
    headers = {} if content_type is None else {"Content-Type": content_type}
    reply = httpx.post(base + path, content=json.dumps(MALLORY), headers=headers, timeout=60)
    error = refusal(reply, 415)
    assert "Content-Type: application/json" in error["message"]
    assert error["data"] == {"content_type": content_type}
    unchanged(base, before)


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "APPLICATION/JSON", "application/json ; charset=UTF-8"])
def test_json_with_or_without_parameters_is_served(base: str, content_type: str) -> None:
    envelope = {"jsonrpc": "2.0", "id": 2, "method": "workspace.describe", "params": {"workspace": WS}}
    reply = httpx.post(base + "/chap", content=json.dumps(envelope), headers={"Content-Type": content_type},
                       timeout=60)
    assert reply.status_code == 200 and reply.json()["result"]["id"] == WS


# -- other sites' pages: the Origin ---------------------------------------------------


@pytest.mark.parametrize("origin", ["https://evil.example", "http://127.0.0.1:1", "null", LISTED])
@pytest.mark.parametrize(("method", "path"), [("POST", "/chap"), ("GET", f"/desk/api/snapshot?workspace={WS}"),
                                              ("GET", "/chap/events"), ("POST", "/mcp")])
def test_another_sites_request_is_refused_without_cors_headers(
    base: str, origin: str, method: str, path: str
) -> None:
    before = log(base)
    reply = httpx.request(method, base + path, headers={"Origin": origin, **JSON}, content=json.dumps(MALLORY),
                          timeout=60)
    error = refusal(reply, 403)
    assert f"--allow-origin {origin}" in error["message"] and error["data"] == {"origin": origin}
    assert not any(name.startswith("access-control-") for name in reply.headers)
    unchanged(base, before)


def test_another_sites_preflight_is_refused(base: str) -> None:
    reply = httpx.options(base + "/chap", headers={"Origin": "https://evil.example",
                                                   "Access-Control-Request-Method": "POST",
                                                   "Access-Control-Request-Headers": "content-type"}, timeout=60)
    refusal(reply, 403)
    assert not any(name.startswith("access-control-") for name in reply.headers)


def test_the_servers_own_pages_are_served(base: str) -> None:
    origin = base.replace("127.0.0.1", "localhost")
    envelope = {"jsonrpc": "2.0", "id": 3, "method": "workspace.describe", "params": {"workspace": WS}}
    for own, host in ((base, None), (origin, origin.removeprefix("http://"))):
        headers = {"Origin": own, **({"Host": host} if host else {})}
        reply = httpx.post(base + "/chap", json=envelope, headers=headers, timeout=60)
        assert reply.status_code == 200 and "access-control-allow-origin" not in reply.headers


def test_a_listed_origin_gets_cors_headers_and_its_preflight_answered(listing: str) -> None:
    preflight = httpx.options(listing + "/chap", headers={"Origin": LISTED, "Access-Control-Request-Method": "POST",
                                                          "Access-Control-Request-Headers": "authorization, content-type"},
                              timeout=60)
    assert preflight.status_code == 204 and preflight.content == b""
    assert preflight.headers["access-control-allow-origin"] == LISTED
    assert "POST" in preflight.headers["access-control-allow-methods"]
    allowed = preflight.headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed and "content-type" in allowed
    envelope = {"jsonrpc": "2.0", "id": 4, "method": "participant.join",
                "params": {"workspace": "wsp_listed", "from": ALICE, "type": "human"}}
    reply = httpx.post(listing + "/chap", json=envelope, headers={"Origin": LISTED}, timeout=60)
    assert reply.status_code == 200 and reply.json()["result"]["joined"] is True
    assert reply.headers["access-control-allow-origin"] == LISTED and reply.headers["vary"] == "Origin"
    for near in ("https://app.example:5173", "http://app.example:5174", "http://app.example", "*"):
        refusal(httpx.post(listing + "/chap", json=envelope, headers={"Origin": near}, timeout=60), 403)


# -- headers on every answer; the desk's files --------------------------------------


def csp(value: str) -> dict[str, list[str]]:
    directives = (d.split() for d in value.split(";") if d.strip())
    return {d[0]: d[1:] for d in directives}


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/", 200), ("GET", "/desk/static/desk.js", 200), ("GET", "/desk/static/desk.css", 200),
    ("GET", "/desk/api/session", 200), ("GET", f"/desk/api/snapshot?workspace={WS}", 200),
    ("GET", "/desk/api/snapshot", 400), ("POST", "/chap", 200), ("GET", "/chap", 405), ("GET", "/nowhere", 404),
    ("GET", "/.well-known/agent-card.json", 200), ("PUT", "/chap", 405),
])
def test_every_answer_carries_the_security_headers(base: str, method: str, path: str, status: int) -> None:
    envelope = {"jsonrpc": "2.0", "id": 5, "method": "workspace.describe", "params": {"workspace": WS}}
    reply = httpx.request(method, base + path, json=envelope if method == "POST" else None, timeout=60)
    assert reply.status_code == status
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["referrer-policy"] == "no-referrer"
    assert reply.headers["x-frame-options"] == "DENY"
    assert reply.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


class _Defective(Coordinator):
    def workspace_ids(self) -> list[str]:
        raise RuntimeError("a defect in the server")


def test_a_defects_500_carries_them_too(tmp_path: Path) -> None:
    coord = _Defective(store=SqliteStore(tmp_path / "c.db"))
    live = LiveServer(create_app(coord))
    try:
        reply = httpx.get(live.url + "/desk/api/workspaces", timeout=60)
    finally:
        live.stop()
        coord.close()
    assert reply.status_code == 500 and "defect" not in reply.text
    refused(reply.json(), -32603)
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


def test_the_event_stream_carries_them_too(base: str) -> None:
    with httpx.stream("GET", base + "/chap/events", timeout=60) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["x-frame-options"] == "DENY"


def test_the_desk_policy_allows_no_inline_code_and_no_framing(base: str) -> None:
    policy = csp(httpx.get(base + "/", timeout=60).headers["content-security-policy"])
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"]
    assert policy["default-src"] == ["'none'"] and policy["base-uri"] == ["'none'"]
    assert not any("unsafe" in source or source == "*" for sources in policy.values() for source in sources)


class _Inline(HTMLParser):
    """Inline script, inline style, event-handler attributes and javascript: URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "style" or (tag == "script" and "src" not in named):
            self.open = tag
        for name, value in attrs:
            if name.startswith("on") or name == "style" or (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}>")

    def handle_data(self, data: str) -> None:
        if self.open and data.strip():
            self.found.append(f"inline <{self.open}>")

    def handle_endtag(self, tag: str) -> None:
        self.open = None


def test_the_desk_files_hold_nothing_the_policy_would_block() -> None:
    page = _Inline()
    page.feed((STATIC / "index.html").read_text())
    assert page.found == []
    for script in STATIC.glob("*.js"):
        text = script.read_text()
        # Attributes set from script: h(tag, {style: ...}) and setAttribute are the ways in.
        for pattern in (r"\bstyle\s*:", r"setAttribute\(\s*[\"'](style|on)", r"\.(inner|outer)HTML\s*=", r"insertAdjacentHTML",
                        r"document\.write", r"\beval\(", r"new Function", r"javascript:"):
            assert not re.search(pattern, text), (script.name, pattern)


# -- starting beyond loopback ----------------------------------------------------------


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "coordinator", *args, "--port", "0", "--db", str(tmp_path / "s.db")],
                            cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("command", [["serve"], ["mcp", "--http"]])
@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_beyond_loopback_without_auth_it_refuses_to_start(tmp_path: Path, command: list[str], host: str) -> None:
    proc = start(tmp_path, *command, "--host", host)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert out == ""
    assert "refusing to listen" in err and "without --auth" in err and "--insecure" in err
    assert "Traceback" not in err
    assert not (tmp_path / "s.db").exists()  # refused before the database was opened


def test_with_insecure_it_starts_and_warns(tmp_path: Path) -> None:
    proc = start(tmp_path, "serve", "--host", "0.0.0.0", "--insecure")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"CHAP on http://0\.0\.0\.0:(\d+)/chap", line)
        assert found, line
        reply = httpx.get(f"http://127.0.0.1:{found.group(1)}/desk/api/session", timeout=60)
        assert reply.json() == {"auth": False, "principal": None}
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "warning: listening on" in err and "without --auth (--insecure)" in err


def test_with_auth_it_starts_beyond_loopback_without_a_warning(tmp_path: Path) -> None:
    proc = start(tmp_path, "serve", "--host", "0.0.0.0", "--auth")
    try:
        assert proc.stdout is not None
        assert "tokens required" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "warning" not in err


@pytest.mark.parametrize(("option", "value"), [
    ("--allow-origin", "*"), ("--allow-origin", "null"), ("--allow-origin", "app.example"),
    ("--allow-origin", "https://app.example/desk"), ("--allow-origin", "ftp://app.example"),
    ("--allow-origin", "https://user@app.example"), ("--allow-origin", "https://app.example:99999"),
    ("--allowed-host", "http://chap.example"), ("--allowed-host", "*.example"), ("--allowed-host", "chap.example/x"),
    ("--allowed-host", "chap.example:port"), ("--allowed-host", ""),
])
def test_a_malformed_listing_is_a_usage_error(tmp_path: Path, option: str, value: str) -> None:
    proc = start(tmp_path, "serve", option, value)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert f"{option} {value!r}" in err and "Traceback" not in err


def test_listings_are_normalised() -> None:
    policy = BrowserPolicy(allowed_hosts=("Chap.Example",), allowed_origins=("HTTPS://App.Example:443/",))
    assert policy.allowed_hosts == ("chap.example",)
    assert policy.allowed_origins == ("https://app.example",)
    assert policy.origin_allowed("https://app.example", "127.0.0.1:8080")
