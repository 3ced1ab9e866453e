"""audit-scitt/1.0 through the coordinator: 0.3.3's shapes and codes with its
hooks, then real COSE statements registered with the suite's own
transparency service and receipts verified with its key."""

from __future__ import annotations

import base64
import copy
from typing import Any

from chap_coordinator import Coordinator as Reference
from client import refused
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pycose.keys.curves import Ed25519
from pycose.keys.okp import OKPKey
from pycose.messages import Sign1Message
from transparency import TransparencyService

from coordinator import Coordinator, CounterIds, StepClock
from coordinator.audit import record_of
from coordinator.engine.canonical import canonical_bytes
from coordinator.security.transparency import ReceiptVerifier, ScittSubmitter

W = "wsp_scitt"
PROFILES = ["core/1.0", "review/1.0", "audit-scitt/1.0"]


def _call(coord: Any, n: int, method: str, **params: Any) -> dict[str, Any]:
    return coord.dispatch({"jsonrpc": "2.0", "id": f"r{n}", "method": method, "params": {"workspace": W, **params}})


def _workload(coord: Any) -> None:
    """Six entries: create, two joins, a task, a member's recorded refusal, an update."""
    _call(coord, 1, "workspace.create", profiles=PROFILES)
    _call(coord, 2, "participant.join", **{"from": "human:alice"}, type="human", role="admin")
    _call(coord, 3, "participant.join", **{"from": "agent:bot"}, type="agent")
    task = _call(coord, 4, "task.create", **{"from": "human:alice"}, assignee="agent:bot", kind="k", input={})
    tid = task["result"]["task_id"]
    refused(_call(coord, 5, "decide.approve", **{"from": "human:alice"}, task_id=tid), -32010)
    _call(coord, 6, "task.update", **{"from": "agent:bot"}, task_id=tid, state="in_progress")


def _count(coord: Any) -> int:
    return len(_call(coord, 99, "audit.read")["result"]["entries"])


def _pair(**hooks: Any) -> tuple[Any, Any]:
    ours = Coordinator(clock=StepClock(), ids=CounterIds(), **hooks)
    theirs = Reference(deterministic_ids=True, deterministic_clock=True, enable_chain=True, **hooks)
    _workload(ours)
    _workload(theirs)
    return ours, theirs


def _shape(answer: dict[str, Any]) -> Any:
    return {"code": answer["error"]["code"]} if "error" in answer else answer["result"]


def test_statements_without_a_submitter_match_the_reference() -> None:
    ours, theirs = _pair()
    # (entries 3-5 name a generated task id, which differs between the two)
    for params in ({"range": {"from_seq": 0, "to_seq": 3}}, {"range": {"from_seq": 7, "to_seq": 9}}, {"issuer": "service:me", "range": {"to_seq": 1}}):
        mine, ref = _call(ours, 10, "audit.submit_to_scitt", **params), _call(theirs, 10, "audit.submit_to_scitt", **params)
        assert mine == ref, params
    whole = _call(ours, 11, "audit.submit_to_scitt")["result"]
    assert len(whole["statements"]) == 6 and whole["note"]
    refusal = whole["statements"][4]
    assert refusal["payload"].startswith('{"outcome":{"code":-32010,"status":"refused"},"request":')
    assert _count(ours) == 6  # never recorded


def test_hook_codes_match_the_reference() -> None:
    calls: list[Any] = []

    def submitter(statement: dict[str, Any]) -> Any:
        calls.append(statement)
        return None if len(calls) == 2 else {"n": len(calls)}

    def down(statement: dict[str, Any]) -> Any:
        raise ConnectionError("transparency service down")

    for hooks, params, expect in (
        ({"scitt_submitter": submitter}, {"range": {"from_seq": 0, "to_seq": 1}}, None),
        ({"scitt_submitter": down}, {}, -32080),
        ({"verify_scitt_receipt": lambda r: r.get("ok") is True}, None, None),
    ):
        calls.clear()
        ours, theirs = _pair(**hooks)
        if params is not None:
            mine = _call(ours, 10, "audit.submit_to_scitt", **params)
            calls.clear()
            ref = _call(theirs, 10, "audit.submit_to_scitt", **params)
            assert _shape(mine) == _shape(ref)
            if expect is None:
                assert "result" in mine, mine
            else:
                refused(mine, expect)
        else:
            for receipt, code in (({"ok": True}, None), ({"ok": False}, -32082), ("s", -32602)):
                mine = _call(ours, 10, "audit.verify_receipt", receipt=receipt)
                ref = _call(theirs, 10, "audit.verify_receipt", receipt=receipt)
                assert _shape(mine) == _shape(ref)
                if code is None:
                    assert "result" in mine, mine
                else:
                    refused(mine, code)
        assert _count(ours) == _count(theirs) == 6
    # a submitter returning None at the second statement: -32081 naming its seq
    calls.clear()
    ours = Coordinator(clock=StepClock(), ids=CounterIds(), scitt_submitter=submitter)
    _workload(ours)
    answer = _call(ours, 10, "audit.submit_to_scitt")
    refused(answer, -32081)
    assert "seq 1" in answer["error"]["message"]
    # no verifier configured: fails closed
    refused(_call(ours, 11, "audit.verify_receipt", receipt={"ok": True}), -32082)


