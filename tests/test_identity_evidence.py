"""Identity evidence fails closed.

A join can carry two kinds of identity evidence: identity-oidc/1.0's
`oidc_token` (checked by the `verify_oidc_token` hook) and identity-vc/1.0's
`vc_presentation` (checked by `verify_vc`); `jwks` is self-asserted, not
evidence. Evidence that was presented and does not verify refuses the join,
whatever the reason: the hook says None, raises, returns something that is not
a verdict, the evidence is of the wrong type, or no hook is configured to
check it. Each is answered with the kind's code and leaves no trace.

The table runs every kind x evidence form x hook verdict x (join, re-join)
through chapline and through chap-coordinator 0.3.3 with the same hooks, and
asserts both answers: ours, and 0.3.3's (which are equal where 0.3.3
implements the case; where they differ SPECIFICATION.md lists it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from chap_coordinator import Coordinator as Reference
from client import refused
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import make, stored

from coordinator import Coordinator, public_jwk, sign_envelope
from coordinator.errors import IdentityRejected
from storage import MemoryStore, SqliteStore

URI = "human:ann"
W = "wsp_evidence"
T = 1_700_000_000
SECRET = "db password hunter2 at 10.0.0.7"  # what a failing hook says: never answered

PARAM = {"oidc": "oidc_token", "vc": "vc_presentation"}
HOOK = {"oidc": "verify_oidc_token", "vc": "verify_vc"}
INVALID = {"oidc": -32403, "vc": -32410}
VALID: dict[str, dict[str, Any]] = {
    "oidc": {"sub": "s-ann", "chap_participant_uri": URI, "acr": "mfa", "auth_time": T},
    "vc": {"holder": "did:ex:ann"},
}


def _raise(exc: Exception) -> Any:
    raise exc


# What each hook verdict is, per kind: a function of the evidence.
VERDICTS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "claims": {"oidc": lambda _: dict(VALID["oidc"]), "vc": lambda _: dict(VALID["vc"])},
    "None": {"oidc": lambda _: None, "vc": lambda _: None},
    "raises": {k: lambda _: _raise(ValueError(SECRET)) for k in PARAM},
    "rejects": {  # a verifier's refusal with a code of the profile's
        "oidc": lambda _: _raise(IdentityRejected(-32405, "the token lacks the chap scope")),
        "vc": lambda _: _raise(IdentityRejected(-32412, "the credential is revoked")),
    },
    "rejects with a foreign code": {k: lambda _: _raise(IdentityRejected(-32603, "oops")) for k in PARAM},
    "a string": {k: lambda _: "valid" for k in PARAM},
    "a list": {"oidc": lambda _: [dict(VALID["oidc"])], "vc": lambda _: [dict(VALID["vc"])]},
    "names nobody": {  # an object, but no subject: no `sub`, no holder
        "oidc": lambda _: {"chap_participant_uri": URI, "acr": "mfa", "auth_time": T},
        "vc": lambda _: {"id": 7},
    },
    "not JSON": {  # the subject, with a pinned key that cannot be stored
        "oidc": lambda _: {**VALID["oidc"], "cnf": {"jwk": {"kid": "k", "x": object()}}},
        "vc": lambda _: {**VALID["vc"], "cnf_jwk": {"kid": "k", "x": object()}},
    },
    "no hook": {},
}

# The evidence a join sends, per kind. "well-formed" forms reach the hook.
EVIDENCE: dict[str, dict[str, Any]] = {
    "oidc": {"token": "eyJhbGciOiJSUzI1NiJ9.e30.c2ln", "number": 5, "object": {"id_token": "x"},
             "list": ["x"], "boolean": True},
    "vc": {"object": {"type": ["VerifiablePresentation"]}, "JWT": "eyJhbGciOiJFZERTQSJ9.e30.c2ln",
           "number": 5, "list": [{"type": "VerifiablePresentation"}], "boolean": True},
}
WELL_FORMED = {"oidc": {"token"}, "vc": {"object", "JWT"}}
# The forms 0.3.3 gives its hook (an oidc_token string, a vc_presentation
# object); it ignores every other form, and evidence without a hook.
REFERENCE_CHECKS = {"oidc": {"token"}, "vc": {"object"}}

OK = "ok"
# Our answer to well-formed evidence, per verdict: (join, re-join).
OURS: dict[str, dict[str, tuple[Any, Any]]] = {
    "oidc": {
        "claims": (OK, OK),
        "None": (-32403, -32403),
        "raises": (-32403, -32403),
        "rejects": (-32405, -32405),
        "rejects with a foreign code": (-32403, -32403),
        "a string": (-32403, -32403),
        "a list": (-32403, -32403),
        "names nobody": (-32403, -32404),
        "not JSON": (-32403, -32403),
        "no hook": (-32403, -32403),
    },
    "vc": {
        "claims": (OK, OK),
        "None": (-32410, -32410),
        "raises": (-32410, -32410),
        "rejects": (-32412, -32412),
        "rejects with a foreign code": (-32410, -32410),
        "a string": (-32410, -32410),
        "a list": (-32410, -32410),
        "names nobody": (-32410, -32411),
        "not JSON": (-32410, -32410),
        "no hook": (-32410, -32410),
    },
}
# 0.3.3's answer to the forms it checks, per verdict: (join, re-join).
REFERENCE: dict[str, dict[str, tuple[Any, Any]]] = {
    "oidc": {
        "claims": (OK, OK),
        "None": (-32403, -32403),
        "raises": (-32603, -32603),
        "rejects": (-32603, -32603),
        "rejects with a foreign code": (-32603, -32603),
        "a string": (-32603, -32603),
        "a list": (-32603, -32603),
        "names nobody": (OK, -32404),
        "not JSON": (OK, OK),
        "no hook": (OK, OK),
    },
    "vc": {
        "claims": (OK, OK),
        "None": (-32410, -32410),
        "raises": (-32603, -32603),
        "rejects": (-32603, -32603),
        "rejects with a foreign code": (-32603, -32603),
        "a string": (-32603, -32603),
        "a list": (-32603, -32603),
        "names nobody": (OK, -32411),
        "not JSON": (OK, OK),
        "no hook": (OK, OK),
    },
}


def expected(kind: str, form: str, verdict: str, rejoin: bool) -> tuple[Any, Any]:
    """(our answer, 0.3.3's answer) for one row of the table."""
    ours = OURS[kind][verdict][rejoin] if form in WELL_FORMED[kind] else INVALID[kind]
    theirs = REFERENCE[kind][verdict][rejoin] if form in REFERENCE_CHECKS[kind] else OK
    return ours, theirs


class Hook:
    """A verify hook whose verdict can be switched between calls, counting calls."""

    def __init__(self, kind: str, verdict: str) -> None:
        self.kind = kind
        self.verdict = verdict
        self.calls = 0

    def __call__(self, evidence: Any) -> Any:
        self.calls += 1
        return VERDICTS[self.verdict][self.kind](evidence)


def _join(i: int, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": f"j{i}", "method": "participant.join",
            "params": {"workspace": W, "from": URI, "type": "human", **params}}


def _answer(response: dict[str, Any]) -> Any:
    return response["error"]["code"] if "error" in response else OK


def _run(coord: Any, hook: Hook | None, kind: str, evidence: Any, verdict: str, rejoin: bool,
         mark: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Join with `evidence` (after a first join with valid evidence, when
    `rejoin`); the hook gives `verdict` for that join only. `mark` runs just
    before it."""
    if rejoin:
        first = {PARAM[kind]: EVIDENCE[kind]["token" if kind == "oidc" else "object"]} if hook else {}
        if hook is not None:
            hook.verdict = "claims"
        assert "result" in coord.dispatch(_join(0, **first))
    mark()
    if hook is not None:
        hook.verdict = verdict
    return coord.dispatch(_join(1, **{PARAM[kind]: evidence}))


def _reference_member(coord: Reference) -> dict[str, Any]:
    m = coord.workspaces[W].members[URI]
    return {f: getattr(m, f) for f in ("oidc_sub", "oidc_auth_time", "oidc_acr", "vc_holder")}


def _our_member(coord: Coordinator) -> dict[str, Any]:
    m = coord.snapshot(W)["members"][URI]
    return {f: m.get(f) for f in ("oidc_sub", "oidc_auth_time", "oidc_acr", "vc_holder")}


ROWS = [
    pytest.param(kind, form, verdict, rejoin, id=f"{kind}-{form}-{verdict}-{'rejoin' if rejoin else 'join'}")
    for kind in PARAM
    for form in EVIDENCE[kind]
    for verdict in VERDICTS
    for rejoin in (False, True)
]


@pytest.mark.parametrize("kind, form, verdict, rejoin", ROWS)
def test_every_evidence_kind_against_every_hook_verdict(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str, form: str, verdict: str, rejoin: bool
) -> None:
    """One row: 0.3.3 answers as listed, chapline as listed; an accepted join
    binds what 0.3.3 binds, a refused one leaves the store as it was."""
    ours_expected, theirs_expected = expected(kind, form, verdict, rejoin)
    evidence = EVIDENCE[kind][form]
    hooked = verdict != "no hook"

    ref_hook = Hook(kind, verdict) if hooked else None
    ref = Reference(deterministic_ids=True, deterministic_clock=True, enable_chain=True,
                    **({HOOK[kind]: ref_hook} if ref_hook else {}))
    ref_answer = _answer(_run(ref, ref_hook, kind, evidence, verdict, rejoin))
    assert ref_answer == theirs_expected, "0.3.3 no longer answers as SPECIFICATION.md says"

    store = SqliteStore(str(tmp_path / "chap.db"))
    hook = Hook(kind, verdict) if hooked else None
    coord = make(store, **({HOOK[kind]: hook} if hook else {}))
    heard: list[Any] = []
    coord.add_audit_listener(lambda wid, entry: heard.append(entry))
    before: list[Any] = []

    def mark() -> None:
        before.extend(stored(store))
        heard.clear()

    response = _run(coord, hook, kind, evidence, verdict, rejoin, mark)
    answer = _answer(response)
    assert answer == ours_expected, response
    if hook is not None and form not in WELL_FORMED[kind]:
        assert hook.calls == (1 if rejoin else 0), "a malformed form must not reach the hook"

    if answer == OK:
        mine = _our_member(coord)
        if ref_answer == OK and form in REFERENCE_CHECKS[kind]:
            assert mine == _reference_member(ref)
        bound = mine["oidc_sub"] if kind == "oidc" else mine["vc_holder"]
        assert isinstance(bound, str) and bound, "an accepted join with evidence binds its subject"
        return
    error = response["error"]
    assert error["message"] and SECRET not in str(error), error
    if verdict == "raises" and form in WELL_FORMED[kind]:
        # the hook's own words go to the log, under the id the answer names
        log_id = error["data"]["log_id"]
        assert log_id in error["message"]
        assert any(log_id in r.getMessage() and r.exc_info and SECRET in str(r.exc_info[1])
                   for r in caplog.records)
    # no trace: the store holds what it held, nobody was told, a restart sees the same
    assert stored(store) == before and heard == []
    coord.close()
    reopened = SqliteStore(str(tmp_path / "chap.db"))
    assert stored(reopened) == before
    reopened.close()
    if not rejoin:
        assert before == []  # the join would have created the workspace: it does not exist



# -- beyond the table ---------------------------------------------------------------


def test_one_refused_kind_refuses_the_whole_join() -> None:
    """A join with a good token and a presentation the hook rejects binds
    neither (0.3.3 answers the same, and binds nothing either)."""
    hooks = {"verify_oidc_token": VERDICTS["claims"]["oidc"], "verify_vc": VERDICTS["None"]["vc"]}
    both = {"oidc_token": "t", "vc_presentation": {"type": ["VerifiablePresentation"]}}
    ref = Reference(deterministic_ids=True, deterministic_clock=True, enable_chain=True, **hooks)
    store = MemoryStore()
    coord = make(store, **hooks)
    for c in (ref, coord):
        refused(c.dispatch(_join(0, **both)), -32410)
    assert W not in coord.workspace_ids() and stored(store) == []
    # a re-join of a plain member: nothing binds, in either
    for c in (ref, coord):
        assert "result" in c.dispatch(_join(1))
        refused(c.dispatch(_join(2, **both)), -32410)
    assert _our_member(coord) == _reference_member(ref) == dict.fromkeys(
        ("oidc_sub", "oidc_auth_time", "oidc_acr", "vc_holder"))


def test_a_rejoin_token_replaces_the_bound_acr() -> None:
    """A re-join's verified token replaces the member's acr, so a token of a
    lower assurance level does not keep an older, higher one for step-up
    (0.3.3 likewise). Step-up ages are on the wall clock in 0.3.3."""
    now = int(time.time())
    tokens = {"mfa": {"sub": "s-ann", "chap_participant_uri": URI, "acr": "mfa", "auth_time": now},
              "pwd": {"sub": "s-ann", "chap_participant_uri": URI, "auth_time": now}}
    answers = []
    for c in (Reference(verify_oidc_token=tokens.get, enforce_step_up=True),
              Coordinator(verify_oidc_token=tokens.get, enforce_step_up=True)):
        c.dispatch({"jsonrpc": "2.0", "id": "c", "method": "workspace.create",
                    "params": {"workspace": W, "min_acr": "mfa"}})
        for i, token in enumerate(("mfa", "pwd")):
            assert "result" in c.dispatch(_join(i, oidc_token=token, role="admin"))
        member = _our_member(c) if isinstance(c, Coordinator) else _reference_member(c)
        assert member["oidc_acr"] is None and member["oidc_sub"] == "s-ann"
        answer = c.dispatch({"jsonrpc": "2.0", "id": "p", "method": "workspace.set_profiles",
                             "params": {"workspace": W, "from": URI, "profiles": ["core/1.0"]}})
        answers.append(answer["error"]["code"])
    assert answers == [-32402, -32402]


@pytest.mark.parametrize("kind", ["oidc", "vc"])
def test_a_join_with_a_sig_must_be_signed_by_the_pinned_key(kind: str) -> None:
    """Proof of possession (RFC 7800) is checked whenever a join carries a
    `sig`: one that is not a signature tag does not skip it."""
    key = Ed25519PrivateKey.generate()
    jwk = public_jwk(key, "ann-1")
    verdict = ({"sub": "s-ann", "chap_participant_uri": URI, "cnf": {"jwk": jwk}} if kind == "oidc"
               else {"holder": "did:ex:ann", "cnf_jwk": jwk})
    code = {"oidc": -32404, "vc": -32411}[kind]
    evidence = {PARAM[kind]: "eyJ.e30.c2ln"}
    for sig in (5, ["ed25519:ann-1:AAAA"], {"kid": "ann-1"}, True, "ed25519:ann-1:AAAA"):
        store = MemoryStore()
        coord = make(store, **{HOOK[kind]: lambda _: verdict})
        answer = coord.dispatch({**_join(0, **evidence), "sig": sig})
        refused(answer, code)
        assert "sign the join with that key" in answer["error"]["message"]
        assert stored(store) == []
    coord = make(**{HOOK[kind]: lambda _: verdict})
    assert "result" in coord.dispatch(sign_envelope(_join(0, **evidence), key, "ann-1"))
    assert coord.snapshot(W)["members"][URI]["keys"][0]["jwk"] == jwk


SAFE = 2**53 - 1


def _json(numbers: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none() | st.booleans() | numbers | st.text(max_size=4),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=6,
    )


# An envelope holds CHAP canonical numbers only (others are -32602 before any
# method runs); what a hook returns may hold any.
JSON = _json(st.integers(-SAFE, SAFE))
ANY_JSON = _json(st.integers() | st.floats(allow_nan=False))
SUBJECTS = st.sampled_from(["s-ann", "did:ex:ann", "", 5, None])
VERDICT_VALUES = st.one_of(
    st.just("raise"),
    ANY_JSON,
    st.fixed_dictionaries({}, optional={
        "sub": SUBJECTS, "holder": SUBJECTS, "id": SUBJECTS, "acr": ANY_JSON, "auth_time": ANY_JSON,
        "chap_participant_uri": st.sampled_from([URI, "human:other", 3]),
    }),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["oidc", "vc"]), evidence=JSON, first=VERDICT_VALUES,
       verdict=VERDICT_VALUES, rejoin=st.booleans())
def test_evidence_is_bound_or_refused_never_ignored(
    kind: str, evidence: Any, first: Any, verdict: Any, rejoin: bool
) -> None:
    """Any evidence, any verdict: the join is refused with one of the kind's
    codes and leaves the store as it was, or it is accepted and the member
    is bound to the subject the verdict names. Never -32603."""
    current = [first]

    def hook(_: Any) -> Any:
        if current[0] == "raise":
            raise RuntimeError(SECRET)
        return current[0]

    store = MemoryStore()
    coord = make(store, **{HOOK[kind]: hook})
    if rejoin and "result" not in coord.dispatch(_join(0, **{PARAM[kind]: "first"})):
        return  # the first join was refused: nothing to re-join
    before = stored(store)
    current[0] = verdict
    answer = coord.dispatch(_join(1, **{PARAM[kind]: evidence}))
    if "error" in answer:
        low, high = {"oidc": (-32405, -32403), "vc": (-32413, -32410)}[kind]
        refused(answer, range(low, high + 1))
        assert evidence is not None, answer
        assert SECRET not in str(answer) and stored(store) == before
        return
    member = _our_member(coord)
    if evidence is None:
        return
    assert isinstance(verdict, dict)
    if kind == "oidc":
        assert member["oidc_sub"] == verdict["sub"] and member["oidc_sub"]
        assert member["oidc_acr"] == (verdict.get("acr") if isinstance(verdict.get("acr"), str) else None)
    else:
        named = [v for v in (verdict.get("holder"), verdict.get("id")) if isinstance(v, str) and v]
        assert member["vc_holder"] == named[0]
