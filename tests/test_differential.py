"""Differential: the same Core workload through chapline and the reference
chap-coordinator 0.3.3 (driven only by calling it).

Generated ids (wsp_, tsk_, art_) differ between the two: each side keeps its
own name -> id table, built from results as they appear, and envelopes are
built per side with its own ids. Responses and recorded entries are then
compared after mapping chapline's ids to the reference's.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from chap_coordinator import Coordinator as Reference
from chap_coordinator.storage.sqlite import SqliteStore as ReferenceSqlite
from client import Client, env, refused
from support import make

from coordinator import Coordinator, public_jwk
from storage import SqliteStore

ID = re.compile(r"^(?:tsk|wsp|art)_[0-9A-HJKMNP-TV-Z]{26}$")


def reference(**kw: Any) -> Any:
    return Reference(deterministic_ids=True, deterministic_clock=True, enable_chain=True, **kw)


def id_map(ours: Client, theirs: Client) -> dict[str, str]:
    assert ours.names.keys() == theirs.names.keys()
    mapping = {ours.names[k]: theirs.names[k] for k in ours.names}
    assert len(set(mapping.values())) == len(mapping)
    return mapping


def mapped(value: Any, mapping: dict[str, str]) -> Any:
    if isinstance(value, str):
        assert not ID.match(value) or value in mapping, f"unmapped generated id {value}"
        return mapping.get(value, value)
    if isinstance(value, dict):
        return {mapped(k, mapping): mapped(v, mapping) for k, v in value.items()}
    if isinstance(value, list):
        return [mapped(v, mapping) for v in value]
    return value


def shape(response: dict[str, Any]) -> Any:
    if "error" in response:
        e = response["error"]
        return {"code": e["code"], "data": e.get("data")}
    return {"result": response["result"]}


def drive(steps: list[tuple], ours: Any = None, theirs: Any = None) -> tuple[Client, Client, list, list]:
    a = Client(ours if ours is not None else make())
    b = Client(theirs if theirs is not None else reference())
    ra, rb = [], []
    for step in steps:
        ra.append(a.run(step))
        rb.append(b.run(step))
    return a, b, ra, rb


A, BOT, BOB, GHOST = "human:alice", "agent:bot", "human:bob", "human:ghost"
W = "wsp_d"


def _f(uri: str) -> dict[str, str]:
    return {"from": uri}


def _jwk(kid: str, seed: int) -> dict[str, str]:
    """A real public key: both coordinators register it (chapline refuses a bad one)."""
    return public_jwk(bytes([seed]) * 32, kid)


# The scripted Core workload: successes, recorded refusals, unrecorded
# refusals, reads and a generated workspace id. Nothing in it is a deliberate
# difference (those are asserted separately below).
CORE = [
    ("workspace.create", {"workspace": W}, ("workspace", "$W")),
    ("participant.join", {"workspace": "$W", **_f(A), "type": "human", "role": "admin"}),
    ("participant.join", {"workspace": "$W", **_f(BOT), "type": "agent", "role": "drafter"}),
    ("participant.join", {"workspace": "$W", **_f(BOB), "type": "human",
                          "jwks": {"keys": [_jwk("b1", 1)]}}),
    ("task.create", {"workspace": "$W", **_f(A), "assignee": BOT, "kind": "k", "input": {"q": [1, 2]},
                     "idempotency_key": "I1"}, ("task_id", "$T")),
    ("task.create", {"workspace": "$W", **_f(A), "assignee": BOT, "kind": "k", "input": {},
                     "idempotency_key": "I1"}),  # replay
    ("task.create", {"workspace": "$W", **_f(A), "to": BOT, "kind": "r", "input": {}, "review_required": True,
                     "mode": "shadow"}, ("task_id", "$R")),
    ("task.update", {"workspace": "$W", **_f(BOT), "task_id": "$T", "state": "in_progress",
                     "progress_note": "started"}),
    ("task.update", {"workspace": "$W", **_f(BOT), "task_id": "$T", "state": "review_requested"}),  # -32602
    ("task.update", {"workspace": "$W", **_f(BOT), "task_id": "$R", "state": "paused"}),  # -32602
    ("task.update", {"workspace": "$W", **_f(GHOST), "task_id": "$T", "state": "in_progress"}),  # -32011
    ("task.complete", {"workspace": "$W", **_f(BOT), "task_id": "$R", "output": {"draft": 1}}),
    ("task.update", {"workspace": "$W", **_f(BOT), "task_id": "$R", "state": "in_progress"}),
    ("task.complete", {"workspace": "$W", **_f(BOT), "task_id": "$R", "output": {"draft": 2}}),
    ("task.complete", {"workspace": "$W", **_f(BOT), "task_id": "$T", "output": {"done": True},
                       "confidence": "0.9"}),
    ("task.complete", {"workspace": "$W", **_f(BOT), "task_id": "$T"}),  # -32602 completed
    ("task.create", {"workspace": "$W", **_f(A), "assignee": BOT, "kind": "k", "input": {},
                     "idempotency_key": "I1"}),  # replay: completed
    ("workspace.set_profiles", {"workspace": "$W", **_f(BOT), "profiles": ["core/1.0"]}),  # recorded -32011
    ("workspace.set_profiles", {"workspace": "$W", **_f(GHOST), "profiles": ["core/1.0"]}),  # -32011
    ("participant.rotate_key", {"workspace": "$W", **_f(BOB), "old_kid": "b1",
                                "new_jwk": _jwk("b2", 2)}),
    ("participant.rotate_key", {"workspace": "$W", **_f(BOB), "old_kid": "zz", "new_jwk": {}}),  # -32071
    ("participant.revoke_key", {"workspace": "$W", **_f(BOT), "target_uri": BOB, "kid": "b2"}),  # recorded
    ("participant.revoke_key", {"workspace": "$W", **_f(A), "target_uri": BOB, "kid": "b2", "reason": "lost"}),
    ("participant.revoke_key", {"workspace": "$W", **_f(BOB), "target_uri": BOB, "kid": "nope"}),  # -32071
    ("participant.rotate_key", {"workspace": "$W", **_f(BOB), "old_kid": "b2", "new_jwk": {"kid": "b3"}}),
    ("control.pause", {"workspace": "$W", **_f(A), "scope": "task", "task_id": "$T"}),  # gated, recorded
    ("whisper.ask", {"workspace": "$W", **_f(A)}),  # gated, not recorded
    ("does.not_exist", {"workspace": "$W", **_f(A)}),
    ("task.create", {"workspace": "$W", **_f(A), "assignee": BOT, "kind": "k", "input": {"x": 0.5}}),
    ("task.create", {"workspace": "$W", **_f(A), "assignee": BOT, "kind": "k", "input": {}, "mode": 5}),
    ("task.create", {"workspace": "$W", **_f(A), "assignee": BOT, "kind": "k", "input": {},
                     "review_required": "yes"}),
    ("task.create", {"workspace": "$W", **_f(A), "assignee": "agent:nobody", "kind": "k", "input": {}}),
    ("participant.leave", {"workspace": "$W", **_f(GHOST)}),
    ("audit.read", {"workspace": "$W", "range": {"from_seq": 2, "to_seq": 999}}),
    ("audit.read", {"workspace": "$W", "filter": {"outcome": "refused"}}),
    ("audit.read", {"workspace": "$W", "filter": {"method": "task.complete", "from": BOT}}),
    ("audit.read", {"workspace": "$W", "filter": {"task_id": "$T"}}),
    ("audit.read", {"workspace": "$W", "filter": {"outcome": "bogus"}}),
    ("participant.leave", {"workspace": "$W", **_f(BOB), "reason": "bye"}),
    ("task.create", {"workspace": "$W", **_f(A), "assignee": BOT, "kind": "k", "input": {},
                     "review_required": True}, ("task_id", "$S")),
    ("task.complete", {"workspace": "$W", **_f(A), "task_id": "$S"}),  # no reviewer: recorded -32011
    ("workspace.set_profiles", {"workspace": "$W", **_f(A), "profiles": ["review/1.0"]}),
    ("workspace.describe", {"workspace": "$W"}),
    ("audit.verify_chain", {"workspace": "$W"}),
    ("audit.verify_chain", {"workspace": "$W", "from_seq": 0}),
    ("workspace.describe", {"workspace": "nope"}),
    ("participant.join", {"workspace": "wsp_auto", **_f(A), "type": "human"}),  # auto-create
    # a generated workspace id, used in a later envelope (its own log is not
    # compared: see test_create_with_a_generated_id_is_not_recorded)
    ("workspace.create", {"profiles": ["core/1.0"]}, ("workspace", "$W2")),
    ("task.create", {"workspace": "$W2", **_f(GHOST), "assignee": BOT, "kind": "k", "input": {}}),
    ("participant.leave", {"workspace": "$W2", **_f(A)}),
    ("workspace.describe", {"workspace": "wsp_auto"}),
]


def _compare(steps: list[tuple]):
    a, b, ra, rb = drive(steps)
    mapping = id_map(a, b)
    for step, x, y in zip(steps, ra, rb, strict=True):
        assert x["id"] == y["id"]
        # evidence heads and chain links depend on the ids: compared below
        # only for id-free workloads
        xs, ys = shape(x), shape(y)
        if "result" in ys and isinstance(ys["result"], dict):
            for key in ("evidence_head", "chain_head"):
                if key in ys["result"]:
                    assert key in xs["result"]
                    xs["result"][key] = ys["result"][key]
            if "entries" in ys["result"]:
                for e in xs["result"]["entries"] + ys["result"]["entries"]:
                    e.pop("prev_hash", None)
        assert mapped(xs, mapping) == ys, (step, x, y)
    return a, b, mapping


def test_core_workload_same_responses():
    _compare(CORE)


def test_core_workload_same_recorded_entries():
    a, b, mapping = _compare(CORE)
    for ws in ("$W",):
        ours = Client(a.target, a.names[ws]).log()
        theirs = Client(b.target, b.names[ws]).log()
        assert len(ours) == len(theirs) == Client(b.target, b.names[ws]).describe()["audit_count"]
        for x, y in zip(ours, theirs, strict=True):
            assert set(x) == set(y)
            x = {k: v for k, v in x.items() if k != "prev_hash"}
            y = {k: v for k, v in y.items() if k != "prev_hash"}
            assert mapped(x, mapping) == y
        outcomes = [e["outcome"]["code"] for e in theirs if "outcome" in e]
        assert outcomes == [-32011, -32011, -32601, -32011]  # the workload has recorded refusals
    assert Client(a.target, "wsp_auto").log() == Client(b.target, "wsp_auto").log()
    assert Client(a.target, "wsp_auto").describe() == Client(b.target, "wsp_auto").describe()


def test_create_with_a_generated_id_is_not_recorded(tmp_path):
    """0.3.3 records a call only when params.workspace names an existing
    workspace, so `workspace.create` without a `workspace` param (id
    generated) appends no entry: the log starts with the first join at seq 0
    with prev_hash ZERO. chapline does the same, so seqs and links agree.
    (0.3.3 also never persists such a workspace until its first entry; ours
    stays durable: it is written with no entries.)"""
    path = str(tmp_path / "gen.db")
    a, b, ra, rb = drive(
        [
            ("workspace.create", {}, ("workspace", "$G")),
            ("participant.join", {"workspace": "$G", **_f(A), "type": "human"}),
        ],
        ours=make(SqliteStore(path)),
    )
    mapping = id_map(a, b)
    assert [mapped(shape(x), mapping) for x in ra] == [shape(y) for y in rb]
    ours, theirs = Client(a.target, a.names["$G"]).log(), Client(b.target, b.names["$G"]).log()
    assert [e["envelope"]["method"] for e in theirs] == ["participant.join"]
    assert [mapped(e, mapping) for e in ours] == theirs
    assert Client(a.target, a.names["$G"]).describe()["audit_count"] == 1
    # durable all the same
    again = Coordinator(SqliteStore(path))
    assert Client(again, a.names["$G"]).describe()["audit_count"] == 1


# An id-free workload: no generated id ever reaches an envelope, so every
# recorded entry, every link and the head must be byte-identical.
ID_FREE = [
    ("workspace.create", {"workspace": W}),
    ("participant.join", {"workspace": W, **_f(A), "type": "human", "role": "admin"}),
    ("participant.join", {"workspace": W, **_f(BOT), "type": "agent"}),
    ("participant.join", {"workspace": W, **_f("human:\U0001f600"), "type": "human",
                          "display_name": "emoji \u2028 \ue000", "capabilities": {"\ue000": 1, "\U0001f600": 2}}),
    ("task.create", {"workspace": W, **_f(A), "assignee": BOT, "kind": "k",
                     "input": {"n": 9007199254740991, "f": 2.0, "s": "8.2", "nested": [[{}], []]}},
     ("task_id", "$X")),  # the id is in the result only, never sent back
    ("workspace.set_profiles", {"workspace": W, **_f(BOT), "profiles": ["core/1.0"]}),  # recorded refusal
    ("control.pause", {"workspace": W, **_f(A), "scope": "workspace"}),  # recorded gated refusal
    ("task.create", {"workspace": W, **_f(GHOST), "assignee": BOT, "kind": "k", "input": {}}),
    ("participant.leave", {"workspace": W, **_f(BOT)}),
    ("participant.join", {"workspace": W, **_f(BOT), "type": "agent"}),
    ("workspace.set_profiles", {"workspace": W, **_f(A), "profiles": ["review/1.0", "modes/1.0"]}),
    ("participant.leave", {"workspace": W, **_f("human:\U0001f600")}),
]


def test_id_free_workload_gives_byte_identical_heads():
    a, b, ra, rb = drive(ID_FREE)
    mapping = id_map(a, b)
    assert [mapped(shape(x), mapping) for x in ra] == [shape(y) for y in rb]
    ours, theirs = Client(a.target, W).describe(), Client(b.target, W).describe()
    assert ours["evidence_head"] == theirs["evidence_head"]
    assert ours == theirs
    assert Client(a.target, W).log() == Client(b.target, W).log()  # prev_hash included
    va = a.target.dispatch(env("audit.verify_chain", {"workspace": W}))
    vb = b.target.dispatch(env("audit.verify_chain", {"workspace": W}))
    assert va == vb and va["result"]["status"] == "verified"


def test_id_free_heads_after_every_step():
    a, b = Client(make()), Client(reference())
    for step in ID_FREE:
        a.run(step)
        b.run(step)
        da, db = Client(a.target, W).describe(), Client(b.target, W).describe()
        assert (da["audit_count"], da["evidence_head"]) == (db["audit_count"], db["evidence_head"])


# -- deliberate differences (ours asserted, the reference's noted) ----------------


@pytest.mark.parametrize(
    "method, params, ours_code, theirs",
    [
        # chapline refuses what it cannot honour; 0.3.3 stores it as given
        ("workspace.create", {"workspace": "w2", "profiles": "core/1.0"}, -32602, "ok"),
        ("workspace.create", {"workspace": "w2", "profiles": ["core/1.0", "gossip/1.0"]}, -32602, "ok"),
        ("workspace.create", {"workspace": "w2", "mode": 5}, -32602, "ok"),
        ("workspace.set_profiles", {"workspace": W, **_f(A), "profiles": "x"}, -32602, "ok"),
        ("participant.join", {"workspace": W, "from": 5, "type": "human"}, -32602, "ok"),
        ("participant.join", {"workspace": W, **_f(BOB), "type": 5}, -32602, "ok"),
        # 0.3.3 answers these with an internal error
        ("audit.read", {"workspace": W, "range": "x"}, -32602, -32603),
        ("audit.read", {"workspace": W, "range": {"from_seq": "a"}}, -32602, -32603),
    ],
)
def test_deliberate_differences_in_core(method, params, ours_code, theirs):
    setup = ID_FREE[:3]
    a, b, _, _ = drive(setup)
    ra = a.target.dispatch(env(method, params, id="x"))
    rb = b.target.dispatch(env(method, params, id="x"))
    refused(ra, ours_code)
    assert (rb["error"]["code"] if "error" in rb else "ok") == theirs
    assert Client(a.target, W).describe()["audit_count"] == 3  # ours recorded nothing


def test_chain_is_on_by_default_in_chapline_only():
    ours = make()  # enable_chain left at its default
    theirs = Reference(deterministic_ids=True, deterministic_clock=True)
    for c in (ours, theirs):
        c.dispatch(env("workspace.create", {"workspace": W}))
    assert Client(ours, W).describe()["evidence_head"].startswith("sha256:")
    assert "evidence_head" not in Client(theirs, W).describe()


# -- a file the reference wrote -------------------------------------------------


def test_reference_sqlite_file_loads_with_the_same_describe_and_chain(tmp_path):
    path = str(tmp_path / "ref.db")
    chained = reference(store=ReferenceSqlite(path))
    b = Client(chained)
    for step in CORE:
        b.run(step)
    wid = b.names["$W"]
    # a second workspace whose chain starts mid-life (set_profiles adds
    # audit-scitt): written by a reference coordinator with the chain off
    plain = Reference(deterministic_ids=True, deterministic_clock=True, store=ReferenceSqlite(path))
    for step in [
        ("workspace.create", {"workspace": "wsp_mid"}),
        ("participant.join", {"workspace": "wsp_mid", **_f(A), "type": "human", "role": "admin"}),
        ("participant.join", {"workspace": "wsp_mid", **_f(BOT), "type": "agent"}),
        ("workspace.set_profiles", {"workspace": "wsp_mid", **_f(A),
                                    "profiles": ["core/1.0", "review/1.0", "audit-scitt/1.0"]}),
        ("workspace.set_profiles", {"workspace": "wsp_mid", **_f(BOT), "profiles": ["core/1.0"]}),
        ("participant.leave", {"workspace": "wsp_mid", **_f(BOT)}),
    ]:
        plain.dispatch(env(*step, id="m"))
    fresh = Reference(deterministic_ids=True, deterministic_clock=True, store=ReferenceSqlite(path))
    ours = Coordinator(SqliteStore(path))
    assert sorted(ours.workspace_ids()) == sorted([wid, "wsp_auto", "wsp_mid"])
    for ws in (wid, "wsp_auto", "wsp_mid"):
        assert Client(ours, ws).describe() == Client(fresh, ws).describe()
        assert Client(ours, ws).log() == Client(fresh, ws).log()
        va = ours.dispatch(env("audit.verify_chain", {"workspace": ws}))
        vb = fresh.dispatch(env("audit.verify_chain", {"workspace": ws}))
        assert va == vb, ws
    mid = ours.dispatch(env("audit.verify_chain", {"workspace": "wsp_mid"}))["result"]
    assert (mid["status"], mid["checked_from_seq"], mid["entries_unchecked"]) == ("not_evaluated", 3, 3)
    # and we carry on writing the reference's workspace; its chain still verifies
    ours.dispatch(env("participant.join", {"workspace": wid, **_f("human:new"), "type": "human"}))
    v = ours.dispatch(env("audit.verify_chain", {"workspace": wid}))["result"]
    assert v["status"] == "verified"
    again = Reference(deterministic_ids=True, deterministic_clock=True, store=ReferenceSqlite(path))
    assert again.dispatch(env("audit.verify_chain", {"workspace": wid}))["result"] == v


# -- the limits, found by calling the reference -------------------------------


def _nest(n: int) -> Any:
    v: Any = 0
    for _ in range(n):
        v = [v] if n % 2 else {"k": v}
    return v


@pytest.mark.parametrize("n", [59, 60, 61, 62, 63])
def test_nesting_limit_agrees_with_the_reference(n):
    envelope = env("workspace.create", {"workspace": W, "x": _nest(n)})
    ra, rb = make().dispatch(envelope), reference().dispatch(envelope)
    assert shape(ra).keys() == shape(rb).keys()
    assert ("error" in ra) == ("error" in rb) == (n > 61)  # the innermost value at level 65 is refused
    if "error" in rb:
        refused(ra, rb["error"]["code"])


@pytest.mark.parametrize("extra", [0, 1, 2])
def test_size_limit_agrees_with_the_reference(extra):
    import rfc8785

    base = env("workspace.create", {"workspace": W, "pad": ""})
    pad = "x" * (300 - len(rfc8785.dumps(base)) + extra)
    envelope = env("workspace.create", {"workspace": W, "pad": pad})
    ours = make(max_envelope_bytes=300)
    theirs = Reference(deterministic_ids=True, deterministic_clock=True, max_envelope_bytes=300)
    ra, rb = ours.dispatch(envelope), theirs.dispatch(envelope)
    assert ("error" in ra) == ("error" in rb) == (extra > 0)
    if "error" in rb:
        refused(ra, rb["error"]["code"])
