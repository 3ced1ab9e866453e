"""whisper/1.0 against chap-coordinator 0.3.3: the same results, codes, log,
chain head and stored whispers, call by call (see interaction_diff.py)."""

from __future__ import annotations

import pytest
from client import Client, refused
from interaction_diff import BOT, GHOST, MEMBERS, A, B, C, W, pair


def ask(p: Client, task: str, frm: str = BOT, **params):
    params.setdefault("to", A)
    params.setdefault("question", "Ship it?")
    params.setdefault("deadline_ms", 60_000)
    params.setdefault("default_if_lapsed", "no")
    return p.ok("whisper.ask", frm=frm, task_id=task, **params)


def test_ask_and_answer_with_and_without_options():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    generated = ask(p, t)  # art_ id generated
    ask(p, t, to=[A, B], options=[{"id": "y", "label": "Yes"}, {"id": "n"}], urgency="high",
        whisper_id="w1", context_summary="the draft", default_if_lapsed={"id": "n"})
    ask(p, t, to="group:reviewers", whisper_id="w2", options=None)
    ask(p, t, to="workspace:" + W, whisper_id="w3", options=[])
    assert p.ok("whisper.answer", frm=B, whisper_id="w1", answer_option="y", comment="fine") == {
        "answered": True, "whisper_id": "w1", "task_id": t}
    p.ok("whisper.answer", frm=C, whisper_id="w2", answer="free text")          # group: any member
    p.ok("whisper.answer", frm=C, whisper_id="w3", answer_text={"k": [1]})       # options [] = none
    p.ok("whisper.answer", frm=A, whisper_id=generated["whisper_id"], answer="", answer_text="t")
    p.target.assert_same_state("whispers")


def test_answer_refusals_in_0_3_3_order():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    ask(p, t, whisper_id="w", to=[A], options=[{"id": 1}, {"id": True}, {"id": "a"}, {"id": {"x": 1}}])
    p.fail(-32011, "whisper.answer", frm=GHOST, whisper_id="w", answer_option=1)   # floor, unrecorded
    p.fail(-32011, "whisper.answer", frm=None, whisper_id="w", answer_option=1)
    p.fail(-32602, "whisper.answer", frm=A, answer_option=1)                        # missing whisper_id
    p.fail(-32602, "whisper.answer", frm=A, whisper_id="nope", answer_option=1)
    p.fail(-32602, "whisper.answer", frm=A, whisper_id=5, answer_option=1)
    p.fail(-32011, "whisper.answer", frm=B, whisper_id="w", answer_option=1)        # not addressed: recorded
    p.fail(-32602, "whisper.answer", frm=A, whisper_id="w", answer_text="x")        # options need an option
    p.fail(-32602, "whisper.answer", frm=A, whisper_id="w", answer_option=None)
    for wrong in (False, 0, "1", 2, [1], {"x": 1}, {"y": 2}):                  # type-strict
        p.fail(-32022, "whisper.answer", frm=A, whisper_id="w", answer_option=wrong)
    p.ok("whisper.answer", frm=A, whisper_id="w", answer_option=1.0)               # 1 matches 1.0
    p.fail(-32020, "whisper.answer", frm=A, whisper_id="w", answer_option=True)
    p.fail(-32011, "whisper.answer", frm=B, whisper_id="w", answer_option=1)        # addressed before answered
    p.target.assert_same_state("whispers")


def test_an_option_id_true_matches_only_true():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    ask(p, t, whisper_id="w", options=[{"id": True}, {"label": "no id"}, "bare"])
    p.fail(-32022, "whisper.answer", frm=A, whisper_id="w", answer_option=1)
    p.ok("whisper.answer", frm=A, whisper_id="w", answer_option=True)
    p.target.assert_same_state("whispers")


def test_the_22_message_shows_the_jcs_form():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    ask(p, t, whisper_id="w", options=[{"id": "x"}])
    for wrong in ("y", {"b": 1, "a": "\u00e9"}, [1, 2.0, "s"], False):
        x, y = p.target.both(p.envelope("whisper.answer", frm=A, whisper_id="w", answer_option=wrong))
        refused(x, -32022)
        refused(y, -32022)
        assert x["error"]["message"] == y["error"]["message"]


