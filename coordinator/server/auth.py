"""Who may act as whom over HTTP: bearer tokens mapped to participant URIs.

A token is a random secret handed out once (`chapline token create`); the
database keeps only its SHA-256 digest, the participant URI it stands for
(the principal) and when it was created and revoked: the serve database,
a SQLite file or PostgreSQL. The transport looks the presented token up on
every request, so a revocation made by another process takes effect at the
next call, and a lookup the database cannot answer refuses the call.

A deployment with an identity provider may also accept the provider's
access tokens (JWTs): an `Authenticator` given an OIDC verifier
(`coordinator.security.identity_verifiers.OidcVerifier`: signature against the provider's JWKS,
`iss`, `aud`, `exp`, `sub`) takes the principal from the token's
`chap_participant_uri` claim.

Each token also carries what it may do, its scopes (server/scopes.py: the
workspaces, the highest role, creating): stored beside the digest, or read
from the OIDC token's scope claim. Authentication yields an `Identity`
(principal and grant); server/authz.py holds calls to the grant.

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
import logging
import re
import secrets
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from coordinator.engine.clock import Clock, iso_ms, system_clock
from coordinator.engine.incidents import logged
from coordinator.engine.wire import (
    AUTHENTICATION_REQUIRED,
    NOT_AUTHORISED,
    STORE_WRITE_FAILED,
    decode_json,
)
from coordinator.errors import IdentityRejected, RpcError, ScopeError
from coordinator.profiles.signed import UNSIGNED_METHODS
from coordinator.security.identity_verifiers import OIDC_TOKEN_INVALID
from coordinator.server.scopes import DEFAULT_MAX_ROLE, Grant
from storage import StoreError, StoreUnavailableError
from storage.target import is_postgres

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "AUTHENTICATION_REQUIRED",
    "OIDC_CLAIM",
    "OIDC_SCOPE_CLAIM",
    "TABLE",
    "Admission",
    "Authenticator",
    "Identity",
    "TokenInfo",
    "TokenStore",
    "admit",
    "bearer",
    "check_participant",
]

# A name of our own: the shared schema owns the chap_* tables.
TABLE = "chapline_tokens"

_PARTICIPANT = re.compile(r"^(human|agent|service|group):\S+$")
_PREFIX = "chl_"

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TokenInfo:
    """One token as the database knows it (never the secret itself)."""

    id: str
    principal: str
    created: str
    revoked: str | None
    grant: Grant


@dataclass(frozen=True)
class Identity:
    """Who a request authenticates as, and what its token may do."""

    principal: str
    grant: Grant


# The scope columns, added after the first release: their defaults are the
# fail-closed grant (a row written without them reaches nothing), and rows
# older than the columns are given what they could do before (_MIGRATED).
_SCOPE_COLUMNS = (
    ("workspaces", "TEXT NOT NULL DEFAULT '[]'"),
    ("max_role", f"TEXT NOT NULL DEFAULT '{DEFAULT_MAX_ROLE}'"),
    ("may_create", "INTEGER NOT NULL DEFAULT 0"),
)
_MIGRATED = Grant.everything().columns()

_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    " id TEXT PRIMARY KEY,"
    " digest TEXT NOT NULL UNIQUE,"
    " principal TEXT NOT NULL,"
    " created TEXT NOT NULL,"
    " revoked TEXT"
    + "".join(f", {name} {kind}" for name, kind in _SCOPE_COLUMNS)
    + ")"
)
_COLUMNS = "id, principal, created, revoked, workspaces, max_role, may_create"
_ADD_COLUMNS = [f"ALTER TABLE {TABLE} ADD COLUMN {name} {kind}" for name, kind in _SCOPE_COLUMNS]
_MIGRATE_ROWS = f"UPDATE {TABLE} SET workspaces = ?, max_role = ?, may_create = ?"


def _info(row: tuple[Any, ...]) -> TokenInfo:
    token_id, principal, created, revoked, workspaces, max_role, may_create = row
    return TokenInfo(token_id, principal, created, revoked, Grant.from_columns(workspaces, max_role, may_create))


class TokenStore:
    """Token digests in the serve database `db`, beside (not inside) the
    shared schema: a SQLite file, or the PostgreSQL database a
    `postgresql://` URI names.

    Safe to use from several threads: one connection behind a lock. Raises
    StoreError (PostgreSQL) or sqlite3.Error when the database fails.
    """

    def __init__(self, db: str, *, clock: Clock = system_clock) -> None:
        if db == ":memory:":
            raise ValueError(
                "tokens need a database file that `chapline token` can reach; "
                "pass --db PATH instead of :memory:"
            )
        self._clock = clock
        self._lock = threading.Lock()
        self._db: _Sqlite | _Postgres = _Postgres(db) if is_postgres(db) else _Sqlite(db)

    def create(self, principal: str, grant: Grant | None = None) -> tuple[str, TokenInfo]:
        """A new token for `principal` that may do what `grant` says (None:
        the fail-closed `Grant()`, no workspace): (the secret, shown once;
        its record)."""
        grant = grant if grant is not None else Grant()
        check_participant(principal)
        secret = _PREFIX + secrets.token_urlsafe(32)
        digest = _digest(secret)
        info = TokenInfo(digest[:12], principal, iso_ms(int(self._clock())), None, grant)
        with self._lock:
            self._db.execute(
                f"INSERT INTO {TABLE} (id, digest, principal, created, workspaces, max_role, "
                "may_create) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (info.id, digest, info.principal, info.created, *grant.columns()),
            )
        return secret, info

    def revoke(self, token_id: str) -> TokenInfo:
        """Revoke one token by its id; revoking twice keeps the first time."""
        with self._lock:
            self._db.execute(
                f"UPDATE {TABLE} SET revoked = ? WHERE id = ? AND revoked IS NULL",
                (iso_ms(int(self._clock())), token_id),
            )
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM {TABLE} WHERE id = ?", (token_id,))
        if not rows:
            raise KeyError(f"no token with id {token_id!r}; `chapline token list` shows the ids")
        return _info(rows[0])

    def all(self) -> list[TokenInfo]:
        """Every token, oldest first, revoked ones included."""
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM {TABLE} ORDER BY created, id")
        return [_info(row) for row in rows]

    def principal(self, secret: str) -> str | None:
        """The principal of a valid (known, unrevoked) token, else None."""
        found = self.identity(secret)
        return None if found is None else found.principal

    def identity(self, secret: str) -> Identity | None:
        """The principal and grant of a valid (known, unrevoked) token, else
        None; ScopeError for a row whose scopes no chapline wrote."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT principal, workspaces, max_role, may_create FROM {TABLE} "
                "WHERE digest = ? AND revoked IS NULL",
                (_digest(secret),),
            )
        if not rows:
            return None
        principal, *scopes = rows[0]
        return Identity(str(principal), Grant.from_columns(*scopes))

    def close(self) -> None:
        with self._lock:
            self._db.close()


