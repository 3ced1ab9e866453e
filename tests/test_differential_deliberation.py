"""deliberation/1.0 against chap-coordinator 0.3.3: the same results, codes,
log, chain head and stored deliberations, call by call (see interaction_diff.py)."""

from __future__ import annotations

import pytest
from interaction_diff import B2, BOT, GHOST, MEMBERS, A, B, C, pair


def test_open_comment_vote_close():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    generated = p.ok("deliberate.open", frm=A, rule="any_one_approves", to=[A, B])  # dlb_ id
    p.ok("deliberate.open", frm=A, rule="quorum:2", participants=[A, B, BOT], deliberation_id="d1",
         task_id=t, question="Q", weights={A: 2}, veto={B: True}, deadline="2024-01-01T00:00:00Z",
         context={"x": 1})
    p.ok("deliberate.open", frm=A, rule="all_approve", to=A, participants=[B], deliberation_id="d2")
    p.ok("deliberate.open", frm=A, rule="all_approve", to=B, task_id="not-a-task", deliberation_id="d3")
    p.ok("deliberate.open", frm=A, rule="all_approve", to="human:outsider", deliberation_id="d4")
    d = generated["deliberation_id"]
    for text in ({"comment": "hi"}, {"text": "t"}, {"comment": "c", "text": "t"}, {},
                 {"comment": ""}, {"comment": "", "text": "t"}, {"comment": None, "text": "t"},
                 {"text": None}, {"comment": {"rich": 1}}):
        p.ok("deliberate.comment", frm=C, deliberation_id=d, **text)  # any member may comment
    p.ok("deliberate.vote", frm=A, deliberation_id=d, vote="yea", weight=5, comment="ok",
         veto_invoked="yes", extra=1)
    p.ok("deliberate.vote", frm=B, deliberation_id=d, vote="abstain")
    first = p.ok("deliberate.close", frm=C, deliberation_id=d)  # any member may close
    assert first == {"outcome": "approved", "rule": "any_one_approves",
                     "tally": {"yea": 1, "nay": 0}, "vetoes": []}
    assert p.ok("deliberate.close", frm=BOT, deliberation_id=d) == first  # again: recorded again
    p.target.assert_same_state("deliberations")


def test_refusals_in_0_3_3_order():
    p = pair()
    p.setup(MEMBERS)
    p.ok("deliberate.open", frm=A, rule="any_one_approves", to=[A, B], deliberation_id="d")
    p.fail(-32011, "deliberate.open", frm=GHOST, rule="all_approve", to=B)
    p.fail(-32011, "deliberate.open", frm=None, rule="all_approve", to=B)
    p.fail(-32602, "deliberate.open", frm=A, to=B)                      # missing rule
    p.fail(-32602, "deliberate.open", frm=A, rule="all_approve")        # no participants
    p.fail(-32602, "deliberate.open", frm=A, rule="all_approve", to=[])
    for rule in ("bogus", "quorum:x", "quorum:1.5", " quorum:1", "weighted_vote:abc",
                 "weighted_vote:", "weighted_vote_with_veto:x"):
        p.fail(-32033, "deliberate.open", frm=A, rule=rule, to=B)       # recorded
    p.fail(-32011, "deliberate.comment", frm=GHOST, deliberation_id="d", comment="x")
    p.fail(-32602, "deliberate.comment", frm=C, deliberation_id="zz", comment="x")
    p.fail(-32602, "deliberate.comment", frm=C, comment="x")
    p.fail(-32602, "deliberate.vote", frm=A, deliberation_id="zz", vote="yea")
    p.fail(-32602, "deliberate.vote", frm=A, vote="maybe")
    p.fail(-32602, "deliberate.vote", frm=A, deliberation_id=5, vote="yea")
    p.fail(-32602, "deliberate.vote", frm=C, deliberation_id="d", vote="maybe")  # before -32030
    p.fail(-32602, "deliberate.vote", frm=C, deliberation_id="d")
    p.fail(-32030, "deliberate.vote", frm=C, deliberation_id="d", vote="yea")    # recorded
    p.ok("deliberate.vote", frm=A, deliberation_id="d", vote="nay")
    p.fail(-32031, "deliberate.vote", frm=A, deliberation_id="d", vote="yea")    # recorded
    p.fail(-32602, "deliberate.close", frm=A, deliberation_id="zz")
    p.fail(-32602, "deliberate.close", frm=A)
    p.ok("deliberate.close", frm=A, deliberation_id="d")
    p.fail(-32032, "deliberate.comment", frm=C, deliberation_id="d", comment="late")
    p.fail(-32032, "deliberate.vote", frm=B, deliberation_id="d", vote="yea")
    p.fail(-32032, "deliberate.vote", frm=B, deliberation_id="d", vote="maybe")   # state first
    p.fail(-32032, "deliberate.vote", frm=C, deliberation_id="d")
    p.fail(-32032, "deliberate.vote", frm=A, deliberation_id="d", vote="yea")
    p.target.assert_same_state("deliberations")


def test_deliberation_methods_are_gated_by_profile():
    p = pair(("core/1.0", "review/1.0"))
    p.setup(MEMBERS)
    for method, params in [
        ("deliberate.open", {"rule": "all_approve", "to": B}),
        ("deliberate.comment", {"deliberation_id": "d", "comment": "x"}),
        ("deliberate.vote", {"deliberation_id": "d", "vote": "yea"}),
        ("deliberate.close", {"deliberation_id": "d"}),
    ]:
        data = p.fail(-32601, method, frm=A, **params)["data"]
        assert data["profile"] == "deliberation/1.0"
        p.fail(-32601, method, frm=GHOST, **params)
    p.target.assert_same_state("deliberations")