@pytest.mark.parametrize(
    "answer",
    [
        {"answer": 0},
        {"answer": []},
        {"answer": {}},
        {"answer": ""},
        {"answer": None, "answer_text": None, "answer_option": None},
        {},
    ],
)
def test_no_answer_at_all_is_refused_unrecorded(answer):
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    ask(p, t, whisper_id="w")
    p.fail(-32602, "whisper.answer", frm=A, whisper_id="w", **answer)
    p.target.assert_same_state("whispers")


@pytest.mark.parametrize(
    "answer",
    [
        {"answer": False, "answer_text": "B"},
        {"answer": 0, "answer_text": "B"},
        {"answer": "A", "answer_text": "B"},
        {"answer_option": ""},
        {"answer_option": False},
        {"answer_option": "zz", "answer": "why not"},
        {"answer_text": 5, "comment": {"c": 1}},
    ],
)
def test_what_an_answer_without_options_keeps(answer):
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    ask(p, t, whisper_id="w")
    p.ok("whisper.answer", frm=A, whisper_id="w", **answer)
    p.target.assert_same_state("whispers")


def test_ask_refusals():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    base = {"to": A, "task_id": t, "question": "q", "deadline_ms": 1000, "default_if_lapsed": "d"}
    p.fail(-32011, "whisper.ask", frm=GHOST, **base)            # floor (A4)
    p.fail(-32011, "whisper.ask", frm=None, **base)
    for name in ("to", "task_id", "question", "deadline_ms", "default_if_lapsed"):
        p.fail(-32602, "whisper.ask", frm=BOT, **{k: v for k, v in base.items() if k != name})
    p.fail(-32602, "whisper.ask", frm=BOT, **{**base, "task_id": "nope"})
    p.fail(-32602, "whisper.ask", frm=BOT, **base, options={"id": "a"})  # options must be a list
    p.fail(-32602, "whisper.ask", frm=BOT, **base, options="a")
    x, y = p.target.both(p.envelope("whisper.ask", frm=BOT, **{**base, "workspace": "wsp_none"}))
    refused(x, -32602)
    refused(y, -32602)
    p.ok("whisper.ask", frm=BOT, **base, options=["bare"], urgency="medium")
    p.ok("whisper.ask", frm=BOT, **{**base, "to": "human:not-a-member", "deadline_ms": 0})
    p.ok("whisper.ask", frm=BOT, **{**base, "deadline_ms": -5, "default_if_lapsed": None,
                                "question": {"rich": True}})
    p.target.assert_same_state("whispers")


def test_whisper_methods_are_gated_by_profile():
    p = pair(("core/1.0", "review/1.0"))
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    data = p.fail(-32601, "whisper.ask", frm=BOT, to=A, task_id=t, question="q", deadline_ms=1,
                 default_if_lapsed="d")["data"]
    assert data == {"profile": "whisper/1.0", "advertised": ["core/1.0", "review/1.0"]}
    p.fail(-32601, "whisper.answer", frm=A, whisper_id="w", answer="x")
    p.fail(-32601, "whisper.answer", frm=GHOST, whisper_id="w", answer="x")  # gate before floor
    p.ok("workspace.set_profiles", frm=A, profiles=["whisper/2.0"])          # any version counts
    ask(p, t, whisper_id="w")
    p.ok("whisper.answer", frm=A, whisper_id="w", answer="x")
    p.target.assert_same_state("whispers")


# -- lapses -------------------------------------------------------------------


def test_lapse_sweep_applies_defaults_and_records_notices():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    ask(p, t, whisper_id="l1", deadline_ms=2000, default_if_lapsed={"pick": "d"})
    ask(p, t, whisper_id="l2", deadline_ms=5000, to=[A, "group:g", A])
    ask(p, t, whisper_id="l3", deadline_ms=0)
    ask(p, t, whisper_id="l4", deadline_ms=10**9)
    ask(p, t, whisper_id="l5", deadline_ms=-5)
    p.ok("whisper.answer", frm=A, whisper_id="l5", answer="late, but no sweep ran")  # accepted
    notices = p.target.lapses()  # the coordinator's own clock
    assert [n["params"]["whisper_id"] for n in notices] == ["l1", "l2", "l3"]
    assert notices[1]["params"]["to"] == [BOT, A, "group:g", A]
    assert all("id" not in n and n["method"] == "notify.message" for n in notices)
    assert p.target.lapses() == []
    p.fail(-32021, "whisper.answer", frm=A, whisper_id="l1", answer="too late")   # recorded
    p.fail(-32021, "whisper.answer", frm=A, whisper_id="l2", answer="too late")
    p.ok("whisper.answer", frm=A, whisper_id="l4", answer="in time")
    p.ok("audit.read", filter={"task_id": t})
    p.ok("audit.read", filter={"from": "service:coordinator"})
    p.target.assert_same_state("whispers")


