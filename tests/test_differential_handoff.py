"""handoff/1.0 against chap-coordinator 0.3.3: the same results, codes, log,
chain head, stored handoffs and reassigned tasks, call by call (see
interaction_diff.py)."""

from __future__ import annotations

from interaction_diff import B2, BOT, GHOST, INTERACTION, MEMBERS, A, B, pair


def test_propose_and_accept_reassign_the_tasks():
    p = pair()
    p.setup(MEMBERS)
    t1, t2, t3 = p.new_task(kind="k"), p.new_task(kind="k"), p.new_task(kind="k")
    p.ok("task.update", frm=BOT, task_id=t2, state="in_progress")
    r = p.ok("handoff.propose", frm=BOT, to=B2, handoff_id="h1", summary="S", context_links=["l"],
             rationale="r", tasks=[{"task_id": t1, "title": "T", "status_summary": "s",
                                    "next_action": "n", "blockers": ["b"], "extra": 1},
                                   {"task_id": t2}])
    assert r == {"handoff_id": "h1", "state": "proposed", "task_ids": [t1, t2]}
    generated = p.ok("handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": t3}])  # hnd_ id
    accepted = p.ok("handoff.accept", frm=B2, handoff_id="h1", comment="thx")
    assert accepted == {"accepted": True, "task_ids": [t1, t2], "assignee": B2}
    p.ok("handoff.accept", frm=B2, handoff_id=generated["handoff_id"], accepted_task_ids=None)
    p.target.assert_same_state("handoffs")


def test_partial_and_repeated_task_ids():
    p = pair()
    p.setup(MEMBERS)
    t1, t2 = p.new_task(kind="k"), p.new_task(kind="k")
    p.ok("handoff.propose", frm=BOT, to=B2, handoff_id="h", tasks=[{"task_id": t1}, {"task_id": t2},
                                                              {"task_id": t1}])
    p.ok("task.update", frm=BOT, task_id=t1, state="declined")  # state is not checked at accept
    p.ok("handoff.accept", frm=B2, handoff_id="h", accepted_task_ids=[t1, t1])
    p.target.assert_same_state("handoffs")


def test_group_handoffs():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    p.ok("handoff.propose", frm=BOT, to="group:team", handoff_id="g", tasks=[{"task_id": t}])
    assert p.ok("handoff.decline", frm=B, handoff_id="g", reason="busy", suggested_target=B2) == {
        "recorded": True, "state": "proposed"}
    p.ok("handoff.decline", frm=B2, handoff_id="g")
    p.ok("handoff.accept", frm=B, handoff_id="g")
    p.fail(-32051, "handoff.accept", frm=B2, handoff_id="g")
    p.target.assert_same_state("handoffs")


def test_decline_by_the_recipient_and_by_others():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    p.ok("handoff.propose", frm=BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}])
    p.ok("handoff.decline", frm=B, handoff_id="h", reason="not me")   # recorded, stays proposed
    assert p.ok("handoff.decline", frm=B2, handoff_id="h", reason="no", suggested_target=A) == {
        "recorded": True, "state": "declined"}
    p.fail(-32051, "handoff.decline", frm=B2, handoff_id="h")
    p.fail(-32051, "handoff.accept", frm=B2, handoff_id="h")
    p.fail(-32051, "handoff.decline", frm=B, handoff_id="h")
    p.target.assert_same_state("handoffs")


def test_propose_refusals():
    p = pair()
    p.setup(MEMBERS)
    mine, bobs = p.new_task(kind="k"), p.new_task(assignee=B, kind="k")
    p.fail(-32011, "handoff.propose", frm=GHOST, to=B2, tasks=[{"task_id": mine}])
    p.fail(-32011, "handoff.propose", frm=None, to=B2, tasks=[{"task_id": mine}])
    p.fail(-32602, "handoff.propose", frm=BOT, tasks=[{"task_id": mine}])            # missing to
    p.fail(-32602, "handoff.propose", frm=BOT, to=B2)                                # missing tasks
    p.fail(-32052, "handoff.propose", frm=BOT, to="agent:outsider", tasks=[{"task_id": mine}])
    p.fail(-32052, "handoff.propose", frm=BOT, to="agent:outsider", tasks=[])        # before tasks
    p.fail(-32602, "handoff.propose", frm=BOT, to=B2, tasks=[])
    p.fail(-32602, "handoff.propose", frm=BOT, to=B2, tasks={"task_id": mine})
    p.fail(-32602, "handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": "nope"}])
    p.fail(-32602, "handoff.propose", frm=BOT, to=B2, tasks=[{"title": "no id"}])
    p.fail(-32602, "handoff.propose", frm=BOT, to=B2, tasks=["bare"])
    p.fail(-32050, "handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": bobs}])     # recorded
    p.fail(-32050, "handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": bobs}, {"task_id": "nope"}])
    p.fail(-32602, "handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": "nope"}, {"task_id": bobs}])
    p.ok("handoff.propose", frm=BOT, to=BOT, handoff_id="self", tasks=[{"task_id": mine}])
    p.target.assert_same_state("handoffs")


