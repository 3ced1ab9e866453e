"""What identity-oidc/1.0 and identity-vc/1.0 add to `participant.join`.

A join may carry an `oidc_token` and a `vc_presentation`: evidence of who the
joiner is. Evidence that was presented is either verified and bound to the
member, or the join is refused with the kind's code (-32403 for a token, -32410
for a presentation): it is never ignored. So a join carrying evidence is
refused when no hook is configured to check it, when the evidence is of a type
no hook takes (a token is a string; a presentation an object or a VP JWT
string), when the hook returns None, something other than an object, or an
object naming no subject, and when the hook raises (its words go to the log,
under a log id the answer names). A hook raising `IdentityRejected` is
answered with its code (when it is one of the profile's) and its message.

What the verified evidence binds, as 0.3.3 does:

- OIDC: claims naming another participant (`chap_participant_uri` ≠ `from`)
  give -32404; so does a re-join whose token has another `sub` than the one
  bound, or, for a member with no bound `sub`, a token that does not name it.
  `sub`, `auth_time` (an integer) and `acr` (a string, else null: a re-join's
  token replaces the bound one) are bound; a `cnf.jwk` with a `kid` is pinned
  as the member's key.
- VC: the holder is the first non-empty string of `holder`, `id`. A re-join
  whose holder differs from the bound one, or that binds a holder to a member
  that had none, gives -32411. The holder is bound; `cnf_jwk` with a `kid`
  is pinned.

A join that carries a `sig` and evidence pinning a key must be signed with
that key (proof of possession, RFC 7800), else -32404 / -32411.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec

from coordinator.engine.incidents import logged
from coordinator.engine.wire import (
    OIDC_CNF_MISMATCH,
    OIDC_TOKEN_INVALID,
    VC_HOLDER_BINDING_INVALID,
    VC_VP_INVALID,
)
from coordinator.errors import IdentityRejected, RpcError, SignatureError
from coordinator.security.signing import public_key_from_jwk, verify_envelope

__all__ = ["Attested", "attest_join", "key_record"]

log = logging.getLogger("chapline")
_encode = msgspec.json.encode
_decode = msgspec.json.decode

OidcHook = Callable[[Any], Any]
VcHook = Callable[[Any], Any]


class _Kind:
    """One kind of evidence: its join param, its hook and its codes."""

    __slots__ = ("param", "hook", "what", "invalid", "codes")

    def __init__(self, param: str, hook: str, what: str, invalid: int, codes: range) -> None:
        self.param = param
        self.hook = hook
        self.what = what
        self.invalid = invalid
        self.codes = codes

    def refused(self, why: str, data: Any = None) -> RpcError:
        return RpcError(self.invalid, f"{self.what} invalid: {why}", data)


# The codes are the profiles' own ranges: a verifier may refuse with any of
# them (-32405 scope missing, -32412 revoked, ...), never with another's.
_OIDC = _Kind("oidc_token", "verify_oidc_token", "OIDC token", OIDC_TOKEN_INVALID, range(-32405, -32402))
_VC = _Kind("vc_presentation", "verify_vc", "VC presentation", VC_VP_INVALID, range(-32413, -32409))


class Attested:
    """What a join's identity evidence binds: member fields and pinned keys.
    On a re-join every field here replaces the member's."""

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


def _verdict(hook: Callable[[Any], Any] | None, evidence: Any, kind: _Kind, new_id: Callable[[str], str]) -> dict[str, Any]:
    """The hook's verdict on `evidence`: an object, else the join is refused."""
    if hook is None:
        raise kind.refused(
            f"this coordinator has no {kind.hook} hook, so it cannot check the "
            f"{kind.param} or bind it; join without {kind.param}"
        )
    try:
        verdict = hook(evidence)
    except IdentityRejected as rejected:
        code = rejected.code
        if type(code) is not int or code not in kind.codes:
            code = kind.invalid
        raise RpcError(code, str(rejected.message)) from None
    except Exception as fault:
        # The hook's own words may name its infrastructure: they go to the log.
        log_id = logged(log, f"the {kind.hook} hook raised on a join's {kind.param}", fault, new_id)
        raise kind.refused(
            f"the verifier failed, so the {kind.param} could not be checked; retry, and if it "
            f"fails again quote {log_id} to the operator",
            {"log_id": log_id},
        ) from None
    if verdict is None:
        raise kind.refused(f"the verifier rejected the {kind.param}; send one it accepts")
    if not isinstance(verdict, dict):
        raise kind.refused(
            f"the verifier returned {type(verdict).__name__}, not an object; the {kind.hook} "
            "hook is faulty (tell the operator)"
        )
    try:
        # A copy: what is bound is stored and answered, so it must be JSON,
        # and the hook must not be able to change it afterwards.
        copy: dict[str, Any] = _decode(_encode(verdict))
    except (TypeError, ValueError, OverflowError) as unusable:
        raise kind.refused(
            f"the verifier returned a value that is not JSON ({unusable}); the {kind.hook} "
            "hook is faulty (tell the operator)"
        ) from None
    return copy


