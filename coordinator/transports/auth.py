"""Who may act as whom over HTTP: bearer tokens mapped to participant URIs.

A token is a random secret handed out once (`chapline token create`); the
database keeps only its SHA-256 digest, the participant URI it stands for
(the principal) and when it was created and revoked. The transport looks the
presented token up on every request, so a revocation made by another process
takes effect at the next call.

A deployment with an identity provider may also accept the provider's
access tokens (JWTs): an `Authenticator` given an OIDC verifier
(`coordinator.verifiers.OidcVerifier`: signature against the provider's JWKS,
`iss`, `aud`, `exp`, `sub`) takes the principal from the token's
`chap_participant_uri` claim.

When a server requires authentication, a call is admitted only when it
carries a valid token and its `params.from`, if present, is the token's
principal; or, when the coordinator itself requires signatures
(security-signed), when it carries no token but a `sig`: the coordinator then
checks the signature against the key `from` registered. Admission happens before the call reaches the coordinator, so a
refused call is never recorded. The rules are in SPECIFICATION.md,
"Authentication".
"""

from __future__ import annotations

import hashlib
import re
import secrets
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.clock import Clock, iso_ms, system_clock
from coordinator.profiles.signed import UNSIGNED_METHODS
from coordinator.verifiers import OIDC_TOKEN_INVALID, IdentityRejected
from coordinator.wire import (
    AUTHENTICATION_REQUIRED,
    NOT_AUTHORISED,
    RpcError,
    decode_json,
)

__all__ = [
    "AUTHENTICATION_REQUIRED",
    "OIDC_CLAIM",
    "TABLE",
    "Authenticator",
    "TokenInfo",
    "TokenStore",
    "admit",
    "bearer",
]

# A name of our own: the shared schema owns the chap_* tables.
TABLE = "chapline_tokens"

_PARTICIPANT = re.compile(r"^(human|agent|service|group):\S+$")
_PREFIX = "chl_"


@dataclass(frozen=True)
class TokenInfo:
    """One token as the database knows it (never the secret itself)."""

    id: str
    principal: str
    created: str
    revoked: str | None


