"""Write-ahead persistence, restarts, snapshot/restore, two writers on one
database (a SQLite file, a PostgreSQL schema), and batches (SPECIFICATION.md,
"Write-ahead persistence" and "Batches")."""

from __future__ import annotations

import copy
import random

import pytest
from client import Client, env, refused
from support import (
    ALICE,
    BOB,
    BOT,
    WS,
    FailingStore,
    make,
    s0,
    stored,
)

from coordinator import BatchWriteError, RestoreError, public_jwk
from storage import MemoryStore, PostgresStore, SqliteStore, StoreChange, StoreConflictError


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request, tmp_path):
    """Opens a new store handle on one empty database per test (a SQLite file
    or a PostgreSQL schema): each call is another connection, as another
    process or a restart would have."""
    if request.param == "sqlite":
        path = str(tmp_path / "store.db")
        return lambda: SqliteStore(path)
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn)


def visible(coord, ws=WS):
    """Everything a caller can see of a workspace, plus its objects."""
    c = Client(coord, ws)
    return {
        "describe": c.describe(),
        "log": c.log(),
        "snapshot": coord.snapshot(ws),
    }


# =============================================================================
# Write-ahead: a failed write leaves no trace
# =============================================================================


@pytest.fixture
def on_failing_store():
    """The usual start (support.s0) on a FailingStore: the store, the
    coordinator, a client and task T's id."""
    store = FailingStore()
    coord = make(store)
    c = Client(coord)
    T = s0(c)
    return store, coord, c, T


CALLS = [
    ("task.update", lambda T: {"from": BOT, "task_id": T, "state": "in_progress"}),
    ("task.complete", lambda T: {"from": BOT, "task_id": T, "output": {"o": 1}}),
    ("task.create", lambda T: {"from": ALICE, "assignee": BOT, "kind": "k", "input": {}, "idempotency_key": "K"}),
    ("participant.join", lambda T: {"from": BOB, "type": "human"}),
    ("participant.leave", lambda T: {"from": BOT}),
    ("workspace.set_profiles", lambda T: {"from": ALICE, "profiles": ["core/1.0"]}),
    # a refusal 0.3.3 records: its write fails the same way
    ("workspace.set_profiles", lambda T: {"from": BOT, "profiles": ["core/1.0"]}),
]


@pytest.mark.parametrize("method, params", CALLS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CALLS)])
def test_failed_write_is_an_error_and_changes_nothing(on_failing_store, method, params, caplog):
    store, coord, c, T = on_failing_store
    before = visible(coord)
    held = stored(store)
    store.failing = True
    sent = c.envelope(method, **params(T))
    r = c.send(sent)
    assert r["id"] == sent["id"] and "result" not in r
    e = refused(r, -32900)
    # the store's own words go to the log under the id the answer carries
    log_id = e["data"]["log_id"]
    assert e["data"] == {"workspace": WS, "log_id": log_id} and log_id.startswith("log_")
    assert WS in e["message"] and log_id in e["message"] and "retry" in e["message"]
    assert "disk full" not in e["message"]
    logged = [r for r in caplog.records if log_id in r.getMessage()]
    assert len(logged) == 1 and "disk full" in str(logged[0].exc_info[1])
    store.failing = False
    assert visible(coord) == before
    assert stored(store) == held
    # the same call now goes through as if the failed one never happened
    r = c.send(dict(sent, id="again"))
    assert c.describe()["audit_count"] == 5
    entry = c.log()[-1]
    assert entry["seq"] == 4
    assert (entry.get("envelope") or entry.get("request"))["id"] == "again"
    assert c.ok("audit.verify_chain")["status"] == "verified"
    # and a restart shows the same
    assert visible(make(store)) == visible(coord)


def test_failed_idempotent_create_leaves_no_key(on_failing_store):
    store, coord, c, T = on_failing_store
    store.failing = True
    c.fail(-32900, "task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="K")
    store.failing = False
    r1 = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="K")
    r2 = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="K")
    assert r1 == r2 and c.describe()["task_count"] == 2


def test_failed_workspace_create_and_join_create_nothing():
    store = FailingStore()
    coord = make(store)
    store.failing = True
    Client(coord, "w1").fail(-32900, "workspace.create")
    Client(coord, "w2").fail(-32900, "participant.join", frm=ALICE, type="human")
    assert coord.workspace_ids() == []
    Client(coord, "w1").fail(-32602, "workspace.describe")
    assert store.load() == []
    store.failing = False
    c = Client(coord, "w2")
    c.ok("participant.join", frm=ALICE, type="human")
    assert c.describe()["audit_count"] == 1


