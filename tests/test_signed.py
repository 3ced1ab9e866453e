"""security-signed/1.0 against chap-coordinator 0.3.3 (a black box): each
accepts what the other's signer produces, both refuse the same envelopes
with the same codes and record none of them, and a signed workload gives
identical entries and chain heads. Then what chapline does beyond 0.3.3:
replays of accepted signed calls, and keys judged by arrival, not `ts`."""

from __future__ import annotations

import base64
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import chap_coordinator
import pytest
from chap_coordinator import Coordinator as Reference
from chap_coordinator.storage.sqlite import SqliteStore as ReferenceSqlite
from client import Client, refused
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from coordinator import Coordinator, CounterIds, StepClock, public_jwk, sign_envelope
from storage import SqliteStore

W = "wsp_sig"
ALICE, BOT, CAROL, GHOST = "human:alice", "agent:bot", "human:carol", "human:ghost"
KEYS = {uri: Ed25519PrivateKey.generate() for uri in (ALICE, BOT, CAROL)}
K2 = Ed25519PrivateKey.generate()  # alice's key after rotation
MALLORY = Ed25519PrivateKey.generate()
KID = {ALICE: "alice-1", BOT: "bot-1", CAROL: "carol-1"}


def ours(**kw: Any) -> Coordinator:
    return Coordinator(clock=kw.pop("clock", StepClock()), ids=kw.pop("ids", CounterIds()),
                       require_signatures=True, **kw)


def reference(**kw: Any) -> Any:
    return Reference(deterministic_ids=True, deterministic_clock=True, require_signatures=True, **kw)


def side_of(coord: Any) -> Client:
    """Calls on W. Writes are sent as `signed` builds them; reads (`log`,
    `describe`) are alice's, signed with her current key (`reader`)."""
    return Client(coord, W, sign=reader(KEYS[ALICE], KID[ALICE]))