def test_lapse_sweep_at_a_given_time_and_its_boundary():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    ask(p, t, whisper_id="l1", deadline_ms=2000)
    ask(p, t, whisper_id="l2", deadline_ms=5000)
    asked = p.target.ours.snapshot(W)["whispers"]["l1"]["asked_at"]
    assert asked == "2023-11-14T22:13:28.000Z"  # lapses at :30.000
    assert p.target.lapses("2023-11-14T22:13:29.999Z") == []
    assert [n["params"]["whisper_id"] for n in p.target.lapses("2023-11-14T22:13:30.000Z")] == ["l1"]
    assert [n["params"]["whisper_id"] for n in p.target.lapses("2023-11-14T23:00:00+00:00")] == ["l2"]
    assert p.target.lapses("2099-01-01T00:00:00Z") == []
    p.target.assert_same_state("whispers")


def test_a_sweep_of_an_unknown_workspace_finds_nothing():
    p = pair()
    assert p.target.ours.check_whisper_lapses("wsp_none") == []
    assert p.target.theirs.check_whisper_lapses("wsp_none") == []


def test_ids_are_drawn_only_by_accepted_asks():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    p.fail(-32602, "whisper.ask", frm=BOT, to=A, task_id="nope", question="q", deadline_ms=1,
          default_if_lapsed="d")
    p.fail(-32602, "whisper.ask", frm=BOT, to=A, task_id=t, question="q", deadline_ms=1,
          default_if_lapsed="d", options="x")
    first = ask(p, t)["whisper_id"]
    ask(p, t, whisper_id="mine")
    assert ask(p, t)["whisper_id"] != first
    p.target.assert_same_state("whispers")


@pytest.mark.parametrize("urgency", [None, "", 0, False, "extreme", 5])
def test_urgency_is_kept_as_given(urgency):
    p = pair()
    p.setup(MEMBERS)
    ask(p, p.new_task(kind="k"), whisper_id="w", urgency=urgency)
    p.target.assert_same_state("whispers")


def test_a_paused_workspace_refuses_whispers_but_still_lapses_them():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    ask(p, t, whisper_id="w", deadline_ms=1)
    ask(p, t, whisper_id="v", deadline_ms=10**9)
    p.target.pause()
    p.fail(-32063, "whisper.ask", frm=BOT, to=A, task_id=t, question="q", deadline_ms=1,
          default_if_lapsed="d")
    p.fail(-32063, "whisper.answer", frm=A, whisper_id="v", answer="x")
    p.fail(-32011, "whisper.answer", frm=GHOST, whisper_id="v", answer="x")
    assert [n["params"]["whisper_id"] for n in p.target.lapses()] == ["w"]
    p.target.assert_same_state("whispers")


def test_a_paused_member_still_asks_and_answers():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    p.target.pause(A)
    ask(p, t, whisper_id="w")
    p.ok("whisper.answer", frm=A, whisper_id="w", answer="x")
    p.target.assert_same_state("whispers")


def test_audit_read_by_task_finds_answers_through_their_whisper():
    p = pair()
    p.setup(MEMBERS)
    t, other = p.new_task(kind="k"), p.new_task(kind="k")
    ask(p, t, whisper_id="w", to=[A, B])
    ask(p, other, whisper_id="v")
    p.fail(-32011, "whisper.answer", frm=C, whisper_id="w", answer="x")          # refused, recorded
    p.ok("whisper.answer", frm=A, whisper_id="w", answer="x", task_id=other)   # params.task_id ignored
    p.ok("whisper.answer", frm=A, whisper_id="v", answer="y", task_id=t)
    p.target.pause()
    p.fail(-32063, "whisper.answer", frm=A, whisper_id="unknown", answer="z", task_id=t)
    for flt in ({"task_id": t}, {"task_id": other}, {"task_id": t, "method": "whisper.answer"},
                {"task_id": t, "outcome": "refused"}, {"task_id": t, "from": A},
                {"task_id": "zzz"}):
        p.call("audit.read", filter=flt)
        p.call("audit.read", filter=flt, range={"from_seq": 8, "to_seq": 11})