def test_failed_write_in_one_workspace_leaves_others_alone(on_failing_store):
    store, coord, c, T = on_failing_store
    other = Client(coord, "w2")
    other.ok("workspace.create")
    store.fail_next = 1
    c.fail(-32900, "task.update", frm=BOT, task_id=T, state="in_progress")
    other.ok("participant.join", frm=ALICE, type="human")
    assert other.describe()["audit_count"] == 2
    assert c.describe()["audit_count"] == 4


class _AlwaysConflicts(MemoryStore):
    """A store that reports another writer on every non-replace write."""

    conflicting = False

    def apply(self, change: StoreChange) -> None:
        if self.conflicting and not change.replace:
            raise StoreConflictError(change.id, change.base + 1, change.base)
        super().apply(change)


def test_persistent_conflict_is_an_error_and_changes_nothing():
    store = _AlwaysConflicts()
    coord = make(store)
    c = Client(coord)
    T = s0(c)
    before = visible(coord)
    store.conflicting = True
    e = c.fail(-32901, "task.update", frm=BOT, task_id=T, state="in_progress")
    assert "Retry" in e["message"] and e["data"]["workspace"] == WS
    store.conflicting = False
    assert visible(coord) == before


# =============================================================================
# Restart from SQLite
# =============================================================================


def _workload(c: Client) -> None:
    T = s0(c, extra_humans=(BOB,))
    c.ok("task.update", frm=BOT, task_id=T, state="in_progress")
    c.ok("participant.join", frm="human:kim", type="human", jwks={"keys": [public_jwk(bytes([1]) * 32, "b1")]})
    c.ok("participant.rotate_key", frm="human:kim", old_kid="b1", new_jwk=public_jwk(bytes([2]) * 32, "b2"))
    c.fail(-32011, "workspace.set_profiles", frm=BOT, profiles=["core/1.0"])  # recorded refusal
    R = c.ok("task.create", frm=ALICE, assignee=BOT, kind="r", input={"a": [1]}, review_required=True,
             idempotency_key="idem")["task_id"]
    c.ok("task.complete", frm=BOT, task_id=R, output={"o": "x"})
    c.ok("task.complete", frm=BOT, task_id=T, output={"done": True}, confidence=1)
    c.ok("participant.leave", frm=BOB)


def test_restart_from_the_store_gives_the_same_workspaces(open_store):
    coord = make(open_store())
    _workload(Client(coord))
    second = Client(coord, "w2")
    second.ok("participant.join", frm=ALICE, type="human")
    before = {ws: visible(coord, ws) for ws in (WS, "w2")}
    coord.close()

    again = make(open_store())
    assert sorted(again.workspace_ids()) == sorted([WS, "w2"])
    for ws in (WS, "w2"):
        assert visible(again, ws) == before[ws]
    c = Client(again)
    assert c.ok("audit.verify_chain")["entries_total"] == before[WS]["describe"]["audit_count"]
    # the idempotency key came back too
    assert c.ok("task.create", frm=ALICE, assignee=BOT, kind="r", input={}, idempotency_key="idem")[
        "state"
    ] == "review_requested"
    # and the restarted coordinator carries on the chain
    c.ok("participant.join", frm=BOB, type="human")
    assert c.ok("audit.verify_chain")["status"] == "verified"
    again.close()


def test_an_unreadable_stored_object_fails_only_the_calls_that_use_it(tmp_path):
    import sqlite3

    path = str(tmp_path / "damaged.db")
    c = Client(make(SqliteStore(path)))
    T = s0(c)
    other = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={})["task_id"]
    db = sqlite3.connect(path)
    with db:
        db.execute(
            "UPDATE chap_objects SET data = '{\"id\": 5}' WHERE collection = 'tasks' AND id = ?", (T,)
        )
    db.close()
    again = Client(make(SqliteStore(path)))
    assert again.describe()["task_count"] == 2  # objects are read when used
    err = again.fail(-32903, "task.update", frm=BOT, task_id=T, state="in_progress")
    assert "cannot be read" in err["message"] and "repair or delete" in err["message"]
    assert err["data"] == {"workspace": WS, "collection": "tasks", "key": T}
    assert "Traceback" not in str(err)
    assert again.ok("task.update", frm=BOT, task_id=other, state="in_progress")
    assert again.describe()["audit_count"] == 6


