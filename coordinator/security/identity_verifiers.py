"""Ready verifiers for identity-oidc/1.0 and identity-vc/1.0, built on joserfc
(chapline[crypto]; `IdentityRejected`, which any verifier may raise, needs nothing).

A deployment passes one as `Coordinator(verify_oidc_token=...)` or
`Coordinator(verify_vc=...)`. Each takes what the joiner sent and returns what
the coordinator binds to the member (claims, or `{holder, cnf_jwk}`), or
raises `IdentityRejected` carrying the CHAP code and a message saying what is
wrong. Nothing here touches the network: keys are given as JWKS dicts (fetch
them yourself, e.g. from the provider's `jwks_uri`, and build a new verifier
when they rotate).

- `OidcVerifier`: an OpenID Connect ID token (a JWT signed by the provider):
  signature against the provider's JWKS, `iss`, `aud`, `exp` (and `nbf`,
  `iat` when present) with a leeway, a `sub`; a `cnf.jwk` (RFC 7800), when
  present, must be an Ed25519 public JWK: it is the key the member signs with.
- `VcVerifier`: a Verifiable Presentation in JWT form (VC-JWT): the holder's
  VP JWT wraps credential JWTs from trusted issuers; each credential names
  its holder (`sub`) and binds the holder's key (`cnf.jwk`), and the VP must
  be signed with that key, by that holder, for this audience.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coordinator.engine.wire import (  # re-exported: raised by the checks here
    OIDC_CNF_MISMATCH,
    OIDC_TOKEN_INVALID,
    VC_HOLDER_BINDING_INVALID,
    VC_VP_INVALID,
)
from coordinator.errors import IdentityRejected
from coordinator.extras import needs

if TYPE_CHECKING:
    from joserfc import jwt
    from joserfc.jwk import KeySet, OKPKey

__all__ = [
    "OIDC_TOKEN_INVALID",
    "OIDC_CNF_MISMATCH",
    "VC_VP_INVALID",
    "VC_HOLDER_BINDING_INVALID",
    "OidcVerifier",
    "VcVerifier",
    "same_public_key",
]


# RS256/ES256 are what OpenID providers sign with; Ed25519 (RFC 9864) and its
# older name EdDSA for keys of the CHAP kind.
DEFAULT_ALGORITHMS = ("RS256", "ES256", "Ed25519", "EdDSA")


def _epoch_seconds() -> int:
    return int(time.time())


def _key_set(jwks: Any, what: str) -> KeySet:
    with needs("crypto"):
        from joserfc.jwk import KeySet

    if not isinstance(jwks, dict) or not isinstance(jwks.get("keys"), list):
        raise ValueError(f"{what} must be a JWKS dict: {{'keys': [jwk, ...]}}")
    return KeySet.import_key_set({"keys": [k for k in jwks["keys"] if isinstance(k, dict)]})


def same_public_key(a: Any, b: Any) -> bool:
    """Whether two JWKs are the same Ed25519 public key (kid aside)."""
    return (
        isinstance(a, dict)
        and isinstance(b, dict)
        and a.get("kty") == b.get("kty") == "OKP"
        and a.get("crv") == b.get("crv") == "Ed25519"
        and isinstance(a.get("x"), str)
        and a.get("x") == b.get("x")
    )


def _ed25519_public(jwk: Any, code: int, what: str) -> dict[str, Any]:
    """`jwk` checked as an Ed25519 public JWK (no private part), as a plain dict."""
    with needs("crypto"):
        from joserfc.errors import JoseError
        from joserfc.jwk import OKPKey

    if not isinstance(jwk, dict) or jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        raise IdentityRejected(code, f"{what} must be an Ed25519 OKP JWK")
    if "d" in jwk:
        raise IdentityRejected(code, f"{what} carries a private key (d); send the public JWK only")
    try:
        OKPKey.import_key(jwk)
    except (JoseError, ValueError, TypeError) as exc:
        raise IdentityRejected(code, f"{what} is not a valid Ed25519 JWK: {exc}") from None
    return dict(jwk)


def _decode(
    token: Any, keys: KeySet | OKPKey, algorithms: tuple[str, ...], code: int, what: str
) -> jwt.Token:
    with needs("crypto"):
        from joserfc import jwt
        from joserfc.errors import JoseError

    if not isinstance(token, str):
        raise IdentityRejected(code, f"{what} must be a compact JWT string")
    try:
        return jwt.decode(token, keys, algorithms=list(algorithms))
    except (JoseError, ValueError, TypeError) as exc:
        raise IdentityRejected(code, f"{what} rejected: {exc}") from None


def _unverified_claims(token: str, what: str) -> dict[str, Any]:
    """The claims of a compact JWT before its signature is checked (only to
    learn which key must check it)."""
    with needs("crypto"):
        from joserfc.errors import JoseError
        from joserfc.jws import extract_compact

    try:
        claims = json.loads(extract_compact(token.encode()).payload)
    except (JoseError, ValueError, UnicodeError) as exc:
        raise IdentityRejected(VC_VP_INVALID, f"{what} is not a compact JWT: {exc}") from None
    if not isinstance(claims, dict):
        raise IdentityRejected(VC_VP_INVALID, f"{what} claims are not a JSON object")
    return claims


def _validate(
    claims: dict[str, Any], code: int, what: str, now: int, leeway: int, **options: Any
) -> None:
    with needs("crypto"):
        from joserfc import jwt
        from joserfc.errors import JoseError

    registry = jwt.JWTClaimsRegistry(now=now, leeway=leeway, **options)
    try:
        registry.validate(claims)
    except JoseError as exc:
        raise IdentityRejected(code, f"{what} rejected: {exc}") from None


class OidcVerifier:
    """Verify OpenID Connect ID tokens from one provider, for one audience.

    `verifier(token)` returns the token's claims, or raises IdentityRejected
    (-32403). `clock` gives epoch seconds (injectable for tests); `leeway` is
    the clock skew tolerated on `exp`/`nbf`/`iat`, in seconds.
    """

    def __init__(
        self,
        jwks: dict[str, Any],
        *,
        issuer: str,
        audience: str,
        algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS,
        leeway: int = 60,
        clock: Callable[[], int] = _epoch_seconds,
    ) -> None:
        self._keys = _key_set(jwks, "jwks")
        self.issuer = issuer
        self.audience = audience
        self._algorithms = algorithms
        self._leeway = leeway
        self._clock = clock

    def __call__(self, token: Any) -> dict[str, Any]:
        decoded = _decode(token, self._keys, self._algorithms, OIDC_TOKEN_INVALID, "OIDC token")
        claims = dict(decoded.claims)
        _validate(
            claims,
            OIDC_TOKEN_INVALID,
            "OIDC token",
            self._clock(),
            self._leeway,
            iss={"essential": True, "value": self.issuer},
            aud={"essential": True, "value": self.audience},
            exp={"essential": True},
            sub={"essential": True},
        )
        cnf = claims.get("cnf")
        if cnf is not None:
            if not isinstance(cnf, dict) or "jwk" not in cnf:
                raise IdentityRejected(OIDC_TOKEN_INVALID, "OIDC token cnf must be {\"jwk\": {...}}")
            claims["cnf"] = {**cnf, "jwk": _ed25519_public(cnf["jwk"], OIDC_CNF_MISMATCH, "cnf.jwk")}
        return claims


class VcVerifier:
    """Verify Verifiable Presentations in JWT form (VC-JWT) for one audience.

    `trusted_issuers` maps an issuer id (the credential JWT's `iss`) to that
    issuer's JWKS. `verifier(presentation)` returns `{holder, cnf_jwk,
    credentials}` (the shape the join hook binds), or raises IdentityRejected
    (-32410 invalid presentation, -32411 holder binding broken).
    """

    def __init__(
        self,
        trusted_issuers: dict[str, dict[str, Any]],
        *,
        audience: str,
        algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS,
        leeway: int = 60,
        clock: Callable[[], int] = _epoch_seconds,
    ) -> None:
        self._issuers = {iss: _key_set(keys, f"trusted_issuers[{iss!r}]") for iss, keys in trusted_issuers.items()}
        self.audience = audience
        self._algorithms = algorithms
        self._leeway = leeway
        self._clock = clock

    def __call__(self, presentation: Any) -> dict[str, Any]:
        if not isinstance(presentation, str):
            raise IdentityRejected(VC_VP_INVALID, "vc_presentation must be a VP JWT (compact string)")
        # The holder key that must have signed the VP is in the credentials
        # it carries: read them first, verify the VP with that key after.
        vp = _unverified_claims(presentation, "vc_presentation").get("vp")
        creds = vp.get("verifiableCredential") if isinstance(vp, dict) else None
        if isinstance(creds, str):
            creds = [creds]
        if not isinstance(creds, list) or not creds:
            raise IdentityRejected(VC_VP_INVALID, "vc_presentation has no vp.verifiableCredential")
        now = self._clock()
        holder: str | None = None
        holder_key: dict[str, Any] | None = None
        credentials = []
        for cred in creds:
            claims = self._credential(cred, now)
            sub, key = claims["sub"], claims["cnf"]["jwk"]
            if holder is None:
                holder, holder_key = sub, key
            elif sub != holder or not same_public_key(key, holder_key):
                raise IdentityRejected(
                    VC_HOLDER_BINDING_INVALID, "The credentials name different holders or holder keys"
                )
            credentials.append(claims)
        assert holder is not None and holder_key is not None
        with needs("crypto"):
            from joserfc import jwt
            from joserfc.errors import JoseError
            from joserfc.jwk import OKPKey

        try:
            decoded = jwt.decode(presentation, OKPKey.import_key(holder_key), algorithms=list(self._algorithms))
        except (JoseError, ValueError, TypeError) as exc:
            raise IdentityRejected(
                VC_HOLDER_BINDING_INVALID,
                f"The presentation is not signed with the holder key its credentials bind: {exc}",
            ) from None
        if decoded.claims.get("iss") != holder:
            raise IdentityRejected(
                VC_HOLDER_BINDING_INVALID,
                f"The presentation's iss {decoded.claims.get('iss')!r} is not the credentials' holder {holder!r}",
            )
        _validate(
            dict(decoded.claims),
            VC_VP_INVALID,
            "vc_presentation",
            now,
            self._leeway,
            aud={"essential": True, "value": self.audience},
            exp={"essential": True},
        )
        cnf_jwk = dict(holder_key)
        kid = decoded.header.get("kid")
        if isinstance(kid, str) and "kid" not in cnf_jwk:
            cnf_jwk["kid"] = kid
        return {"holder": holder, "cnf_jwk": cnf_jwk, "credentials": credentials}

    def _credential(self, cred: Any, now: int) -> dict[str, Any]:
        if not isinstance(cred, str):
            raise IdentityRejected(VC_VP_INVALID, "each verifiableCredential must be a VC JWT string")
        issuer = _unverified_claims(cred, "credential").get("iss")
        keys = self._issuers.get(issuer) if isinstance(issuer, str) else None
        if keys is None:
            raise IdentityRejected(VC_VP_INVALID, f"credential issuer {issuer!r} is not trusted")
        claims = dict(_decode(cred, keys, self._algorithms, VC_VP_INVALID, "credential").claims)
        _validate(claims, VC_VP_INVALID, "credential", now, self._leeway, sub={"essential": True})
        cnf = claims.get("cnf")
        if not isinstance(cnf, dict):
            raise IdentityRejected(VC_HOLDER_BINDING_INVALID, "credential binds no holder key (cnf.jwk)")
        claims["cnf"] = {**cnf, "jwk": _ed25519_public(cnf.get("jwk"), VC_HOLDER_BINDING_INVALID, "credential cnf.jwk")}
        return claims