def reader(key: Any, kid: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def sign(envelope: dict[str, Any]) -> dict[str, Any]:
        envelope["params"]["from"] = ALICE
        return sign_envelope(envelope, key, kid)

    return sign


def signed(side: Client, sender: str, method: str, params: dict[str, Any], key: Any = None, kid: str | None = None) -> dict[str, Any]:
    envelope = side.envelope(method, frm=sender, **side.build(params))
    return sign_envelope(envelope, key or KEYS[sender], kid or KID[sender])


def setup(side: Client) -> None:
    assert "result" in side.send(side.envelope("workspace.create"))
    for uri, kind, role in ((ALICE, "human", "admin"), (BOT, "agent", "drafter"), (CAROL, "human", "reviewer")):
        answer = side.send(side.envelope("participant.join", frm=uri, type=kind, role=role,
                                         jwks={"keys": [public_jwk(KEYS[uri], KID[uri])]}))
        assert answer["result"] == {"joined": True, "as": uri}


def both() -> tuple[Client, Client]:
    a, b = side_of(ours()), side_of(reference())
    setup(a)
    setup(b)
    return a, b


TASK = {"assignee": BOT, "kind": "draft", "input": {"text": "hello"}}


def test_reference_accepts_our_helper_and_we_accept_its_signatures() -> None:
    a, b = both()
    answer = b.send(signed(b, ALICE, "task.create", TASK))
    assert answer["result"]["state"] == "created"
    envelope = a.envelope("task.create", frm=ALICE, **TASK)
    envelope["sig"] = chap_coordinator.sign(chap_coordinator.canonicalize(envelope), KEYS[ALICE], KID[ALICE])
    assert a.send(envelope)["result"]["state"] == "created"
    assert a.log()[-1]["envelope"]["sig"] == envelope["sig"]


def _tamper(envelope: dict[str, Any]) -> dict[str, Any]:
    return {**envelope, "params": {**envelope["params"], "kind": "evil"}}


def _sig(text: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda envelope: {**envelope, "sig": text}


# (label, sender, method, params, key, kid, mangle, code)
BEFORE_ROTATION = [
    ("unsigned", ALICE, "task.create", TASK, None, None, lambda e: {k: v for k, v in e.items() if k != "sig"}, -32070),
    ("sig not a string", ALICE, "task.create", TASK, None, None, _sig(5), -32070),  # type: ignore[arg-type]
    ("tampered", ALICE, "task.create", TASK, None, None, _tamper, -32070),
    ("wrong key", ALICE, "task.create", TASK, MALLORY, "alice-1", None, -32070),
    ("another member's kid", ALICE, "task.create", TASK, KEYS[BOT], "bot-1", None, -32071),
    ("unknown kid", ALICE, "task.create", TASK, MALLORY, "nope", None, -32071),
    ("not a member", GHOST, "task.create", TASK, MALLORY, "g-1", None, -32071),
    ("ts not a string", ALICE, "task.create", {**TASK, "ts": 5}, None, None, None, -32070),
    ("malformed tag", ALICE, "task.create", TASK, None, None, _sig("ed25519:alice-1"), -32070),
    ("other scheme", ALICE, "task.create", TASK, None, None, _sig("rsa:alice-1:AAAA"), -32070),
    ("bad base64", ALICE, "task.create", TASK, None, None, _sig("ed25519:alice-1:!!!!"), -32070),
    ("short signature", ALICE, "task.create", TASK, None, None, _sig("ed25519:alice-1:" + base64.b64encode(b"x" * 32).decode()), -32070),
    ("unknown workspace", ALICE, "task.create", {**TASK, "workspace": "wsp_none"}, None, None, None, -32070),
    ("workspace not a string", ALICE, "task.create", {**TASK, "workspace": 7}, None, None, None, -32070),
    ("unsigned read", ALICE, "workspace.describe", {}, None, None, lambda e: {k: v for k, v in e.items() if k != "sig"}, -32070),
    ("rotation signed by another key", ALICE, "participant.rotate_key",
     {"old_kid": "alice-1", "new_jwk": public_jwk(K2, "alice-2")}, KEYS[ALICE], "carol-1", None, -32071),
]


def _send_case(side: Client, case: tuple) -> dict[str, Any]:
    label, sender, method, params, key, kid, mangle, code = case
    envelope = signed(side, sender, method, params, key, kid)
    if mangle is not None:
        envelope = mangle(envelope)
    return side.send(envelope)


def _assert_same_refusals(a: Client, b: Client, cases: list[tuple]) -> None:
    count_a, count_b = len(a.log()), len(b.log())
    for case in cases:
        ra, rb = _send_case(a, case), _send_case(b, case)
        refused(rb, case[-1])
        refused(ra, case[-1])
        assert ra["error"]["message"], case[0]
    # nothing refused is recorded, by either
    assert len(a.log()) == count_a and len(b.log()) == count_b


def test_both_refuse_the_same_envelopes_with_the_same_codes() -> None:
    a, b = both()
    _assert_same_refusals(a, b, BEFORE_ROTATION)


def test_rotation_and_revocation_give_the_same_codes() -> None:
    a, b = both()
    for side in (a, b):
        rotate = signed(side, ALICE, "participant.rotate_key", {"old_kid": "alice-1", "new_jwk": public_jwk(K2, "alice-2")})
        assert side.send(rotate)["result"]["new_kid"] == "alice-2"
        side.sign = reader(K2, "alice-2")
        revoke = signed(side, ALICE, "participant.revoke_key", {"target_uri": CAROL, "kid": "carol-1", "reason": "lost"}, K2, "alice-2")
        assert side.send(revoke)["result"]["revoked"] is True
    backdated = {**TASK, "ts": "2000-01-01T00:00:00.000Z"}
    _assert_same_refusals(a, b, [
        ("rotated out", ALICE, "task.create", TASK, KEYS[ALICE], "alice-1", None, -32071),
        ("rotated out, backdated ts", ALICE, "task.create", backdated, KEYS[ALICE], "alice-1", None, -32071),
        ("revoked", CAROL, "task.create", TASK, None, None, None, -32072),
        ("revoked, backdated ts", CAROL, "task.create", backdated, None, None, None, -32072),
        ("rotate a revoked key", CAROL, "participant.rotate_key",
         {"old_kid": "carol-1", "new_jwk": public_jwk(MALLORY, "carol-2")}, None, None, None, -32072),
        ("rotate signed by the current, not the old, key", ALICE, "participant.rotate_key",
         {"old_kid": "alice-1", "new_jwk": public_jwk(MALLORY, "alice-3")}, K2, "alice-2", None, -32073),
    ])
    for side in (a, b):  # the new key works on both
        assert side.send(signed(side, ALICE, "task.create", TASK, K2, "alice-2"))["result"]["state"] == "created"


class ReplayIds:
    """Ids in the order another run generated them, per prefix, so that both
    implementations record byte-identical envelopes."""

    def __init__(self, seen: dict[str, list[str]]) -> None:
        self.queues = {prefix: deque(ids) for prefix, ids in seen.items()}

    def __call__(self, prefix: str) -> str:
        return self.queues[prefix].popleft()


SIGNED_WORKLOAD = [
    (ALICE, "task.create", {**TASK, "review_required": True}, "task"),
    (BOT, "task.update", {"task_id": "$task", "state": "in_progress"}, None),
    (BOT, "task.complete", {"task_id": "$task", "output": {"text": "done"}}, "review"),
    (CAROL, "decide.approve", {"task_id": "$task"}, None),
    (ALICE, "task.create", TASK, "t2"),
    (ALICE, "decide.approve", {"task_id": "$t2"}, None),  # a recorded refusal (-32010)
    (BOT, "participant.rotate_key", {"old_kid": "bot-1", "new_jwk": public_jwk(K2, "bot-2")}, None),
    (ALICE, "task.update", {"task_id": "$t2", "state": "in_progress", "ts": "2023-11-14T22:13:40.000Z"}, None),
]


def _run_workload(side: Client) -> list[dict[str, Any]]:
    answers = []
    keys = {**KEYS}
    kids = {**KID}
    for sender, method, params, save in SIGNED_WORKLOAD:
        answer = side.send(signed(side, sender, method, params, keys[sender], kids[sender]))
        answers.append(answer)
        if method == "participant.rotate_key":
            keys[sender], kids[sender] = K2, "bot-2"
        if save and "result" in answer:
            side.names["$" + save] = answer["result"].get("task_id", answer["result"].get("review_id"))
    return answers


def test_signed_workload_gives_identical_entries_and_chain_heads() -> None:
    b = side_of(reference(enable_chain=True))
    setup(b)
    theirs = _run_workload(b)
    seen: dict[str, list[str]] = defaultdict(list)
    for value in b.names.values():
        seen[value.split("_", 1)[0]].append(value)
    a = side_of(ours(enable_chain=True, ids=ReplayIds(seen)))
    setup(a)
    mine = _run_workload(a)
    assert mine == theirs
    refused(mine[5], -32010)  # the workload's recorded refusal
    log_a, log_b = a.log(), b.log()
    assert log_a == log_b and all("sig" in (e.get("envelope") or e["request"]) for e in log_a[4:])
    assert a.describe()["evidence_head"] == b.describe()["evidence_head"]


# -- beyond 0.3.3 ---------------------------------------------------------------


def test_a_verbatim_resend_of_an_accepted_signed_call_is_answered_as_a_replay(tmp_path: Any) -> None:
    path = str(tmp_path / "chap.db")
    a = side_of(ours(store=SqliteStore(path)))
    setup(a)
    create = signed(a, ALICE, "task.create", TASK)
    first = a.send(create)
    count = len(a.log())
    again = a.send(create)
    assert again == first and len(a.log()) == count
    tasks = a.describe()["task_count"]
    # a new id is a new call
    assert a.send(signed(a, ALICE, "task.create", TASK))["result"]["task_id"] != first["result"]["task_id"]
    a.target.close()
    # after a restart, and from another coordinator on the same file, still a replay
    for coord in (ours(store=SqliteStore(path)), ours(store=SqliteStore(path))):
        side = side_of(coord)
        side.n = 100
        assert side.send(create) == first
        assert side.describe()["task_count"] == tasks + 1
        coord.close()
    # 0.3.3 still loads the file (and, as it does, runs the resend again)
    ref = Reference(require_signatures=True, store=ReferenceSqlite(path))  # its clock: now
    assert ref.get_workspace(W) is not None
    assert "result" in ref.dispatch(create)


def test_keys_are_judged_by_arrival_not_by_the_senders_ts() -> None:
    """0.3.3 picks the key valid at the sender's ts, so a sender whose clock
    lags its own rotation is refused; chapline accepts the current key."""
    a, b = both()
    for side in (a, b):
        rotate = signed(side, ALICE, "participant.rotate_key", {"old_kid": "alice-1", "new_jwk": public_jwk(K2, "alice-2")})
        assert "result" in side.send(rotate)
    lagging = {**TASK, "ts": "2023-11-14T22:13:00.000Z"}  # before the rotation
    refused(b.send(signed(b, ALICE, "task.create", lagging, K2, "alice-2")), -32071)
    assert a.send(signed(a, ALICE, "task.create", lagging, K2, "alice-2"))["result"]["state"] == "created"


def test_the_reference_options_turn_signatures_on() -> None:
    from coordinator import CoordinatorOptions

    for coord in (Coordinator(CoordinatorOptions(require_signatures=True)), Reference(require_signatures=True)):
        side = side_of(coord)
        setup(side)
        assert side.describe()["profiles"] == ["core/1.0", "review/1.0", "security-signed/1.0"]
        unsigned = side.send(side.envelope("workspace.describe", frm=ALICE))
        refused(unsigned, -32070)


def test_security_signed_is_advertised_only_when_enforced() -> None:
    for coord in (Coordinator(), Reference()):
        Client(coord, W).fail(-32602, "workspace.create", profiles=["core/1.0", "security-signed/1.0"])
    with pytest.raises(ValueError, match="require_signatures"):
        Coordinator(default_profiles=["core/1.0", "security-signed/1.0"])


def test_a_replay_is_recognised_by_a_coordinator_that_has_not_seen_the_call(tmp_path: Any) -> None:
    """Two coordinators open on one file: the second learns of the first's
    signed call only through the store, and still answers the resend as a replay."""
    path = str(tmp_path / "chap.db")
    clock = StepClock()  # one clock for both: keys are valid from the time first registered them
    first = side_of(ours(store=SqliteStore(path), clock=clock))
    second = side_of(ours(store=SqliteStore(path), clock=clock))
    setup(first)
    second.n = 50
    assert second.describe()["audit_count"] == 4  # second sees the workspace, through the store
    create = signed(first, ALICE, "task.create", TASK)
    answer = first.send(create)
    assert second.send(create) == answer  # second's memory was stale: the write conflicted, it reloaded
    assert second.describe()["task_count"] == 1 and first.describe()["task_count"] == 1
    first.target.close()
    second.target.close()


def test_a_signed_refusal_is_answered_again_not_evaluated_by_both() -> None:
    """A signed refusal answered again, under require_signatures: carol (a
    member, not an addressed reviewer) is refused and recorded; once the
    review is widened to her, the same signed envelope still gets the first
    refusal, from both implementations."""
    a, b = both()
    answers = []
    for side in (a, b):
        task = side.send(signed(side, ALICE, "task.create", {**TASK, "review_required": True}))
        tid = task["result"]["task_id"]
        side.send(signed(side, BOT, "task.update", {"task_id": tid, "state": "in_progress"}))
        side.send(signed(side, BOT, "review.request", {"task_id": tid, "to": [ALICE], "artefact": {"a": 1}}))
        approve = signed(side, CAROL, "decide.approve", {"task_id": tid})
        first = side.send(approve)
        count = len(side.log())
        side.send(signed(side, BOT, "review.request", {"task_id": tid, "to": [ALICE, CAROL], "artefact": {"a": 1}}))
        again = side.send(approve)
        repeated = {"code": again["error"]["code"], "data": again["error"]["data"]}
        answers.append((first["error"]["code"], repeated, len(side.log()) - count))
    assert answers[0] == answers[1]
    code, again, added = answers[0]
    assert code == -32011 and again["code"] == -32011 and "refused_at_seq" in again["data"]
    assert added == 1  # the widening request only; the resend is not recorded


def test_the_readmes_signing_example_runs() -> None:
    import re
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme[readme.index("## An agent signing its calls"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    scope: dict[str, Any] = {}
    exec(code.group(1), scope)  # noqa: S102 - the README's own example
    again = scope["coord"].dispatch(sign_envelope(scope["call"], scope["key"], "drafter-2026-01"))
    assert again["result"]["state"] == "created"  # answered as the replay it is


def _without_sig(envelope: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in envelope.items() if k != "sig"}


def test_a_resend_is_answered_from_the_replay_index_only_when_its_signature_verifies() -> None:
    """The signed digest leaves `sig` out, so any `sig` on a resend gives the
    accepted call's digest: the signature is checked before the index may
    answer, and 0.3.3 (which evaluates every resend again) gives the same
    codes and records none of them."""
    a, b = both()
    answers = []
    for side in (a, b):
        create = signed(side, CAROL, "task.create", TASK)
        first = side.send(create)
        assert first["result"]["state"] == "created"
        count = len(side.log())
        forged = [
            {**create, "sig": "garbage"},
            {**create, "sig": sign_envelope(_without_sig(create), MALLORY, KID[CAROL])["sig"]},
            {**create, "sig": sign_envelope(_without_sig(create), KEYS[BOT], KID[BOT])["sig"]},
        ]
        codes = [side.send(envelope)["error"]["code"] for envelope in forged]
        # a verbatim resend whose key was revoked since is refused too
        revoke = signed(side, ALICE, "participant.revoke_key", {"target_uri": CAROL, "kid": KID[CAROL], "reason": "lost"})
        assert side.send(revoke)["result"]["revoked"] is True
        codes.append(side.send(create)["error"]["code"])
        answers.append((codes, len(side.log()) - count))
    assert answers[0] == answers[1] == ([-32070, -32070, -32071, -32072], 1)  # the revocation only


def test_without_required_signatures_only_a_verbatim_resend_is_a_replay() -> None:
    """Nothing verifies signatures then, so a resend with another `sig` is
    not the accepted call: it is run again, as 0.3.3 runs every resend."""
    sides = [Client(Coordinator(clock=StepClock(), ids=CounterIds()), W),
             Client(Reference(deterministic_ids=True, deterministic_clock=True), W)]
    grown, sent = [], []
    for side in sides:
        setup(side)
        create = signed(side, ALICE, "task.create", TASK)
        first = side.send(create)
        count = len(side.log())
        again = side.send({**create, "sig": "garbage"})["result"]
        assert again["task_id"] != first["result"]["task_id"]
        grown.append(len(side.log()) - count)
        sent.append((create, first))
    assert grown == [1, 1]
    create, first = sent[0]  # beyond 0.3.3: the verbatim resend is answered as the replay it is
    count = len(sides[0].log())
    assert sides[0].send(create) == first and len(sides[0].log()) == count
