"""Browser safety: what stops a web page from driving the server through the
browser of someone who can reach it.

The server identifies callers by bearer token or by the envelope, never by
cookies, yet a page on another site can still reach a server on loopback or
a private network through its visitor's browser. Four rules, applied to
every request before any route sees it (SPECIFICATION.md, "Browser safety"):

- Host: only names this server answers to (loopback names, IP addresses,
  `--allowed-host`), so a page whose own name was re-pointed at this address
  (DNS rebinding) is refused: 421.
- Origin: a request a browser marks as coming from another site is refused
  (403) unless that origin was listed (`--allow-origin`); only listed origins
  get CORS headers and preflight answers. No wildcard.
- Content-Type: a POST must be `application/json`. Every other type is one a
  page may send cross-origin without a preflight (forms, `text/plain`
  fetches, `navigator.sendBeacon`): 415.
- Every answer carries `nosniff`, `no-referrer`, `X-Frame-Options: DENY` and
  a Content-Security-Policy without inline script or style and with
  `frame-ancestors 'none'` (the desk's pages need nothing else).

Refusals are JSON-RPC errors (-32600, `id: null`) with the status above.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import msgspec

from coordinator.engine.wire import INVALID_REQUEST, error_response
from coordinator.errors import UnsafeRequest
from coordinator.extras import needs

with needs("server"):
    from starlette.datastructures import Headers
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "DEFAULT_POLICY", "LOOPBACK_NAMES", "BrowserGuard", "BrowserPolicy"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")

# The desk loads its own modules and stylesheet and talks to its own origin;
# nothing inline, nothing from elsewhere, never inside a frame.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

_ALWAYS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
]

# What a listed origin's page may send and read (MCP's session headers included).
_PREFLIGHT = [
    (b"access-control-allow-methods", b"GET, POST, DELETE, OPTIONS"),
    (b"access-control-allow-headers", b"Authorization, Content-Type, Last-Event-ID, Mcp-Session-Id, Mcp-Protocol-Version"),
    (b"access-control-max-age", b"600"),
]
_EXPOSE = (b"access-control-expose-headers", b"Mcp-Session-Id, WWW-Authenticate")

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class BrowserPolicy:
    """Which Host names and which other origins the server accepts.

    `allowed_hosts` adds names to the loopback names and IP addresses that are
    always accepted: `name` (any port) or `name:port`. `allowed_origins` lists
    the exact origins (`https://app.example.org`, `http://localhost:5173`)
    whose pages may call the server. Both are checked and normalised
    (lower case, no default port); a malformed entry is a ValueError naming it.
    """

    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_hosts", tuple(_host_entry(h) for h in self.allowed_hosts))
        object.__setattr__(self, "allowed_origins", tuple(_origin_entry(o) for o in self.allowed_origins))

    def host_allowed(self, host: str) -> bool:
        """Whether a request naming `host` (the Host header) may be served."""
        split = _split_host(host.lower())
        if split is None:
            return False
        name, port = split
        if name in LOOPBACK_NAMES or name in self.allowed_hosts or f"{name}:{port}" in self.allowed_hosts:
            return True
        # No page can rebind an address: a Host that is one names the page's own origin.
        return _is_address(name)

    def origin_allowed(self, origin: str, host: str) -> bool:
        """Whether a request from a page on `origin` may be served: the
        server's own origin (Host), or one listed."""
        if origin.lower() in self.allowed_origins:
            return True
        parts = urlsplit(origin.lower())
        return parts.scheme in _DEFAULT_PORTS and parts.netloc == host.lower() and not parts.path


# Loopback names and IP addresses, no other origin.
DEFAULT_POLICY = BrowserPolicy()