class TokenStore:
    """Token digests in a SQLite file, beside (not inside) the shared schema.

    Safe to use from several threads: one connection behind a lock.
    """

    def __init__(self, path: str, *, clock: Clock = system_clock) -> None:
        if path == ":memory:":
            raise ValueError(
                "tokens need a database file that `chapline token` can reach; "
                "pass --db PATH instead of :memory:"
            )
        self._clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 5000")
        self._db.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} ("
            " id TEXT PRIMARY KEY,"
            " digest TEXT NOT NULL UNIQUE,"
            " principal TEXT NOT NULL,"
            " created TEXT NOT NULL,"
            " revoked TEXT)"
        )

    def create(self, principal: str) -> tuple[str, TokenInfo]:
        """A new token for `principal`: (the secret, shown once; its record)."""
        if not _PARTICIPANT.match(principal):
            raise ValueError(
                f"{principal!r} is not a participant URI; write it as human:NAME, "
                "agent:NAME, service:NAME or group:NAME"
            )
        secret = _PREFIX + secrets.token_urlsafe(32)
        digest = _digest(secret)
        info = TokenInfo(digest[:12], principal, iso_ms(self._clock()), None)
        with self._lock:
            self._db.execute(
                f"INSERT INTO {TABLE} (id, digest, principal, created) VALUES (?, ?, ?, ?)",
                (info.id, digest, info.principal, info.created),
            )
        return secret, info

    def revoke(self, token_id: str) -> TokenInfo:
        """Revoke one token by its id; revoking twice keeps the first time."""
        with self._lock:
            self._db.execute(
                f"UPDATE {TABLE} SET revoked = ? WHERE id = ? AND revoked IS NULL",
                (iso_ms(self._clock()), token_id),
            )
            row = self._db.execute(
                f"SELECT id, principal, created, revoked FROM {TABLE} WHERE id = ?", (token_id,)
            ).fetchone()
        if row is None:
            raise KeyError(f"no token with id {token_id!r}; `chapline token list` shows the ids")
        return TokenInfo(*row)

    def all(self) -> list[TokenInfo]:
        """Every token, oldest first, revoked ones included."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT id, principal, created, revoked FROM {TABLE} ORDER BY created, id"
            ).fetchall()
        return [TokenInfo(*row) for row in rows]

    def principal(self, secret: str) -> str | None:
        """The principal of a valid (known, unrevoked) token, else None."""
        with self._lock:
            row = self._db.execute(
                f"SELECT principal FROM {TABLE} WHERE digest = ? AND revoked IS NULL",
                (_digest(secret),),
            ).fetchone()
        return None if row is None else str(row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _digest(secret: str) -> str:
    # Tokens carry 256 random bits, so a plain SHA-256 cannot be brute-forced.
    return hashlib.sha256(secret.encode()).hexdigest()


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, else None."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


# The claim that names the participant an OIDC access token stands for.
OIDC_CLAIM = "chap_participant_uri"


class Authenticator:
    """The principal behind an `Authorization` header.

    A token starting `chl_` is looked up in `tokens`; any other is, when an
    `oidc` verifier is given, verified as the provider's access token: the
    verifier (an `OidcVerifier`) returns its claims or raises
    `IdentityRejected`.
    """

    def __init__(
        self,
        tokens: TokenStore,
        *,
        oidc: Callable[[str], dict[str, Any]] | None = None,
        signatures: bool = False,
    ) -> None:
        self.tokens = tokens
        self.oidc = oidc
        # True only when the coordinator verifies every signed method's `sig`
        # (Coordinator(require_signatures=True)): then a signature may stand
        # in for a token.
        self.signatures = signatures

    def refusal(self, header: str | None, body: bytes) -> tuple[int, Any, RpcError] | None:
        """(HTTP status, request id, error) for a call that may not go on to
        the coordinator, or None when it may."""
        if bearer(header) is None and self.signatures and _signed(body):
            return None
        try:
            principal = self.principal(header)
        except RpcError as err:
            return 401, None, err
        refused = admit(principal, body)
        return None if refused is None else (403, *refused)

    def principal(self, header: str | None) -> str:
        """The principal, or an RpcError saying why there is none."""
        token = bearer(header)
        if token is None:
            raise RpcError(
                AUTHENTICATION_REQUIRED,
                "Authentication required: send 'Authorization: Bearer <token>' "
                "(create one with `chapline token create --as URI`)",
            )
        if token.startswith(_PREFIX) or self.oidc is None:
            principal = self.tokens.principal(token)
            if principal is None:
                raise RpcError(
                    AUTHENTICATION_REQUIRED,
                    "The bearer token is unknown or revoked; ask for a new one "
                    "(`chapline token create --as URI`)",
                )
            return principal
        return self._oidc_principal(self.oidc, token)

    @staticmethod
    def _oidc_principal(oidc: Callable[[str], dict[str, Any]], token: str) -> str:
        try:
            claims = oidc(token)
        except IdentityRejected as exc:
            raise RpcError(exc.code, f"{exc.message}; sign in again") from None
        principal = claims.get(OIDC_CLAIM)
        if not isinstance(principal, str) or not _PARTICIPANT.match(principal):
            raise RpcError(
                OIDC_TOKEN_INVALID,
                f"The OIDC token has no {OIDC_CLAIM} claim naming a participant URI "
                "(human:NAME, agent:NAME, ...); ask the identity provider to add it",
                {"sub": claims.get("sub")},
            )
        return principal


def _signed(body: bytes) -> bool:
    """A call the coordinator will verify a signature on: a string `sig`
    and a method that is not exempt (joins and creates carry none)."""
    try:
        envelope = decode_json(body)
    except RpcError:
        return False
    return (
        isinstance(envelope, dict)
        and isinstance(envelope.get("sig"), str)
        and isinstance(envelope.get("method"), str)
        and envelope["method"] not in UNSIGNED_METHODS
    )


def admit(principal: str, body: bytes) -> tuple[Any, RpcError] | None:
    """(the request id, the refusal) when the call's `params.from` is not
    `principal`; None when the call may go on to the coordinator.

    A body that does not decode, or is not an envelope with object params,
    goes on: the coordinator refuses it with the right code and records nothing.
    """
    try:
        envelope = decode_json(body)
    except RpcError:
        return None
    if not isinstance(envelope, dict):
        return None
    params = envelope.get("params")
    if not isinstance(params, dict) or "from" not in params:
        return None
    sender = params["from"]
    if sender == principal:
        return None
    return envelope.get("id"), RpcError(
        NOT_AUTHORISED,
        f"'from' is {sender!r} but the bearer token authenticates {principal!r}; "
        "a token may act only as its own participant",
        {"from": sender, "principal": principal},
    )
