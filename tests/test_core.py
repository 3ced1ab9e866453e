"""core/1.0 as 0.3.3 answers it: every method's success path and errors, the
dispatch order and codes (delta A5), which refusals are recorded (A1) and how,
and the audit listeners (A27, issue 3 item 8).

Where chapline deliberately answers differently from the reference the test
says so ("deliberate:") and asserts our behaviour.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3

import pytest
import rfc8785
from client import Client, env, refused
from support import (
    ALICE,
    BOB,
    BOT,
    WS,
    FailingStore,
    edit_workspace,
    make,
    s0,
)

from coordinator import AuditEntry, public_jwk
from storage import MemoryStore, SqliteStore

ZERO = "sha256:" + "0" * 64
GHOST = "human:ghost"
CAROL = "human:carol"


def jwk(kid: str) -> dict[str, str]:
    """A real public key under `kid` (a key that is not one is refused: test_keys.py)."""
    return public_jwk(kid.encode().ljust(32, b"."), kid)


@pytest.fixture
def coord():
    return make()


@pytest.fixture
def c(coord):
    return Client(coord)


@pytest.fixture
def T(c):
    return s0(c)


def last(c: Client) -> dict:
    return c.log()[-1]


def assert_not_recorded(c: Client, before: int) -> None:
    assert c.describe()["audit_count"] == before


def assert_refusal_recorded(c: Client, before: int, code: int, sent: dict) -> dict:
    """One refusal entry in the exact 0.3.3 wire shape, for the envelope sent."""
    assert c.describe()["audit_count"] == before + 1
    entry = last(c)
    assert set(entry) == {"seq", "arrived", "request", "outcome", "prev_hash"}
    assert entry["seq"] == before
    assert entry["request"] == sent
    assert entry["outcome"] == {"status": "refused", "code": code}
    return entry


def link(record, prev: str) -> str:
    """The chain link computed independently, with rfc8785 as the canonicaliser."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(record) + prev.encode()).hexdigest()


# =============================================================================
# workspace.create
# =============================================================================


def test_create_with_id_is_recorded_as_seq_0(c):
    sent = c.envelope("workspace.create")
    r = c.send(sent)
    assert r == {
        "jsonrpc": "2.0",
        "id": sent["id"],
        "result": {"workspace": WS, "created": "2023-11-14T22:13:21.000Z"},
    }
    log = c.log()
    assert log == [
        {"seq": 0, "arrived": "2023-11-14T22:13:21.000Z", "envelope": sent, "prev_hash": ZERO}
    ]


def test_create_generates_an_id_and_takes_settings(coord):
    r = coord.dispatch(env("workspace.create", {}))["result"]
    assert r["workspace"].startswith("wsp_") and len(r["workspace"]) == 4 + 26
    c = Client(coord, r["workspace"])
    c.ok(
        "workspace.create",
        workspace="w2",
        profiles=["core/1.0", "modes/1.0"],
        mode="shadow",
        mode_ceiling="trial",
        routing_policy_uri="https://policy.example/p",
        step_up_window_sec=60,
    )
    d = Client(coord, "w2").describe()
    assert d["profiles"] == ["core/1.0", "modes/1.0"]
    assert (d["mode"], d["mode_ceiling"], d["step_up_window_sec"]) == ("shadow", "trial", 60)
    assert d["routing_policy_uri"] == "https://policy.example/p"


def test_create_without_params_key(coord):
    r = coord.dispatch(env("workspace.create"))
    assert r["result"]["workspace"].startswith("wsp_")


@pytest.mark.parametrize(
    "params, why",
    [
        ({"workspace": 5}, "workspace must be a string"),
        ({"workspace": ["w"]}, "workspace must be a string"),
        # deliberate: 0.3.3 accepts these and stores them as given
        ({"workspace": "w2", "profiles": "core/1.0"}, "profiles must be an array"),
        ({"workspace": "w2", "profiles": ["core/1.0", 5]}, "profiles must be an array"),
        ({"workspace": "w2", "profiles": ["core/1.0", "gossip/1.0"]}, "not implemented"),
        ({"workspace": "w2", "mode": 5}, "mode must be a string"),
        ({"workspace": "w2", "mode_ceiling": ["x"]}, "mode_ceiling must be a string"),
        ({"workspace": "w2", "step_up_window_sec": "60"}, "step_up_window_sec"),
    ],
)
def test_create_refusals_are_minus_32602_and_not_recorded(c, params, why):
    c.ok("workspace.create")
    e = c.fail(-32602, "workspace.create", **params)
    assert why in e["message"]
    assert_not_recorded(c, 1)
    assert "w2" not in c.target.workspace_ids()


def test_create_duplicate_is_refused_and_not_recorded(c, T):
    e = c.fail(-32602, "workspace.create")
    assert "already exists" in e["message"]
    assert_not_recorded(c, 4)


def test_create_without_chain():
    plain = make(enable_chain=False)
    c = Client(plain)
    c.ok("workspace.create")
    d = c.describe()
    assert "evidence_head" not in d  # A8: omitted, not null
    assert "prev_hash" not in c.log()[0]
    e = c.fail(-32602, "audit.verify_chain")
    assert "not enabled" in e["message"]
    assert plain.workspace_ids() == [WS]


# =============================================================================
# workspace.describe
# =============================================================================


def test_describe_shape(c, T):
    d = c.describe()
    assert set(d) == {
        "id", "created", "state", "mode", "mode_ceiling", "max_envelope_bytes",
        "step_up_window_sec", "profiles", "members", "audit_count", "task_count",
        "override_count", "evidence_head",
    }
    assert d["id"] == WS and d["state"] == "active"
    assert d["max_envelope_bytes"] == 1_048_576
    assert d["profiles"] == ["core/1.0", "review/1.0"]
    assert d["members"] == [
        {"uri": ALICE, "type": "human", "role": "admin", "joined": "2023-11-14T22:13:22.000Z"},
        {"uri": BOT, "type": "agent", "role": "drafter", "joined": "2023-11-14T22:13:23.000Z"},
    ]
    assert (d["audit_count"], d["task_count"], d["override_count"]) == (4, 1, 0)
    log = c.log()
    head = ZERO
    for e in log:
        head = link(e["envelope"], head)
    assert d["evidence_head"] == head
    # describe is a read: never recorded
    assert c.describe()["audit_count"] == 4


def test_describe_publishes_max_envelope_bytes_option():
    c = Client(make(max_envelope_bytes=4096))
    c.ok("workspace.create")
    assert c.describe()["max_envelope_bytes"] == 4096


@pytest.mark.parametrize("params", [{"workspace": "nope"}, {"workspace": 5}, {"workspace": None}])
def test_describe_unknown_workspace(c, T, params):
    c.fail(-32602, "workspace.describe", **params)


