"""identity-oidc/1.0 and identity-vc/1.0: the join hooks as 0.3.3 runs them
(the same hooks through both implementations), the ready verifiers end to
end on tokens minted here, and step-up."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest
from chap_coordinator import Coordinator as Reference
from client import Client
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from joserfc import jwt
from joserfc.jwk import OKPKey, RSAKey

from coordinator import Coordinator, CounterIds, StepClock, public_jwk, sign_envelope
from coordinator.security.identity_verifiers import OidcVerifier, VcVerifier

W = "wsp_id"
JWK = {"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}
CLAIMS = {
    "a": {"sub": "s-a", "chap_participant_uri": "human:alice", "cnf": {"jwk": {**JWK, "kid": "cnf-a"}},
          "auth_time": 1_700_000_000, "acr": "mfa"},
    "b": {"sub": "s-b"},
    "nouri": {"sub": "s-n"},
    "zed": {"sub": "s-z", "chap_participant_uri": "human:zed"},
    "acr-int": {"sub": "s-i", "chap_participant_uri": "human:ivy", "acr": 5, "auth_time": "soon"},
}


def oidc_hook(token: Any) -> Any:
    return CLAIMS.get(token)


def vc_hook(vp: Any) -> Any:
    if isinstance(vp, dict) and "h" in vp:
        return {"holder": vp["h"], **({"cnf_jwk": vp["cnf"]} if "cnf" in vp else {})}
    if isinstance(vp, dict) and "i" in vp:
        return {"id": vp["i"]}
    return None


def _join(uri: str, **extra: Any) -> dict[str, Any]:
    return {"workspace": W, "from": uri, "type": "human", **extra}


HOOK_STEPS: list[tuple[str, dict[str, Any]]] = [
    ("join with a token", _join("human:alice", oidc_token="a", jwks={"keys": [{**JWK, "kid": "self"}]})),
    ("re-join, same subject", _join("human:alice", oidc_token="a")),
    ("re-join, another subject", _join("human:alice", oidc_token="b")),
    ("token naming nobody", _join("human:bob", oidc_token="nouri")),
    ("token bound to another participant", _join("human:x", oidc_token="zed")),
    ("token the hook rejects", _join("human:x", oidc_token="unknown")),
    ("acr and auth_time of the wrong type", _join("human:ivy", oidc_token="acr-int")),
    ("plain member", _join("human:dan")),
    ("re-join of a plain member, token naming nobody", _join("human:dan", oidc_token="nouri")),
    ("presentation with a key", _join("human:v", vc_presentation={"h": "did:ex:1", "cnf": {**JWK, "kid": "vc-1"}})),
    ("re-join, same holder", _join("human:v", vc_presentation={"h": "did:ex:1"})),
    ("re-join, same holder as id", _join("human:v", vc_presentation={"i": "did:ex:1"})),
    ("re-join, another holder", _join("human:v", vc_presentation={"h": "did:ex:2"})),
    ("presentation the hook rejects", _join("human:v2", vc_presentation={"nope": 1})),
    ("presentation for a plain member", _join("human:dan", vc_presentation={"h": "did:ex:3"})),
]


def _shape(response: dict[str, Any]) -> Any:
    return {"code": response["error"]["code"]} if "error" in response else response["result"]


def test_hooks_behave_as_in_the_reference() -> None:
    ours = Coordinator(clock=StepClock(), ids=CounterIds(), verify_oidc_token=oidc_hook, verify_vc=vc_hook)
    theirs = Reference(deterministic_ids=True, deterministic_clock=True, enable_chain=True,
                       verify_oidc_token=oidc_hook, verify_vc=vc_hook)
    codes = {}
    for coord in (ours, theirs):
        assert "result" in coord.dispatch({"jsonrpc": "2.0", "id": "c", "method": "workspace.create",
                                           "params": {"workspace": W}})
    for i, (label, params) in enumerate(HOOK_STEPS):
        envelope = {"jsonrpc": "2.0", "id": f"j{i}", "method": "participant.join", "params": params}
        mine, ref = _shape(ours.dispatch(envelope)), _shape(theirs.dispatch(envelope))
        assert mine == ref, label
        codes[label] = mine.get("code")
    assert codes["re-join, another subject"] == -32404
    assert codes["token bound to another participant"] == -32404
    assert codes["re-join of a plain member, token naming nobody"] == -32404
    assert codes["token the hook rejects"] == -32403
    assert codes["re-join, another holder"] == -32411
    assert codes["presentation for a plain member"] == -32411
    assert codes["presentation the hook rejects"] == -32410
    describe = {"jsonrpc": "2.0", "id": "d", "method": "workspace.describe", "params": {"workspace": W}}
    mine, ref = ours.dispatch(describe)["result"], theirs.dispatch(describe)["result"]
    assert mine["profiles"] == ref["profiles"] == ["core/1.0", "review/1.0", "identity-oidc/1.0"]
    assert mine["members"] == ref["members"]
    alice = next(m for m in mine["members"] if m["uri"] == "human:alice")
    assert alice["oidc_sub"] == "s-a" and alice["jwks"] == {"keys": [{**JWK, "kid": "cnf-a"}]}
    read = {"jsonrpc": "2.0", "id": "r", "method": "audit.read", "params": {"workspace": W}}
    assert ours.dispatch(read)["result"] == theirs.dispatch(read)["result"]  # refusals never recorded


def test_identity_oidc_is_advertised_only_with_a_verifier() -> None:
    for coord in (Coordinator(), Reference()):
        Client(coord, W).fail(-32602, "workspace.create", profiles=["core/1.0", "identity-oidc/1.0"])
    vc_only = Client(Coordinator(), W).ok("workspace.create", profiles=["core/1.0", "identity-vc/1.0"])
    assert vc_only["workspace"] == W


# -- the ready verifiers, end to end --------------------------------------------------

ISSUER, AUDIENCE = "https://idp.example", "chap:" + W


class Identities:
    """An OpenID provider and a credential issuer of the test's own."""

    def __init__(self, now: int) -> None:
        self.now = now
        self.idp = RSAKey.generate_key(2048, parameters={"kid": "idp-1"})
        self.university = OKPKey.generate_key("Ed25519", parameters={"kid": "uni-1"})

    def token(self, sub: str, uri: str, key: Ed25519PrivateKey | None = None, **over: Any) -> str:
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "exp": self.now + 300,
                  "auth_time": self.now - 5, "chap_participant_uri": uri, **over}
        if key is not None:
            claims["cnf"] = {"jwk": public_jwk(key, _kid(uri))}
        return jwt.encode({"alg": "RS256", "kid": "idp-1"}, claims, self.idp)

    def presentation(self, holder: str, key: Ed25519PrivateKey, signer: Ed25519PrivateKey | None = None) -> str:
        holder_jwk = {k: v for k, v in public_jwk(key, "h").items() if k != "kid"}
        credential = jwt.encode({"alg": "Ed25519", "kid": "uni-1"}, {
            "iss": "did:example:university", "sub": holder, "exp": self.now + 3600,
            "cnf": {"jwk": holder_jwk}, "vc": {"type": ["VerifiableCredential"]}},
            self.university, algorithms=["Ed25519"])
        signing = OKPKey.import_key({**public_jwk(signer or key, "h"),
                                     "d": _b64url((signer or key).private_bytes_raw())})
        return jwt.encode({"alg": "Ed25519", "kid": _kid(holder) + "-key"}, {
            "iss": holder, "aud": AUDIENCE, "exp": self.now + 120,
            "vp": {"verifiableCredential": [credential]}}, signing, algorithms=["Ed25519"])

    def coordinator(self) -> Coordinator:
        oidc = OidcVerifier({"keys": [self.idp.as_dict(private=False)]}, issuer=ISSUER,
                            audience=AUDIENCE, clock=lambda: self.now)
        vc = VcVerifier({"did:example:university": {"keys": [self.university.as_dict(private=False)]}},
                        audience=AUDIENCE, clock=lambda: self.now)
        return Coordinator(verify_oidc_token=oidc, verify_vc=vc, require_signatures=True,
                           clock=lambda: self.now * 1000)