def test_memory_and_durable_stores_hold_the_same(open_store):
    mem = MemoryStore()
    sql = open_store()
    _workload(Client(make(mem)))
    _workload(Client(make(sql)))
    assert stored(mem) == stored(sql)
    sql.close()


# =============================================================================
# snapshot() / restore()
# =============================================================================


@pytest.fixture
def source():
    coord = make()
    _workload(Client(coord))
    return coord


def _arrays(data):
    """The same snapshot with every collection as an array of objects."""
    out = copy.deepcopy(data)
    for name in ("members", "tasks", "overrides", "whispers", "deliberations", "handoffs",
                 "snapshots", "route_decisions"):
        out[name] = list(out[name].values())
    return out


@pytest.mark.parametrize("shape", ["keyed", "arrays"])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_snapshot_restore_round_trip(source, tmp_path, shape, kind):
    data = source.snapshot(WS)
    assert isinstance(data["members"], dict) and isinstance(data["audit"], list)
    # JSON-safe: survives a trip through JSON text
    import json
    assert json.loads(json.dumps(data)) == data
    given = _arrays(data) if shape == "arrays" else copy.deepcopy(data)
    store = MemoryStore() if kind == "memory" else SqliteStore(str(tmp_path / "r.db"))
    target = make(store)
    assert target.restore(given) == [WS]
    assert visible(target) == visible(source)
    assert target.snapshot(WS) == data
    assert Client(target).ok("audit.verify_chain")["status"] == "verified"
    # written to the store: a new coordinator on it sees the same
    assert visible(make(store)) == visible(source)
    # and it carries on
    Client(target).ok("participant.join", frm="human:zed", type="human")
    assert Client(target).ok("audit.verify_chain")["entries_total"] == len(data["audit"]) + 1


def test_restore_replaces_what_the_store_held(source):
    store = MemoryStore()
    target = make(store)
    c = Client(target)
    s0(c)
    c.ok("participant.join", frm="human:other", type="human")
    with pytest.raises(RestoreError, match="overwrite=True"):  # it would lose the join
        target.restore(source.snapshot(WS))
    target.restore(source.snapshot(WS), overwrite=True)
    assert visible(target) == visible(source)
    assert visible(make(store)) == visible(source)


def test_restore_several_workspaces(source):
    second = Client(source, "w2")
    second.ok("workspace.create")
    target = make()
    assert target.restore({"workspaces": [source.snapshot(WS), source.snapshot("w2")]}) == [WS, "w2"]
    assert visible(target, "w2") == visible(source, "w2")


def _tamper_entry(data):
    data["audit"][3]["envelope"]["params"]["kind"] = "forged"


def _tamper_head(data):
    data["chain_head"] = "sha256:" + "1" * 64


def _drop_entry(data):
    del data["audit"][2]


def _drop_prev(data):
    del data["audit"][5]["prev_hash"]


@pytest.mark.parametrize("tamper", [_tamper_entry, _tamper_head, _drop_entry, _drop_prev])
def test_restore_refuses_a_chain_that_does_not_verify(source, tamper):
    data = source.snapshot(WS)
    tamper(data)
    store = MemoryStore()
    target = make(store)
    c = Client(target)
    c.ok("workspace.create")
    before = visible(target)
    with pytest.raises(RestoreError) as info:
        target.restore(data)
    assert WS in str(info.value)
    assert visible(target) == before
    assert visible(make(store)) == before


def test_restore_refuses_bad_data_and_writes_nothing(source):
    store = MemoryStore()
    target = make(store)
    good = source.snapshot(WS)
    for bad in [
        [],
        {"no": "id"},
        dict(good, audit="nope"),
        dict(good, members=5),
        dict(good, members=[{"no": "uri"}]),
    ]:
        if bad == []:
            assert target.restore(bad) == []
            continue
        with pytest.raises((RestoreError, ValueError)):
            target.restore(bad)
    # a batch of restores is checked whole before anything is written
    with pytest.raises(RestoreError):
        target.restore([good, {"id": "w9", "audit": [{"seq": 5}]}])
    assert target.workspace_ids() == [] and store.load() == []


