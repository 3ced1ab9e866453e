"""review/1.0 and modes/1.0: behaviour through `Coordinator.dispatch`.

Facts come from probing chap-coordinator 0.3.3 as a black box (and
SPECIFICATION.md, "Review and modes"). Where chapline deliberately
refuses input the reference accepts or crashes on, the test says so.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from client import Client
from hypothesis import given
from hypothesis import strategies as st
from support import ours, recorded_refusal, run_both

from coordinator import canonical_bytes

CORE_REVIEW = ("core/1.0", "review/1.0")
WITH_MODES = ("core/1.0", "review/1.0", "modes/1.0")
ALICE, BOT, BOB, CAROL = "human:alice", "agent:bot", "human:bob", "human:carol"
ART = {"title": "Q3 summary", "body": "draft", "n": [1, 2]}


def sha(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_bytes(value)).hexdigest()


@pytest.fixture
def client() -> Client:
    """core+review; alice (admin), bot, bob, carol; no task yet."""
    client = Client(ours(CORE_REVIEW))
    client.setup()
    return client


@pytest.fixture
def modes_client() -> Client:
    """The same members in a workspace that advertises modes/1.0."""
    client = Client(ours(WITH_MODES))
    client.setup()
    return client


def open_review(client: Client, artefact: Any = ART, to: Any = (ALICE,), **params: Any) -> str:
    task = client.new_task()
    params.setdefault("to", list(to) if isinstance(to, tuple) else to)
    result = client.ok("review.request", frm=BOT, task_id=task, artefact=artefact, **params)
    assert result == {"state": "review_requested", "review_id": task}
    return task


def set_state(client: Client, mutate: Any) -> None:
    """Edit the stored workspace through snapshot/restore (the public API).

    Used to reach states only control/1.0 can make (cancelled, superseded,
    paused tasks, paused members, a lowered ceiling), which chapline does
    not implement yet.
    """
    snapshot = client.target.snapshot(client.workspace)
    mutate(snapshot)
    client.target.restore(snapshot)


# -- review.request ----------------------------------------------------------


def test_review_request_opens_a_review(client: Client) -> None:
    task = open_review(client, to=[ALICE, BOB], deadline="2030-01-01T00:00:00Z", summary="please")
    stored = client.task(task)
    assert stored["state"] == "review_requested"
    assert stored["pending_artefact"] == ART
    review = stored["review"]
    assert review["requested_to"] == [ALICE, BOB]
    assert review["rule"] == "any_one_approves"
    assert review["deadline"] == "2030-01-01T00:00:00Z"
    assert review["decisions"] == []
    assert review["requested_at"] == client.last()["arrived"]
    assert client.last()["envelope"]["method"] == "review.request"


def test_review_request_to_may_be_one_uri(client: Client) -> None:
    task = open_review(client, to=BOB)
    assert client.task(task)["review"]["requested_to"] == [BOB]


@pytest.mark.parametrize("to", [None, [], ""])
def test_review_request_needs_to(client: Client, to: Any) -> None:
    task = client.new_task()
    before = client.count()
    params = {} if to is None else {"to": to}
    client.fail(-32602, "review.request", frm=BOT, task_id=task, artefact=ART, **params)
    # "" is accepted by the reference (it stores [""]); chapline refuses it.
    assert client.count() == before and client.task(task)["state"] == "created"


@pytest.mark.parametrize("to", [5, [5], ["human:alice", None], {"uri": ALICE}])
def test_review_request_to_must_be_uris(client: Client, to: Any) -> None:
    # The reference crashes (-32603) on 5 and stores [5]; chapline refuses both.
    task = client.new_task()
    before, held = client.count(), client.task(task)
    client.fail(-32602, "review.request", frm=BOT, task_id=task, artefact=ART, to=to)
    assert client.count() == before and client.task(task) == held  # nothing recorded or changed


@pytest.mark.parametrize("rule", ["any_one_approves", "all_approve", "quorum:1", "quorum:3"])
def test_review_rules_accepted(client: Client, rule: str) -> None:
    task = open_review(client, rule=rule)
    assert client.task(task)["review"]["rule"] == rule


@pytest.mark.parametrize(
    "rule",
    ["weighted_vote:1.5", "weighted_vote_with_veto:2", "quorum:0", "quorum:-1", "quorum:x",
     "quorum:", "quorum: 2", "quorum:1.0", "ALL_APPROVE", "", 5, ["all_approve"]],
)
def test_review_rules_refused(client: Client, rule: Any) -> None:
    task = client.new_task()
    before = client.count()
    error = client.fail(-32602, "review.request", frm=BOT, task_id=task, artefact=ART, to=[ALICE], rule=rule)
    assert "any_one_approves" in error["message"]  # says what is accepted
    assert client.count() == before


def test_review_request_argument_checks_in_order(client: Client) -> None:
    task = client.new_task()
    before = client.count()
    client.fail(-32602, "review.request", frm=BOT, artefact=ART, to=[ALICE])  # no task_id
    client.fail(-32602, "review.request", frm=BOT, task_id=task, to=[ALICE])  # no artefact
    client.fail(-32602, "review.request", task_id=task, artefact=ART, to=[ALICE])  # no from
    client.fail(-32011, "review.request", frm="human:ghost", task_id="tsk_x", artefact=ART)
    client.fail(-32602, "review.request", frm=BOT, task_id="tsk_nope", artefact=ART, to=[ALICE])
    assert client.count() == before  # -32602 and a non-member's -32011 are never recorded
    ghost = Client(client.target, "wsp_nope")
    ghost.fail(-32602, "review.request", frm=BOT, task_id=task, artefact=ART, to=[ALICE])


def test_amendment_widens_the_reviewer_set(client: Client) -> None:
    task = open_review(client, to=[ALICE, BOB], rule="all_approve")
    client.ok("decide.approve", frm=ALICE, task_id=task)
    # JCS-identical (key order differs) and rule omitted: an amendment.
    same = {"n": [1, 2], "body": "draft", "title": "Q3 summary"}
    result = client.ok(
        "review.request", frm=BOB, task_id=task, artefact=same, to=[BOB, CAROL, BOB],
        deadline="2031-01-01T00:00:00Z",
    )
    assert result == {
        "state": "review_requested",
        "review_id": task,
        "amended": True,
        "requested_to": [ALICE, BOB, CAROL],
    }
    review = client.task(task)["review"]
    assert review["requested_to"] == [ALICE, BOB, CAROL]
    assert review["deadline"] == "2031-01-01T00:00:00Z"
    assert [d["reviewer"] for d in review["decisions"]] == [ALICE]  # decisions kept
    assert review["rule"] == "all_approve"
    assert client.last()["envelope"]["method"] == "review.request"  # amendments are recorded


def test_amendment_with_the_same_rule_given(client: Client) -> None:
    task = open_review(client, rule="quorum:2")
    result = client.ok("review.request", frm=BOT, task_id=task, artefact=ART, to=[BOB], rule="quorum:2")
    assert result["amended"] is True and result["requested_to"] == [ALICE, BOB]


def test_open_review_refuses_a_different_artefact_or_rule(client: Client) -> None:
    task = open_review(client, rule="all_approve")
    before_task = client.task(task)
    for params in (
        {"artefact": {**ART, "body": "other"}, "to": [BOB]},
        {"artefact": None, "to": [BOB]},
        {"artefact": {**ART, "body": "other"}, "to": [BOB], "rule": "all_approve"},
        {"artefact": ART, "to": [BOB], "rule": "any_one_approves"},
    ):
        before = client.count()
        client.fail(-32014, "review.request", frm=BOT, task_id=task, **params)
        assert recorded_refusal(client, before, -32014)["request"]["method"] == "review.request"
    assert client.task(task) == before_task


@pytest.mark.parametrize("state", ["cancelled", "superseded", "paused"])
def test_review_request_refused_on_stopped_tasks(client: Client, state: str) -> None:
    task = client.new_task()

    def stop(snapshot: dict[str, Any]) -> None:
        snapshot["tasks"][task]["state"] = state

    set_state(client, stop)
    before = client.count()
    # -32010 comes before the rule check.
    client.fail(-32010, "review.request", frm=BOT, task_id=task, artefact=ART, to=[ALICE], rule="bogus")
    assert recorded_refusal(client, before, -32010)["request"]["method"] == "review.request"
    assert client.task(task)["state"] == state


def test_review_request_on_finished_tasks_opens_a_fresh_review(client: Client) -> None:
    task = open_review(client, rule="all_approve", to=[ALICE])
    client.ok("decide.approve", frm=ALICE, task_id=task)
    assert client.task(task)["state"] == "completed"
    client.ok("review.request", frm=BOT, task_id=task, artefact={"v": 2}, to=[CAROL])
    review = client.task(task)["review"]
    assert review["decisions"] == [] and review["requested_to"] == [CAROL]
    assert review["rule"] == "any_one_approves"
    declined = client.new_task()
    client.ok("task.update", frm=BOT, task_id=declined, state="declined")
    client.ok("review.request", frm=BOT, task_id=declined, artefact={}, to=[ALICE])
    assert client.task(declined)["state"] == "review_requested"


def test_review_methods_are_gated_by_profile() -> None:
    client = Client(ours(("core/1.0",)))
    client.setup(profiles=["core/1.0"])
    task = client.new_task()
    before = client.count()
    for method in ("review.request", "decide.approve", "decide.reject", "decide.override",
                   "abstain.declare", "escalate.raise"):
        error = client.fail(-32601, method, frm=ALICE, task_id=task)
        assert error["data"] == {"profile": "review/1.0", "advertised": ["core/1.0"]}
    assert client.count() == before  # not privileged: never recorded


# -- decide.approve ----------------------------------------------------------


def test_approve_completes_with_the_artefact_as_output(client: Client) -> None:
    task = open_review(client)
    assert client.ok("decide.approve", frm=ALICE, task_id=task, comment="fine", tags=["ok"]) == {
        "state": "completed"
    }
    stored = client.task(task)
    assert stored["output"] == ART and stored["state"] == "completed"
    (decision,) = stored["review"]["decisions"]
    assert decision == {
        "reviewer": ALICE, "kind": "approve", "ts": client.last()["arrived"], "comment": "fine", "tags": ["ok"],
    }


def test_all_approve_needs_every_named_reviewer(client: Client) -> None:
    task = open_review(client, to=[ALICE, BOB, "group:leads"], rule="all_approve")
    assert client.ok("decide.approve", frm=ALICE, task_id=task) == {"state": "review_requested"}
    # A repeat is accepted and recorded, but counts once.
    assert client.ok("decide.approve", frm=ALICE, task_id=task) == {"state": "review_requested"}
    assert client.last()["envelope"]["method"] == "decide.approve"
    assert client.task(task)["output"] is None
    # group: means any member may decide; it is not a reviewer to wait for.
    assert client.ok("decide.approve", frm=CAROL, task_id=task) == {"state": "review_requested"}
    assert client.ok("decide.approve", frm=BOB, task_id=task) == {"state": "completed"}
    assert len(client.task(task)["review"]["decisions"]) == 4
    assert client.task(task)["output"] == ART


def test_all_approve_with_only_group_entries_needs_one(client: Client) -> None:
    task = open_review(client, to=["workspace:wsp_t"], rule="all_approve")
    assert client.ok("decide.approve", frm=BOT, task_id=task) == {"state": "completed"}


def test_quorum_counts_distinct_approvers(client: Client) -> None:
    task = open_review(client, to=[ALICE, BOB, CAROL], rule="quorum:2")
    assert client.ok("decide.approve", frm=ALICE, task_id=task)["state"] == "review_requested"
    assert client.ok("decide.approve", frm=ALICE, task_id=task)["state"] == "review_requested"
    assert client.ok("decide.approve", frm=CAROL, task_id=task)["state"] == "completed"
    client.fail(-32010, "decide.approve", frm=BOB, task_id=task)


def test_only_addressed_reviewers_decide(client: Client) -> None:
    task = open_review(client, to=[ALICE])
    for method, extra in (
        ("decide.approve", {}),
        ("decide.reject", {}),
        ("decide.override", {"diff": [], "rationale": "r"}),
        ("abstain.declare", {"reason": "r"}),
    ):
        before = client.count()
        # The reviewer check comes before the digest check.
        client.fail(-32011, method, frm=BOB, task_id=task, approved_artefact_digest="sha256:00", **extra)
        assert recorded_refusal(client, before, -32011)["request"]["method"] == method
        before = client.count()
        client.fail(-32011, method, frm="human:ghost", task_id=task, **extra)
        assert client.count() == before  # a non-member's refusal is not recorded
    assert client.task(task)["review"]["decisions"] == []


def test_decisions_need_an_open_review(client: Client) -> None:
    task = client.new_task()
    for method, extra in (
        ("decide.approve", {}),
        ("decide.reject", {}),
        ("decide.override", {"diff": [], "rationale": "r"}),
        ("abstain.declare", {"reason": "r"}),
    ):
        before = client.count()
        client.fail(-32010, method, frm=ALICE, task_id=task, **extra)
        assert recorded_refusal(client, before, -32010)["request"]["method"] == method


def test_decide_argument_checks(client: Client) -> None:
    task = open_review(client)
    before = client.count()
    client.fail(-32602, "decide.approve", frm=ALICE)
    client.fail(-32602, "decide.approve", task_id=task)
    client.fail(-32602, "decide.approve", frm=ALICE, task_id="tsk_nope")
    client.fail(-32602, "decide.approve", frm=ALICE, task_id=task, tags="x")
    client.fail(-32602, "decide.approve", frm=ALICE, task_id=task, tags=[1])
    client.fail(-32602, "decide.reject", frm=ALICE, task_id=task, tags=[None])
    client.fail(-32602, "decide.approve", frm=ALICE, task_id=task, approved_artefact_digest=5)
    assert client.count() == before and client.task(task)["state"] == "review_requested"


def test_approved_artefact_digest_binds_the_artefact(client: Client) -> None:
    task = open_review(client)
    wrong = sha({**ART, "body": "tampered"})
    for method in ("decide.approve", "decide.reject"):
        before = client.count()
        error = client.fail(-32074, method, frm=ALICE, task_id=task, approved_artefact_digest=wrong)
        assert error["data"] == {"declared": wrong, "actual": sha(ART)}
        assert recorded_refusal(client, before, -32074)["request"]["method"] == method
    # Case matters: the digest is lowercase hex.
    client.fail(-32074, "decide.approve", frm=ALICE, task_id=task, approved_artefact_digest=sha(ART).upper())
    assert client.task(task)["state"] == "review_requested" and client.task(task)["review"]["decisions"] == []
    assert client.ok("decide.approve", frm=ALICE, task_id=task, approved_artefact_digest=sha(ART)) == {
        "state": "completed"
    }


def test_override_digest_is_checked_too(client: Client) -> None:
    task = open_review(client)
    error = client.fail(
        -32074, "decide.override", frm=ALICE, task_id=task, diff=[], rationale="r",
        approved_artefact_digest="sha256:" + "1" * 64,
    )
    assert error["data"]["actual"] == sha(ART)
    assert client.last()["outcome"] == {"status": "refused", "code": -32074}  # recorded, unchanged
    assert client.task(task)["state"] == "review_requested" and client.task(task)["review"]["decisions"] == []


# -- decide.reject -----------------------------------------------------------


def test_reject_with_revision_returns_to_in_progress(client: Client) -> None:
    task = open_review(client)
    assert client.ok("decide.reject", frm=ALICE, task_id=task, request_revision=True, comment="redo") == {
        "state": "in_progress"
    }
    stored = client.task(task)
    assert stored["output"] is None and stored["pending_artefact"] == ART
    assert stored["review"]["decisions"] == [
        {"reviewer": ALICE, "kind": "reject", "ts": client.last()["arrived"], "comment": "redo", "tags": []}
    ]
    client.fail(-32010, "decide.reject", frm=ALICE, task_id=task)


@pytest.mark.parametrize("extra", [{}, {"request_revision": False}, {"request_revision": None}])
def test_reject_declines(client: Client, extra: dict[str, Any]) -> None:
    task = open_review(client)
    assert client.ok("decide.reject", frm=ALICE, task_id=task, **extra) == {"state": "declined"}


def test_reject_settles_a_partly_approved_review(client: Client) -> None:
    task = open_review(client, to=[ALICE, BOB], rule="all_approve")
    client.ok("decide.approve", frm=ALICE, task_id=task)
    assert client.ok("decide.reject", frm=BOB, task_id=task)["state"] == "declined"
    assert [d["kind"] for d in client.task(task)["review"]["decisions"]] == ["approve", "reject"]


def test_request_revision_must_be_boolean(client: Client) -> None:
    # The reference reads any truthy value ("yes", 1) as true; chapline refuses.
    task = open_review(client)
    before, held = client.count(), client.task(task)
    client.fail(-32602, "decide.reject", frm=ALICE, task_id=task, request_revision="yes")
    assert client.count() == before and client.task(task) == held  # nothing recorded or changed


# -- decide.override ---------------------------------------------------------

DIFF = [
    {"op": "replace", "path": "/body", "value": "softened"},
    {"op": "add", "path": "/n/-", "value": 3},
]
PATCHED = {"title": "Q3 summary", "body": "softened", "n": [1, 2, 3]}


def test_override_applies_the_patch_and_keeps_an_override(client: Client) -> None:
    task = open_review(client, to=[ALICE, BOB, CAROL], rule="quorum:3")
    result = client.ok(
        "decide.override", frm=BOB, task_id=task, diff=DIFF, rationale="tone", tags=["edit"],
        policy_refs=["pol:tone"], logical_id="lgl_1", instance_id="ins_1", intent_preserved=True,
        based_on_artefact="art_ignored",
    )
    override_id = result["override_artefact_id"]
    assert result == {"state": "completed", "override_artefact_id": override_id, "applied": PATCHED}
    assert override_id.startswith("art_")
    stored = client.task(task)
    assert stored["output"] == PATCHED and stored["pending_artefact"] == ART
    arrived = client.last()["arrived"]
    assert stored["review"]["decisions"] == [
        {"reviewer": BOB, "kind": "override", "ts": arrived, "tags": ["edit"],
         "override_artefact_id": override_id}
    ]
    assert client.overrides() == {
        override_id: {
            "id": override_id, "task_id": task, "reviewer": BOB, "based_on_artefact": ART,
            "diff": DIFF, "result": PATCHED, "rationale": "tone", "tags": ["edit"],
            "policy_refs": ["pol:tone"], "ts": arrived, "logical_id": "lgl_1",
            "instance_id": "ins_1", "intent_preserved": True,
        }
    }
    assert client.describe()["override_count"] == 1
    params = client.last()["envelope"]["params"]
    assert params["diff"] == DIFF and params["tags"] == ["edit"] and params["policy_refs"] == ["pol:tone"]


def test_override_defaults(client: Client) -> None:
    task = open_review(client)
    result = client.ok("decide.override", frm=ALICE, task_id=task, diff=[], rationale="as is")
    (override,) = client.overrides().values()
    assert result["applied"] == ART
    assert override["tags"] == [] and override["policy_refs"] == []
    assert override["logical_id"] is None and override["intent_preserved"] is None


@pytest.mark.parametrize(
    "diff",
    [
        [{"op": "replace", "path": "/n/01", "value": 9}],
        [{"op": "test", "path": "/n/0", "value": True}],
        [{"op": "add", "path": "/__proto__/x", "value": 1}],
        [{"op": "remove", "path": ""}],
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "replace", "path": "/body", "value": "ok"}, {"op": "frobnicate", "path": "/body"}],
        [{"op": "copy", "from": "/n", "path": "/n/-"}] * 20,
        [{"op": "move", "from": "/n", "path": "/n/0"}],
        [5],
    ],
)
def test_override_patch_failure_changes_nothing(client: Client, diff: list[Any]) -> None:
    task = open_review(client)
    before_task = client.task(task)
    before = client.count()
    error = client.fail(-32012, "decide.override", frm=ALICE, task_id=task, diff=diff, rationale="r")
    assert isinstance(error["data"]["op_index"], int)  # where it failed
    assert recorded_refusal(client, before, -32012)["request"]["method"] == "decide.override"
    assert client.task(task) == before_task and client.overrides() == {}


def test_override_argument_checks(client: Client) -> None:
    task = open_review(client)
    before = client.count()
    client.fail(-32602, "decide.override", frm=ALICE, task_id=task, diff=[])  # no rationale
    client.fail(-32602, "decide.override", frm=ALICE, task_id=task, rationale="r")  # no diff
    client.fail(-32602, "decide.override", frm=ALICE, task_id=task, rationale="r", diff={"op": "add"})
    client.fail(-32602, "decide.override", frm=ALICE, task_id=task, rationale=5, diff=[])
    client.fail(-32602, "decide.override", frm=ALICE, task_id=task, rationale="r", diff=[], tags=[1])
    client.fail(-32602, "decide.override", frm=ALICE, task_id=task, rationale="r", diff=[], policy_refs="x")
    assert client.count() == before and client.overrides() == {}


# -- abstain.declare ---------------------------------------------------------


@pytest.mark.parametrize(
    "category",
    [None, "out_of_authority", "out_of_scope", "conflict_of_interest", "insufficient_context", "other"],
)
def test_abstain_records_the_category(client: Client, category: str | None) -> None:
    task = open_review(client)
    extra = {} if category is None else {"category": category}
    result = client.ok("abstain.declare", frm=ALICE, task_id=task, reason="not mine",
                       suggested_escalation_target=BOB, **extra)
    assert result == {"state": "abstained"}
    assert client.task(task)["review"]["decisions"] == [
        {"reviewer": ALICE, "kind": "abstain", "ts": client.last()["arrived"], "comment": "not mine",
         "abstain_category": category or "other"}
    ]


def test_abstain_argument_checks(client: Client) -> None:
    task = open_review(client)
    before, held = client.count(), client.task(task)
    client.fail(-32602, "abstain.declare", frm=ALICE, task_id=task)  # reason is required
    # The reference stores any category; chapline holds to the five defined.
    client.fail(-32602, "abstain.declare", frm=ALICE, task_id=task, reason="r", category="bogus")
    client.fail(-32602, "abstain.declare", frm=ALICE, task_id=task, reason=5)
    assert client.count() == before and client.task(task) == held  # nothing recorded or changed


# -- escalate.raise ----------------------------------------------------------


def test_escalate_creates_a_successor(client: Client) -> None:
    client.ok("participant.join", frm="agent:b2", type="agent")
    task = client.new_task(input={"i": 1}, kind="summary")
    result = client.ok("escalate.raise", frm=BOB, original_task_id=task, new_task={"assignee": "agent:b2"})
    new = result["new_task_id"]
    assert result == {"new_task_id": new, "escalated_from": task}
    original, successor = client.task(task), client.task(new)
    assert original["state"] == "escalated" and original["superseded_by"] == new
    assert successor["state"] == "created" and successor["supersedes"] == task
    assert successor["delegator"] == BOB and successor["assignee"] == "agent:b2"
    assert successor["kind"] == "summary" and successor["input"] == {}
    assert successor["mode"] == original["mode"] == "trial"
    assert successor["review_required"] is None
    assert client.describe()["task_count"] == 2


def test_escalate_new_task_fields(client: Client) -> None:
    task = client.new_task()
    new = client.ok("escalate.raise", frm=ALICE, original_task_id=task,
                    new_task={"assignee": BOB, "kind": "legal", "input": {"why": "x"}, "mode": "shadow"})
    successor = client.task(new["new_task_id"])
    assert (successor["kind"], successor["input"], successor["mode"]) == ("legal", {"why": "x"}, "shadow")


@pytest.mark.parametrize("how", ["declined", "abstained", "review_requested", "escalated", "paused"])
def test_escalate_from_unfinished_states(client: Client, how: str) -> None:
    task = client.new_task()

    def put(snapshot: dict[str, Any]) -> None:
        snapshot["tasks"][task]["state"] = how

    set_state(client, put)
    client.ok("escalate.raise", frm=ALICE, original_task_id=task, new_task={"assignee": BOT})
    assert client.task(task)["state"] == "escalated"


@pytest.mark.parametrize("how", ["completed", "cancelled", "superseded"])
def test_escalate_refused_from_finished_states(client: Client, how: str) -> None:
    task = client.new_task()

    def put(snapshot: dict[str, Any]) -> None:
        snapshot["tasks"][task]["state"] = how

    set_state(client, put)
    before = client.count()
    client.fail(-32602, "escalate.raise", frm=ALICE, original_task_id=task, new_task={"assignee": BOT})
    assert client.count() == before and client.task(task)["state"] == how


def test_escalate_argument_checks(client: Client) -> None:
    task = client.new_task()
    before = client.count()
    client.fail(-32602, "escalate.raise", frm=ALICE, original_task_id=task)
    client.fail(-32602, "escalate.raise", frm=ALICE, new_task={"assignee": BOT})
    client.fail(-32602, "escalate.raise", original_task_id=task, new_task={"assignee": BOT})
    client.fail(-32011, "escalate.raise", frm="human:ghost", original_task_id=task, new_task={"assignee": BOT})
    client.fail(-32602, "escalate.raise", frm=ALICE, original_task_id="tsk_nope", new_task={"assignee": BOT})
    client.fail(-32602, "escalate.raise", frm=ALICE, original_task_id=5, new_task={"assignee": BOT})
    client.fail(-32602, "escalate.raise", frm=ALICE, original_task_id=task, new_task="x")
    client.fail(-32602, "escalate.raise", frm=ALICE, original_task_id=task, new_task={})
    client.fail(-32602, "escalate.raise", frm=ALICE, original_task_id=task, new_task={"assignee": 5})
    client.fail(-32602, "escalate.raise", frm=ALICE, original_task_id=task, new_task={"assignee": "agent:ghost"})
    client.fail(-32602, "escalate.raise", frm=ALICE, original_task_id=task, new_task={"assignee": BOT, "mode": 5})
    # The reference accepts these and stores them; chapline holds successors to task.create's rules.
    client.fail(-32602, "escalate.raise", frm=ALICE, original_task_id=task, new_task={"assignee": BOT, "kind": 5})
    client.fail(-32602, "escalate.raise", frm=ALICE, original_task_id=task, new_task={"assignee": BOT, "input": "x"})
    assert client.count() == before and client.task(task)["state"] == "created"


def test_escalate_to_a_paused_assignee(client: Client) -> None:
    task = client.new_task()

    def pause(snapshot: dict[str, Any]) -> None:
        snapshot["members"][BOB]["paused"] = True

    set_state(client, pause)
    before = client.count()
    client.fail(-32063, "escalate.raise", frm=ALICE, original_task_id=task, new_task={"assignee": BOB})
    assert recorded_refusal(client, before, -32063)["request"]["method"] == "escalate.raise"
    assert client.task(task)["state"] == "created"


def test_escalate_respects_the_current_ceiling(modes_client: Client) -> None:
    task = modes_client.new_task()  # trial, so review_required under modes/1.0

    def lower(snapshot: dict[str, Any]) -> None:
        snapshot["mode_ceiling"] = "shadow"

    set_state(modes_client, lower)
    before = modes_client.count()
    modes_client.fail(-32040, "escalate.raise", frm=ALICE, original_task_id=task, new_task={"assignee": BOT})
    assert recorded_refusal(modes_client, before, -32040)["request"]["method"] == "escalate.raise"
    new = modes_client.ok("escalate.raise", frm=ALICE, original_task_id=task,
                          new_task={"assignee": BOT, "mode": "shadow"})["new_task_id"]
    # Inherited: the original required review.
    assert modes_client.task(new)["mode"] == "shadow" and modes_client.task(new)["review_required"] is True


def test_escalated_trial_task_requires_review_under_modes(modes_client: Client) -> None:
    task = modes_client.new_task(mode="shadow")
    assert modes_client.task(task)["review_required"] is None
    new = modes_client.ok("escalate.raise", frm=ALICE, original_task_id=task,
                          new_task={"assignee": BOT, "mode": "trial"})["new_task_id"]
    assert modes_client.task(new)["review_required"] is True


def test_escalate_keeps_review_required_without_modes(client: Client) -> None:
    task = client.new_task(review_required=True)
    new = client.ok("escalate.raise", frm=ALICE, original_task_id=task, new_task={"assignee": BOT})["new_task_id"]
    assert client.task(new)["review_required"] is True
    plain = client.new_task()
    new = client.ok("escalate.raise", frm=ALICE, original_task_id=plain, new_task={"assignee": BOT})["new_task_id"]
    assert client.task(new)["review_required"] is None


# -- task.complete on a review-required task ("Core methods") ---------------


def test_complete_opens_the_required_review(modes_client: Client) -> None:
    modes_client.ok("participant.join", frm="service:s", type="service")
    task = modes_client.new_task()
    result = modes_client.ok("task.complete", frm=BOT, task_id=task, output={"o": 1}, confidence=80)
    assert result == {"state": "review_requested", "review_id": task}
    stored = modes_client.task(task)
    assert stored["pending_artefact"] == {"o": 1} and stored["output"] is None
    assert stored["confidence"] is None
    # Every human but the caller and the assignee, in join order; the delegator too.
    assert stored["review"]["requested_to"] == [ALICE, BOB, CAROL]
    assert stored["review"]["rule"] == "any_one_approves"
    assert modes_client.ok("decide.approve", frm=BOB, task_id=task) == {"state": "completed"}
    assert modes_client.task(task)["output"] == {"o": 1}


def test_complete_after_a_revision_request_keeps_the_reviewers_and_the_rule(modes_client: Client) -> None:
    task = modes_client.new_task()
    modes_client.ok("review.request", frm=BOT, task_id=task, artefact={"v": 1}, to=[CAROL], rule="all_approve")
    modes_client.ok("decide.reject", frm=CAROL, task_id=task, request_revision=True)
    modes_client.ok("task.complete", frm=BOT, task_id=task, output={"v": 2})
    review = modes_client.task(task)["review"]
    assert review["requested_to"] == [CAROL] and review["rule"] == "all_approve"
    assert [d["kind"] for d in review["decisions"]] == ["reject"]
    assert modes_client.ok("decide.approve", frm=CAROL, task_id=task) == {"state": "completed"}
    assert modes_client.task(task)["output"] == {"v": 2}


def test_complete_without_an_eligible_reviewer_is_refused() -> None:
    modes_client = Client(ours(WITH_MODES))
    modes_client.setup(members=(ALICE, BOT, "agent:x"))
    task = modes_client.new_task()
    before = modes_client.count()
    modes_client.fail(-32011, "task.complete", frm=ALICE, task_id=task, output={"o": 1})
    assert recorded_refusal(modes_client, before, -32011)["request"]["method"] == "task.complete"
    assert modes_client.task(task)["state"] == "created"
    modes_client.ok("task.complete", frm="agent:x", task_id=task, output={"o": 1})
    assert modes_client.task(task)["review"]["requested_to"] == [ALICE]


def test_override_needs_an_artefact(modes_client: Client) -> None:
    task = modes_client.new_task()
    modes_client.ok("task.complete", frm=BOT, task_id=task)  # no output: nothing to patch or digest
    before, held = modes_client.count(), modes_client.task(task)
    modes_client.fail(-32602, "decide.override", frm=ALICE, task_id=task, diff=[], rationale="r")
    modes_client.fail(-32602, "decide.approve", frm=ALICE, task_id=task, approved_artefact_digest=sha(None))
    assert modes_client.count() == before and modes_client.task(task) == held  # nothing recorded or changed
    assert modes_client.ok("decide.approve", frm=ALICE, task_id=task) == {"state": "completed"}


def test_update_cannot_complete_a_review_required_task(modes_client: Client) -> None:
    task = modes_client.new_task()
    modes_client.ok("task.update", frm=BOT, task_id=task, state="in_progress")
    before = modes_client.count()
    modes_client.fail(-32602, "task.update", frm=BOT, task_id=task, state="completed")
    assert modes_client.count() == before and modes_client.task(task)["state"] == "in_progress"


# -- modes/1.0 ----------------------------------------------------------------


def test_trial_forces_review_only_under_modes(modes_client: Client, client: Client) -> None:
    assert modes_client.task(modes_client.new_task())["review_required"] is True
    assert modes_client.task(modes_client.new_task(review_required=False))["review_required"] is True
    assert modes_client.task(modes_client.new_task(mode="shadow"))["review_required"] is None
    assert client.task(client.new_task())["review_required"] is None
    assert client.task(client.new_task(review_required=False))["review_required"] is False
    task = client.new_task()
    assert client.ok("task.complete", frm=BOT, task_id=task, output=1) == {"state": "completed"}


@pytest.mark.parametrize("profiles", [CORE_REVIEW, WITH_MODES])
def test_mode_ceiling(profiles: tuple[str, ...]) -> None:
    client = Client(ours(profiles))
    client.setup(mode="trial", mode_ceiling="trial")
    described = client.describe()
    assert (described["mode"], described["mode_ceiling"]) == ("trial", "trial")
    for mode in ("production", "bogus"):
        before = client.count()
        error = client.fail(-32040, "task.create", frm=ALICE, assignee=BOT, kind="k", input={}, mode=mode)
        assert "trial" in error["message"]
        assert recorded_refusal(client, before, -32040)["request"]["method"] == "task.create"
    client.fail(-32602, "task.create", frm=ALICE, assignee=BOT, kind="k", input={}, mode=5)
    client.fail(-32602, "task.create", frm=ALICE, assignee=BOT, kind="k", input={}, review_required="yes")
    assert client.task(client.new_task(mode="shadow"))["mode"] == "shadow"
    assert client.task(client.new_task(mode=None))["mode"] == "trial"
    before = client.count()
    client.fail(-32011, "task.create", frm="human:ghost", assignee=BOT, kind="k", input={}, mode="production")
    assert client.count() == before


def test_task_mode_above_workspace_mode_but_within_ceiling() -> None:
    client = Client(ours(WITH_MODES))
    client.setup(mode="shadow")
    assert client.task(client.new_task())["mode"] == "shadow"
    assert client.task(client.new_task(mode="production"))["mode"] == "production"


# -- the same calls on the reference ------------------------------------------

SETUP = [
    ("workspace.create", {"workspace": "wsp_t"}),
    ("participant.join", {"workspace": "wsp_t", "from": ALICE, "type": "human", "role": "admin"}),
    ("participant.join", {"workspace": "wsp_t", "from": BOT, "type": "agent"}),
    ("participant.join", {"workspace": "wsp_t", "from": BOB, "type": "human"}),
    ("participant.join", {"workspace": "wsp_t", "from": CAROL, "type": "human"}),
    ("task.create", {"workspace": "wsp_t", "from": ALICE, "kind": "draft", "input": {}, "assignee": BOT}),
]
T = "$5"  # the task SETUP creates


def step(method: str, frm: str, **params: Any) -> tuple[str, dict[str, Any]]:
    return method, {"workspace": "wsp_t", "from": frm, **params}


def rr(**params: Any) -> tuple[str, dict[str, Any]]:
    params.setdefault("artefact", ART)
    return step("review.request", BOT, task_id=T, **params)


SCRIPTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "review lifecycle and amendments": [
        rr(to=[ALICE, BOB], rule="all_approve"),
        step("decide.approve", ALICE, task_id=T),
        rr(to=[BOB, CAROL, BOB], artefact={"n": [1, 2], "body": "draft", "title": "Q3 summary"}),
        rr(to=[BOB], artefact={"x": 1}),
        rr(to=[BOB], rule="quorum:2"),
        rr(to=[BOB], rule="weighted_vote:1.5"),
        rr(),
        step("decide.approve", BOB, task_id=T, comment="ok", tags=["a"]),
        step("decide.approve", BOB, task_id=T),
        step("decide.approve", "human:ghost", task_id=T),
        step("decide.approve", CAROL, task_id=T),
        step("decide.approve", CAROL, task_id=T),
        rr(to=[CAROL]),
    ],
    "quorum, digests and non-reviewers": [
        rr(to=[ALICE, BOB, "group:x"], rule="quorum:2"),
        step("decide.approve", BOT, task_id=T, approved_artefact_digest="sha256:" + "1" * 64),
        step("decide.approve", ALICE, task_id=T, approved_artefact_digest="sha256:" + "1" * 64),
        step("decide.approve", ALICE, task_id=T, approved_artefact_digest=sha(ART)),
        step("decide.reject", CAROL, task_id=T, approved_artefact_digest=5),
        step("decide.approve", CAROL, task_id=T, tags=["x", "y"]),
    ],
    "reject, revise, override": [
        rr(to=[ALICE]),
        step("decide.reject", ALICE, task_id=T, request_revision=True, comment="again"),
        step("decide.reject", ALICE, task_id=T),
        rr(to=[ALICE, BOB], rule="quorum:2", artefact={"l": [1, 2], "b": True}),
        step("decide.override", ALICE, task_id=T, rationale="r",
             diff=[{"op": "test", "path": "/b", "value": 1}]),
        step("decide.override", ALICE, task_id=T, rationale="r",
             diff=[{"op": "replace", "path": "/l/01", "value": 9}]),
        step("decide.override", ALICE, task_id=T, rationale="fix", tags=["t"], policy_refs=["p"],
             diff=[{"op": "replace", "path": "/l/0", "value": 9}, {"op": "add", "path": "/c", "value": "n"}],
             based_on_artefact="art_whatever"),
        step("decide.override", ALICE, task_id=T, rationale="again", diff=[]),
        step("workspace.describe", ALICE),
    ],
    "abstain and escalate": [
        rr(to=[ALICE]),
        step("abstain.declare", BOB, task_id=T, reason="r"),
        step("abstain.declare", ALICE, task_id=T, reason="conflict", category="conflict_of_interest"),
        step("escalate.raise", ALICE, original_task_id=T, new_task={"assignee": "agent:ghost"}),
        step("escalate.raise", ALICE, original_task_id=T, new_task={"assignee": BOB, "kind": "legal"}),
        step("escalate.raise", ALICE, original_task_id=T, new_task={"assignee": BOB}),
        step("review.request", BOT, task_id="$10", artefact={}, to=["workspace:wsp_t"]),
        step("abstain.declare", CAROL, task_id="$10", reason="no"),
    ],
    "a required review opened by task.complete": [
        step("task.create", ALICE, kind="draft", input={}, assignee=BOT, review_required=True),
        step("task.complete", BOT, task_id="$6", output={"o": 1}, confidence=80),
        step("task.update", BOT, task_id="$6", state="completed"),
        step("decide.reject", CAROL, task_id="$6", request_revision=True),
        step("task.update", BOT, task_id="$6", state="completed"),
        step("task.complete", BOT, task_id="$6", output={"o": 2}),
        step("decide.approve", BOB, task_id="$6", approved_artefact_digest=sha({"o": 2})),
        step("task.complete", ALICE, task_id=T, output=[1]),
    ],
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_same_as_the_reference(name: str) -> None:
    mine, theirs = run_both(SETUP + SCRIPTS[name])
    assert mine == theirs


MODES_SCRIPT = [
    ("workspace.create", {"workspace": "wsp_t", "mode_ceiling": "trial", "profiles": list(WITH_MODES)}),
    *SETUP[1:4],
    ("task.create", {"workspace": "wsp_t", "from": ALICE, "kind": "d", "input": {}, "assignee": BOT,
                     "review_required": False}),
    step("task.create", ALICE, kind="d", input={}, assignee=BOT, mode="production"),
    step("task.create", ALICE, kind="d", input={}, assignee=BOT, mode="bogus"),
    step("task.create", ALICE, kind="d", input={}, assignee=BOT, mode="shadow"),
    step("task.complete", BOT, task_id="$4", output={"x": 1}),
    step("task.complete", BOT, task_id="$7", output={"x": 1}),
    step("escalate.raise", ALICE, original_task_id="$7", new_task={"assignee": BOB, "mode": "trial"}),
    step("escalate.raise", ALICE, original_task_id="$4", new_task={"assignee": BOB, "mode": "production"}),
    step("decide.override", BOB, task_id="$4", rationale="r", diff=[{"op": "add", "path": "/y", "value": 2}]),
]


def test_modes_same_as_the_reference() -> None:
    mine, theirs = run_both(MODES_SCRIPT, WITH_MODES)
    assert mine == theirs


# -- random review workloads agree with the reference --------------------------

PEOPLE = [ALICE, BOT, BOB, CAROL, "group:g"]
ARTEFACTS = [{"a": 1}, {"a": [1, 2]}, {"b": True}]
DIFFS = [
    [],
    [{"op": "add", "path": "/z", "value": 1}],
    [{"op": "remove", "path": "/a"}],
    [{"op": "test", "path": "/b", "value": 1}],
]


def _random_step(data: st.DataObject, tasks: list[str]) -> tuple[str, dict[str, Any]]:
    draw = data.draw
    task = draw(st.sampled_from(tasks))
    who = draw(st.sampled_from([ALICE, BOT, BOB, CAROL]))
    kind = draw(st.integers(0, 8))
    maybe = draw(st.booleans())
    if kind == 0:
        extra = {"rule": draw(st.sampled_from(["any_one_approves", "all_approve", "quorum:1", "quorum:2"]))}
        return step("review.request", who, task_id=task, artefact=draw(st.sampled_from(ARTEFACTS)),
                    to=draw(st.lists(st.sampled_from(PEOPLE), min_size=1, max_size=3)),
                    **(extra if maybe else {}))
    if kind == 1:
        extra = {"approved_artefact_digest": sha(draw(st.sampled_from(ARTEFACTS)))}
        return step("decide.approve", who, task_id=task, **(extra if maybe else {}))
    if kind == 2:
        return step("decide.reject", who, task_id=task, request_revision=maybe)
    if kind == 3:
        return step("decide.override", who, task_id=task, rationale="r", diff=draw(st.sampled_from(DIFFS)))
    if kind == 4:
        return step("abstain.declare", who, task_id=task, reason="r", **({"category": "out_of_scope"} if maybe else {}))
    if kind == 5:
        assignee = draw(st.sampled_from([BOT, BOB, "agent:ghost"]))
        return step("escalate.raise", who, original_task_id=task, new_task={"assignee": assignee})
    if kind == 6:
        return step("task.complete", who, task_id=task, output=draw(st.sampled_from(ARTEFACTS)))
    if kind == 7:
        state = draw(st.sampled_from(["in_progress", "completed", "declined"]))
        return step("task.update", who, task_id=task, state=state)
    return step("task.create", ALICE, kind="d", input={}, assignee=BOT, **({"review_required": True} if maybe else {}))


@given(st.data(), st.sampled_from([CORE_REVIEW, WITH_MODES]))
def test_random_workloads_same_as_the_reference(data: st.DataObject, profiles: tuple[str, ...]) -> None:
    steps = list(SETUP)
    tasks = [T]
    for _ in range(data.draw(st.integers(1, 25))):
        method, params = _random_step(data, tasks)
        if method in ("task.create", "escalate.raise"):
            tasks.append(f"${len(steps)}")  # its new id, if it succeeds
        steps.append((method, params))
    mine, theirs = run_both(steps, profiles)
    assert mine == theirs
