"""A small SCITT transparency service of the test suite's own, on 127.0.0.1.

`POST /entries` with a COSE_Sign1 body (`application/cose`) registers the
statement when its signature verifies with a trusted issuer key, and answers
201 with a receipt: a COSE_Sign1 by the service's key over the SHA-256 of the
statement (detached), `Location: /entries/<n>`. Anything else is refused 400.
`fail_next` makes the next registration answer 503.
"""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from coordinator.errors import CoseError
from coordinator.security.cose import (
    CWT_CLAIMS,
    CWT_IAT,
    CWT_ISS,
    CWT_SUB,
    KID,
    sign1,
    verify_sign1,
)

SERVICE_ID = "https://ts.test"


class TransparencyService:
    def __init__(self, trusted: list[Ed25519PublicKey]) -> None:
        self.key = Ed25519PrivateKey.generate()
        self.trusted = trusted
        self.entries: list[bytes] = []
        self.fail_next = False
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, headers, payload = service.register(self.path, self.headers.get("Content-Type"), body)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> TransparencyService:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()

    def register(self, path: str, content_type: str | None, body: bytes) -> tuple[int, dict[str, str], bytes]:
        if self.fail_next:
            self.fail_next = False
            return 503, {}, b"unavailable"
        if path != "/entries" or content_type != "application/cose":
            return 400, {}, b"POST a COSE_Sign1 to /entries"
        for key in self.trusted:
            try:
                verify_sign1(body, key)
                break
            except CoseError:
                continue
        else:
            return 400, {}, b"statement signature does not verify with a trusted issuer key"
        self.entries.append(body)
        n = len(self.entries)
        receipt = sign1(
            {KID: b"ts-1", CWT_CLAIMS: {CWT_ISS: SERVICE_ID, CWT_SUB: f"entry-{n}", CWT_IAT: 1_800_000_000 + n}},
            hashlib.sha256(body).digest(),
            self.key,
            detached=True,
        )
        return 201, {"Content-Type": "application/cose", "Location": f"/entries/{n}"}, receipt