# =============================================================================
# Two coordinators on one database
# =============================================================================


def test_two_coordinators_interleaving_lose_nothing(open_store):
    first = make(open_store())
    a = Client(first)
    T = s0(a, extra_humans=(BOB,))
    second = make(open_store())  # loads the workspace as it is now
    b = Client(second)
    b.n = 1000
    rng = random.Random(7)
    acknowledged = []
    refused_ids = []
    tasks = [T]
    for step in range(60):
        client = a if rng.random() < 0.5 else b
        kind = rng.choice(["create", "update", "join", "refused"])
        if kind == "create":
            sent = client.envelope("task.create", frm=ALICE, assignee=BOT, kind="k", input={"s": step})
        elif kind == "update":
            sent = client.envelope("task.update", frm=BOT, task_id=rng.choice(tasks), state="in_progress")
        elif kind == "join":
            sent = client.envelope("participant.join", frm=f"human:p{step}", type="human")
        else:
            sent = client.envelope("workspace.set_profiles", frm=BOT, profiles=["core/1.0"])
        r = client.send(sent)
        if "result" in r:
            acknowledged.append(sent["id"])
            if kind == "create":
                tasks.append(r["result"]["task_id"])
        else:
            refused(r, (-32011, -32602))
            if r["error"]["code"] == -32011:
                refused_ids.append(sent["id"])
    log = Client(make(open_store())).log()
    ids = [(e.get("envelope") or e.get("request"))["id"] for e in log]
    assert [e["seq"] for e in log] == list(range(len(log)))
    # every acknowledged call is in the log exactly once, and so is every
    # recorded refusal; nothing else is
    setup_ids = ids[:5]
    assert sorted(ids[5:]) == sorted(acknowledged + refused_ids)
    assert len(set(ids)) == len(ids) and len(setup_ids) == 5
    for coord in (first, second, make(open_store())):
        c = Client(coord)
        c.ok("participant.join", frm=ALICE, type="human")  # catches up on conflict
        v = c.ok("audit.verify_chain")
        assert v["status"] == "verified"
    final = Client(make(open_store()))
    assert final.ok("audit.verify_chain")["entries_total"] == len(log) + 3


def test_second_coordinator_sees_the_other_writers_state_after_a_conflict(open_store):
    first = make(open_store())
    a = Client(first)
    T = s0(a)
    second = make(open_store())
    b = Client(second)
    b.n = 100
    a.ok("task.update", frm=BOT, task_id=T, state="in_progress")
    a.ok("task.complete", frm=BOT, task_id=T, output={})
    # b still holds T as created; its call conflicts, reloads, and is re-run on
    # the fresh state, where T is completed
    e = b.fail(-32602, "task.complete", frm=BOT, task_id=T)
    assert "completed" in e["message"]
    assert b.describe()["audit_count"] == 6
    b.ok("participant.join", frm=BOB, type="human")
    # a is now the stale one: its next write conflicts, and after the reload
    # it holds b's join too
    a.ok("participant.join", frm="human:carol", type="human")
    assert [m["uri"] for m in a.describe()["members"]] == [ALICE, BOT, BOB, "human:carol"]
    assert a.describe()["audit_count"] == 8


def test_join_auto_create_race(open_store):
    first, second = make(open_store()), make(open_store())
    a, b = Client(first, "wnew"), Client(second, "wnew")
    b.n = 50
    a.ok("participant.join", frm=ALICE, type="human")
    # b did not know wnew: its create conflicts, it reloads and re-runs the join
    b.ok("participant.join", frm=BOB, type="human")
    d = Client(make(open_store()), "wnew").describe()
    assert [m["uri"] for m in d["members"]] == [ALICE, BOB] and d["audit_count"] == 2
    assert Client(make(open_store()), "wnew").ok("audit.verify_chain")["status"] == "verified"


# =============================================================================
# Batches
# =============================================================================


class _Recording(FailingStore):
    pass