def _kid(uri: str) -> str:
    return uri.split(":", 1)[1] + "-1"  # a kid holds no ':' (the tag's separator)


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _joined(coord: Coordinator, uri: str, key: Ed25519PrivateKey | None = None, **params: Any) -> dict[str, Any]:
    envelope = {"jsonrpc": "2.0", "id": f"j-{uri}-{len(params)}", "method": "participant.join",
                "params": {"workspace": W, "from": uri, "type": "human", **params}}
    if key is not None:
        envelope = sign_envelope(envelope, key, _kid(uri))
    return coord.dispatch(envelope)


@pytest.fixture
def identities() -> Identities:
    return Identities(now=int(time.time()))


def _code(answer: dict[str, Any]) -> int | None:
    return answer["error"]["code"] if "error" in answer else None


def test_oidc_verifier_binds_the_token_and_its_key(identities: Identities) -> None:
    coord = identities.coordinator()
    alice = Ed25519PrivateKey.generate()
    assert _joined(coord, "human:alice", alice, oidc_token=identities.token("s-a", "human:alice", alice))["result"]["joined"]
    # the pinned key signs alice's calls
    call = sign_envelope({"jsonrpc": "2.0", "id": "t", "method": "task.create", "params": {
        "workspace": W, "from": "human:alice", "assignee": "human:alice", "kind": "k", "input": {}}},
        alice, _kid("human:alice"))
    assert coord.dispatch(call)["result"]["state"] == "created"