def test_describe_and_read_with_read_membership():
    c = Client(make(require_read_membership=True))
    s0(c)
    c.fail(-32011, "workspace.describe")
    c.fail(-32011, "workspace.describe", frm=GHOST)
    c.fail(-32011, "audit.read", frm=GHOST)
    assert c.ok("workspace.describe", frm=BOT)["audit_count"] == 4
    assert len(c.ok("audit.read", frm=BOT)["entries"]) == 4
    assert c.ok("workspace.describe", frm=BOT)["audit_count"] == 4


# =============================================================================
# workspace.set_profiles
# =============================================================================


def test_set_profiles_appends_core_and_is_recorded(c, T):
    r = c.ok("workspace.set_profiles", frm=ALICE, profiles=["review/1.1", "modes/1.0"])
    assert r == {"profiles": ["review/1.1", "modes/1.0", "core/1.0"]}
    assert c.describe()["profiles"] == ["review/1.1", "modes/1.0", "core/1.0"]
    assert last(c)["envelope"]["method"] == "workspace.set_profiles"
    r = c.ok("workspace.set_profiles", frm=ALICE, profiles=["core/2.0"])
    assert r == {"profiles": ["core/2.0"]}  # any core/ version counts


def test_set_profiles_then_gate_uses_the_new_list(c, T):
    c.ok("workspace.set_profiles", frm=ALICE, profiles=["core/1.0"])
    e = c.fail(-32601, "review.request", frm=ALICE, task_id=T, to=[ALICE], artefact={"a": 1})
    assert e["data"] == {"profile": "review/1.0", "advertised": ["core/1.0"]}


def test_set_profiles_by_non_admin_member_is_recorded(c, T):
    sent = c.envelope("workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    e = refused(c.send(sent), -32011)
    assert "admin" in e["message"]
    assert_refusal_recorded(c, 4, -32011, sent)
    assert c.describe()["profiles"] == ["core/1.0", "review/1.0"]


@pytest.mark.parametrize(
    "params, code",
    [
        ({"from": GHOST, "profiles": ["core/1.0"]}, -32011),
        ({"profiles": ["core/1.0"]}, -32011),
        ({"from": ALICE}, -32602),
        ({"from": ALICE, "profiles": None}, -32602),
        # deliberate: 0.3.3 accepts a non-list (and stores it)
        ({"from": ALICE, "profiles": "review/1.0"}, -32602),
        ({"from": ALICE, "profiles": ["gossip/1.0"]}, -32602),
        ({"workspace": "nope", "from": ALICE, "profiles": ["core/1.0"]}, -32602),
    ],
)
def test_set_profiles_unrecorded_refusals(c, T, params, code):
    c.fail(code, "workspace.set_profiles", **params)
    assert_not_recorded(c, 4)


# =============================================================================
# participant.join / leave
# =============================================================================


def test_join_adds_member_and_is_recorded(c, T):
    sent = c.envelope(
        "participant.join", frm=BOB, type="human", role="reviewer",
        display_name="Bob", capabilities={"kinds": ["k"]}, scopes=["decide"],
    )
    assert c.send(sent)["result"] == {"joined": True, "as": BOB}
    assert last(c)["envelope"] == sent
    bob = c.describe()["members"][-1]
    assert bob == {
        "uri": BOB, "type": "human", "role": "reviewer", "joined": "2023-11-14T22:13:25.000Z",
        "display_name": "Bob", "capabilities": {"kinds": ["k"]}, "scopes": ["decide"],
    }


def test_rejoin_is_additive_and_recorded(c, T):
    c.ok("participant.join", frm=BOT, type="agent", role="admin")
    assert c.describe()["members"][1]["role"] == "drafter"
    assert c.describe()["audit_count"] == 5


def test_join_creates_unknown_workspace_with_default_profiles():
    coord = make(default_profiles=("core/1.0", "modes/1.0"))
    c = Client(coord, "wnew")
    sent = c.envelope("participant.join", frm=ALICE, type="human")
    assert c.send(sent)["result"] == {"joined": True, "as": ALICE}
    d = c.describe()
    assert d["profiles"] == ["core/1.0", "modes/1.0"]
    assert d["audit_count"] == 1 and d["created"] == "2023-11-14T22:13:21.000Z"
    assert c.log()[0] == {
        "seq": 0, "arrived": d["created"], "envelope": sent, "prev_hash": ZERO,
    }


def test_join_with_jwks_shows_keys(c, T):
    c.ok("participant.join", frm=BOB, type="human", jwks={"keys": [jwk("b1")]})
    bob = c.describe()["members"][-1]
    assert bob["jwks"] == {"keys": [jwk("b1")]}
    assert bob["key_history"] == [
        {"jwk": jwk("b1"), "kid": "b1", "valid_from": "2023-11-14T22:13:25.000Z"}
    ]


@pytest.mark.parametrize(
    "params",
    [
        {"type": "human"},
        {"from": BOB},
        {"from": BOB, "type": None},
        {"workspace": 5, "from": BOB, "type": "human"},
        {"workspace": None, "from": BOB, "type": "human"},
        # deliberate: 0.3.3 accepts a non-string from / type and stores the member
        {"from": 5, "type": "human"},
        {"from": BOB, "type": 5},
    ],
)
def test_join_refusals_are_never_recorded(c, T, params):
    c.fail(-32602, "participant.join", **params)
    assert_not_recorded(c, 4)


def test_leave_removes_member_and_is_recorded(c, T):
    sent = c.envelope("participant.leave", frm=BOT, reason="done")
    assert c.send(sent)["result"] == {"left": True}
    assert last(c)["envelope"] == sent
    assert [m["uri"] for m in c.describe()["members"]] == [ALICE]
    # the former member is now refused by the floor, unrecorded
    c.fail(-32011, "participant.leave", frm=BOT)
    assert_not_recorded(c, 5)


@pytest.mark.parametrize(
    "params, code",
    [
        ({"from": GHOST}, -32011),
        ({}, -32011),
        ({"from": ["human:alice"]}, -32011),
        ({"workspace": "nope", "from": ALICE}, -32602),
    ],
)
def test_leave_refusals(c, T, params, code):
    c.fail(code, "participant.leave", **params)
    assert_not_recorded(c, 4)


# =============================================================================
# participant.rotate_key / revoke_key
# =============================================================================


@pytest.fixture
def K(c, T):
    """BOB joined with key k1."""
    c.ok("participant.join", frm=BOB, type="human", jwks={"keys": [jwk("k1")]})
    return "k1"


def test_rotate_key(c, K):
    sent = c.envelope("participant.rotate_key", frm=BOB, old_kid="k1", new_jwk=jwk("k2"))
    r = c.send(sent)["result"]
    assert r == {"rotated": True, "old_kid": "k1", "new_kid": "k2", "valid_from": "2023-11-14T22:13:26.000Z"}
    assert last(c)["envelope"] == sent
    bob = c.describe()["members"][-1]
    assert bob["jwks"] == {"keys": [jwk("k2")]}
    assert bob["key_history"][0]["valid_until"] == r["valid_from"]


@pytest.mark.parametrize(
    "params, code",
    [
        ({"from": BOB, "old_kid": "nope", "new_jwk": {"kid": "k2"}}, -32071),
        ({"from": GHOST, "old_kid": "k1", "new_jwk": {"kid": "k2"}}, -32071),
        ({"old_kid": "k1", "new_jwk": {"kid": "k2"}}, -32071),
        # 0.3.3 order: the key lookups come before the new_jwk check
        ({"from": BOB, "old_kid": "nope", "new_jwk": {}}, -32071),
        ({"from": BOB, "old_kid": "k1", "new_jwk": {}}, -32602),
        ({"from": BOB, "old_kid": "k1", "new_jwk": "k2"}, -32602),
        ({"from": BOB, "new_jwk": {"kid": "k2"}}, -32602),
        ({"from": BOB, "old_kid": "k1"}, -32602),
        ({"workspace": "nope", "from": BOB, "old_kid": "k1", "new_jwk": {"kid": "k2"}}, -32602),
    ],
)
def test_rotate_key_refusals_are_not_recorded(c, K, params, code):
    c.fail(code, "participant.rotate_key", **params)
    assert_not_recorded(c, 5)


def test_rotate_revoked_key(c, K):
    c.ok("participant.revoke_key", frm=BOB, target_uri=BOB, kid="k1")
    # refused before the new_jwk check, as 0.3.3
    c.fail(-32072, "participant.rotate_key", frm=BOB, old_kid="k1", new_jwk={})
    assert_not_recorded(c, 6)


def test_revoke_own_key_default_reason(c, K):
    r = c.ok("participant.revoke_key", frm=BOB, target_uri=BOB, kid="k1")
    assert r == {"revoked": True, "kid": "k1", "revoked_at": "2023-11-14T22:13:26.000Z", "reason": "unspecified"}
    bob = c.describe()["members"][-1]
    assert bob["jwks"] == {"keys": []}
    assert bob["key_history"][0]["revoked_reason"] == "unspecified"


def test_admin_revokes_another_members_key(c, K):
    r = c.ok("participant.revoke_key", frm=ALICE, target_uri=BOB, kid="k1", reason="lost")
    assert r["reason"] == "lost"
    assert last(c)["envelope"]["method"] == "participant.revoke_key"


def test_non_admin_revoking_another_members_key_is_recorded(c, K):
    sent = c.envelope("participant.revoke_key", frm=BOT, target_uri=BOB, kid="k1")
    refused(c.send(sent), -32011)
    assert_refusal_recorded(c, 5, -32011, sent)


@pytest.mark.parametrize(
    "params, code",
    [
        ({"from": GHOST, "target_uri": BOB, "kid": "k1"}, -32011),
        ({"target_uri": BOB, "kid": "k1"}, -32011),
        ({"from": ALICE, "target_uri": GHOST, "kid": "k1"}, -32071),
        ({"from": ALICE, "target_uri": BOB, "kid": "nope"}, -32071),
        ({"from": ALICE, "kid": "k1"}, -32602),
        ({"from": ALICE, "target_uri": BOB}, -32602),
        ({"workspace": "nope", "from": ALICE, "target_uri": BOB, "kid": "k1"}, -32602),
    ],
)
def test_revoke_key_unrecorded_refusals(c, K, params, code):
    c.fail(code, "participant.revoke_key", **params)
    assert_not_recorded(c, 5)


# =============================================================================
# task.create
# =============================================================================


def task_of(coord, task_id: str, ws: str = WS) -> dict:
    return coord.snapshot(ws)["tasks"][task_id]


def test_task_create(c, T):
    t = task_of(c.target, T)
    assert T.startswith("tsk_")
    assert (t["state"], t["assignee"], t["delegator"], t["kind"], t["mode"]) == (
        "created", BOT, ALICE, "k", "trial",
    )
    assert t["created_at"] == c.log()[3]["arrived"] == "2023-11-14T22:13:24.000Z"
    assert t["review_required"] is None  # A12: trial forces review only under modes/1.0
    assert c.describe()["task_count"] == 1


def test_task_create_with_to_and_options(c, T):
    r = c.ok(
        "task.create", frm=ALICE, to=BOT, kind="k2", input={"n": 1}, mode="shadow",
        deadline="2030-01-01T00:00:00Z", routing_hints={"criticality": "low"}, review_required=True,
    )
    t = task_of(c.target, r["task_id"])
    assert (t["assignee"], t["mode"], t["review_required"], t["input"]) == (BOT, "shadow", True, {"n": 1})


def test_trial_forces_review_under_modes():
    c = Client(make())
    s0(c, profiles=["core/1.0", "modes/1.0"])
    t = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required=False)
    assert task_of(c.target, t["task_id"])["review_required"] is True
    t = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, mode="production")
    assert task_of(c.target, t["task_id"])["review_required"] is None