def test_batch_writes_one_change_per_workspace():
    store = _Recording()
    heard = []
    coord = make(store, on_audit=lambda w, e: heard.append((w, e.seq)))
    c, d = Client(coord), Client(coord, "w2")
    T = s0(c)
    store.applied.clear()
    heard.clear()
    with coord.batch():
        r1 = c.call("task.update", frm=BOT, task_id=T, state="in_progress")
        r2 = d.call("workspace.create")
        r3 = c.call("task.complete", frm=BOT, task_id=T, output={})
        r4 = d.call("participant.join", frm=ALICE, type="human")
        # calls in a batch see each other's effects at once
        assert c.describe()["audit_count"] == 6
        assert len(c.log()) == 6
        assert heard == []  # nothing is durable yet
    assert all("result" in r for r in (r1, r2, r3, r4))
    assert [(ch.id, ch.base, ch.version, len(ch.entries)) for ch in store.applied] == [
        (WS, 4, 6, 2), ("w2", 0, 2, 2),
    ]
    assert sorted(heard) == sorted([(WS, 4), (WS, 5), ("w2", 0), ("w2", 1)])
    assert [s for w, s in heard if w == WS] == [4, 5]
    assert visible(make(store)) == visible(coord)
    assert c.ok("audit.verify_chain")["status"] == "verified"


def test_failed_batch_undoes_every_call_and_rewrites_responses():
    store = _Recording()
    heard = []
    coord = make(store, on_audit=lambda w, e: heard.append(e.seq))
    c = Client(coord)
    T = s0(c)
    d = Client(coord, "w2")
    before = visible(coord)
    held = stored(store)
    heard.clear()
    responses = []
    with pytest.raises(BatchWriteError) as info:
        with coord.batch():
            responses.append(c.call("task.update", frm=BOT, task_id=T, state="in_progress"))
            responses.append(c.call("participant.join", frm=BOB, type="human"))
            responses.append(c.call("workspace.set_profiles", frm=BOT, profiles=["core/1.0"]))
            responses.append(d.call("workspace.create"))
            responses.append(c.call("task.create", frm=ALICE, assignee=BOT, kind="k", input={},
                                    idempotency_key="B"))
            store.failing = True
    store.failing = False
    assert info.value.error.code == -32900
    for r in responses:
        refused(r, -32900)
    assert visible(coord) == before
    assert stored(store) == held
    assert coord.workspace_ids() == [WS]
    assert heard == []
    # the same calls now succeed from the old state
    assert c.ok("task.update", frm=BOT, task_id=T, state="in_progress") == {"state": "in_progress"}
    r = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={}, idempotency_key="B")
    assert c.describe()["task_count"] == 2 and r["state"] == "created"
    assert c.ok("audit.verify_chain")["entries_total"] == 6


class _FailsFor(MemoryStore):
    """Refuses writes to one workspace only."""

    def __init__(self, workspace: str) -> None:
        super().__init__()
        self.workspace = workspace
        self.failing = False

    def apply(self, change: StoreChange) -> None:
        if self.failing and change.id == self.workspace:
            raise OSError("disk full (injected)")
        super().apply(change)


def test_a_batch_keeps_the_workspaces_whose_write_succeeded():
    store = _FailsFor("w2")
    heard = []
    coord = make(store, on_audit=lambda w, e: heard.append((w, e.seq)))
    c, d = Client(coord), Client(coord, "w2")
    T = s0(c)
    d.ok("workspace.create")
    heard.clear()
    store.failing = True
    with pytest.raises(BatchWriteError) as info:
        with coord.batch():
            kept = c.call("task.update", frm=BOT, task_id=T, state="in_progress")
            lost = d.call("participant.join", frm=ALICE, type="human")
    store.failing = False
    assert info.value.error.code == -32900 and info.value.error.data["workspace"] == "w2"
    assert kept == {"jsonrpc": "2.0", "id": kept["id"], "result": {"state": "in_progress"}}
    refused(lost, -32900)
    assert heard == [(WS, 4)]
    # what was answered with a result is durable; what was not left no trace
    again = make(store)
    assert Client(again).describe()["audit_count"] == 5
    assert Client(again, "w2").describe()["members"] == []
    assert d.describe()["members"] == []


def test_a_batch_that_conflicts_reruns_its_calls_on_the_fresh_state(open_store):
    first = make(open_store())
    c1 = Client(first)
    T = s0(c1)
    second = make(open_store())
    c2 = Client(second)
    with first.batch():
        r1 = c1.call("task.update", frm=BOT, task_id=T, state="in_progress")
        r2 = c1.call("participant.join", frm=BOB, type="human")
        # another writer appends to the same workspace before the batch writes
        c2.ok("participant.join", frm="human:carol", type="human")
    assert r1["result"] == {"state": "in_progress"} and r2["result"] == {"joined": True, "as": BOB}
    fresh = Client(make(open_store()))
    log = fresh.log()
    assert [e["envelope"]["method"] for e in log[-3:]] == [
        "participant.join", "task.update", "participant.join",
    ]
    assert [e["envelope"]["params"]["from"] for e in log[-3:]] == ["human:carol", BOT, BOB]
    assert fresh.ok("audit.verify_chain")["status"] == "verified"
    assert c1.describe() == fresh.describe()


