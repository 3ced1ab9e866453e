"""The ready OIDC and VC verifiers, on tokens and presentations minted here
from keys generated here (no network)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, OctKey, OKPKey, RSAKey

from coordinator.errors import IdentityRejected
from coordinator.security.identity_verifiers import (
    OIDC_CNF_MISMATCH,
    OIDC_TOKEN_INVALID,
    VC_HOLDER_BINDING_INVALID,
    VC_VP_INVALID,
    OidcVerifier,
    VcVerifier,
    same_public_key,
)

NOW = 1_800_000_000
ISSUER = "https://idp.example"
AUDIENCE = "chap:wsp_demo"


def _public(key: OKPKey | RSAKey | ECKey) -> dict[str, Any]:
    return key.as_dict(private=False)


def _mint(key: Any, claims: dict[str, Any], alg: str = "Ed25519", kid: str | None = None) -> str:
    header = {"alg": alg, **({"kid": kid} if kid else {})}
    return jwt.encode(header, claims, key, algorithms=[alg])


@pytest.fixture
def idp() -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": "idp-1"})


@pytest.fixture
def holder_key() -> OKPKey:
    return OKPKey.generate_key("Ed25519", parameters={"kid": "alice-1"})


def _claims(**over: Any) -> dict[str, Any]:
    base = {"iss": ISSUER, "aud": AUDIENCE, "sub": "s-alice", "exp": NOW + 300, "iat": NOW - 10,
            "auth_time": NOW - 10, "chap_participant_uri": "human:alice"}
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def _oidc(idp: RSAKey, **kw: Any) -> OidcVerifier:
    return OidcVerifier({"keys": [_public(idp)]}, issuer=ISSUER, audience=AUDIENCE, clock=lambda: NOW, **kw)


def _rejected(code: int, fn: Any, *args: Any) -> str:
    with pytest.raises(IdentityRejected) as err:
        fn(*args)
    assert err.value.code == code, err.value.message
    return err.value.message


def test_oidc_valid_token_gives_claims_with_cnf(idp: RSAKey, holder_key: OKPKey) -> None:
    cnf = {"jwk": {k: v for k, v in _public(holder_key).items()}}
    token = _mint(idp, _claims(cnf=cnf), "RS256", "idp-1")
    claims = _oidc(idp)(token)
    assert claims["sub"] == "s-alice" and claims["chap_participant_uri"] == "human:alice"
    assert same_public_key(claims["cnf"]["jwk"], _public(holder_key))


def test_oidc_accepts_ec_and_ed25519_providers() -> None:
    for key, alg in ((ECKey.generate_key("P-256", parameters={"kid": "e"}), "ES256"),
                     (OKPKey.generate_key("Ed25519", parameters={"kid": "o"}), "Ed25519")):
        verifier = OidcVerifier({"keys": [_public(key)]}, issuer=ISSUER, audience=AUDIENCE, clock=lambda: NOW)
        assert verifier(_mint(key, _claims(), alg, key.kid))["sub"] == "s-alice"


@pytest.mark.parametrize(
    "claims, message",
    [
        (_claims(exp=NOW - 61), "expired"),
        (_claims(aud="chap:other"), "aud"),
        (_claims(iss="https://evil.example"), "iss"),
        (_claims(sub=None), "sub"),
        (_claims(exp=None), "exp"),
        (_claims(nbf=NOW + 3600), "not yet valid"),
    ],
    ids=["expired", "wrong-audience", "wrong-issuer", "no-sub", "no-exp", "not-yet-valid"],
)
def test_oidc_claim_failures_are_32403(idp: RSAKey, claims: dict[str, Any], message: str) -> None:
    text = _rejected(OIDC_TOKEN_INVALID, _oidc(idp), _mint(idp, claims, "RS256", "idp-1"))
    assert re.search(message, text, re.I), text


def test_oidc_leeway_tolerates_small_skew(idp: RSAKey) -> None:
    assert _oidc(idp)(_mint(idp, _claims(exp=NOW - 30), "RS256", "idp-1"))["sub"] == "s-alice"


def test_oidc_signature_failures_are_32403(idp: RSAKey) -> None:
    other = RSAKey.generate_key(2048, parameters={"kid": "idp-1"})
    verifier = _oidc(idp)
    _rejected(OIDC_TOKEN_INVALID, verifier, _mint(other, _claims(), "RS256", "idp-1"))  # forged
    _rejected(OIDC_TOKEN_INVALID, verifier, _mint(other, _claims(), "RS256", "idp-9"))  # unknown kid
    good = _mint(idp, _claims(), "RS256", "idp-1")
    head, body, sig = good.split(".")
    tampered_body = _mint(idp, _claims(sub="s-mallory"), "RS256", "idp-1").split(".")[1]
    _rejected(OIDC_TOKEN_INVALID, verifier, f"{head}.{tampered_body}.{sig}")
    _rejected(OIDC_TOKEN_INVALID, verifier, "not-a-jwt")
    _rejected(OIDC_TOKEN_INVALID, verifier, 42)
    hs = jwt.encode({"alg": "HS256"}, _claims(), OctKey.import_key(b"k" * 32))
    _rejected(OIDC_TOKEN_INVALID, verifier, hs)  # an algorithm the verifier does not allow


def test_oidc_cnf_must_be_an_ed25519_public_key(idp: RSAKey, holder_key: OKPKey) -> None:
    verifier = _oidc(idp)
    rsa_cnf = {"jwk": _public(RSAKey.generate_key(2048))}
    _rejected(OIDC_CNF_MISMATCH, verifier, _mint(idp, _claims(cnf=rsa_cnf), "RS256", "idp-1"))
    private_cnf = {"jwk": holder_key.as_dict(private=True)}
    _rejected(OIDC_CNF_MISMATCH, verifier, _mint(idp, _claims(cnf=private_cnf), "RS256", "idp-1"))
    _rejected(OIDC_TOKEN_INVALID, verifier, _mint(idp, _claims(cnf="x"), "RS256", "idp-1"))


def test_same_public_key() -> None:
    a = OKPKey.generate_key("Ed25519").as_dict(private=False)
    assert same_public_key(a, {**a, "kid": "other"})
    assert not same_public_key(a, OKPKey.generate_key("Ed25519").as_dict(private=False))
    assert not same_public_key(a, None)


# -- VC presentations --------------------------------------------------------------

VC_ISSUER = "did:example:university"
HOLDER = "did:example:alice"


@pytest.fixture
def issuer_key() -> OKPKey:
    return OKPKey.generate_key("Ed25519", parameters={"kid": "uni-1"})


def _credential(issuer_key: OKPKey, holder_key: OKPKey, **over: Any) -> str:
    claims = {"iss": VC_ISSUER, "sub": HOLDER, "iat": NOW - 100, "exp": NOW + 3600,
              "cnf": {"jwk": _public(holder_key)},
              "vc": {"type": ["VerifiableCredential", "Employee"], "credentialSubject": {"id": HOLDER, "role": "reviewer"}}}
    claims.update(over)
    return _mint(issuer_key, {k: v for k, v in claims.items() if v is not None}, kid="uni-1")


def _presentation(holder_key: OKPKey, creds: list[str], **over: Any) -> str:
    claims = {"iss": HOLDER, "aud": AUDIENCE, "iat": NOW, "exp": NOW + 120, "nonce": "n-1",
              "vp": {"type": ["VerifiablePresentation"], "verifiableCredential": creds}}
    claims.update(over)
    return _mint(holder_key, {k: v for k, v in claims.items() if v is not None}, kid="alice-1")


def _vc(issuer_key: OKPKey) -> VcVerifier:
    return VcVerifier({VC_ISSUER: {"keys": [_public(issuer_key)]}}, audience=AUDIENCE, clock=lambda: NOW)


def test_vc_valid_presentation(issuer_key: OKPKey, holder_key: OKPKey) -> None:
    out = _vc(issuer_key)(_presentation(holder_key, [_credential(issuer_key, holder_key)]))
    assert out["holder"] == HOLDER
    assert same_public_key(out["cnf_jwk"], _public(holder_key)) and out["cnf_jwk"]["kid"] == "alice-1"
    assert out["credentials"][0]["vc"]["credentialSubject"]["role"] == "reviewer"


def test_vc_failures(issuer_key: OKPKey, holder_key: OKPKey) -> None:
    verifier = _vc(issuer_key)
    good = _credential(issuer_key, holder_key)
    mallory = OKPKey.generate_key("Ed25519", parameters={"kid": "alice-1"})
    rogue = OKPKey.generate_key("Ed25519", parameters={"kid": "uni-1"})
    # the presentation is not signed by the holder key the credential binds
    _rejected(VC_HOLDER_BINDING_INVALID, verifier, _presentation(mallory, [good]))
    # signed by the right key but claiming another holder
    _rejected(VC_HOLDER_BINDING_INVALID, verifier, _presentation(holder_key, [good], iss="did:example:bob"))
    # credential not from a trusted issuer, or forged in its name
    _rejected(VC_VP_INVALID, verifier, _presentation(holder_key, [_credential(issuer_key, holder_key, iss="did:example:diploma-mill")]))
    _rejected(VC_VP_INVALID, verifier, _presentation(holder_key, [_credential(rogue, holder_key)]))
    # expired credential, expired presentation, wrong audience
    _rejected(VC_VP_INVALID, verifier, _presentation(holder_key, [_credential(issuer_key, holder_key, exp=NOW - 3600)]))
    _rejected(VC_VP_INVALID, verifier, _presentation(holder_key, [good], exp=NOW - 3600))
    _rejected(VC_VP_INVALID, verifier, _presentation(holder_key, [good], aud="chap:other"))
    # no credentials, not a JWT, a credential without a holder key
    _rejected(VC_VP_INVALID, verifier, _presentation(holder_key, []))
    _rejected(VC_VP_INVALID, verifier, {"holder": HOLDER})
    _rejected(VC_VP_INVALID, verifier, "a.b.c")
    _rejected(VC_HOLDER_BINDING_INVALID, verifier, _presentation(holder_key, [_credential(issuer_key, holder_key, cnf=None)]))


def test_vc_credentials_must_agree_on_the_holder(issuer_key: OKPKey, holder_key: OKPKey) -> None:
    other = _credential(issuer_key, holder_key, sub="did:example:bob")
    _rejected(VC_HOLDER_BINDING_INVALID, _vc(issuer_key),
              _presentation(holder_key, [_credential(issuer_key, holder_key), other]))