def test_bad_ranges_and_issuers_are_invalid_params() -> None:
    ours = Coordinator()
    _workload(ours)
    for params in ({"range": "all"}, {"range": {"from_seq": "a"}}, {"range": {"to_seq": -1}}, {"issuer": 5}):
        answer = _call(ours, 10, "audit.submit_to_scitt", **params)
        refused(answer, -32602)
        assert answer["error"]["message"], params


def _pycose_verify(statement: dict[str, Any], key: Ed25519PrivateKey) -> Sign1Message:
    message = Sign1Message.decode(base64.b64decode(statement["cose_sign1"]))
    message.key = OKPKey(crv=Ed25519, x=key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
    assert message.verify_signature()
    return message


def test_real_statements_register_and_their_receipts_verify() -> None:
    issuer = Ed25519PrivateKey.generate()
    with TransparencyService(trusted=[issuer.public_key()]) as ts:
        coord = Coordinator(scitt_issuer_key=issuer, scitt_issuer_kid="coord-2026",
                            scitt_submitter=ScittSubmitter(ts.url),
                            verify_scitt_receipt=ReceiptVerifier(ts.key.public_key()))
        _workload(coord)
        entries = _call(coord, 9, "audit.read")["result"]["entries"]
        receipts = _call(coord, 10, "audit.submit_to_scitt")["result"]["receipts"]
        assert [r["seq"] for r in receipts] == list(range(6)) and len(ts.entries) == 6
        for entry, statement_bytes in zip(entries, ts.entries, strict=True):
            message = Sign1Message.decode(statement_bytes)
            message.key = OKPKey(crv=Ed25519, x=issuer.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
            assert message.verify_signature()
            assert message.payload == canonical_bytes(record_of(entry))
        good = receipts[3]["receipt"]
        assert _call(coord, 11, "audit.verify_receipt", receipt=good)["result"] == {"verified": True}
        tampered = copy.deepcopy(good)
        raw = bytearray(base64.b64decode(tampered["receipt"]))
        raw[-1] ^= 1
        tampered["receipt"] = base64.b64encode(bytes(raw)).decode()
        answer = _call(coord, 12, "audit.verify_receipt", receipt=tampered)
        refused(answer, -32082)
        swapped = {**good, "statement": receipts[4]["receipt"]["statement"]}
        refused(_call(coord, 13, "audit.verify_receipt", receipt=swapped), -32082)
        # statements without a submitter carry the same COSE, checked by pycose
        plain = Coordinator(scitt_issuer_key=issuer)
        _workload(plain)
        statement = _call(plain, 14, "audit.submit_to_scitt", range={"to_seq": 1})["result"]["statements"][0]
        assert _pycose_verify(statement, issuer).phdr
        assert statement["protected"]["cwt_claims"]["sub"] == W and statement["signature"] != "<deployment-supplied>"


def test_an_unreachable_or_refusing_service_records_nothing() -> None:
    issuer = Ed25519PrivateKey.generate()
    with TransparencyService(trusted=[Ed25519PrivateKey.generate().public_key()]) as ts:
        url = ts.url
        refusing = Coordinator(scitt_issuer_key=issuer, scitt_submitter=ScittSubmitter(url))
        _workload(refusing)
        answer = _call(refusing, 10, "audit.submit_to_scitt")
        refused(answer, -32081)
        assert ts.entries == []
    unreachable = Coordinator(scitt_issuer_key=issuer, scitt_submitter=ScittSubmitter(url, timeout=2))
    _workload(unreachable)
    before = unreachable.snapshot(W)
    answer = _call(unreachable, 10, "audit.submit_to_scitt")
    refused(answer, -32080)
    assert "could not be reached" in answer["error"]["message"]
    assert unreachable.snapshot(W) == before and _count(unreachable) == 6


def test_advertising_audit_scitt_turns_chaining_on_as_the_reference_does() -> None:
    heads = []
    for coord in (Coordinator(clock=StepClock(), ids=CounterIds(), enable_chain=False),
                  Reference(deterministic_ids=True, deterministic_clock=True)):
        _call(coord, 1, "workspace.create")
        _call(coord, 2, "participant.join", **{"from": "human:alice"}, type="human", role="admin")
        _call(coord, 3, "workspace.set_profiles", **{"from": "human:alice"}, profiles=["core/1.0", "audit-scitt/1.0"])
        _call(coord, 4, "participant.join", **{"from": "human:bob"}, type="human")
        verdict = _call(coord, 5, "audit.verify_chain")["result"]
        entries = _call(coord, 6, "audit.read")["result"]["entries"]
        heads.append((verdict, [e.get("prev_hash") for e in entries]))
    assert heads[0] == heads[1]
    verdict, prevs = heads[0]
    assert verdict["status"] == "not_evaluated" and verdict["checked_from_seq"] == 2
    assert prevs[:3] == [None, None, "sha256:" + "0" * 64]