def test_exception_inside_a_batch_undoes_it():
    store = _Recording()
    coord = make(store)
    c = Client(coord)
    T = s0(c)
    before = visible(coord)
    with pytest.raises(KeyError):
        with coord.batch():
            r = c.call("task.update", frm=BOT, task_id=T, state="in_progress")
            assert r["result"] == {"state": "in_progress"}
            raise KeyError("caller bug")
    assert "result" not in r and "abandoned" in r["error"]["data"]["detail"]
    assert visible(coord) == before
    assert visible(make(store)) == before


def test_unrecorded_calls_in_a_batch_write_nothing():
    store = _Recording()
    coord = make(store)
    c = Client(coord)
    s0(c)
    store.applied.clear()
    with coord.batch():
        c.describe()
        c.fail(-32011, "task.update", frm="human:ghost", task_id="x", state="in_progress")
    assert store.applied == []


def test_mutating_responses_and_listener_entries_changes_nothing_held():
    seen = []
    coord = make(on_audit=lambda w, e: seen.append(e))
    c = Client(coord)
    T = s0(c)
    c.ok("participant.join", frm=BOB, type="human", capabilities={"kinds": ["k"]})
    before = visible(coord)
    described = c.describe()
    described["members"][-1]["capabilities"]["kinds"].append("forged")
    for entry in seen:
        entry.envelope["params"]["forged"] = True
    c.ok("task.update", frm=BOT, task_id=T, state="in_progress")
    c.ok("review.request", frm=BOT, task_id=T, to=[ALICE], artefact={"body": "b"})
    applied = c.ok("decide.override", frm=ALICE, task_id=T, rationale="r",
                   diff=[{"op": "replace", "path": "/body", "value": "c"}])["applied"]
    applied["body"] = "forged"
    snap = coord.snapshot(WS)
    assert snap["tasks"][T]["output"] == {"body": "c"}
    assert before["describe"]["members"] == c.describe()["members"]
    assert all("forged" not in e["envelope"]["params"] for e in c.log())
    assert c.ok("audit.verify_chain")["status"] == "verified"


def test_mutating_the_callers_envelope_after_the_call_changes_nothing_held():
    """A caller's dict is copied before the pipeline keeps any part of it:
    changing its nested dicts and lists afterwards reaches neither the held
    state nor the log."""
    coord = make()
    c = Client(coord)
    s0(c)
    join = {"jsonrpc": "2.0", "id": "j", "method": "participant.join",
            "params": {"workspace": WS, "from": BOB, "type": "human", "capabilities": {"kinds": ["k"]}}}
    create = {"jsonrpc": "2.0", "id": "t", "method": "task.create",
              "params": {"workspace": WS, "from": ALICE, "assignee": BOT, "kind": "k",
                         "input": {"doc": {"lines": ["a", "b"]}, "n": 1}}}
    assert "result" in coord.dispatch(join)
    task = coord.dispatch(create)["result"]["task_id"]
    before = visible(coord)
    join["params"]["capabilities"]["kinds"].append("forged")
    join["params"]["type"] = "agent"
    create["params"]["input"]["doc"]["lines"][0] = "forged"
    create["params"]["input"]["n"] = 2
    assert visible(coord) == before
    assert coord.snapshot(WS)["tasks"][task]["input"] == {"doc": {"lines": ["a", "b"]}, "n": 1}
    logged = [e["envelope"]["params"] for e in c.log() if e["envelope"]["method"] == "task.create"]
    assert logged[-1]["input"] == {"doc": {"lines": ["a", "b"]}, "n": 1}
    assert c.ok("audit.verify_chain")["status"] == "verified"


class _CountingSqlite(SqliteStore):
    def __init__(self, path):
        super().__init__(path)
        self.calls: list[str] = []

    def apply(self, change):
        self.calls.append("apply")
        super().apply(change)

    def apply_many(self, changes):
        self.calls.append("apply_many")
        return super().apply_many(changes)