@pytest.mark.parametrize(
    "params, code",
    [
        ({"from": GHOST, "assignee": BOT, "kind": "k", "input": {}}, -32011),
        ({"from": ["human:alice"], "assignee": BOT, "kind": "k", "input": {}}, -32011),
        ({"assignee": BOT, "kind": "k", "input": {}}, -32011),
        ({"from": ALICE, "assignee": "agent:ghost", "kind": "k", "input": {}}, -32602),
        ({"from": ALICE, "kind": "k", "input": {}}, -32602),
        ({"from": ALICE, "assignee": BOT, "input": {}}, -32602),
        ({"from": ALICE, "assignee": BOT, "kind": "k"}, -32602),
        ({"from": ALICE, "assignee": BOT, "kind": "k", "input": None}, -32602),
        ({"from": ALICE, "assignee": BOT, "kind": "k", "input": {}, "review_required": "yes"}, -32602),
        ({"from": ALICE, "assignee": BOT, "kind": "k", "input": {}, "mode": 5}, -32602),
        ({"workspace": "nope", "from": ALICE, "assignee": BOT, "kind": "k", "input": {}}, -32602),
    ],
)
def test_task_create_unrecorded_refusals(c, T, params, code):
    c.fail(code, "task.create", **params)
    assert_not_recorded(c, 4)
    assert c.describe()["task_count"] == 1