class BrowserGuard:
    """ASGI middleware applying a BrowserPolicy to every HTTP request."""

    def __init__(self, app: ASGIApp, policy: BrowserPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        try:
            listed = self._check(scope["method"], headers, origin)
        except UnsafeRequest as refusal:
            await _refuse(refusal, send)
            return
        extra = list(_ALWAYS)
        if listed and origin is not None:
            extra += [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin"), _EXPOSE]
            if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
                await send({"type": "http.response.start", "status": 204, "headers": extra + _PREFLIGHT})
                await send({"type": "http.response.body", "body": b""})
                return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = _merged(message.get("headers", []), extra)
            await send(message)

        await self.app(scope, receive, with_headers)

    def _check(self, method: str, headers: Headers, origin: str | None) -> bool:
        """Raises UnsafeRequest for a request to refuse; True when it comes
        from a listed origin (its answer then carries CORS headers)."""
        host = headers.get("host", "")
        if not self.policy.host_allowed(host):
            shown = _split_host(host.lower())
            name = shown[0] if shown else host
            raise UnsafeRequest(
                421,
                "Host",
                INVALID_REQUEST,
                f"Host {host!r} is not a name this server answers to: a page on another site can "
                "point its own name at this address (DNS rebinding). Reach the server as localhost "
                f"or by its IP address, or start it with --allowed-host {name or 'NAME'}",
                {"host": host},
            )
        listed = origin is not None and origin.lower() in self.policy.allowed_origins
        if origin is not None and not self.policy.origin_allowed(origin, host):
            raise UnsafeRequest(
                403,
                "Origin",
                INVALID_REQUEST,
                f"Requests from pages on {origin!r} are not accepted: to let that site call this "
                f"server, start it with --allow-origin {origin}",
                {"origin": origin},
            )
        if method == "POST":
            given = headers.get("content-type")
            if given is None or given.split(";")[0].strip().lower() != "application/json":
                raise UnsafeRequest(
                    415,
                    "Content-Type",
                    INVALID_REQUEST,
                    f"Send the body as Content-Type: application/json (got {given or 'none'}); "
                    "other types are what a page on another site can send without asking",
                    {"content_type": given},
                )
        return listed


async def _refuse(refusal: UnsafeRequest, send: Send) -> None:
    body = msgspec.json.encode(error_response(None, refusal))
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *_ALWAYS,
    ]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _merged(given: Iterable[tuple[bytes, bytes]], extra: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The response's headers plus `extra`, a header the response set itself kept."""
    out = list(given)
    present = {name.lower() for name, _ in out}
    out += [(name, value) for name, value in extra if name not in present]
    return out


def _split_host(host: str) -> tuple[str, str] | None:
    """(name, port) of a Host header value ('' for no port), None when malformed."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return None
        name, rest = host[: end + 1], host[end + 1 :]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        return name, rest[1:]
    name, colon, port = host.partition(":")
    if not name or (colon and not port.isdigit()) or ":" in port:
        return None
    return name, port


def _is_address(name: str) -> bool:
    text = name[1:-1] if name.startswith("[") else name
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    # An IPv6 address is written in brackets in a Host header, an IPv4 one never.
    return (address.version == 6) == name.startswith("[")


def _host_entry(entry: Any) -> str:
    text = str(entry).strip().lower()
    split = _split_host(text)
    if split is None or "/" in text or "*" in text:
        raise ValueError(
            f"--allowed-host {entry!r} is not a host name: give a name as clients write it in "
            "the URL, without scheme or path (chap.example.org, or chap.example.org:8443)"
        )
    return text


def _origin_entry(entry: Any) -> str:
    text = str(entry).strip().lower().removesuffix("/")
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (
        parts.scheme not in _DEFAULT_PORTS
        or not parts.hostname
        or parts.path
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
        or "*" in text
        or port == -1
    ):
        raise ValueError(
            f"--allow-origin {entry!r} is not an origin: give scheme, host and port as the "
            "browser shows them, nothing else (https://app.example.org, http://localhost:5173)"
        )
    if port == _DEFAULT_PORTS[parts.scheme]:
        text = f"{parts.scheme}://{parts.netloc.rsplit(':', 1)[0]}"
    return text