@pytest.mark.parametrize(
    "case, code",
    [("expired", -32403), ("wrong audience", -32403), ("wrong issuer", -32403),
     ("cnf.jwk mismatch", -32404), ("bound to another participant", -32404)],
)
def test_oidc_verifier_refusals(identities: Identities, case: str, code: int) -> None:
    coord = identities.coordinator()
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    token = {
        "expired": lambda: identities.token("s", "human:u", key, exp=identities.now - 3600),
        "wrong audience": lambda: identities.token("s", "human:u", key, aud="chap:elsewhere"),
        "wrong issuer": lambda: identities.token("s", "human:u", key, iss="https://evil.example"),
        # the join is signed with `key`, the token pins `other`: no proof of possession
        "cnf.jwk mismatch": lambda: identities.token("s", "human:u", other),
        "bound to another participant": lambda: identities.token("s", "human:mallory", key),
    }[case]()
    answer = _joined(coord, "human:u", key, oidc_token=token)
    assert _code(answer) == code, answer
    assert answer["error"]["message"]
    assert W not in coord.workspace_ids()  # the join that would have created it was refused


def test_oidc_rejoin_with_another_subject(identities: Identities) -> None:
    coord = identities.coordinator()
    key = Ed25519PrivateKey.generate()
    assert "result" in _joined(coord, "human:u", key, oidc_token=identities.token("s-1", "human:u", key))
    assert _code(_joined(coord, "human:u", key, oidc_token=identities.token("s-2", "human:u", key))) == -32404


def test_vc_verifier_binds_the_holder_and_refuses_a_mismatch(identities: Identities) -> None:
    coord = identities.coordinator()
    key = Ed25519PrivateKey.generate()
    assert "result" in _joined(coord, "human:v", vc_presentation=identities.presentation("did:ex:v", key))
    member = coord.snapshot(W)["members"]["human:v"]
    assert member["vc_holder"] == "did:ex:v" and member["keys"][0]["kid"] == "ex:v-1-key"
    # a presentation signed with another key than its credential binds
    assert _code(_joined(coord, "human:w", vc_presentation=identities.presentation("did:ex:w", key, Ed25519PrivateKey.generate()))) == -32411
    # a re-join presenting another holder
    assert _code(_joined(coord, "human:v", vc_presentation=identities.presentation("did:ex:other", key))) == -32411
    # not a presentation at all
    assert _code(_joined(coord, "human:x", vc_presentation={"holder": "did:ex:x"})) == -32410