def test_a_batch_over_several_workspaces_commits_once(tmp_path):
    path = str(tmp_path / "many.db")
    store = _CountingSqlite(path)
    coord = make(store)
    c, d = Client(coord), Client(coord, "w2")
    T = s0(c)
    store.calls.clear()
    with coord.batch():
        c.ok("task.update", frm=BOT, task_id=T, state="in_progress")
        d.ok("workspace.create")
        d.ok("participant.join", frm=ALICE, type="human")
    assert store.calls == ["apply_many"]
    again = make(SqliteStore(path))
    assert Client(again).describe()["audit_count"] == 5
    assert [m["uri"] for m in Client(again, "w2").describe()["members"]] == [ALICE]


# -- findings of the whole-repository review -----------------------------------


def test_values_that_would_not_load_again_are_refused(open_store):
    c = Client(make(open_store()))
    c.fail(-32602, "workspace.create", routing_policy_uri=5)
    c.ok("workspace.create")
    c.fail(-32602, "participant.join", frm=ALICE, type="human", role=7)
    c.ok("participant.join", frm=ALICE, type="human", role="reviewer")
    again = Client(make(open_store()))
    assert [m["role"] for m in again.describe()["members"]] == ["reviewer"]


def test_a_replay_in_a_failed_batch_is_answered_with_the_error():
    store = FailingStore()
    coord = make(store)
    c = Client(coord)
    s0(c)
    store.failing = True
    with pytest.raises(BatchWriteError):
        with coord.batch():
            first = c.call("task.create", frm=ALICE, assignee=BOT, kind="k", input={},
                           idempotency_key="K")
            replay = c.call("task.create", frm=ALICE, assignee=BOT, kind="k", input={},
                            idempotency_key="K")
            read = c.call("workspace.describe")
            assert read["result"]["task_count"] == 2  # provisional
    store.failing = False
    for r in (first, replay, read):
        refused(r, -32900)
    assert c.describe()["task_count"] == 1


def test_a_replay_in_a_conflicting_batch_is_run_again(open_store):
    one = make(open_store())
    c1 = Client(one)
    s0(c1)
    c2 = Client(make(open_store()))
    with one.batch():
        first = c1.call("task.create", frm=ALICE, assignee=BOT, kind="k", input={},
                        idempotency_key="K")
        replay = c1.call("task.create", frm=ALICE, assignee=BOT, kind="k", input={},
                         idempotency_key="K")
        c2.ok("participant.join", frm=BOB, type="human")
    assert first["result"]["task_id"] == replay["result"]["task_id"]
    fresh = make(open_store())
    assert fresh.snapshot(WS)["tasks"].keys() >= {first["result"]["task_id"]}
    assert Client(fresh).describe()["task_count"] == 2


def test_a_join_in_a_batch_finds_a_workspace_another_writer_created(open_store):
    from coordinator.engine.ids import random_ids

    a = make(open_store())
    # a generated id: the workspace is stored with no entries, so only a
    # lookup (not the base check) can tell that it exists
    b = make(open_store(), ids=random_ids)
    theirs = Client(b, None).call("workspace.create", mode_ceiling="shadow")["result"]["workspace"]
    with a.batch():
        r = Client(a, theirs).call("participant.join", frm=ALICE, type="human")
    assert r["result"]["joined"] is True
    assert Client(make(open_store()), theirs).describe()["mode_ceiling"] == "shadow"


def test_generated_ids_never_reuse_a_held_one(open_store):
    from coordinator import CounterIds

    c = Client(make(open_store(), ids=CounterIds()))
    s0(c)
    again = Client(make(open_store(), ids=CounterIds()))
    again.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={})
    assert again.describe()["task_count"] == 2


def test_unimplemented_default_profiles_are_refused():
    with pytest.raises(ValueError, match="gossip/1.0"):
        make(default_profiles=("core/1.0", "gossip/1.0"))


def test_restore_takes_back_what_snapshot_gave_for_an_empty_chained_workspace():
    coord = make()
    wid = Client(coord, None).call("workspace.create")["result"]["workspace"]
    again = make()
    assert again.restore(coord.snapshot(wid)) == [wid]
    assert again.snapshot(wid) == coord.snapshot(wid)