def test_task_create_over_the_ceiling_is_recorded():
    c = Client(make())
    c.ok("workspace.create", mode_ceiling="trial")
    c.ok("participant.join", frm=ALICE, type="human")
    c.ok("participant.join", frm=BOT, type="agent")
    sent = c.envelope("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, mode="production")
    e = refused(c.send(sent), -32040)
    assert "ceiling" in e["message"]
    assert_refusal_recorded(c, 3, -32040, sent)
    assert c.describe()["task_count"] == 0


def test_task_create_for_a_paused_assignee(coord, c, T):
    def pause_bot(data):
        data["members"][BOT]["paused"] = True

    edit_workspace(coord, WS, pause_bot)
    sent = c.envelope("task.create", frm=ALICE, assignee=BOT, kind="k", input={})
    refused(c.send(sent), -32063)
    assert_refusal_recorded(c, 4, -32063, sent)


def test_idempotency_key_replay(coord, c, T):
    heard = []
    coord.add_audit_listener(lambda w, e: heard.append(e.seq))
    first = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="K1")
    assert first["state"] == "created"
    assert heard == [4]
    before = (c.describe(), c.log())
    again = c.ok("task.create", frm=ALICE, assignee=BOT, kind="other", input={"x": 1}, idempotency_key="K1")
    assert again == first
    assert (c.describe(), c.log()) == before  # nothing created or recorded
    assert heard == [4]  # listeners not called
    c.ok("task.update", frm=BOT, task_id=first["task_id"], state="in_progress")
    # the replay reports the current state, even to a non-member
    again = c.ok("task.create", frm=GHOST, assignee=BOT, kind="k", input={}, idempotency_key="K1")
    assert again == {"task_id": first["task_id"], "state": "in_progress"}
    assert c.describe()["audit_count"] == 6
    # a different key creates a new task
    other = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="K2")
    assert other["task_id"] != first["task_id"]


def test_idempotency_key_survives_restart(tmp_path):
    path = str(tmp_path / "idem.db")
    c = Client(make(SqliteStore(path)))
    s0(c)
    first = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="K1")
    c.target.close()
    c2 = Client(make(SqliteStore(path)))
    assert c2.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="K1") == first
    assert c2.describe()["audit_count"] == 5
    c2.target.close()


# =============================================================================
# task.update: the 0.3.3 transition table (delta A10)
# =============================================================================

STATES = ["created", "in_progress", "review_requested", "completed", "declined",
          "cancelled", "paused", "superseded", "escalated", "bogus"]
ALLOWED = {
    "created": {"in_progress", "declined"},
    "in_progress": {"in_progress", "completed", "declined"},
    "review_requested": {"in_progress"},
    "paused": {"cancelled"},
    "completed": set(),
    "declined": set(),
    "cancelled": set(),
}


def _task_in(coord, c: Client, state: str) -> str:
    """A task (alice -> bot) in `state`, reached through the methods where
    core has one, else through snapshot/restore."""
    tid = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={})["task_id"]
    if state in ("in_progress", "completed", "declined"):
        c.ok("task.update", frm=BOT, task_id=tid, state="in_progress")
    if state in ("completed", "declined"):
        c.ok("task.update", frm=BOT, task_id=tid, state=state)
    if state == "review_requested":
        rid = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required=True)
        tid = rid["task_id"]
        assert c.ok("task.complete", frm=BOT, task_id=tid, output={"o": 1})["state"] == "review_requested"
    if state in ("paused", "cancelled"):
        def put(data):
            data["tasks"][tid]["state"] = state
        edit_workspace(coord, WS, put)
    return tid


@pytest.mark.parametrize("source", list(ALLOWED))
def test_update_transition_table(source):
    for target in STATES:
        coord = make()
        c = Client(coord)
        s0(c, extra_humans=(BOB,))
        tid = _task_in(coord, c, source)
        before = c.describe()["audit_count"]
        r = c.call("task.update", frm=BOT, task_id=tid, state=target, progress_note="n")
        if target in ALLOWED[source]:
            assert r.get("result") == {"state": target}, (source, target, r)
            t = task_of(coord, tid)
            assert t["state"] == target
            assert t["history"][-1] == {
                "ts": last(c)["arrived"], "from_": BOT, "state": target, "note": "n",
            }
            assert c.describe()["audit_count"] == before + 1
        else:
            refused(r, -32602)
            assert "Illegal transition" in r["error"]["message"]
            assert c.describe()["audit_count"] == before
            assert task_of(coord, tid)["state"] == source


def test_update_to_completed_refused_when_review_required(c, T):
    tid = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required=True)["task_id"]
    c.ok("task.update", frm=BOT, task_id=tid, state="in_progress")
    e = c.fail(-32602, "task.update", frm=BOT, task_id=tid, state="completed")
    assert "task.complete" in e["message"]
    assert_not_recorded(c, 6)


@pytest.mark.parametrize(
    "params, code",
    [
        ({"from": GHOST, "task_id": "$T", "state": "in_progress"}, -32011),
        ({"from": GHOST, "task_id": "nope", "state": "in_progress"}, -32011),
        ({"from": ALICE, "task_id": "nope", "state": "in_progress"}, -32602),
        ({"from": ALICE, "state": "in_progress"}, -32602),
        ({"from": ALICE, "task_id": "$T"}, -32602),
        ({"workspace": "nope", "from": ALICE, "task_id": "$T", "state": "in_progress"}, -32602),
    ],
)
def test_update_unrecorded_refusals(c, T, params, code):
    params = {k: (T if v == "$T" else v) for k, v in params.items()}
    c.fail(code, "task.update", **params)
    assert_not_recorded(c, 4)


# =============================================================================
# task.complete (delta A11)
# =============================================================================


@pytest.mark.parametrize("start", ["created", "in_progress"])
def test_complete(c, T, start):
    if start == "in_progress":
        c.ok("task.update", frm=BOT, task_id=T, state="in_progress")
    n = c.describe()["audit_count"]
    sent = c.envelope("task.complete", frm=BOT, task_id=T, output={"o": [1]}, confidence="0.9")
    assert c.send(sent)["result"] == {"state": "completed"}
    assert last(c)["envelope"] == sent and c.describe()["audit_count"] == n + 1
    t = task_of(c.target, T)
    assert (t["state"], t["output"], t["confidence"]) == ("completed", {"o": [1]}, "0.9")


@pytest.mark.parametrize(
    "params, code",
    [
        ({"from": GHOST, "task_id": "$T"}, -32011),
        ({"from": ALICE, "task_id": "nope"}, -32602),
        ({"from": ALICE}, -32602),
        ({"workspace": "nope", "from": ALICE, "task_id": "$T"}, -32602),
        ({"from": ALICE, "task_id": "$T", "confidence": 0.9}, -32602),  # not canonical
    ],
)
def test_complete_unrecorded_refusals(c, T, params, code):
    params = {k: (T if v == "$T" else v) for k, v in params.items()}
    c.fail(code, "task.complete", **params)
    assert_not_recorded(c, 4)


@pytest.mark.parametrize("state", ["completed", "declined", "review_requested", "paused", "cancelled"])
def test_complete_from_other_states_refused_unrecorded(coord, c, T, state):
    c.ok("participant.join", frm=BOB, type="human")
    tid = _task_in(coord, c, state)
    n = c.describe()["audit_count"]
    e = c.fail(-32602, "task.complete", frm=BOT, task_id=tid)
    assert state in e["message"]
    assert_not_recorded(c, n)


