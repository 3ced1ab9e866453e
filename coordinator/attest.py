"""What identity-oidc/1.0 and identity-vc/1.0 add to `participant.join`.

A join may carry an `oidc_token` and a `vc_presentation`. When the
coordinator has the matching hook (`verify_oidc_token`, `verify_vc`), the
joiner's identity is checked and bound to the member, as 0.3.3 does:

- OIDC: the hook returns the token's claims (None: -32403). Claims naming
  another participant (`chap_participant_uri` ≠ `from`) give -32404; so does
  a re-join whose token has another `sub` than the one bound, or, for a member
  with no bound `sub`, a token that does not name it. `sub`, `auth_time`
  (an integer) and `acr` (a string) are bound; a `cnf.jwk` with a `kid` is
  pinned as the member's key.
- VC: the hook returns `{holder | id, cnf_jwk?}` (None, or an error other than
  IdentityRejected: the presentation is ignored, as 0.3.3 ignores it). A
  re-join whose holder differs from the bound one, or that binds a holder to
  a member that had none, gives -32411. The holder is bound; `cnf_jwk` with a
  `kid` is pinned.

Beyond 0.3.3: a ready verifier (coordinator.verifiers) refuses with
IdentityRejected, answered with its code and message. A signed join whose
token or presentation pins a key must be signed with that key (proof of
possession, RFC 7800), else -32404 / -32411.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.signing import SignatureError, public_key_from_jwk, verify_envelope
from coordinator.verifiers import IdentityRejected
from coordinator.wire import (
    OIDC_CNF_MISMATCH,
    OIDC_TOKEN_INVALID,
    VC_HOLDER_BINDING_INVALID,
    RpcError,
)

__all__ = ["Attested", "attest_join", "key_record"]

OidcHook = Callable[[Any], Any]
VcHook = Callable[[Any], Any]


class Attested:
    """What a join's identity evidence binds: member fields and pinned keys."""

    __slots__ = ("fields", "keys")

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        self.keys: list[dict[str, Any]] = []


def key_record(jwk: dict[str, Any], arrived: str) -> dict[str, Any]:
    """A member key record for `jwk`, valid from `arrived`."""
    return {
        "jwk": jwk,
        "kid": jwk.get("kid"),
        "valid_from": arrived,
        "valid_until": None,
        "revoked_at": None,
        "revoked_reason": None,
    }


def _possession(envelope: dict[str, Any], jwk: Any, code: int, what: str) -> None:
    """A signed join must be signed with the key its evidence pins."""
    if not isinstance(envelope.get("sig"), str):
        return
    try:
        verify_envelope(envelope, public_key_from_jwk(jwk))
    except SignatureError:
        raise RpcError(
            code, f"The join is signed, but not with the key its {what} pins (cnf.jwk)"
        ) from None


def _oidc(
    hook: OidcHook, token: str, sender: Any, member: Any, envelope: dict[str, Any], out: Attested, arrived: str
) -> None:
    try:
        claims = hook(token)
    except IdentityRejected as exc:
        raise RpcError(exc.code, exc.message) from None
    if not isinstance(claims, dict):
        raise RpcError(OIDC_TOKEN_INVALID, "OIDC token invalid")
    bound_uri = claims.get("chap_participant_uri")
    if bound_uri is not None and bound_uri != sender:
        raise RpcError(OIDC_CNF_MISMATCH, "OIDC token is bound to another participant")
    sub = claims.get("sub")
    if member is not None:
        if member.oidc_sub is not None:
            if sub != member.oidc_sub:
                raise RpcError(OIDC_CNF_MISMATCH, "OIDC token subject does not match the member")
        elif bound_uri != sender:
            raise RpcError(OIDC_CNF_MISMATCH, "OIDC token does not name this member")
    auth_time = claims.get("auth_time")
    acr = claims.get("acr")
    out.fields["oidc_sub"] = sub
    out.fields["oidc_auth_time"] = auth_time if type(auth_time) is int else None
    out.fields["oidc_acr"] = acr if isinstance(acr, str) else None
    cnf = claims.get("cnf")
    jwk = cnf.get("jwk") if isinstance(cnf, dict) else None
    if isinstance(jwk, dict):
        _possession(envelope, jwk, OIDC_CNF_MISMATCH, "OIDC token")
        if isinstance(jwk.get("kid"), str):
            out.keys.append(key_record(jwk, arrived))


def _vc(hook: VcHook, presentation: Any, member: Any, envelope: dict[str, Any], out: Attested, arrived: str) -> None:
    try:
        subject = hook(presentation)
    except IdentityRejected as exc:
        raise RpcError(exc.code, exc.message) from None
    except Exception:  # as 0.3.3: a hook that fails attests nothing
        return
    if not isinstance(subject, dict):
        return
    holder = next(
        (v for v in (subject.get("holder"), subject.get("id")) if isinstance(v, str) and v), None
    )
    if holder is None:
        return
    if member is not None and member.vc_holder != holder:
        raise RpcError(VC_HOLDER_BINDING_INVALID, "Presentation holder does not match the member")
    out.fields["vc_holder"] = holder
    jwk = subject.get("cnf_jwk")
    if isinstance(jwk, dict):
        _possession(envelope, jwk, VC_HOLDER_BINDING_INVALID, "presentation")
        if isinstance(jwk.get("kid"), str):
            out.keys.append(key_record(jwk, arrived))


def attest_join(
    envelope: dict[str, Any],
    member: Any,
    arrived: str,
    verify_oidc_token: OidcHook | None,
    verify_vc: VcHook | None,
) -> Attested:
    """Check a join's identity evidence (`member` is the existing member on a
    re-join, else None); RpcError when it is refused."""
    params = envelope.get("params") or {}
    sender = params.get("from")
    out = Attested()
    token = params.get("oidc_token")
    if verify_oidc_token is not None and isinstance(token, str):
        _oidc(verify_oidc_token, token, sender, member, envelope, out, arrived)
    presentation = params.get("vc_presentation")
    if verify_vc is not None and presentation is not None:
        _vc(verify_vc, presentation, member, envelope, out, arrived)
    return out
