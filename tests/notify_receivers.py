"""Real receivers for the notification tests: an HTTP server that checks
each webhook's signature as a receiver would (HMAC-SHA256 of `<t>.<body>`,
computed here with hmac, not with chapline's own signing), can fail its
first requests and can be stopped and started again on the same port; and
an SMTP server (aiosmtpd) keeping every message."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import socket
import threading
from collections.abc import Callable
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

from aiosmtpd.controller import Controller


class Delivery(NamedTuple):
    path: str
    key: str
    body: bytes
    signed: bool  # the signature checks out with the subscription's secret


class WebhookReceiver:
    """POSTs to http://127.0.0.1:PORT/<path>, kept in `deliveries` (those
    answered 2xx) once `fail_first` requests have been answered 500.
    `answer` is the status of the others (a 3xx redirects to /elsewhere);
    every request's path is in `paths`. `before_answer`, when set, is called
    with each delivery once it is kept and before it is answered (a test
    kills the sender there); a sender gone before its answer is no error."""

    def __init__(self, secret: str, *, fail_first: int = 0, port: int = 0) -> None:
        self.secret = secret
        self.fail_first = fail_first
        self.requests = 0
        self.answer = 204
        self.paths: list[str] = []
        self.deliveries: list[Delivery] = []
        self.before_answer: Callable[[Delivery], None] | None = None
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.port = port
        self.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                delivery = None
                with receiver.lock:
                    receiver.requests += 1
                    receiver.paths.append(self.path)
                    status = 500 if receiver.requests <= receiver.fail_first else receiver.answer
                    if 200 <= status < 300:
                        delivery = Delivery(
                            self.path, self.headers.get("Idempotency-Key", ""), body,
                            receiver.signed(self.headers.get("Chapline-Signature", ""), body))
                        receiver.deliveries.append(delivery)
                    hook = receiver.before_answer
                if delivery is not None and hook is not None:
                    hook(delivery)
                with contextlib.suppress(ConnectionError):  # the sender may be gone (killed)
                    self.send_response(status)
                    if 300 <= status < 400:
                        self.send_header("Location", "/elsewhere")
                    self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()
        self.server = None

    def signed(self, header: str, body: bytes) -> bool:
        fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
        expected = hmac.new(self.secret.encode(), fields.get("t", "").encode() + b"." + body,
                            hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, fields.get("v1", ""))

    def keys(self) -> set[str]:
        with self.lock:
            return {d.key for d in self.deliveries}


class SmtpReceiver:
    """An SMTP server on a free loopback port; `messages` as parsed."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        receiver = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
                receiver.messages.append(message_from_bytes(envelope.content))
                return "250 OK"

        # aiosmtpd connects to its own port to know it is up: it needs a
        # number, so take a free one from the kernel first.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=port)
        self.controller.start()
        self.url = f"smtp://127.0.0.1:{self.controller.port}"

    def stop(self) -> None:
        self.controller.stop()
