"""The method registry: every CHAP 0.3 method known once, the gates' facts
derived from the declarations, and advertisable profiles."""

from __future__ import annotations

from typing import Any

import pytest
from client import Client, env, refused
from support import ALICE, WS, make, s0

from coordinator.engine.registry import CHAP_0_3, Profile, Registry, schema
from coordinator.errors import RegistryError
from coordinator.profiles import REGISTRY

# The method catalogue of CHAP 0.3 (schemas/profiles/chap-methods.schema.json),
# by owning profile.
CATALOGUE = {
    "core/1.0": "workspace.create workspace.describe workspace.set_profiles participant.join "
    "participant.leave participant.rotate_key participant.revoke_key task.create task.update "
    "task.complete audit.read",
    "review/1.0": "review.request decide.approve decide.reject decide.override "
    "abstain.declare escalate.raise",
    "routing/1.0": "task.route review.depth escalate.auto",
    "whisper/1.0": "whisper.ask whisper.answer",
    "deliberation/1.0": "deliberate.open deliberate.comment deliberate.vote deliberate.close",
    "handoff/1.0": "handoff.propose handoff.accept handoff.decline",
    "control/1.0": "control.pause control.resume control.cancel control.snapshot "
    "control.rollback control.supersede control.set_mode_ceiling",
    "audit-scitt/1.0": "audit.verify_chain audit.verify_receipt audit.submit_to_scitt",
}


def _handler(call: Any) -> dict[str, Any]:
    return {}


def _profile(name: str, *methods: str) -> Profile:
    profile = Profile(name)
    for method in methods:
        profile.method(method, title=method, description=method)(_handler)
    return profile


def test_every_chap_method_is_known_once_with_its_owner() -> None:
    expected = {m: p for p, names in CATALOGUE.items() for m in names.split()}
    assert len(expected) == 39
    assert {m: spec.profile for m, spec in CHAP_0_3.items()} == expected
    assert {m.name: m.profile for m in REGISTRY.methods()} == expected


def test_each_method_has_one_handler_or_is_unimplemented() -> None:
    implemented = {m.name: m.implemented_by for m in REGISTRY.implemented() if not m.extension}
    complete = ("core/1.0", "review/1.0", "whisper/1.0", "deliberation/1.0", "handoff/1.0",
                "control/1.0", "routing/1.0")
    assert implemented == {
        **{m: p for p in complete for m in CATALOGUE[p].split()},
        "audit.verify_chain": "core/1.0",
        "audit.verify_receipt": "audit-scitt/1.0",
        "audit.submit_to_scitt": "audit-scitt/1.0",
    }
    handlers = [m.handler for m in REGISTRY.implemented()]
    assert len(set(handlers)) == len(handlers)  # no handler serves two names
    for method in REGISTRY.methods():
        if method.name not in implemented:
            assert method.handler is None and method.implemented_by is None


def test_verify_chain_belongs_to_audit_scitt_and_is_implemented_in_core() -> None:
    method = REGISTRY.get("audit.verify_chain")
    assert method is not None
    assert (method.profile, method.implemented_by, method.always_available, method.read) == (
        "audit-scitt/1.0",
        "core/1.0",
        True,
        True,
    )
    assert "audit-scitt/1.0" in REGISTRY.advertisable  # with its other two, from scitt.py


def test_the_gates_facts_are_the_specifications() -> None:
    methods = REGISTRY.methods()
    assert {m.name for m in methods if m.read and m.handler} == {
        "workspace.describe",
        "audit.read",
        "audit.verify_chain",
        "audit.verify_receipt",
        "audit.submit_to_scitt",
    }
    assert {m.name for m in methods if m.pause_exempt} == {
        "workspace.create",
        "workspace.describe",
        "audit.read",
        "participant.join",
        "participant.leave",
        "control.resume",
    }
    assert {m.name for m in methods if m.floor} == {
        "participant.leave",
        *CATALOGUE["control/1.0"].split(),
        *CATALOGUE["routing/1.0"].split(),
        *CATALOGUE["whisper/1.0"].split(),
        *CATALOGUE["deliberation/1.0"].split(),
        *CATALOGUE["handoff/1.0"].split(),
    }
    assert {m.name for m in methods if m.privileged} == {
        *CATALOGUE["control/1.0"].split(),
        "workspace.set_profiles",
        "participant.rotate_key",
        "participant.revoke_key",
    }
    assert {m.name for m in methods if m.always_available} == {
        "workspace.describe",
        "audit.read",
        "audit.verify_chain",
        "audit.verify_receipt",
    }
    assert {m.name for m in methods if m.handler and not m.records_refusals} == {
        "workspace.create",
        "participant.join",
        "workspace.describe",
        "audit.read",
        "audit.verify_chain",
        "audit.verify_receipt",
        "audit.submit_to_scitt",
    }