MALFORMED = ["", "not-a-jwt", "a.b.c", "e30.e30.", 5, True, ["x"], {"jwt": "x"}]


@pytest.mark.parametrize("param, code", [("oidc_token", -32403), ("vc_presentation", -32410)])
def test_ready_verifiers_refuse_malformed_evidence_on_join_and_rejoin(
    identities: Identities, param: str, code: int
) -> None:
    """Through the ready verifiers, malformed evidence of every shape refuses the
    join and the re-join, and changes nothing."""
    coord = identities.coordinator()
    key = Ed25519PrivateKey.generate()
    for bad in MALFORMED:
        answer = _joined(coord, "human:m", **{param: bad})
        assert _code(answer) == code and answer["error"]["message"], (bad, answer)
    assert W not in coord.workspace_ids()
    good = (identities.token("s-m", "human:m", key) if param == "oidc_token"
            else identities.presentation("did:ex:m", key))
    assert "result" in _joined(coord, "human:m", key, **{param: good})
    before = coord.snapshot(W)
    for bad in MALFORMED:
        answer = _joined(coord, "human:m", **{param: bad})
        assert _code(answer) == code, (bad, answer)
    assert coord.snapshot(W) == before


# -- step-up ---------------------------------------------------------------------------


def test_step_up_as_the_reference_on_the_same_clock() -> None:
    now = int(time.time())
    tokens = {"fresh": {"sub": "s1", "chap_participant_uri": "human:f", "auth_time": now, "acr": "high"},
              "stale": {"sub": "s2", "chap_participant_uri": "human:s", "auth_time": now - 3600, "acr": "high"},
              "low": {"sub": "s3", "chap_participant_uri": "human:l", "auth_time": now, "acr": "low"},
              "agent": {"sub": "s4", "chap_participant_uri": "agent:a", "auth_time": now - 3600}}
    results: list[list[Any]] = []
    for make in (lambda: Coordinator(verify_oidc_token=tokens.get, enforce_step_up=True),
                 lambda: Reference(verify_oidc_token=tokens.get, enforce_step_up=True)):
        coord = make()
        coord.dispatch({"jsonrpc": "2.0", "id": "c", "method": "workspace.create",
                        "params": {"workspace": W, "min_acr": "high"}})
        out = []
        for uri, token, kind in (("human:f", "fresh", "human"), ("human:s", "stale", "human"),
                                 ("human:l", "low", "human"), ("human:p", None, "human"),
                                 ("agent:a", "agent", "agent"), ("agent:b", None, "agent")):
            params = {"workspace": W, "from": uri, "type": kind, "role": "admin",
                      **({"oidc_token": token} if token else {})}
            coord.dispatch({"jsonrpc": "2.0", "id": "j", "method": "participant.join", "params": params})
            answer = coord.dispatch({"jsonrpc": "2.0", "id": "p", "method": "workspace.set_profiles",
                                     "params": {"workspace": W, "from": uri, "profiles": ["core/1.0", "identity-oidc/1.0"]}})
            error = answer.get("error")
            out.append(None if error is None else (error["code"], sorted(error.get("data", {}))))
        log = coord.dispatch({"jsonrpc": "2.0", "id": "r", "method": "audit.read", "params": {"workspace": W}})
        out.append([e.get("outcome") for e in log["result"]["entries"]])
        results.append(out)
    assert results[0] == results[1]
    assert results[0][:6] == [None, (-32402, ["age_sec", "window_sec"]), (-32402, ["acr", "required_acr"]),
                              (-32402, ["window_sec"]), (-32402, ["age_sec", "window_sec"]), None]