def check_participant(principal: str) -> None:
    """ValueError unless `principal` is a participant URI a token may stand for."""
    if not _PARTICIPANT.match(principal):
        raise ValueError(
            f"{principal!r} is not a participant URI; write it as human:NAME, "
            "agent:NAME, service:NAME or group:NAME"
        )


def _digest(secret: str) -> str:
    # Tokens carry 256 random bits, so a plain SHA-256 cannot be brute-forced.
    return hashlib.sha256(secret.encode()).hexdigest()


class _Sqlite:
    """The token table in a SQLite file. Statements use `?`."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 5000")
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute(_SCHEMA)
            known = {row[1] for row in self._db.execute(f"PRAGMA table_info({TABLE})")}
            if "workspaces" not in known:  # a table from before scopes: migrated in place
                for statement in _ADD_COLUMNS:
                    self._db.execute(statement)
                self._db.execute(_MIGRATE_ROWS, _MIGRATED)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            self._db.close()
            raise

    def execute(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self._db.execute(sql, args).fetchall()

    def close(self) -> None:
        self._db.close()


# Taken while creating the table, so serve's workers starting at once on an
# empty database do not race on the catalogue.
_TABLE_LOCK = 0x6368_746B  # "chtk"


class _Postgres:
    """The token table in a PostgreSQL database (storage.postgres.connect:
    UTF-8, the same refusals as the store's). A connection the server broke
    is replaced, and the statement run once more on the new one."""

    def __init__(self, uri: str) -> None:
        self._uri = uri
        self._conn = self._connect()
        try:
            self._run(self._create)
        except BaseException:
            self._conn.close()
            raise

    def _connect(self) -> psycopg.Connection[Any]:
        from storage.postgres import connect

        return connect(self._uri)

    def _create(self) -> None:
        with self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_TABLE_LOCK,))
            self._conn.execute(_SCHEMA)
            known = self._conn.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = %s AND column_name = 'workspaces'",
                (TABLE,),
            ).fetchone()
            if known is None:  # a table from before scopes: migrated in place
                for statement in _ADD_COLUMNS:
                    self._conn.execute(statement)
                self._conn.execute(_MIGRATE_ROWS.replace("?", "%s"), _MIGRATED)

    def execute(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        def statement() -> list[tuple[Any, ...]]:
            cursor = self._conn.execute(sql.replace("?", "%s"), args)
            return list(cursor.fetchall()) if cursor.description else []

        return self._run(statement)

    def _run(self, work: Callable[[], T]) -> T:
        import psycopg

        for attempt in (1, 2):
            if self._conn.closed or self._conn.broken:
                self._conn.close()
                self._conn = self._connect()
            try:
                return work()
            except psycopg.Error as exc:
                if not self._conn.broken or attempt == 2:
                    said = getattr(exc.diag, "message_primary", None) or type(exc).__name__
                    raise StoreUnavailableError(
                        "", f"the token table could not be read or written ({said}); retry"
                    ) from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._conn.close()


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
# The claim that carries its scopes, unless `serve --oidc-scope-claim` names another.
OIDC_SCOPE_CLAIM = "chapline_scope"

# What a call admitted on its signature alone may do: act where its signer
# is a member, as at most a participant; joining, creating and privileged
# calls need a token (SPECIFICATION.md, "Authorisation").
_SIGNED_GRANT = Grant(None, DEFAULT_MAX_ROLE, False)


@dataclass(frozen=True)
class Admission:
    """The transport's verdict on one request: `refusal` (HTTP status,
    request id, error) when it may not go on; else the `identity` it goes on
    as (the signer's, for a call admitted on its signature)."""

    refusal: tuple[int, Any, RpcError] | None
    identity: Identity | None = None


class Authenticator:
    """The principal behind an `Authorization` header, and its grant.

    A token starting `chl_` is looked up in `tokens`; any other is, when an
    `oidc` verifier is given, verified as the provider's access token: the
    verifier (an `OidcVerifier`) returns its claims or raises
    `IdentityRejected`; its grant is read from the claim `scope_claim`.
    """

    def __init__(
        self,
        tokens: TokenStore,
        *,
        oidc: Callable[[str], dict[str, Any]] | None = None,
        signatures: bool = False,
        scope_claim: str = OIDC_SCOPE_CLAIM,
    ) -> None:
        self.tokens = tokens
        self.oidc = oidc
        # True only when the coordinator verifies every signed method's `sig`
        # (Coordinator(require_signatures=True)): then a signature may stand
        # in for a token.
        self.signatures = signatures
        self.scope_claim = scope_claim

    def refusal(self, header: str | None, body: bytes) -> tuple[int, Any, RpcError] | None:
        """(HTTP status, request id, error) for a call that may not go on to
        the coordinator, or None when it may."""
        return self.admission(header, body).refusal

    def admission(self, header: str | None, body: bytes) -> Admission:
        """Whether the call may go on to the coordinator, and as whom."""
        if bearer(header) is None and self.signatures:
            signer = _signer(body)
            if signer is not None:
                return Admission(None, Identity(signer, _SIGNED_GRANT))
        try:
            identity = self.identity(header)
        except RpcError as err:
            return Admission((401, None, err))
        except (StoreError, sqlite3.Error) as exc:
            # Fail closed: a token that cannot be checked admits nothing. The
            # cause (database names, the server's words) goes to the log only.
            log_id = logged(log, "the token table could not be read", exc)
            return Admission((503, None, RpcError(
                STORE_WRITE_FAILED,
                "The bearer token could not be checked (the database did not answer), so the "
                f"call was not run; retry it. The server logged the cause as {log_id} (quote "
                "it to the operator if the retry fails too).",
                {"log_id": log_id},
            )))
        refused = admit(identity.principal, body)
        if refused is not None:
            return Admission((403, *refused))
        return Admission(None, identity)

    def principal(self, header: str | None) -> str:
        """The principal, or an RpcError saying why there is none."""
        return self.identity(header).principal

    def identity(self, header: str | None) -> Identity:
        """The principal and its grant, or an RpcError saying why there is none."""
        token = bearer(header)
        if token is None:
            raise RpcError(
                AUTHENTICATION_REQUIRED,
                "Authentication required: send 'Authorization: Bearer <token>' "
                "(create one with `chapline token create --as URI --workspace ID`)",
            )
        if token.startswith(_PREFIX) or self.oidc is None:
            try:
                found = self.tokens.identity(token)
            except ScopeError as exc:
                raise RpcError(
                    AUTHENTICATION_REQUIRED,
                    f"The bearer token's scopes cannot be read ({exc.message}); ask for a new one "
                    "(`chapline token create --as URI --workspace ID`)",
                ) from None
            if found is None:
                raise RpcError(
                    AUTHENTICATION_REQUIRED,
                    "The bearer token is unknown or revoked; ask for a new one "
                    "(`chapline token create --as URI --workspace ID`)",
                )
            return found
        return self._oidc_identity(self.oidc, token)

    def _oidc_identity(self, oidc: Callable[[str], dict[str, Any]], token: str) -> Identity:
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
        try:
            grant = Grant.from_claim(self.scope_claim, claims.get(self.scope_claim))
        except ScopeError as exc:
            raise RpcError(
                OIDC_TOKEN_INVALID,
                f"The OIDC token's {self.scope_claim} claim cannot be read ({exc.message}); ask "
                "the identity provider to send it as SPECIFICATION.md, \"Authorisation\" shows",
                {"sub": claims.get("sub"), "claim": self.scope_claim},
            ) from None
        return Identity(principal, grant)


def _signer(body: bytes) -> str | None:
    """The `from` of a call the coordinator will verify a signature on (a
    string `sig`, a method that is not exempt: joins and creates carry none,
    and a string `from`), else None."""
    try:
        envelope = decode_json(body)
    except RpcError:
        return None
    if not (
        isinstance(envelope, dict)
        and isinstance(envelope.get("sig"), str)
        and isinstance(envelope.get("method"), str)
        and envelope["method"] not in UNSIGNED_METHODS
    ):
        return None
    params = envelope.get("params")
    sender = params.get("from") if isinstance(params, dict) else None
    return sender if isinstance(sender, str) else None


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
