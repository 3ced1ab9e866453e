"""whisper/1.0, deliberation/1.0 and handoff/1.0 beyond the differential
suite: the deliberate differences from 0.3.3, write-ahead under a failing
store and inside batches, restarts, snapshot/restore, the lapse sweep's own
contract, and the cross-effects (a handoff moves tasks, a lapse applies the
default)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from client import Client, refused
from interaction_diff import B2, BOT, INTERACTION, MEMBERS, A, B, C, W, pair, reference_ids
from support import FailingStore, make

from coordinator import BatchWriteError, Coordinator
from storage import SqliteStore


def client(coord: Any = None) -> Client:
    return Client(coord if coord is not None else ours(), W)


def ours(store: Any = None, **options: Any) -> Coordinator:
    return make(store, enable_chain=True, default_profiles=INTERACTION, **options)


def setup(c: Client) -> str:
    c.setup((A, BOT, B, B2, C))
    return c.new_task()


def ask(c: Client, task: str, whisper_id: str = "w", **params: Any) -> Any:
    params.setdefault("to", A)
    params.setdefault("deadline_ms", 60_000)
    params.setdefault("default_if_lapsed", "d")
    return c.ok("whisper.ask", frm=BOT, task_id=task, question="q", whisper_id=whisper_id, **params)


# -- deliberate differences ------------------------------------------------------

# (method, params, what 0.3.3 answers): chapline answers -32602 and records
# nothing where 0.3.3 crashes (-32603), stores a value its own later calls
# cannot use, or overwrites an object the workspace already holds.
DIFFERENCES = [
    ("whisper.ask", {"to": 5}, "ok"),
    ("whisper.ask", {"to": [A, 5]}, "ok"),
    ("whisper.ask", {"deadline_ms": "1000"}, "ok"),     # 0.3.3 converts with int()
    ("whisper.ask", {"deadline_ms": True}, "ok"),
    ("whisper.ask", {"deadline_ms": [1]}, -32603),
    ("whisper.ask", {"deadline_ms": None}, -32603),
    ("whisper.ask", {"whisper_id": "w"}, "ok"),          # already held: 0.3.3 overwrites it
    ("whisper.answer", {"whisper_id": ["w"], "answer": "x"}, -32603),
    ("deliberate.open", {"rule": 5, "to": B}, -32603),
    ("deliberate.open", {"rule": "all_approve", "to": 5}, -32603),
    ("deliberate.open", {"rule": "weighted_vote:1", "to": B, "weights": "x"}, "ok"),
    ("deliberate.open", {"rule": "weighted_vote:1", "to": B, "weights": {B: "2"}}, "ok"),
    ("deliberate.open", {"rule": "weighted_vote_with_veto:1", "to": B, "veto": [B]}, "ok"),
    ("deliberate.open", {"rule": "all_approve", "to": B, "deliberation_id": "d"}, "ok"),
    ("deliberate.vote", {"deliberation_id": ["d"], "vote": "yea"}, -32603),
    ("handoff.propose", {"to": 5, "tasks": [{"task_id": "$T"}]}, "ok"),
    ("handoff.propose", {"to": [B2], "tasks": [{"task_id": "$T"}]}, "ok"),
    ("handoff.propose", {"to": B2, "tasks": [{"task_id": "$T", "blockers": "x"}]}, "ok"),
    ("handoff.propose", {"to": B2, "tasks": [{"task_id": "$T"}], "context_links": "x"}, "ok"),
    ("handoff.propose", {"to": B2, "tasks": [{"task_id": "$T"}], "handoff_id": "h"}, "ok"),
    ("handoff.accept", {"handoff_id": "h", "accepted_task_ids": "x"}, "ok"),  # 0.3.3: all
]


@pytest.mark.parametrize("method, params, theirs", DIFFERENCES)
def test_deliberate_differences_in_whispers_deliberations_and_handoffs(method: str, params: dict[str, Any], theirs: Any) -> None:
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    p.ok("whisper.ask", frm=BOT, to=A, task_id=t, question="q", deadline_ms=1000,
         default_if_lapsed="d", whisper_id="w")
    p.ok("deliberate.open", frm=A, rule="all_approve", to=[A, B], deliberation_id="d")
    p.ok("handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": t}], handoff_id="h")
    if method == "whisper.ask":
        params = {"to": A, "task_id": t, "question": "q", "deadline_ms": 1000,
                  "default_if_lapsed": "d", **params}
    params = {k: [{"task_id": t, **{x: y for x, y in e.items() if x != "task_id"}} for e in v]
              if k == "tasks" else v for k, v in params.items()}
    frm = {"whisper.answer": A, "handoff.accept": B2}.get(method, BOT if "handoff" in method else A)
    ours = Client(p.target.ours, W)
    count = ours.count()
    x, y = p.target.both(p.envelope(method, frm=frm, **params))
    refused(x, -32602)
    assert "Traceback" not in x["error"]["message"]
    assert (y["error"]["code"] if "error" in y else "ok") == theirs, y
    assert ours.count() == count  # ours recorded nothing


def test_a_held_id_is_never_overwritten():
    c = client()
    t = setup(c)
    ask(c, t, "w", options=[{"id": "a"}])
    c.ok("whisper.answer", frm=A, whisper_id="w", answer_option="a")
    err = c.fail(-32602, "whisper.ask", frm=BOT, to=A, task_id=t, question="q2", deadline_ms=1,
                default_if_lapsed="d", whisper_id="w")
    assert "already in use" in err["message"]
    assert c.target.snapshot(W)["whispers"]["w"]["state"] == "answered"


# -- cross-effects -----------------------------------------------------------------


def test_an_accepted_handoff_moves_the_work_to_the_acceptor():
    c = client()
    t = setup(c)
    c.ok("task.update", frm=BOT, task_id=t, state="in_progress")
    c.ok("handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": t}], handoff_id="h")
    c.fail(-32050, "handoff.propose", frm=B2, to=BOT, tasks=[{"task_id": t}])  # not B2's yet
    c.ok("handoff.accept", frm=B2, handoff_id="h")
    task = c.task(t)
    assert (task["assignee"], task["state"]) == (B2, "in_progress")
    assert task["history"][-1]["note"] == f"handoff accepted from {BOT}"
    c.fail(-32050, "handoff.propose", frm=BOT, to=B, tasks=[{"task_id": t}])   # no longer BOT's
    c.ok("handoff.propose", frm=B2, to=BOT, tasks=[{"task_id": t}], handoff_id="back")
    c.ok("handoff.accept", frm=BOT, handoff_id="back")
    assert c.task(t)["assignee"] == BOT


def test_a_lapsed_whisper_applies_its_default_and_refuses_answers():
    c = client()
    t = setup(c)
    ask(c, t, "w", deadline_ms=1, default_if_lapsed={"ship": False})
    notices = c.target.check_whisper_lapses(W)
    assert [n["params"]["default_applied"] for n in notices] == [{"ship": False}]
    held = c.target.snapshot(W)["whispers"]["w"]
    assert (held["state"], held["default_applied"]) == ("lapsed", {"ship": False})
    c.fail(-32021, "whisper.answer", frm=A, whisper_id="w", answer="too late")
    entry = c.log()[-2]
    assert entry["envelope"]["method"] == "notify.message"
    assert entry["envelope"]["params"]["task_id"] == t
    assert c.ok("audit.verify_chain")["status"] == "verified"


def test_the_sweep_reads_the_injected_clock():
    c = client()
    t = setup(c)
    ask(c, t, "soon", deadline_ms=2000)
    ask(c, t, "later", deadline_ms=10**9)
    asked = c.target.snapshot(W)["whispers"]["soon"]["asked_at"]
    notices = c.target.check_whisper_lapses(W)  # StepClock: +1 s per read
    assert [n["params"]["whisper_id"] for n in notices] == ["soon"]
    assert notices[0]["params"]["ts"] > asked


@pytest.mark.parametrize(
    ("now", "error", "says"),
    [
        ("garbage", ValueError, "now"),
        ("2024-01-01T00:00:00", ValueError, "now"),
        # not a str: refused by the method itself, alike in both builds
        (5, TypeError, "argument 'now' must be .* a str .* or None, not int"),
    ],
)
def test_a_sweep_with_an_unreadable_now_raises_and_changes_nothing(now: Any, error: type, says: str):
    c = client()
    t = setup(c)
    ask(c, t, "w", deadline_ms=1)
    before = c.target.snapshot(W)
    with pytest.raises(error, match=says):
        c.target.check_whisper_lapses(W, now)
    assert c.target.snapshot(W) == before


# -- write-ahead ---------------------------------------------------------------------


def _script(c: Client, t: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        ("whisper.ask", BOT, {"to": A, "task_id": t, "question": "q", "deadline_ms": 1,
                              "default_if_lapsed": "d", "whisper_id": "w2"}),
        ("whisper.answer", A, {"whisper_id": "w", "answer": "x"}),
        ("deliberate.open", A, {"rule": "all_approve", "to": [A], "deliberation_id": "d2"}),
        ("deliberate.comment", B, {"deliberation_id": "d", "comment": "c"}),
        ("deliberate.vote", A, {"deliberation_id": "d", "vote": "yea"}),
        ("deliberate.close", A, {"deliberation_id": "d"}),
        ("handoff.propose", BOT, {"to": B2, "tasks": [{"task_id": t}], "handoff_id": "h2"}),
        ("handoff.accept", B2, {"handoff_id": "h"}),
        ("handoff.decline", B2, {"handoff_id": "h"}),
        ("deliberate.vote", B, {"deliberation_id": "d", "vote": "yea"}),  # refusal -32030
    ]


def _prepared(store: Any) -> tuple[Client, str]:
    c = client(ours(store))
    t = setup(c)
    ask(c, t, "w")
    c.ok("deliberate.open", frm=A, rule="any_one_approves", to=[A], deliberation_id="d")
    c.ok("handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": t}], handoff_id="h")
    return c, t


@pytest.mark.parametrize("step", range(10))
def test_a_failed_write_changes_nothing(step: int):
    store = FailingStore()
    c, t = _prepared(store)
    method, frm, params = _script(c, t)[step]
    before = c.target.snapshot(W)
    store.failing = True
    c.fail(-32900, method, frm=frm, **params)
    assert c.target.snapshot(W) == before
    store.failing = False
    response = c.call(method, frm=frm, **params)  # and the same call then goes through
    if "error" in response:
        refused(response, -32030)
    assert c.target.snapshot(W) != before


def test_a_failed_sweep_raises_and_changes_nothing():
    store = FailingStore()
    c, t = _prepared(store)
    ask(c, t, "soon", deadline_ms=1)
    before = c.target.snapshot(W)
    store.failing = True
    with pytest.raises(OSError, match="disk full"):
        c.target.check_whisper_lapses(W)
    assert c.target.snapshot(W) == before
    store.failing = False
    assert [n["params"]["whisper_id"] for n in c.target.check_whisper_lapses(W)] == ["soon"]


def test_a_failed_batch_undoes_every_call_of_the_workspace():
    store = FailingStore()
    c, t = _prepared(store)
    before = c.target.snapshot(W)
    store.fail_next = 1
    responses = []
    with pytest.raises(BatchWriteError):
        with c.target.batch():
            for method, frm, params in _script(c, t)[:8]:
                responses.append(c.call(method, frm=frm, **params))
    for response in responses:
        refused(response, -32900)
    assert c.target.snapshot(W) == before


def test_a_second_coordinator_on_the_same_store_reloads_and_reruns(tmp_path: Path):
    path = tmp_path / "two.db"
    c, t = _prepared(SqliteStore(path))
    other = client(ours(SqliteStore(path)))
    other.ok("deliberate.vote", frm=A, deliberation_id="d", vote="yea")   # written by the other
    c.fail(-32031, "deliberate.vote", frm=A, deliberation_id="d", vote="nay")  # re-run on fresh state
    assert c.ok("deliberate.close", frm=B, deliberation_id="d")["outcome"] == "approved"


# -- persistence -------------------------------------------------------------------


def test_a_restart_carries_on_where_it_stopped(tmp_path: Path):
    path = tmp_path / "restart.db"
    first = ours(SqliteStore(path), ids=reference_ids())
    c = client(first)
    t = setup(c)
    ask(c, t, "w", options=[{"id": 1}])
    ask(c, t, "gone", deadline_ms=1)
    c.ok("deliberate.open", frm=A, rule="quorum:1", to=[A, B], deliberation_id="d", weights={A: 2})
    c.ok("deliberate.vote", frm=A, deliberation_id="d", vote="yea")
    c.ok("handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": t}], handoff_id="h")
    snapshot = first.snapshot(W)
    first.close()
    again = client(ours(SqliteStore(path)))
    assert again.target.snapshot(W) == snapshot
    again.fail(-32022, "whisper.answer", frm=A, whisper_id="w", answer_option=True)
    again.ok("whisper.answer", frm=A, whisper_id="w", answer_option=1)
    lapsed = again.target.check_whisper_lapses(W, "2030-01-01T00:00:00Z")
    assert [n["params"]["whisper_id"] for n in lapsed] == ["gone"]
    again.fail(-32031, "deliberate.vote", frm=A, deliberation_id="d", vote="nay")
    again.ok("deliberate.close", frm=B, deliberation_id="d")
    again.ok("handoff.accept", frm=B2, handoff_id="h")
    assert again.ok("audit.verify_chain")["status"] == "verified"


def test_snapshot_and_restore_carry_the_interaction_objects():
    c, t = _prepared(None)
    c.ok("whisper.answer", frm=A, whisper_id="w", answer="x")
    c.ok("deliberate.vote", frm=A, deliberation_id="d", vote="yea")
    data = c.target.snapshot(W)
    assert set(data["whispers"]) == {"w"} and set(data["deliberations"]) == {"d"}
    assert set(data["handoffs"]) == {"h"}
    fresh = ours()
    fresh.restore(data)
    assert fresh.snapshot(W) == data
    as_arrays = {**data, **{k: list(data[k].values()) for k in ("whispers", "deliberations", "handoffs")}}
    other = ours()
    other.restore(as_arrays)
    assert other.snapshot(W) == data
    moved = client(other)
    moved.ok("deliberate.close", frm=C, deliberation_id="d")
    moved.ok("handoff.accept", frm=B2, handoff_id="h")


def test_the_new_profiles_are_advertisable_and_gated_by_name():
    c = client(make())  # library default: core + review
    c.setup((A, BOT))
    t = c.new_task()
    c.fail(-32601, "whisper.ask", frm=BOT, to=A, task_id=t, question="q", deadline_ms=1,
          default_if_lapsed="d")
    c.ok("workspace.set_profiles", frm=A, profiles=["whisper/1.0", "deliberation/1.0", "handoff/1.0"])
    ask(c, t)
    c.ok("deliberate.open", frm=A, rule="all_approve", to=A)
    c.ok("handoff.propose", frm=BOT, to=A, tasks=[{"task_id": t}])