VOTERS = (A, B, BOT, C)


@pytest.mark.parametrize(
    "rule, votes, extra",
    [
        ("any_one_approves", ["nay", "nay", "yea"], {}),
        ("any_one_approves", ["nay", "abstain"], {}),
        ("any_one_approves", [], {}),
        ("all_approve", ["yea", "yea", "yea", "yea"], {}),
        ("all_approve", ["yea", "yea", "yea"], {}),
        ("all_approve", ["yea", "yea", "yea", "abstain"], {}),
        ("all_approve", ["yea", "nay", "yea", "yea"], {}),
        ("quorum:3", ["yea", "nay"], {}),
        ("quorum:3", ["yea", "nay", "abstain"], {}),
        ("quorum:3", ["yea", "yea", "nay"], {}),
        ("quorum:2", ["yea", "nay"], {}),
        ("quorum:0", [], {}),
        ("quorum:-1", ["nay"], {}),
        ("weighted_vote:3", ["yea", "yea", "nay"], {"weights": {A: 2}}),
        ("weighted_vote:3", ["yea", "nay", "yea"], {"weights": {A: 2}}),
        ("weighted_vote:3", ["yea", "yea"], {}),
        ("weighted_vote:1e3", ["yea"], {"weights": {A: 1000}}),
        ("weighted_vote:nan", ["yea"], {}),
        ("weighted_vote:-1", [], {}),
        ("weighted_vote:0", ["nay"], {"weights": {B: 0}}),
        ("weighted_vote_with_veto:1", ["yea", "nay"], {"veto": {B: True}}),
        ("weighted_vote_with_veto:1", ["yea", ("nay", True)], {"veto": {B: True}}),
        ("weighted_vote_with_veto:1", [("yea", True), ("nay", True)], {"veto": {A: True, B: True}}),
        ("weighted_vote_with_veto:1", ["yea", ("nay", True)], {"veto": {B: False}}),
        ("weighted_vote_with_veto:1", ["yea", ("nay", True)], {}),
        ("weighted_vote_with_veto:2", [("abstain", True), "yea", "yea"], {"veto": {A: True}}),
        ("weighted_vote:2", [("nay", True), "yea", "yea"], {"veto": {A: True}}),
    ],
)
def test_rule_outcomes(rule, votes, extra):
    p = pair()
    p.setup(MEMBERS)
    p.ok("deliberate.open", frm=A, rule=rule, to=list(VOTERS), deliberation_id="d", **extra)
    for voter, vote in zip(VOTERS, votes, strict=False):  # votes may be fewer
        vote, veto = vote if isinstance(vote, tuple) else (vote, None)
        params = {"veto_invoked": veto} if veto is not None else {}
        p.ok("deliberate.vote", frm=voter, deliberation_id="d", vote=vote, **params)
    p.ok("deliberate.close", frm=B2, deliberation_id="d")
    p.target.assert_same_state("deliberations")


def test_weights_come_from_the_opener_not_the_vote():
    p = pair()
    p.setup(MEMBERS)
    p.ok("deliberate.open", frm=A, rule="weighted_vote:2", to=[A, B], deliberation_id="d",
         weights={A: 1, B: 1})
    p.ok("deliberate.vote", frm=A, deliberation_id="d", vote="yea", weight=10)
    outcome = p.ok("deliberate.close", frm=A, deliberation_id="d")
    assert outcome["outcome"] == "rejected"
    p.target.assert_same_state("deliberations")


@pytest.mark.parametrize(
    "params",
    [
        {"rule": "bogus"},                                    # no participants, bad rule
        {"rule": "all_approve", "to": [], "participants": [B]},
        {"rule": "all_approve", "to": None, "participants": B},
        {"rule": "all_approve", "participants": []},
        {"rule": "bogus", "to": B, "workspace": "wsp_none"},
    ],
)
def test_open_checks_in_0_3_3_order(params):
    p = pair()
    p.setup(MEMBERS)
    p.call("deliberate.open", frm=A, **params)
    p.ok("deliberate.open", frm=A, rule="all_approve", to=B)  # the next generated id agrees
    p.target.assert_same_state("deliberations")


def test_a_paused_workspace_refuses_every_deliberation_method():
    p = pair()
    p.setup(MEMBERS)
    p.ok("deliberate.open", frm=A, rule="all_approve", to=[A, B], deliberation_id="d")
    p.target.pause()
    p.fail(-32063, "deliberate.open", frm=A, rule="all_approve", to=B)
    p.fail(-32063, "deliberate.comment", frm=C, deliberation_id="d", comment="x")
    p.fail(-32063, "deliberate.vote", frm=A, deliberation_id="d", vote="yea")
    p.fail(-32063, "deliberate.close", frm=A, deliberation_id="d")
    p.fail(-32011, "deliberate.close", frm=GHOST, deliberation_id="d")
    p.target.assert_same_state("deliberations")


def test_a_paused_member_still_votes():
    p = pair()
    p.setup(MEMBERS)
    p.ok("deliberate.open", frm=A, rule="all_approve", to=[A, B], deliberation_id="d")
    p.target.pause(B)
    p.ok("deliberate.vote", frm=B, deliberation_id="d", vote="yea")
    p.ok("deliberate.comment", frm=B, deliberation_id="d", comment="still here")
    p.target.assert_same_state("deliberations")
