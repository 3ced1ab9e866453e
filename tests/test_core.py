"""core/1.0 as 0.3.3 answers it: every method's success path and errors
(SPECIFICATION.md, "Core methods"), the dispatch order and codes and which
refusals are recorded and how ("Dispatch"), and the audit listeners
("Listeners").

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
    recorded_refusal,
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
    """A deterministic coordinator (support.make)."""
    return make()


@pytest.fixture
def client(coord):
    """A client on `coord`'s test workspace, not created yet."""
    return Client(coord)


@pytest.fixture
def task(client):
    """The usual start (support.s0) made through `client`: task T's id."""
    return s0(client)


def last(client: Client) -> dict:
    return client.log()[-1]


def assert_not_recorded(client: Client, before: int) -> None:
    assert client.describe()["audit_count"] == before


def assert_refusal_recorded(client: Client, before: int, code: int, sent: dict) -> dict:
    """One refusal entry in the exact 0.3.3 wire shape, for the envelope sent."""
    assert client.describe()["audit_count"] == before + 1
    entry = recorded_refusal(client, before, code)
    assert set(entry) == {"seq", "arrived", "request", "outcome", "prev_hash"}
    assert entry["request"] == sent
    return entry


def link(record, prev: str) -> str:
    """The chain link computed independently, with rfc8785 as the canonicaliser."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(record) + prev.encode()).hexdigest()


# =============================================================================
# workspace.create
# =============================================================================


def test_create_with_id_is_recorded_as_seq_0(client):
    sent = client.envelope("workspace.create")
    r = client.send(sent)
    assert r == {
        "jsonrpc": "2.0",
        "id": sent["id"],
        "result": {"workspace": WS, "created": "2023-11-14T22:13:21.000Z"},
    }
    log = client.log()
    assert log == [
        {"seq": 0, "arrived": "2023-11-14T22:13:21.000Z", "envelope": sent, "prev_hash": ZERO}
    ]


def test_create_generates_an_id_and_takes_settings(coord):
    r = coord.dispatch(env("workspace.create", {}))["result"]
    assert r["workspace"].startswith("wsp_") and len(r["workspace"]) == 4 + 26
    client = Client(coord, r["workspace"])
    client.ok(
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
def test_create_refusals_are_minus_32602_and_not_recorded(client, params, why):
    client.ok("workspace.create")
    e = client.fail(-32602, "workspace.create", **params)
    assert why in e["message"]
    assert_not_recorded(client, 1)
    assert "w2" not in client.target.workspace_ids()


def test_create_duplicate_is_refused_and_not_recorded(client, task):
    e = client.fail(-32602, "workspace.create")
    assert "already exists" in e["message"]
    assert_not_recorded(client, 4)


def test_create_without_chain():
    plain = make(enable_chain=False)
    client = Client(plain)
    client.ok("workspace.create")
    d = client.describe()
    assert "evidence_head" not in d  # omitted, not null, until chained
    assert "prev_hash" not in client.log()[0]
    e = client.fail(-32602, "audit.verify_chain")
    assert "not enabled" in e["message"]
    assert plain.workspace_ids() == [WS]


# =============================================================================
# workspace.describe
# =============================================================================


def test_describe_shape(client, task):
    d = client.describe()
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
    log = client.log()
    head = ZERO
    for e in log:
        head = link(e["envelope"], head)
    assert d["evidence_head"] == head
    # describe is a read: never recorded
    assert client.describe()["audit_count"] == 4


def test_describe_publishes_max_envelope_bytes_option():
    client = Client(make(max_envelope_bytes=4096))
    client.ok("workspace.create")
    assert client.describe()["max_envelope_bytes"] == 4096


@pytest.mark.parametrize("params", [{"workspace": "nope"}, {"workspace": 5}, {"workspace": None}])
def test_describe_unknown_workspace(client, task, params):
    client.fail(-32602, "workspace.describe", **params)


def test_describe_and_read_with_read_membership():
    client = Client(make(require_read_membership=True))
    s0(client)
    client.fail(-32011, "workspace.describe")
    client.fail(-32011, "workspace.describe", frm=GHOST)
    client.fail(-32011, "audit.read", frm=GHOST)
    assert client.ok("workspace.describe", frm=BOT)["audit_count"] == 4
    assert len(client.ok("audit.read", frm=BOT)["entries"]) == 4
    assert client.ok("workspace.describe", frm=BOT)["audit_count"] == 4


# =============================================================================
# workspace.set_profiles
# =============================================================================


def test_set_profiles_appends_core_and_is_recorded(client, task):
    r = client.ok("workspace.set_profiles", frm=ALICE, profiles=["review/1.1", "modes/1.0"])
    assert r == {"profiles": ["review/1.1", "modes/1.0", "core/1.0"]}
    assert client.describe()["profiles"] == ["review/1.1", "modes/1.0", "core/1.0"]
    assert last(client)["envelope"]["method"] == "workspace.set_profiles"
    r = client.ok("workspace.set_profiles", frm=ALICE, profiles=["core/2.0"])
    assert r == {"profiles": ["core/2.0"]}  # any core/ version counts


def test_set_profiles_then_gate_uses_the_new_list(client, task):
    client.ok("workspace.set_profiles", frm=ALICE, profiles=["core/1.0"])
    e = client.fail(-32601, "review.request", frm=ALICE, task_id=task, to=[ALICE], artefact={"a": 1})
    assert e["data"] == {"profile": "review/1.0", "advertised": ["core/1.0"]}


def test_set_profiles_by_non_admin_member_is_recorded(client, task):
    sent = client.envelope("workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    e = refused(client.send(sent), -32011)
    assert "admin" in e["message"]
    assert_refusal_recorded(client, 4, -32011, sent)
    assert client.describe()["profiles"] == ["core/1.0", "review/1.0"]


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
def test_set_profiles_unrecorded_refusals(client, task, params, code):
    client.fail(code, "workspace.set_profiles", **params)
    assert_not_recorded(client, 4)


# =============================================================================
# participant.join / leave
# =============================================================================


def test_join_adds_member_and_is_recorded(client, task):
    sent = client.envelope(
        "participant.join", frm=BOB, type="human", role="reviewer",
        display_name="Bob", capabilities={"kinds": ["k"]}, scopes=["decide"],
    )
    assert client.send(sent)["result"] == {"joined": True, "as": BOB}
    assert last(client)["envelope"] == sent
    bob = client.describe()["members"][-1]
    assert bob == {
        "uri": BOB, "type": "human", "role": "reviewer", "joined": "2023-11-14T22:13:25.000Z",
        "display_name": "Bob", "capabilities": {"kinds": ["k"]}, "scopes": ["decide"],
    }


def test_rejoin_is_additive_and_recorded(client, task):
    client.ok("participant.join", frm=BOT, type="agent", role="admin")
    assert client.describe()["members"][1]["role"] == "drafter"
    assert client.describe()["audit_count"] == 5


def test_join_creates_unknown_workspace_with_default_profiles():
    coord = make(default_profiles=("core/1.0", "modes/1.0"))
    client = Client(coord, "wnew")
    sent = client.envelope("participant.join", frm=ALICE, type="human")
    assert client.send(sent)["result"] == {"joined": True, "as": ALICE}
    d = client.describe()
    assert d["profiles"] == ["core/1.0", "modes/1.0"]
    assert d["audit_count"] == 1 and d["created"] == "2023-11-14T22:13:21.000Z"
    assert client.log()[0] == {
        "seq": 0, "arrived": d["created"], "envelope": sent, "prev_hash": ZERO,
    }


def test_join_with_jwks_shows_keys(client, task):
    client.ok("participant.join", frm=BOB, type="human", jwks={"keys": [jwk("b1")]})
    bob = client.describe()["members"][-1]
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
def test_join_refusals_are_never_recorded(client, task, params):
    client.fail(-32602, "participant.join", **params)
    assert_not_recorded(client, 4)


def test_leave_removes_member_and_is_recorded(client, task):
    sent = client.envelope("participant.leave", frm=BOT, reason="done")
    assert client.send(sent)["result"] == {"left": True}
    assert last(client)["envelope"] == sent
    assert [m["uri"] for m in client.describe()["members"]] == [ALICE]
    # the former member is now refused by the floor, unrecorded
    client.fail(-32011, "participant.leave", frm=BOT)
    assert_not_recorded(client, 5)


@pytest.mark.parametrize(
    "params, code",
    [
        ({"from": GHOST}, -32011),
        ({}, -32011),
        ({"from": ["human:alice"]}, -32011),
        ({"workspace": "nope", "from": ALICE}, -32602),
    ],
)
def test_leave_refusals(client, task, params, code):
    client.fail(code, "participant.leave", **params)
    assert_not_recorded(client, 4)


# =============================================================================
# participant.rotate_key / revoke_key
# =============================================================================


@pytest.fixture
def bob_key(client, task):
    """BOB joined with key k1: its kid."""
    client.ok("participant.join", frm=BOB, type="human", jwks={"keys": [jwk("k1")]})
    return "k1"


def test_rotate_key(client, bob_key):
    sent = client.envelope("participant.rotate_key", frm=BOB, old_kid="k1", new_jwk=jwk("k2"))
    r = client.send(sent)["result"]
    assert r == {"rotated": True, "old_kid": "k1", "new_kid": "k2", "valid_from": "2023-11-14T22:13:26.000Z"}
    assert last(client)["envelope"] == sent
    bob = client.describe()["members"][-1]
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
def test_rotate_key_refusals_are_not_recorded(client, bob_key, params, code):
    client.fail(code, "participant.rotate_key", **params)
    assert_not_recorded(client, 5)


def test_rotate_revoked_key(client, bob_key):
    client.ok("participant.revoke_key", frm=BOB, target_uri=BOB, kid="k1")
    # refused before the new_jwk check, as 0.3.3
    client.fail(-32072, "participant.rotate_key", frm=BOB, old_kid="k1", new_jwk={})
    assert_not_recorded(client, 6)


def test_revoke_own_key_default_reason(client, bob_key):
    r = client.ok("participant.revoke_key", frm=BOB, target_uri=BOB, kid="k1")
    assert r == {"revoked": True, "kid": "k1", "revoked_at": "2023-11-14T22:13:26.000Z", "reason": "unspecified"}
    bob = client.describe()["members"][-1]
    assert bob["jwks"] == {"keys": []}
    assert bob["key_history"][0]["revoked_reason"] == "unspecified"


def test_admin_revokes_another_members_key(client, bob_key):
    r = client.ok("participant.revoke_key", frm=ALICE, target_uri=BOB, kid="k1", reason="lost")
    assert r["reason"] == "lost"
    assert last(client)["envelope"]["method"] == "participant.revoke_key"


def test_non_admin_revoking_another_members_key_is_recorded(client, bob_key):
    sent = client.envelope("participant.revoke_key", frm=BOT, target_uri=BOB, kid="k1")
    refused(client.send(sent), -32011)
    assert_refusal_recorded(client, 5, -32011, sent)


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
def test_revoke_key_unrecorded_refusals(client, bob_key, params, code):
    client.fail(code, "participant.revoke_key", **params)
    assert_not_recorded(client, 5)


# =============================================================================
# task.create
# =============================================================================


def task_of(coord, task_id: str, ws: str = WS) -> dict:
    return coord.snapshot(ws)["tasks"][task_id]


def test_task_create(client, task):
    t = task_of(client.target, task)
    assert task.startswith("tsk_")
    assert (t["state"], t["assignee"], t["delegator"], t["kind"], t["mode"]) == (
        "created", BOT, ALICE, "k", "trial",
    )
    assert t["created_at"] == client.log()[3]["arrived"] == "2023-11-14T22:13:24.000Z"
    assert t["review_required"] is None  # trial forces review only under modes/*
    assert client.describe()["task_count"] == 1


def test_task_create_with_to_and_options(client, task):
    r = client.ok(
        "task.create", frm=ALICE, to=BOT, kind="k2", input={"n": 1}, mode="shadow",
        deadline="2030-01-01T00:00:00Z", routing_hints={"criticality": "low"}, review_required=True,
    )
    t = task_of(client.target, r["task_id"])
    assert (t["assignee"], t["mode"], t["review_required"], t["input"]) == (BOT, "shadow", True, {"n": 1})


def test_trial_forces_review_under_modes():
    client = Client(make())
    s0(client, profiles=["core/1.0", "modes/1.0"])
    t = client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required=False)
    assert task_of(client.target, t["task_id"])["review_required"] is True
    t = client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, mode="production")
    assert task_of(client.target, t["task_id"])["review_required"] is None


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
def test_task_create_unrecorded_refusals(client, task, params, code):
    client.fail(code, "task.create", **params)
    assert_not_recorded(client, 4)
    assert client.describe()["task_count"] == 1


def test_task_create_over_the_ceiling_is_recorded():
    client = Client(make())
    client.ok("workspace.create", mode_ceiling="trial")
    client.ok("participant.join", frm=ALICE, type="human")
    client.ok("participant.join", frm=BOT, type="agent")
    sent = client.envelope("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, mode="production")
    e = refused(client.send(sent), -32040)
    assert "ceiling" in e["message"]
    assert_refusal_recorded(client, 3, -32040, sent)
    assert client.describe()["task_count"] == 0


def test_task_create_for_a_paused_assignee(coord, client, task):
    def pause_bot(data):
        data["members"][BOT]["paused"] = True

    edit_workspace(coord, WS, pause_bot)
    sent = client.envelope("task.create", frm=ALICE, assignee=BOT, kind="k", input={})
    refused(client.send(sent), -32063)
    assert_refusal_recorded(client, 4, -32063, sent)


def test_idempotency_key_replay(coord, client, task):
    heard = []
    coord.add_audit_listener(lambda w, e: heard.append(e.seq))
    first = client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="K1")
    assert first["state"] == "created"
    assert heard == [4]
    before = (client.describe(), client.log())
    again = client.ok("task.create", frm=ALICE, assignee=BOT, kind="other", input={"x": 1}, idempotency_key="K1")
    assert again == first
    assert (client.describe(), client.log()) == before  # nothing created or recorded
    assert heard == [4]  # listeners not called
    client.ok("task.update", frm=BOT, task_id=first["task_id"], state="in_progress")
    # the replay reports the current state, even to a non-member
    again = client.ok("task.create", frm=GHOST, assignee=BOT, kind="k", input={}, idempotency_key="K1")
    assert again == {"task_id": first["task_id"], "state": "in_progress"}
    assert client.describe()["audit_count"] == 6
    # a different key creates a new task
    other = client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="K2")
    assert other["task_id"] != first["task_id"]


def test_idempotency_key_survives_restart(tmp_path):
    path = str(tmp_path / "idem.db")
    client = Client(make(SqliteStore(path)))
    s0(client)
    first = client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="K1")
    client.target.close()
    c2 = Client(make(SqliteStore(path)))
    assert c2.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="K1") == first
    assert c2.describe()["audit_count"] == 5
    c2.target.close()


# =============================================================================
# task.update: the 0.3.3 transition table (SPECIFICATION.md, "Core methods")
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


def _task_in(coord, client: Client, state: str) -> str:
    """A task (alice -> bot) in `state`, reached through the methods where
    core has one, else through snapshot/restore."""
    tid = client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={})["task_id"]
    if state in ("in_progress", "completed", "declined"):
        client.ok("task.update", frm=BOT, task_id=tid, state="in_progress")
    if state in ("completed", "declined"):
        client.ok("task.update", frm=BOT, task_id=tid, state=state)
    if state == "review_requested":
        rid = client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required=True)
        tid = rid["task_id"]
        assert client.ok("task.complete", frm=BOT, task_id=tid, output={"o": 1})["state"] == "review_requested"
    if state in ("paused", "cancelled"):
        def put(data):
            data["tasks"][tid]["state"] = state
        edit_workspace(coord, WS, put)
    return tid


@pytest.mark.parametrize("source", list(ALLOWED))
def test_update_transition_table(source):
    for target in STATES:
        coord = make()
        client = Client(coord)
        s0(client, extra_humans=(BOB,))
        tid = _task_in(coord, client, source)
        before = client.describe()["audit_count"]
        r = client.call("task.update", frm=BOT, task_id=tid, state=target, progress_note="n")
        if target in ALLOWED[source]:
            assert r.get("result") == {"state": target}, (source, target, r)
            t = task_of(coord, tid)
            assert t["state"] == target
            assert t["history"][-1] == {
                "ts": last(client)["arrived"], "from_": BOT, "state": target, "note": "n",
            }
            assert client.describe()["audit_count"] == before + 1
        else:
            refused(r, -32602)
            assert "Illegal transition" in r["error"]["message"]
            assert client.describe()["audit_count"] == before
            assert task_of(coord, tid)["state"] == source


def test_update_to_completed_refused_when_review_required(client, task):
    tid = client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required=True)["task_id"]
    client.ok("task.update", frm=BOT, task_id=tid, state="in_progress")
    e = client.fail(-32602, "task.update", frm=BOT, task_id=tid, state="completed")
    assert "task.complete" in e["message"]
    assert_not_recorded(client, 6)


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
def test_update_unrecorded_refusals(client, task, params, code):
    params = {k: (task if v == "$T" else v) for k, v in params.items()}
    client.fail(code, "task.update", **params)
    assert_not_recorded(client, 4)


# =============================================================================
# task.complete (SPECIFICATION.md, "Core methods")
# =============================================================================


@pytest.mark.parametrize("start", ["created", "in_progress"])
def test_complete(client, task, start):
    if start == "in_progress":
        client.ok("task.update", frm=BOT, task_id=task, state="in_progress")
    n = client.describe()["audit_count"]
    sent = client.envelope("task.complete", frm=BOT, task_id=task, output={"o": [1]}, confidence="0.9")
    assert client.send(sent)["result"] == {"state": "completed"}
    assert last(client)["envelope"] == sent and client.describe()["audit_count"] == n + 1
    t = task_of(client.target, task)
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
def test_complete_unrecorded_refusals(client, task, params, code):
    params = {k: (task if v == "$T" else v) for k, v in params.items()}
    client.fail(code, "task.complete", **params)
    assert_not_recorded(client, 4)


@pytest.mark.parametrize("state", ["completed", "declined", "review_requested", "paused", "cancelled"])
def test_complete_from_other_states_refused_unrecorded(coord, client, task, state):
    client.ok("participant.join", frm=BOB, type="human")
    tid = _task_in(coord, client, state)
    n = client.describe()["audit_count"]
    e = client.fail(-32602, "task.complete", frm=BOT, task_id=tid)
    assert state in e["message"]
    assert_not_recorded(client, n)


def test_complete_opens_review_when_required(client, task):
    client.ok("participant.join", frm=BOB, type="human")
    client.ok("participant.join", frm=CAROL, type="human")
    tid = client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required=True)["task_id"]
    r = client.ok("task.complete", frm=ALICE, task_id=tid, output={"o": 1}, confidence=1)
    assert r == {"state": "review_requested", "review_id": tid}
    t = task_of(client.target, tid)
    assert t["state"] == "review_requested"
    assert t["pending_artefact"] == {"o": 1}
    assert t["confidence"] is None and t["output"] is None
    # every human member except the caller and the assignee, in join order
    assert t["review"]["requested_to"] == [BOB, CAROL]
    assert t["review"]["rule"] == "any_one_approves"
    assert t["history"][-1]["state"] == "review_requested"


def test_complete_reuses_an_existing_review(client, task):
    client.ok("participant.join", frm=BOB, type="human")
    tid = client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required=True)["task_id"]
    client.ok("task.complete", frm=BOT, task_id=tid, output={"v": 1})
    assert task_of(client.target, tid)["review"]["requested_to"] == [ALICE, BOB]
    client.ok("task.update", frm=BOT, task_id=tid, state="in_progress")
    client.ok("participant.join", frm=CAROL, type="human")
    r = client.ok("task.complete", frm=BOT, task_id=tid, output={"v": 2})
    assert r == {"state": "review_requested", "review_id": tid}
    t = task_of(client.target, tid)
    assert t["review"]["requested_to"] == [ALICE, BOB]  # kept, carol not added
    assert t["pending_artefact"] == {"v": 2}


def test_complete_without_an_eligible_reviewer_is_recorded(client, task):
    tid = client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required=True)["task_id"]
    sent = client.envelope("task.complete", frm=ALICE, task_id=tid)
    e = refused(client.send(sent), -32011)
    assert "review" in e["message"]
    assert_refusal_recorded(client, 5, -32011, sent)
    assert task_of(client.target, tid)["state"] == "created"


# =============================================================================
# audit.read
# =============================================================================


@pytest.fixture
def mixed_log(client, task):
    """A log with accepted calls and recorded refusals:
    0 create, 1-2 joins, 3 T, 4 update (bot), 5 refused set_profiles (bot),
    6 complete (bot), 7 refused set_profiles (bot)."""
    client.ok("task.update", frm=BOT, task_id=task, state="in_progress")
    client.fail(-32011, "workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    client.ok("task.complete", frm=BOT, task_id=task, output={})
    client.fail(-32011, "workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    assert client.describe()["audit_count"] == 8
    return task


def seqs(entries):
    return [e["seq"] for e in entries]


def test_read_everything(client, mixed_log):
    r = client.ok("audit.read")
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
def test_read_range(client, mixed_log, rng, expect, next_seq):
    r = client.ok("audit.read", range=rng)
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
def test_read_filters(client, mixed_log, flt, expect):
    flt = {k: (mixed_log if v == "$T" else v) for k, v in flt.items()}
    r = client.ok("audit.read", filter=flt)
    assert seqs(r["entries"]) == expect and r["next_seq"] == 8


def test_read_filter_with_range(client, mixed_log):
    r = client.ok("audit.read", range={"from_seq": 5, "to_seq": 7}, filter={"from": BOT})
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
def test_read_refusals(client, mixed_log, params):
    client.fail(-32602, "audit.read", **params)
    assert_not_recorded(client, 8)


def test_read_is_never_recorded(client, mixed_log):
    for _ in range(3):
        client.ok("audit.read", filter={"outcome": "refused"})
    assert client.describe()["audit_count"] == 8


# =============================================================================
# audit.verify_chain
# =============================================================================


def test_verify_chain_verified(client, mixed_log):
    head = client.describe()["evidence_head"]
    r = client.ok("audit.verify_chain")
    assert r == {
        "status": "verified", "ok": True, "entries_total": 8, "entries_checked": 8,
        "entries_unchecked": 0, "checked_from_seq": 0, "chain_head": head,
    }
    assert client.describe()["audit_count"] == 8  # a read


@pytest.mark.parametrize("params", [{"from_seq": 0}, {"to_seq": 3}, {"workspace": "nope"}])
def test_verify_chain_refusals(client, mixed_log, params):
    client.fail(-32602, "audit.verify_chain", **params)


def test_verify_chain_not_evaluated_for_an_unchained_prefix():
    """A workspace whose chain started at seq 3 (as after a set_profiles that
    adds audit-scitt): built by hand with rfc8785, loaded through restore()."""
    plain = make(enable_chain=False)
    client = Client(plain)
    task = s0(client)
    client.ok("task.update", frm=BOT, task_id=task, state="in_progress")
    client.fail(-32011, "workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
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
    client = Client(coord)
    task = s0(client)
    client.ok("task.update", frm=BOT, task_id=task, state="in_progress")
    assert client.ok("audit.verify_chain")["status"] == "verified"
    coord.close()
    db = sqlite3.connect(path)
    with db:
        n = db.execute(edit_sql).rowcount
    db.close()
    assert n == 1
    return Client(make(SqliteStore(path)))


def test_verify_chain_broken_by_an_edited_middle_entry(tmp_path):
    client = _tampered(
        tmp_path,
        "UPDATE chap_entries SET data = replace(data, '\"role\":\"drafter\"', '\"role\":\"admin\"') "
        "WHERE seq = 2",
    )
    e = client.fail(-32602, "audit.verify_chain")
    assert "seq 3: prev_hash mismatch" in e["message"]


def test_verify_chain_broken_by_an_edited_last_entry(tmp_path):
    client = _tampered(
        tmp_path,
        "UPDATE chap_entries SET data = replace(data, '\"in_progress\"', '\"declined\"') WHERE seq = 4",
    )
    e = client.fail(-32602, "audit.verify_chain")
    assert "chain_head mismatch" in e["message"]


def test_verify_chain_broken_by_a_malformed_entry(tmp_path):
    # a refusal entry whose outcome was removed: "malformed", never downgraded
    client = _tampered(
        tmp_path,
        "UPDATE chap_entries SET data = json_remove(data, '$.envelope.jsonrpc') WHERE seq = 1",
    )
    e = client.fail(-32602, "audit.verify_chain")
    assert "seq 1: malformed entry" in e["message"]


# =============================================================================
# Dispatch order and codes (SPECIFICATION.md, "Dispatch")
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
def test_invalid_request(client, task, envelope, req_id):
    r = client.send(envelope)
    assert r["id"] == req_id
    refused(r, -32600)
    assert set(r["error"]) == {"code", "message"}
    # each fault has its own words after the common start (tests/test_hostile.py checks them)
    assert r["error"]["message"].startswith("Invalid JSON-RPC 2.0 request: ")
    assert_not_recorded(client, 4)


def _task_env(client: Client, task: str, **extra):
    return client.envelope("task.update", frm=BOT, task_id=task, state="in_progress", **extra)


def test_nesting_boundary_is_64_levels(client, task):
    # envelope (1) > params (2) > x (3) > 61 lists (level 64 at the innermost 0)
    ok = _task_env(client, task, x=nest(61))
    assert client.send(ok)["result"] == {"state": "in_progress"}
    deep = _task_env(client, task, x=nest(62))
    e = refused(client.send(deep), -32600)
    assert "64" in e["message"]
    assert_not_recorded(client, 5)


def test_nesting_is_checked_before_params_and_method(client, task):
    deep = {"jsonrpc": "2.0", "id": 1, "method": "nope.nope", "params": [nest(70), 0.5]}
    refused(client.send(deep), -32600)


def test_size_limit_boundary():
    coord = make(max_envelope_bytes=300)
    client = Client(coord)
    s0(client)
    probe = client.envelope("participant.join", frm=BOB, type="human", pad="")
    size = len(rfc8785.dumps(probe))
    pad = "x" * (300 - size)
    at_limit = dict(probe, params={**probe["params"], "pad": pad})
    assert len(rfc8785.dumps(at_limit)) == 300
    assert client.send(at_limit)["result"] == {"joined": True, "as": BOB}
    over = dict(at_limit, params={**at_limit["params"], "pad": pad + "x"})
    size = len(rfc8785.dumps(over))
    assert size == 301
    e = refused(client.send(over), -32600)
    assert "301" in e["message"] and "300" in e["message"]
    assert_not_recorded(client, 5)


def test_size_is_checked_before_params_and_method():
    client = Client(make(max_envelope_bytes=100))
    client.ok("workspace.create")
    big = {"jsonrpc": "2.0", "id": 1, "method": "nope.nope", "params": ["x" * 200]}
    refused(client.send(big), -32600)


def test_non_canonical_envelope_counts_as_size_zero():
    client = Client(make(max_envelope_bytes=100))
    client.ok("workspace.create")
    e = client.fail(-32602, "participant.join", frm=BOB, type="human", pad="x" * 200, n=0.5)
    assert "integers" in e["message"]


@pytest.mark.parametrize(
    "params",
    [[1], "x", 5, True, []],
    ids=["list", "str", "int", "bool", "empty-list"],
)
def test_non_object_params(client, task, params):
    r = client.send({"jsonrpc": "2.0", "id": 9, "method": "workspace.describe", "params": params})
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


def test_params_checked_before_unknown_method(client, task):
    r = client.send({"jsonrpc": "2.0", "id": 9, "method": "nope.nope", "params": [1]})
    refused(r, -32602)


def test_unknown_method_comes_before_the_canonical_check(client, task):
    e = client.fail(-32601, "does.not_exist", frm=ALICE, n=0.5)
    assert e["message"].startswith("Unknown method: does.not_exist; ")
    assert_not_recorded(client, 4)


@pytest.mark.parametrize(
    "bad",
    [0.5, 1e-7, 2**53, "\ud800", {"k\udc00": 1}],
    ids=["half", "tiny", "2^53", "surrogate", "surrogate-key"],
)
def test_non_canonical_values(client, task, bad):
    client.fail(-32602, "task.update", frm=BOT, task_id=task, state="in_progress", note=bad)
    assert_not_recorded(client, 4)


def test_non_canonical_id_is_refused(client, task):
    r = client.send({"jsonrpc": "2.0", "id": 1.5, "method": "workspace.describe", "params": {"workspace": WS}})
    refused(r, -32602)
    assert r["id"] == 1.5


def test_canonical_check_comes_before_the_gate_and_membership(client, task):
    client.fail(-32602, "whisper.ask", frm=GHOST, n=0.5)
    client.fail(-32602, "participant.leave", frm=GHOST, n=0.5)


def test_integral_float_is_accepted_and_recorded_as_integer(client, task):
    sent = client.envelope("task.update", frm=BOT, task_id=task, state="in_progress", n=2.0)
    assert client.send(sent)["result"] == {"state": "in_progress"}
    recorded = last(client)["envelope"]
    assert recorded == sent and type(recorded["params"]["n"]) is int


def test_profile_gate(client, task):
    e = client.fail(-32601, "whisper.ask", frm=ALICE, to=[BOT], task_id=task, question="q")
    assert e == {
        "code": -32601,
        "message": "Unknown method: whisper.ask",
        "data": {"profile": "whisper/1.0", "advertised": ["core/1.0", "review/1.0"]},
    }
    assert_not_recorded(client, 4)
    # the gate comes before the membership floor
    e = client.fail(-32601, "control.pause", frm=GHOST, scope="workspace")
    assert e["data"]["profile"] == "control/1.0"
    e = client.fail(-32601, "audit.submit_to_scitt", frm=ALICE)
    assert e["data"]["profile"] == "audit-scitt/1.0"
    assert_not_recorded(client, 4)


def test_gated_privileged_method_from_a_member_is_recorded(client, task):
    sent = client.envelope("control.pause", frm=ALICE, scope="task", task_id=task)
    refused(client.send(sent), -32601)
    assert_refusal_recorded(client, 4, -32601, sent)


def test_gate_is_skipped_for_an_unknown_workspace(client, task):
    # no workspace, no gate: the method is known, so the handler's answer wins
    client.fail(-32602, "workspace.describe", workspace="nope")


def test_gate_and_reads_never_gated(client, task):
    # audit.verify_chain belongs to audit-scitt but is never gated
    assert client.ok("audit.verify_chain")["status"] == "verified"


def test_membership_floor(client, task):
    client.fail(-32011, "participant.leave", frm=GHOST)
    assert_not_recorded(client, 4)


def test_paused_workspace(coord, client, task):
    def pause(data):
        data["state"] = "paused"

    edit_workspace(coord, WS, pause)
    assert client.describe()["state"] == "paused"
    sent = client.envelope("task.create", frm=ALICE, assignee=BOT, kind="k", input={})
    e = refused(client.send(sent), -32063)
    assert WS in e["message"]
    assert_refusal_recorded(client, 4, -32063, sent)
    # a non-member's paused refusal is not recorded
    client.fail(-32063, "task.update", frm=GHOST, task_id=task, state="in_progress")
    client.fail(-32063, "workspace.set_profiles", frm=ALICE, profiles=["core/1.0"])
    assert client.describe()["audit_count"] == 6
    # earlier steps still win over the paused gate
    client.fail(-32601, "does.not_exist", frm=ALICE)
    client.fail(-32602, "task.create", frm=ALICE, assignee=BOT, kind="k", input={"x": 0.5})
    # reads that are exempt, and join/leave
    assert client.ok("audit.read", range={"from_seq": 6})["entries"] == []
    client.ok("participant.join", frm=BOB, type="human")
    client.ok("participant.leave", frm=BOB)
    # audit.verify_chain is not exempt (0.3.3), and is not recorded
    client.fail(-32063, "audit.verify_chain")
    assert client.describe()["audit_count"] == 8


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
    client = Client(coord)
    s0(client)
    store.broken = True
    with caplog.at_level(logging.ERROR):
        sent = client.envelope("audit.read")
        r = client.send(sent)
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
    assert client.describe()["audit_count"] == 4


# =============================================================================
# Which refusals are recorded (SPECIFICATION.md, "Dispatch", step 17)
# =============================================================================


def test_refusal_entry_links_into_the_chain(client, task):
    sent = client.envelope("workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    client.send(sent)
    log = client.log()
    refusal = log[4]
    assert refusal["prev_hash"] == link(log[3]["envelope"], log[3]["prev_hash"])
    record = {"outcome": {"status": "refused", "code": -32011}, "request": sent}
    assert client.describe()["evidence_head"] == link(record, refusal["prev_hash"])
    assert client.ok("audit.verify_chain")["entries_checked"] == 5


def test_refusal_without_chain_has_no_prev_hash():
    client = Client(make(enable_chain=False))
    s0(client)
    client.fail(-32011, "workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    entry = last(client)
    assert set(entry) == {"seq", "arrived", "request", "outcome"}


def test_recorded_request_is_exactly_as_sent(client, task):
    sent = {
        "jsonrpc": "2.0", "id": {"n": 1}, "method": "workspace.set_profiles",
        "params": {"workspace": WS, "from": BOT, "profiles": ["core/1.0"], "extra": [None, True]},
        "sig": "ed25519:k:AAAA", "meta": {"ü": "\U0001f600"},
    }
    refused(client.send(sent), -32011)
    assert last(client)["request"] == sent


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
def test_unrecorded_refusals(client, task, method, params, code):
    params = {k: (task if v == "$T" else v) for k, v in params.items()}
    client.fail(code, method, **params)
    assert_not_recorded(client, 4)


def test_unrecorded_when_from_is_not_a_string(client, task):
    # 0.3.3: a non-string from is never "a current member"
    client.fail(-32011, "workspace.set_profiles", frm=[BOT], profiles=["core/1.0"])
    assert_not_recorded(client, 4)


def test_signed_refusal_is_answered_from_the_log(client, task):
    """B1: a resent signed refused request gets the stored code and is not
    evaluated or recorded again."""
    sent = client.envelope("workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    sent["sig"] = "ed25519:k:AAAA"
    refused(client.send(sent), -32011)
    assert client.describe()["audit_count"] == 5
    client.ok("participant.join", frm=BOT, type="agent")  # (role unchanged: still refused)
    again = dict(sent, sig="ed25519:k:BBBB")
    e = refused(client.send(again), -32011)
    assert e["data"] == {"refused_at_seq": 4}
    assert client.describe()["audit_count"] == 6


# =============================================================================
# Listeners (SPECIFICATION.md, "Listeners")
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
    client = Client(coord)
    task = s0(client)
    expected = []
    for seq in range(4):
        expected += [("on_audit", WS, seq), ("added1", WS, seq), ("added2", WS, seq)]
    assert calls == expected
    # a recorded refusal is heard, with request and outcome set
    entries = []
    coord.add_audit_listener(lambda w, e: entries.append(e))
    client.fail(-32011, "workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
    assert len(entries) == 1
    e = entries[0]
    assert e.envelope is None and e.outcome == {"status": "refused", "code": -32011}
    assert e.request["method"] == "workspace.set_profiles" and e.seq == 4
    assert e.to_dict() == last(client)
    # never for reads, unrecorded refusals, replays
    n = len(calls)
    client.describe()
    client.log()
    client.ok("audit.verify_chain")
    client.fail(-32011, "task.update", frm=GHOST, task_id=task, state="in_progress")
    client.fail(-32602, "task.update", frm=ALICE, task_id=task, state="paused")
    client.fail(-32601, "does.not_exist")
    client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="I")
    n += 3
    client.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="I")
    assert len(calls) == n


def test_listener_not_called_when_the_write_fails():
    store = FailingStore()
    heard = []
    coord = make(store, on_audit=lambda w, e: heard.append(e.seq))
    client = Client(coord)
    s0(client)
    assert heard == [0, 1, 2, 3]
    store.failing = True
    client.fail(-32900, "participant.join", frm=BOB, type="human")
    assert heard == [0, 1, 2, 3]


def test_raising_listener_is_logged_and_breaks_nothing(caplog):
    heard = []

    def bad(workspace_id, entry):
        raise ValueError("listener bug")

    coord = make(on_audit=bad)
    coord.add_audit_listener(lambda w, e: heard.append(e.seq))
    coord.add_audit_listener(bad)
    coord.add_audit_listener(lambda w, e: heard.append(-e.seq))
    client = Client(coord)
    with caplog.at_level(logging.ERROR):
        r = client.call("workspace.create")
    assert r["result"]["workspace"] == WS
    assert heard == [0, 0]
    assert "listener bug" in caplog.text
    assert client.describe()["audit_count"] == 1
    assert client.ok("audit.verify_chain")["status"] == "verified"