def test_a_name_declared_twice_is_refused() -> None:
    with pytest.raises(RegistryError, match="whisper.ask: declared twice"):
        Registry([_profile("whisper/1.0", "whisper.ask", "whisper.ask")])
    with pytest.raises(RegistryError, match="audit.verify_chain: declared twice"):
        Registry([_profile("core/1.0", "audit.verify_chain"),
                  _profile("audit-scitt/1.0", "audit.verify_chain")])
    with pytest.raises(RegistryError, match="whisper.ask: declared twice"):
        Registry([_profile("whisper/1.0", "whisper.ask"), _profile("whisper/1.0", "whisper.ask")])


def test_a_profile_may_span_modules() -> None:
    # core/1.0 is declared by core.py, tasks.py and audit_reads.py.
    split = Registry([_profile("whisper/1.0", "whisper.ask"), _profile("whisper/1.0", "whisper.answer")])
    assert split.advertisable == ("whisper/1.0",)


def test_declarations_must_agree_with_chap() -> None:
    with pytest.raises(RegistryError, match="not a CHAP 0.3 method"):
        _profile("whisper/1.0", "whisper.shout")
    with pytest.raises(RegistryError, match="owned by whisper/1.0"):
        _profile("core/1.0", "whisper.ask")
    with pytest.raises(RegistryError, match="not a CHAP 0.3 profile"):
        Profile("gossip/1.0")


def test_a_profile_is_advertisable_once_all_its_methods_have_handlers() -> None:
    assert REGISTRY.advertisable == (
        "core/1.0",
        "audit-scitt/1.0",
        "control/1.0",
        "deliberation/1.0",
        "handoff/1.0",
        "identity-oidc/1.0",
        "identity-vc/1.0",
        "modes/1.0",
        "review/1.0",
        "routing/1.0",
        "security-signed/1.0",
        "whisper/1.0",
        "x-chapline-work/1.0",
    )
    # core/1.0 declared without its handlers is not advertisable either.
    half = Registry([_profile("core/1.0"), _profile("modes/1.0"), _profile("whisper/1.0", "whisper.ask")])
    assert half.advertisable == ("modes/1.0",)
    assert "whisper/1.0 not implemented" in (half.unadvertisable(["whisper/1.0"]) or "")
    whole = Registry([_profile("modes/1.0"), _profile("whisper/1.0", "whisper.ask", "whisper.answer")])
    assert whole.advertisable == ("modes/1.0", "whisper/1.0")
    assert whole.unadvertisable(["modes/1.0", "whisper/2.0"]) is None


def test_parameter_schemas_name_what_they_require() -> None:
    for method in REGISTRY.implemented():
        params = method.params
        assert params["type"] == "object", method.name
        assert set(params.get("required", [])) <= set(params["properties"]), method.name
        assert method.title and method.description, method.name
        assert method.annotations["readOnlyHint"] is method.read, method.name
    assert schema(["workspace", "from"], from_={"type": "string"})["properties"]["from"] == {
        "type": "string"
    }
    with pytest.raises(RegistryError, match="required but given no schema"):
        schema(["task_id"])


def test_cli_profiles_all_is_every_advertisable_profile_no_option_must_enforce() -> None:
    from coordinator.cli import ALL_PROFILES

    assert ALL_PROFILES == tuple(
        p for p in REGISTRY.advertisable if p not in ("security-signed/1.0", "identity-oidc/1.0")
    )


def test_an_unimplemented_privileged_method_refused_by_the_gate_is_recorded() -> None:
    c = Client(make())
    s0(c)
    before = c.describe()["audit_count"]
    err = c.fail(-32601, "control.pause", frm=ALICE, scope="workspace")
    assert err["data"] == {"profile": "control/1.0", "advertised": ["core/1.0", "review/1.0"]}
    assert c.describe()["audit_count"] == before + 1
    # Not privileged: refused the same way, never recorded.
    c.fail(-32601, "whisper.ask", frm=ALICE, to=ALICE, question="?")
    assert c.describe()["audit_count"] == before + 1
    refused(c.target.dispatch(env("nothing.here", {"workspace": WS})), -32601)