def test_accept_refusals():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    p.ok("handoff.propose", frm=BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}])
    p.fail(-32011, "handoff.accept", frm=GHOST, handoff_id="h")
    p.fail(-32602, "handoff.accept", frm=B2)
    p.fail(-32602, "handoff.accept", frm=B2, handoff_id="zz")
    p.fail(-32052, "handoff.accept", frm=B, handoff_id="h")                    # not the recipient
    p.fail(-32052, "handoff.accept", frm=B, handoff_id="h", accepted_task_ids=[])
    p.fail(-32602, "handoff.accept", frm=B2, handoff_id="h", accepted_task_ids=[])   # an empty list
    p.fail(-32602, "handoff.accept", frm=B2, handoff_id="h", accepted_task_ids=["zz"])
    p.ok("participant.leave", frm=B2)
    p.fail(-32011, "handoff.accept", frm=B2, handoff_id="h")
    p.ok("participant.join", frm=B2, type="agent")
    p.ok("handoff.accept", frm=B2, handoff_id="h")
    p.fail(-32051, "handoff.accept", frm=B2, handoff_id="h", accepted_task_ids=[])
    p.fail(-32051, "handoff.accept", frm=B, handoff_id="h")
    p.target.assert_same_state("handoffs")


def test_decline_refusals():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    p.ok("handoff.propose", frm=BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}])
    p.fail(-32011, "handoff.decline", frm=GHOST, handoff_id="h")
    p.fail(-32602, "handoff.decline", frm=B2)
    p.fail(-32602, "handoff.decline", frm=B2, handoff_id="zz")
    p.target.assert_same_state("handoffs")


def test_handoff_methods_are_gated_by_profile():
    p = pair(("core/1.0", "review/1.0"))
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    for method, params in [
        ("handoff.propose", {"to": B2, "tasks": [{"task_id": t}]}),
        ("handoff.accept", {"handoff_id": "h"}),
        ("handoff.decline", {"handoff_id": "h"}),
    ]:
        assert p.fail(-32601, method, frm=BOT, **params)["data"]["profile"] == "handoff/1.0"
    p.target.assert_same_state("handoffs")


def test_ids_are_drawn_only_by_accepted_proposals():
    p = pair()
    p.setup(MEMBERS)
    mine, bobs = p.new_task(kind="k"), p.new_task(assignee=B, kind="k")
    p.fail(-32050, "handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": bobs}])
    p.fail(-32602, "handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": "nope"}])
    p.ok("handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": mine}])
    p.ok("handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": mine}], handoff_id="h")
    p.ok("handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": mine}])
    p.target.assert_same_state("handoffs")


def test_a_decline_notes_the_latest_reason_only():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    p.ok("handoff.propose", frm=BOT, to="group:g", handoff_id="g", tasks=[{"task_id": t}])
    p.ok("handoff.decline", frm=B, handoff_id="g", reason="busy", suggested_target=B2)
    p.ok("handoff.decline", frm=A, handoff_id="g")
    p.ok("handoff.propose", frm=BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}],
         context_links=None, summary={"rich": 1})
    p.ok("handoff.propose", frm=BOT, to=B2, handoff_id="h2",
         tasks=[{"task_id": t, "blockers": None, "title": 5}])
    p.target.assert_same_state("handoffs")


def test_a_paused_acceptor_is_refused_and_a_paused_member_may_decline():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    p.ok("handoff.propose", frm=BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}])
    p.ok("handoff.propose", frm=BOT, to="group:g", handoff_id="g", tasks=[{"task_id": t}])
    p.target.pause(B2)
    p.fail(-32063, "handoff.accept", frm=B2, handoff_id="h")                    # paused acceptor, recorded
    p.fail(-32063, "handoff.accept", frm=B2, handoff_id="h", accepted_task_ids=[])
    p.fail(-32063, "handoff.accept", frm=B2, handoff_id="h", accepted_task_ids=["zz"])
    p.fail(-32052, "handoff.accept", frm=B, handoff_id="h")
    p.fail(-32063, "handoff.accept", frm=B2, handoff_id="g")
    p.ok("handoff.decline", frm=B2, handoff_id="h", reason="paused")
    p.fail(-32051, "handoff.accept", frm=B2, handoff_id="h")
    p.target.assert_same_state("handoffs")


def test_a_paused_workspace_refuses_every_handoff_method():
    p = pair()
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    p.ok("handoff.propose", frm=BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}])
    p.target.pause()
    p.fail(-32063, "handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": t}])
    p.fail(-32063, "handoff.accept", frm=B2, handoff_id="h")
    p.fail(-32063, "handoff.decline", frm=B2, handoff_id="h")
    p.fail(-32011, "handoff.decline", frm=GHOST, handoff_id="h")                # floor first
    p.target.assert_same_state("handoffs")


def test_a_member_paused_through_control_cannot_accept():
    p = pair((*INTERACTION, "control/1.0"))
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    p.ok("handoff.propose", frm=BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}])
    p.ok("control.pause", frm=A, scope="participant", participant_uri=B2)
    p.fail(-32063, "handoff.accept", frm=B2, handoff_id="h")
    p.ok("control.resume", frm=A, scope="participant", participant_uri=B2)
    p.ok("handoff.accept", frm=B2, handoff_id="h")
    p.ok("control.pause", frm=A, scope="workspace")
    p.fail(-32063, "handoff.decline", frm=B2, handoff_id="h")
    p.target.assert_same_state("handoffs")