def test_restore_refuses_malformed_entries_without_a_chain():
    bad = {"id": "w", "created": "t", "chain_enabled": False,
           "audit": [{"seq": 0, "arrived": "t", "envelope": "junk"}]}
    with pytest.raises(RestoreError, match="entry 0"):
        make().restore(bad)


def test_dispatch_never_raises_and_answers_deep_or_broken_input():
    import time

    coord = make(clock=lambda: time.time() * 1000)  # a float clock
    assert "result" in coord.dispatch(
        {"jsonrpc": "2.0", "id": 1, "method": "workspace.create", "params": {"workspace": "w"}}
    )
    deep = b'{"jsonrpc":"2.0","id":1,"method":"workspace.describe","params":{"x":' + b"[" * 5000 + b"]" * 5000 + b"}}"
    refused(coord.dispatch(deep), -32600)
    nested: dict = {"a": 1}
    for _ in range(5000):
        nested = {"a": nested}
    r = coord.dispatch({"jsonrpc": "2.0", "id": 1, "method": "workspace.describe", "params": {"x": nested}})
    refused(r, -32600)
    # a raw lone surrogate in JSON text is read as in the dict: an unknown method
    r = coord.dispatch('{"jsonrpc":"2.0","id":1,"method":"a\ud800"}')
    refused(r, -32601)
    assert r["id"] == 1
    assert r["error"] == coord.dispatch({"jsonrpc": "2.0", "id": 1, "method": "a\ud800"})["error"]


def test_a_failed_batch_puts_back_what_it_added_and_deleted_in_order():
    store = FailingStore()
    coord = make(store)
    c = Client(coord)
    s0(c)
    c.ok("participant.join", frm=BOB, type="human")
    before = [m["uri"] for m in c.describe()["members"]]
    store.failing = True
    with pytest.raises(BatchWriteError):
        with coord.batch():
            c.ok("participant.join", frm="human:carol", type="human")
            c.ok("participant.leave", frm=ALICE)
            c.ok("participant.join", frm=ALICE, type="human")
    store.failing = False
    assert [m["uri"] for m in c.describe()["members"]] == before == [ALICE, BOT, BOB]
    assert visible(make(store))["describe"]["members"] == c.describe()["members"]


def test_after_a_batch_memory_keeps_objects_in_the_stores_order(open_store):
    coord = make(open_store())
    c = Client(coord)
    s0(c)
    c.ok("participant.join", frm=BOB, type="human")
    with coord.batch():
        c.ok("participant.leave", frm=ALICE)
        c.ok("participant.join", frm=ALICE, type="human", role="admin")
        c.ok("participant.join", frm="human:carol", type="human")
    fresh = Client(make(open_store()))
    assert [m["uri"] for m in c.describe()["members"]] == [ALICE, BOT, BOB, "human:carol"]
    assert c.describe()["members"] == fresh.describe()["members"]


def test_restore_inside_a_batch_is_refused():
    coord = make()
    c = Client(coord)
    s0(c)
    snap = coord.snapshot(WS)
    with coord.batch():
        c.ok("participant.join", frm=BOB, type="human")
        with pytest.raises(RestoreError, match="batch"):
            coord.restore(snap)
    assert Client(make(coord.store)).describe() == c.describe()


def test_dispatch_answers_even_when_the_envelope_misbehaves():
    class Hostile(dict):
        def get(self, *args):
            raise RuntimeError("boom")

    r = make().dispatch(Hostile(jsonrpc="2.0", id=7, method="workspace.describe"))
    refused(r, -32603)
    assert r["id"] == 7


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_two_coordinators_never_overwrite_each_others_new_workspace(tmp_path, kind):
    # Same id source, one store: both generate the same workspace id. The
    # batch holds the second creator's write back until the first has
    # written, so the base check alone (0 entries either way) cannot tell
    # them apart; the store refuses the second create and it runs again.
    store = MemoryStore() if kind == "memory" else SqliteStore(str(tmp_path / "s.db"))
    first, second = make(store), make(store)
    with second.batch():
        late = second.dispatch(env("workspace.create", {}))
        early = first.dispatch(env("workspace.create", {}))
        assert late["result"]["workspace"] == early["result"]["workspace"]
    taken, other = early["result"]["workspace"], late["result"]["workspace"]
    assert taken != other
    assert sorted(r.id for r in store.load()) == sorted([taken, other])
    assert first.snapshot(taken) == second.snapshot(taken)