def _possession(envelope: dict[str, Any], jwk: Any, code: int, what: str) -> None:
    """A join carrying a `sig` must be signed with the key its evidence pins
    (whatever the `sig` is: one that is not a signature tag skips nothing)."""
    if envelope.get("sig") is None:
        return
    try:
        verify_envelope(envelope, public_key_from_jwk(jwk))
    except SignatureError:
        raise RpcError(
            code,
            f"The join carries a sig not made with the key its {what} pins (cnf.jwk); "
            "sign the join with that key, or send it without a sig",
        ) from None


def _oidc(
    hook: OidcHook | None,
    token: Any,
    sender: Any,
    member: Any,
    envelope: dict[str, Any],
    out: Attested,
    arrived: str,
    new_id: Callable[[str], str],
) -> None:
    if hook is not None and not isinstance(token, str):
        raise _OIDC.refused(
            f"oidc_token must be a string (the ID token, a compact JWT), not {type(token).__name__}"
        )
    claims = _verdict(hook, token, _OIDC, new_id)
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
    if not isinstance(sub, str) or not sub:
        raise _OIDC.refused(
            "the verifier's claims carry no sub, so they identify nobody; the "
            "verify_oidc_token hook is faulty (tell the operator)"
        )
    auth_time = claims.get("auth_time")
    acr = claims.get("acr")
    out.fields["oidc_sub"] = sub
    if type(auth_time) is int:
        out.fields["oidc_auth_time"] = auth_time
    # Always set: a re-join's token replaces the assurance level, never keeps
    # an older, higher one.
    out.fields["oidc_acr"] = acr if isinstance(acr, str) else None
    cnf = claims.get("cnf")
    jwk = cnf.get("jwk") if isinstance(cnf, dict) else None
    if isinstance(jwk, dict):
        _possession(envelope, jwk, OIDC_CNF_MISMATCH, "OIDC token")
        if isinstance(jwk.get("kid"), str):
            out.keys.append(key_record(jwk, arrived))


def _vc(
    hook: VcHook | None,
    presentation: Any,
    member: Any,
    envelope: dict[str, Any],
    out: Attested,
    arrived: str,
    new_id: Callable[[str], str],
) -> None:
    # 0.3.3's hooks take an object (a JSON-LD VP); VcVerifier a VP JWT.
    if hook is not None and not isinstance(presentation, (dict, str)):
        raise _VC.refused(
            "vc_presentation must be a Verifiable Presentation: an object, or a VP JWT "
            f"(a compact string), not {type(presentation).__name__}"
        )
    subject = _verdict(hook, presentation, _VC, new_id)
    holder = next(
        (v for v in (subject.get("holder"), subject.get("id")) if isinstance(v, str) and v), None
    )
    if member is not None and (member.vc_holder is None or holder != member.vc_holder):
        raise RpcError(VC_HOLDER_BINDING_INVALID, "Presentation holder does not match the member")
    if holder is None:
        raise _VC.refused(
            "the verifier's answer names no holder (holder or id), so it identifies "
            "nobody; the verify_vc hook is faulty (tell the operator)"
        )
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
    new_id: Callable[[str], str],
) -> Attested:
    """Check a join's identity evidence (`member` is the existing member on a
    re-join, else None); RpcError when it is refused. A null evidence param
    is no evidence. `new_id` names a failing hook's log record."""
    params = envelope.get("params") or {}
    sender = params.get("from")
    out = Attested()
    token = params.get("oidc_token")
    if token is not None:
        _oidc(verify_oidc_token, token, sender, member, envelope, out, arrived, new_id)
    presentation = params.get("vc_presentation")
    if presentation is not None:
        _vc(verify_vc, presentation, member, envelope, out, arrived, new_id)
    return out