def test_complete_opens_review_when_required(c, T):
    c.ok("participant.join", frm=BOB, type="human")
    c.ok("participant.join", frm=CAROL, type="human")
    tid = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required=True)["task_id"]
    r = c.ok("task.complete", frm=ALICE, task_id=tid, output={"o": 1}, confidence=1)
    assert r == {"state": "review_requested", "review_id": tid}
    t = task_of(c.target, tid)
    assert t["state"] == "review_requested"
    assert t["pending_artefact"] == {"o": 1}
    assert t["confidence"] is None and t["output"] is None
    # every human member except the caller and the assignee, in join order
    assert t["review"]["requested_to"] == [BOB, CAROL]
    assert t["review"]["rule"] == "any_one_approves"
    assert t["history"][-1]["state"] == "review_requested"


def test_complete_reuses_an_existing_review(c, T):
    c.ok("participant.join", frm=BOB, type="human")
    tid = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required=True)["task_id"]
    c.ok("task.complete", frm=BOT, task_id=tid, output={"v": 1})
    assert task_of(c.target, tid)["review"]["requested_to"] == [ALICE, BOB]
    c.ok("task.update", frm=BOT, task_id=tid, state="in_progress")
    c.ok("participant.join", frm=CAROL, type="human")
    r = c.ok("task.complete", frm=BOT, task_id=tid, output={"v": 2})
    assert r == {"state": "review_requested", "review_id": tid}
    t = task_of(c.target, tid)
    assert t["review"]["requested_to"] == [ALICE, BOB]  # kept, carol not added
    assert t["pending_artefact"] == {"v": 2}


def test_complete_without_an_eligible_reviewer_is_recorded(c, T):
    tid = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required=True)["task_id"]
    sent = c.envelope("task.complete", frm=ALICE, task_id=tid)
    e = refused(c.send(sent), -32011)
    assert "review" in e["message"]
    assert_refusal_recorded(c, 5, -32011, sent)
    assert task_of(c.target, tid)["state"] == "created"


# =============================================================================
# audit.read
# =============================================================================


@pytest.fixture
def mixed(c, T):
    """A log with accepted calls and recorded refusals:
    0 create, 1-2 joins, 3 T, 4 update (bot), 5 refused set_profiles (bot),
    6 complete (bot), 7 refused set_profiles (bot)."""
    c.ok("task.update", frm=BOT, task_id=T, state="in_progress")
    c.fail(-32011, "workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    c.ok("task.complete", frm=BOT, task_id=T, output={})
    c.fail(-32011, "workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    assert c.describe()["audit_count"] == 8
    return T


def seqs(entries):
    return [e["seq"] for e in entries]


def test_read_everything(c, mixed):
    r = c.ok("audit.read")
    assert seqs(r["entries"]) == list(range(8)) and r["next_seq"] == 8
    for e in r["entries"]:
        if e["seq"] in (5, 7):
            assert set(e) == {"seq", "arrived", "request", "outcome", "prev_hash"}
        else:
            assert set(e) == {"seq", "arrived", "envelope", "prev_hash"}


@pytest.mark.parametrize(
    "rng, expect, next_seq",
    [
        ({"from_seq": 2, "to_seq": 5}, [2, 3, 4], 5),
        ({"from_seq": 2, "to_seq": 999}, [2, 3, 4, 5, 6, 7], 8),
        ({"from_seq": 6}, [6, 7], 8),
        ({"to_seq": 2}, [0, 1], 2),
        ({"from_seq": -5, "to_seq": 2}, [0, 1], 2),
        ({"from_seq": 5, "to_seq": 3}, [], 3),
        ({"from_seq": 8}, [], 8),
        ({}, list(range(8)), 8),
    ],
)
def test_read_range(c, mixed, rng, expect, next_seq):
    r = c.ok("audit.read", range=rng)
    assert seqs(r["entries"]) == expect and r["next_seq"] == next_seq


@pytest.mark.parametrize(
    "flt, expect",
    [
        ({"method": "workspace.set_profiles"}, [5, 7]),
        ({"method": "task.update"}, [4]),
        ({"from": BOT}, [2, 4, 5, 6, 7]),
        ({"from": ALICE}, [1, 3]),
        ({"task_id": "$T"}, [4, 6]),
        ({"outcome": "accepted"}, [0, 1, 2, 3, 4, 6]),
        ({"outcome": "refused"}, [5, 7]),
        ({"outcome": "refused", "from": BOT}, [5, 7]),
        ({"method": "task.complete", "from": BOT, "task_id": "$T", "outcome": "accepted"}, [6]),
        ({"method": "nope"}, []),
        ({"outcome": None}, list(range(8))),
        ({"unknown_key": 1}, list(range(8))),
    ],
)
def test_read_filters(c, mixed, flt, expect):
    flt = {k: (mixed if v == "$T" else v) for k, v in flt.items()}
    r = c.ok("audit.read", filter=flt)
    assert seqs(r["entries"]) == expect and r["next_seq"] == 8


def test_read_filter_with_range(c, mixed):
    r = c.ok("audit.read", range={"from_seq": 5, "to_seq": 7}, filter={"from": BOT})
    assert seqs(r["entries"]) == [5, 6] and r["next_seq"] == 7


@pytest.mark.parametrize(
    "params",
    [
        {"filter": {"outcome": "bogus"}},
        {"filter": {"outcome": 1}},
        {"workspace": "nope"},
        {"workspace": None},
        # deliberate: 0.3.3 answers these with -32603 (an internal error)
        {"range": "0-3"},
        {"range": {"from_seq": "a"}},
        {"range": {"to_seq": [1]}},
    ],
)
def test_read_refusals(c, mixed, params):
    c.fail(-32602, "audit.read", **params)
    assert_not_recorded(c, 8)


def test_read_is_never_recorded(c, mixed):
    for _ in range(3):
        c.ok("audit.read", filter={"outcome": "refused"})
    assert c.describe()["audit_count"] == 8


# =============================================================================
# audit.verify_chain
# =============================================================================


def test_verify_chain_verified(c, mixed):
    head = c.describe()["evidence_head"]
    r = c.ok("audit.verify_chain")
    assert r == {
        "status": "verified", "ok": True, "entries_total": 8, "entries_checked": 8,
        "entries_unchecked": 0, "checked_from_seq": 0, "chain_head": head,
    }
    assert c.describe()["audit_count"] == 8  # a read


@pytest.mark.parametrize("params", [{"from_seq": 0}, {"to_seq": 3}, {"workspace": "nope"}])
def test_verify_chain_refusals(c, mixed, params):
    c.fail(-32602, "audit.verify_chain", **params)


def test_verify_chain_not_evaluated_for_an_unchained_prefix():
    """A workspace whose chain started at seq 3 (as after a set_profiles that
    adds audit-scitt): built by hand with rfc8785, loaded through restore()."""
    plain = make(enable_chain=False)
    c = Client(plain)
    T = s0(c)
    c.ok("task.update", frm=BOT, task_id=T, state="in_progress")
    c.fail(-32011, "workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    data = plain.snapshot(WS)
    head = ZERO
    for entry in data["audit"][3:]:
        entry["prev_hash"] = head
        record = entry["envelope"] if "envelope" in entry else {
            "outcome": entry["outcome"], "request": entry["request"],
        }
        head = link(record, head)
    data.update(chain_enabled=True, chain_head=head)
    other = make()
    other.restore(data)
    r = Client(other).ok("audit.verify_chain")
    assert r == {
        "status": "not_evaluated", "ok": False, "reason": "unchained_prefix",
        "entries_total": 6, "entries_checked": 3, "entries_unchecked": 3,
        "checked_from_seq": 3, "chain_head": head,
    }


def _tampered(tmp_path, edit_sql: str) -> Client:
    path = str(tmp_path / "chain.db")
    coord = make(SqliteStore(path))
    c = Client(coord)
    T = s0(c)
    c.ok("task.update", frm=BOT, task_id=T, state="in_progress")
    assert c.ok("audit.verify_chain")["status"] == "verified"
    coord.close()
    db = sqlite3.connect(path)
    with db:
        n = db.execute(edit_sql).rowcount
    db.close()
    assert n == 1
    return Client(make(SqliteStore(path)))


def test_verify_chain_broken_by_an_edited_middle_entry(tmp_path):
    c = _tampered(
        tmp_path,
        "UPDATE chap_entries SET data = replace(data, '\"role\":\"drafter\"', '\"role\":\"admin\"') "
        "WHERE seq = 2",
    )
    e = c.fail(-32602, "audit.verify_chain")
    assert "seq 3: prev_hash mismatch" in e["message"]


def test_verify_chain_broken_by_an_edited_last_entry(tmp_path):
    c = _tampered(
        tmp_path,
        "UPDATE chap_entries SET data = replace(data, '\"in_progress\"', '\"declined\"') WHERE seq = 4",
    )
    e = c.fail(-32602, "audit.verify_chain")
    assert "chain_head mismatch" in e["message"]


def test_verify_chain_broken_by_a_malformed_entry(tmp_path):
    # a refusal entry whose outcome was removed: "malformed", never downgraded
    c = _tampered(
        tmp_path,
        "UPDATE chap_entries SET data = json_remove(data, '$.envelope.jsonrpc') WHERE seq = 1",
    )
    e = c.fail(-32602, "audit.verify_chain")
    assert "seq 1: malformed entry" in e["message"]


# =============================================================================
# Dispatch order and codes (delta A5)
# =============================================================================


def nest(n: int):
    v = 0
    for _ in range(n):
        v = [v]
    return v


@pytest.mark.parametrize(
    "raw", ['{"jsonrpc":"2.0",', b"\xff\xfe", "", b"{'a': 1}", "nul"], ids=["truncated", "bytes", "empty", "quotes", "nul"]
)
def test_parse_error(coord, raw):
    r = coord.dispatch(raw)
    assert r == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": r["error"]["message"]}}
    assert r["error"]["message"].startswith("Parse error")


def test_text_and_bytes_envelopes_are_dispatched(coord):
    r = coord.dispatch('{"jsonrpc":"2.0","id":7,"method":"workspace.create","params":{"workspace":"w"}}')
    assert r["result"]["workspace"] == "w"
    r = coord.dispatch(b'{"jsonrpc":"2.0","id":8,"method":"workspace.describe","params":{"workspace":"w"}}')
    assert r["id"] == 8 and r["result"]["audit_count"] == 1


@pytest.mark.parametrize(
    "envelope, req_id",
    [
        ("[]", None),
        ("5", None),
        ("null", None),
        ([1, 2], None),
        ({"id": 1, "method": "workspace.describe", "params": {"workspace": WS}}, 1),
        ({"jsonrpc": "1.0", "id": 1, "method": "workspace.describe", "params": {"workspace": WS}}, 1),
        ({"jsonrpc": 2.0, "id": 1, "method": "workspace.describe", "params": {"workspace": WS}}, 1),
        ({"jsonrpc": "2.0", "id": 2, "params": {"workspace": WS}}, 2),
        ({"jsonrpc": "2.0", "id": 3, "method": "", "params": {"workspace": WS}}, 3),
        ({"jsonrpc": "2.0", "id": 4, "method": 5, "params": {"workspace": WS}}, 4),
        ({"jsonrpc": "2.0", "id": 5, "method": None, "params": [1]}, 5),
    ],
)
def test_invalid_request(c, T, envelope, req_id):
    r = c.send(envelope)
    assert r["id"] == req_id
    refused(r, -32600)
    assert set(r["error"]) == {"code", "message"}
    # each fault has its own words after the common start (tests/test_hostile.py checks them)
    assert r["error"]["message"].startswith("Invalid JSON-RPC 2.0 request: ")
    assert_not_recorded(c, 4)


def _task_env(c: Client, T: str, **extra):
    return c.envelope("task.update", frm=BOT, task_id=T, state="in_progress", **extra)


def test_nesting_boundary_is_64_levels(c, T):
    # envelope (1) > params (2) > x (3) > 61 lists (level 64 at the innermost 0)
    ok = _task_env(c, T, x=nest(61))
    assert c.send(ok)["result"] == {"state": "in_progress"}
    deep = _task_env(c, T, x=nest(62))
    e = refused(c.send(deep), -32600)
    assert "64" in e["message"]
    assert_not_recorded(c, 5)


def test_nesting_is_checked_before_params_and_method(c, T):
    deep = {"jsonrpc": "2.0", "id": 1, "method": "nope.nope", "params": [nest(70), 0.5]}
    refused(c.send(deep), -32600)


def test_size_limit_boundary():
    coord = make(max_envelope_bytes=300)
    c = Client(coord)
    s0(c)
    probe = c.envelope("participant.join", frm=BOB, type="human", pad="")
    size = len(rfc8785.dumps(probe))
    pad = "x" * (300 - size)
    at_limit = dict(probe, params={**probe["params"], "pad": pad})
    assert len(rfc8785.dumps(at_limit)) == 300
    assert c.send(at_limit)["result"] == {"joined": True, "as": BOB}
    over = dict(at_limit, params={**at_limit["params"], "pad": pad + "x"})
    size = len(rfc8785.dumps(over))
    assert size == 301
    e = refused(c.send(over), -32600)
    assert "301" in e["message"] and "300" in e["message"]
    assert_not_recorded(c, 5)


def test_size_is_checked_before_params_and_method():
    c = Client(make(max_envelope_bytes=100))
    c.ok("workspace.create")
    big = {"jsonrpc": "2.0", "id": 1, "method": "nope.nope", "params": ["x" * 200]}
    refused(c.send(big), -32600)


def test_non_canonical_envelope_counts_as_size_zero():
    c = Client(make(max_envelope_bytes=100))
    c.ok("workspace.create")
    e = c.fail(-32602, "participant.join", frm=BOB, type="human", pad="x" * 200, n=0.5)
    assert "integers" in e["message"]


@pytest.mark.parametrize(
    "params",
    [[1], "x", 5, True, []],
    ids=["list", "str", "int", "bool", "empty-list"],
)
def test_non_object_params(c, T, params):
    r = c.send({"jsonrpc": "2.0", "id": 9, "method": "workspace.describe", "params": params})
    assert r["error"] == {"code": -32602, "message": "Invalid params: expected an object"}


def test_null_params_are_no_params_as_in_the_reference():
    from chap_coordinator import Coordinator as Reference

    ref = Reference(deterministic_ids=True, deterministic_clock=True)
    env = {"jsonrpc": "2.0", "id": 9, "method": "workspace.create", "params": None}
    ours = make().dispatch(env)
    theirs = ref.dispatch(env)
    assert "result" in ours and "result" in theirs
    env = {"jsonrpc": "2.0", "id": 9, "method": "workspace.describe", "params": None}
    assert make().dispatch(env)["error"] == {"code": -32602, "message": "Missing field: workspace"}


def test_params_checked_before_unknown_method(c, T):
    r = c.send({"jsonrpc": "2.0", "id": 9, "method": "nope.nope", "params": [1]})
    refused(r, -32602)


def test_unknown_method_comes_before_the_canonical_check(c, T):
    e = c.fail(-32601, "does.not_exist", frm=ALICE, n=0.5)
    assert e["message"].startswith("Unknown method: does.not_exist; ")
    assert_not_recorded(c, 4)


@pytest.mark.parametrize(
    "bad",
    [0.5, 1e-7, 2**53, "\ud800", {"k\udc00": 1}],
    ids=["half", "tiny", "2^53", "surrogate", "surrogate-key"],
)
def test_non_canonical_values(c, T, bad):
    c.fail(-32602, "task.update", frm=BOT, task_id=T, state="in_progress", note=bad)
    assert_not_recorded(c, 4)


def test_non_canonical_id_is_refused(c, T):
    r = c.send({"jsonrpc": "2.0", "id": 1.5, "method": "workspace.describe", "params": {"workspace": WS}})
    refused(r, -32602)
    assert r["id"] == 1.5


def test_canonical_check_comes_before_the_gate_and_membership(c, T):
    c.fail(-32602, "whisper.ask", frm=GHOST, n=0.5)
    c.fail(-32602, "participant.leave", frm=GHOST, n=0.5)


def test_integral_float_is_accepted_and_recorded_as_integer(c, T):
    sent = c.envelope("task.update", frm=BOT, task_id=T, state="in_progress", n=2.0)
    assert c.send(sent)["result"] == {"state": "in_progress"}
    recorded = last(c)["envelope"]
    assert recorded == sent and type(recorded["params"]["n"]) is int


def test_profile_gate(c, T):
    e = c.fail(-32601, "whisper.ask", frm=ALICE, to=[BOT], task_id=T, question="q")
    assert e == {
        "code": -32601,
        "message": "Unknown method: whisper.ask",
        "data": {"profile": "whisper/1.0", "advertised": ["core/1.0", "review/1.0"]},
    }
    assert_not_recorded(c, 4)
    # the gate comes before the membership floor
    e = c.fail(-32601, "control.pause", frm=GHOST, scope="workspace")
    assert e["data"]["profile"] == "control/1.0"
    e = c.fail(-32601, "audit.submit_to_scitt", frm=ALICE)
    assert e["data"]["profile"] == "audit-scitt/1.0"
    assert_not_recorded(c, 4)


def test_gated_privileged_method_from_a_member_is_recorded(c, T):
    sent = c.envelope("control.pause", frm=ALICE, scope="task", task_id=T)
    refused(c.send(sent), -32601)
    assert_refusal_recorded(c, 4, -32601, sent)


def test_gate_is_skipped_for_an_unknown_workspace(c, T):
    # no workspace, no gate: the method is known, so the handler's answer wins
    c.fail(-32602, "workspace.describe", workspace="nope")


def test_gate_and_reads_never_gated(c, T):
    # audit.verify_chain belongs to audit-scitt but is never gated
    assert c.ok("audit.verify_chain")["status"] == "verified"


def test_membership_floor(c, T):
    c.fail(-32011, "participant.leave", frm=GHOST)
    assert_not_recorded(c, 4)


def test_paused_workspace(coord, c, T):
    def pause(data):
        data["state"] = "paused"

    edit_workspace(coord, WS, pause)
    assert c.describe()["state"] == "paused"
    sent = c.envelope("task.create", frm=ALICE, assignee=BOT, kind="k", input={})
    e = refused(c.send(sent), -32063)
    assert WS in e["message"]
    assert_refusal_recorded(c, 4, -32063, sent)
    # a non-member's paused refusal is not recorded
    c.fail(-32063, "task.update", frm=GHOST, task_id=T, state="in_progress")
    c.fail(-32063, "workspace.set_profiles", frm=ALICE, profiles=["core/1.0"])
    assert c.describe()["audit_count"] == 6
    # earlier steps still win over the paused gate
    c.fail(-32601, "does.not_exist", frm=ALICE)
    c.fail(-32602, "task.create", frm=ALICE, assignee=BOT, kind="k", input={"x": 0.5})
    # reads that are exempt, and join/leave
    assert c.ok("audit.read", range={"from_seq": 6})["entries"] == []
    c.ok("participant.join", frm=BOB, type="human")
    c.ok("participant.leave", frm=BOB)
    # audit.verify_chain is not exempt (0.3.3), and is not recorded
    c.fail(-32063, "audit.verify_chain")
    assert c.describe()["audit_count"] == 8


class _BrokenReads(MemoryStore):
    """A store whose log reads fail with an unexpected error."""

    broken = False

    def read_entries(self, *args, **kwargs):
        if self.broken:
            raise RuntimeError("read failed at /srv/secret/path")
        return super().read_entries(*args, **kwargs)

    def read_entry_texts(self, *args, **kwargs):
        if self.broken:
            raise RuntimeError("read failed at /srv/secret/path")
        return super().read_entry_texts(*args, **kwargs)


def test_internal_error_has_no_traceback(caplog):
    store = _BrokenReads()
    coord = make(store)
    c = Client(coord)
    s0(c)
    store.broken = True
    with caplog.at_level(logging.ERROR):
        sent = c.envelope("audit.read")
        r = c.send(sent)
    assert r["id"] == sent["id"]
    e = refused(r, -32603)
    assert e["message"].startswith("Internal error")
    text = repr(e)
    assert "Traceback" not in text and 'File "' not in text and ".py" not in text
    assert "/srv/secret" not in text and "read failed" not in text  # the store's words stay in the log
    log_id = e["data"]["log_id"]
    assert e["data"] == {"log_id": log_id} and log_id in e["message"]
    assert log_id in caplog.text and "/srv/secret/path" in caplog.text  # logged for the operator
    store.broken = False
    assert c.describe()["audit_count"] == 4


# =============================================================================
# Which refusals are recorded (delta A1)
# =============================================================================


def test_refusal_entry_links_into_the_chain(c, T):
    sent = c.envelope("workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    c.send(sent)
    log = c.log()
    refusal = log[4]
    assert refusal["prev_hash"] == link(log[3]["envelope"], log[3]["prev_hash"])
    record = {"outcome": {"status": "refused", "code": -32011}, "request": sent}
    assert c.describe()["evidence_head"] == link(record, refusal["prev_hash"])
    assert c.ok("audit.verify_chain")["entries_checked"] == 5


def test_refusal_without_chain_has_no_prev_hash():
    c = Client(make(enable_chain=False))
    s0(c)
    c.fail(-32011, "workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    entry = last(c)
    assert set(entry) == {"seq", "arrived", "request", "outcome"}


def test_recorded_request_is_exactly_as_sent(c, T):
    sent = {
        "jsonrpc": "2.0", "id": {"n": 1}, "method": "workspace.set_profiles",
        "params": {"workspace": WS, "from": BOT, "profiles": ["core/1.0"], "extra": [None, True]},
        "sig": "ed25519:k:AAAA", "meta": {"ü": "\U0001f600"},
    }
    refused(c.send(sent), -32011)
    assert last(c)["request"] == sent


@pytest.mark.parametrize(
    "method, params, code",
    [
        ("task.update", {"from": GHOST, "task_id": "$T", "state": "in_progress"}, -32011),  # non-member
        ("task.update", {"from": ALICE, "task_id": "$T", "state": "paused"}, -32602),  # -32602 never
        ("does.not_exist", {"from": ALICE}, -32601),  # unknown method
        ("whisper.ask", {"from": ALICE}, -32601),  # gated, not privileged
        ("participant.join", {"from": ALICE}, -32602),  # join never
        ("workspace.create", {}, -32602),  # create never
        ("participant.rotate_key", {"from": ALICE, "old_kid": "x", "new_jwk": {"kid": "y"}}, -32071),
        ("audit.read", {"filter": {"outcome": "x"}}, -32602),  # reads never
        ("workspace.set_profiles", {"workspace": "nope", "from": ALICE, "profiles": []}, -32602),
    ],
)
def test_unrecorded_refusals(c, T, method, params, code):
    params = {k: (T if v == "$T" else v) for k, v in params.items()}
    c.fail(code, method, **params)
    assert_not_recorded(c, 4)


def test_unrecorded_when_from_is_not_a_string(c, T):
    # 0.3.3: a non-string from is never "a current member"
    c.fail(-32011, "workspace.set_profiles", frm=[BOT], profiles=["core/1.0"])
    assert_not_recorded(c, 4)


def test_signed_refusal_is_answered_from_the_log(c, T):
    """B1: a resent signed refused request gets the stored code and is not
    evaluated or recorded again."""
    sent = c.envelope("workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    sent["sig"] = "ed25519:k:AAAA"
    refused(c.send(sent), -32011)
    assert c.describe()["audit_count"] == 5
    c.ok("participant.join", frm=BOT, type="agent")  # (role unchanged: still refused)
    again = dict(sent, sig="ed25519:k:BBBB")
    e = refused(c.send(again), -32011)
    assert e["data"] == {"refused_at_seq": 4}
    assert c.describe()["audit_count"] == 6


# =============================================================================
# Listeners (A27; issue 3 item 8)
# =============================================================================


def test_listeners_called_after_durability_in_order():
    store = MemoryStore()
    calls = []

    def durable(tag):
        def listener(workspace_id, entry):
            assert isinstance(entry, AuditEntry)
            # the entry is already in the store when the listener runs
            held = store.read_entries(workspace_id, entry.seq, entry.seq + 1)
            assert held == [entry.to_dict()]
            calls.append((tag, workspace_id, entry.seq))
        return listener

    coord = make(store, on_audit=durable("on_audit"))
    coord.add_audit_listener(durable("added1"))
    coord.add_audit_listener(durable("added2"))
    c = Client(coord)
    T = s0(c)
    expected = []
    for seq in range(4):
        expected += [("on_audit", WS, seq), ("added1", WS, seq), ("added2", WS, seq)]
    assert calls == expected
    # a recorded refusal is heard, with request and outcome set
    entries = []
    coord.add_audit_listener(lambda w, e: entries.append(e))
    c.fail(-32011, "workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    assert len(entries) == 1
    e = entries[0]
    assert e.envelope is None and e.outcome == {"status": "refused", "code": -32011}
    assert e.request["method"] == "workspace.set_profiles" and e.seq == 4
    assert e.to_dict() == last(c)
    # never for reads, unrecorded refusals, replays
    n = len(calls)
    c.describe()
    c.log()
    c.ok("audit.verify_chain")
    c.fail(-32011, "task.update", frm=GHOST, task_id=T, state="in_progress")
    c.fail(-32602, "task.update", frm=ALICE, task_id=T, state="paused")
    c.fail(-32601, "does.not_exist")
    c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="I")
    n += 3
    c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="I")
    assert len(calls) == n


def test_listener_not_called_when_the_write_fails():
    store = FailingStore()
    heard = []
    coord = make(store, on_audit=lambda w, e: heard.append(e.seq))
    c = Client(coord)
    s0(c)
    assert heard == [0, 1, 2, 3]
    store.failing = True
    c.fail(-32900, "participant.join", frm=BOB, type="human")
    assert heard == [0, 1, 2, 3]


def test_raising_listener_is_logged_and_breaks_nothing(caplog):
    heard = []

    def bad(workspace_id, entry):
        raise ValueError("listener bug")

    coord = make(on_audit=bad)
    coord.add_audit_listener(lambda w, e: heard.append(e.seq))
    coord.add_audit_listener(bad)
    coord.add_audit_listener(lambda w, e: heard.append(-e.seq))
    c = Client(coord)
    with caplog.at_level(logging.ERROR):
        r = c.call("workspace.create")
    assert r["result"]["workspace"] == WS
    assert heard == [0, 0]
    assert "listener bug" in caplog.text
    assert c.describe()["audit_count"] == 1
    assert c.ok("audit.verify_chain")["status"] == "verified"
