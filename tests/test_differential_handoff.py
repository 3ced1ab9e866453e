"""handoff/1.0 against chap-coordinator 0.3.3: the same results, codes, log,
chain head, stored handoffs and reassigned tasks, call by call (see
interaction_diff.py)."""

from __future__ import annotations

from interaction_diff import B2, BOT, GHOST, INTERACTION, A, B, Pair


def test_propose_and_accept_reassign_the_tasks():
    p = Pair()
    p.setup()
    t1, t2, t3 = p.task(), p.task(), p.task()
    p.ok("task.update", BOT, task_id=t2, state="in_progress")
    r = p.ok("handoff.propose", BOT, to=B2, handoff_id="h1", summary="S", context_links=["l"],
             rationale="r", tasks=[{"task_id": t1, "title": "T", "status_summary": "s",
                                    "next_action": "n", "blockers": ["b"], "extra": 1},
                                   {"task_id": t2}])
    assert r == {"handoff_id": "h1", "state": "proposed", "task_ids": [t1, t2]}
    generated = p.ok("handoff.propose", BOT, to=B2, tasks=[{"task_id": t3}])  # hnd_ id
    accepted = p.ok("handoff.accept", B2, handoff_id="h1", comment="thx")
    assert accepted == {"accepted": True, "task_ids": [t1, t2], "assignee": B2}
    p.ok("handoff.accept", B2, handoff_id=generated["handoff_id"], accepted_task_ids=None)
    p.assert_same_state("handoffs")


def test_partial_and_repeated_task_ids():
    p = Pair()
    p.setup()
    t1, t2 = p.task(), p.task()
    p.ok("handoff.propose", BOT, to=B2, handoff_id="h", tasks=[{"task_id": t1}, {"task_id": t2},
                                                              {"task_id": t1}])
    p.ok("task.update", BOT, task_id=t1, state="declined")  # state is not checked at accept
    p.ok("handoff.accept", B2, handoff_id="h", accepted_task_ids=[t1, t1])
    p.assert_same_state("handoffs")


def test_group_handoffs():
    p = Pair()
    p.setup()
    t = p.task()
    p.ok("handoff.propose", BOT, to="group:team", handoff_id="g", tasks=[{"task_id": t}])
    assert p.ok("handoff.decline", B, handoff_id="g", reason="busy", suggested_target=B2) == {
        "recorded": True, "state": "proposed"}
    p.ok("handoff.decline", B2, handoff_id="g")
    p.ok("handoff.accept", B, handoff_id="g")
    p.err(-32051, "handoff.accept", B2, handoff_id="g")
    p.assert_same_state("handoffs")


def test_decline_by_the_recipient_and_by_others():
    p = Pair()
    p.setup()
    t = p.task()
    p.ok("handoff.propose", BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}])
    p.ok("handoff.decline", B, handoff_id="h", reason="not me")   # recorded, stays proposed
    assert p.ok("handoff.decline", B2, handoff_id="h", reason="no", suggested_target=A) == {
        "recorded": True, "state": "declined"}
    p.err(-32051, "handoff.decline", B2, handoff_id="h")
    p.err(-32051, "handoff.accept", B2, handoff_id="h")
    p.err(-32051, "handoff.decline", B, handoff_id="h")
    p.assert_same_state("handoffs")


def test_propose_refusals():
    p = Pair()
    p.setup()
    mine, bobs = p.task(), p.task(assignee=B)
    p.err(-32011, "handoff.propose", GHOST, to=B2, tasks=[{"task_id": mine}])
    p.err(-32011, "handoff.propose", None, to=B2, tasks=[{"task_id": mine}])
    p.err(-32602, "handoff.propose", BOT, tasks=[{"task_id": mine}])            # missing to
    p.err(-32602, "handoff.propose", BOT, to=B2)                                # missing tasks
    p.err(-32052, "handoff.propose", BOT, to="agent:outsider", tasks=[{"task_id": mine}])
    p.err(-32052, "handoff.propose", BOT, to="agent:outsider", tasks=[])        # before tasks
    p.err(-32602, "handoff.propose", BOT, to=B2, tasks=[])
    p.err(-32602, "handoff.propose", BOT, to=B2, tasks={"task_id": mine})
    p.err(-32602, "handoff.propose", BOT, to=B2, tasks=[{"task_id": "nope"}])
    p.err(-32602, "handoff.propose", BOT, to=B2, tasks=[{"title": "no id"}])
    p.err(-32602, "handoff.propose", BOT, to=B2, tasks=["bare"])
    p.err(-32050, "handoff.propose", BOT, to=B2, tasks=[{"task_id": bobs}])     # recorded
    p.err(-32050, "handoff.propose", BOT, to=B2, tasks=[{"task_id": bobs}, {"task_id": "nope"}])
    p.err(-32602, "handoff.propose", BOT, to=B2, tasks=[{"task_id": "nope"}, {"task_id": bobs}])
    p.ok("handoff.propose", BOT, to=BOT, handoff_id="self", tasks=[{"task_id": mine}])
    p.assert_same_state("handoffs")


def test_accept_refusals():
    p = Pair()
    p.setup()
    t = p.task()
    p.ok("handoff.propose", BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}])
    p.err(-32011, "handoff.accept", GHOST, handoff_id="h")
    p.err(-32602, "handoff.accept", B2)
    p.err(-32602, "handoff.accept", B2, handoff_id="zz")
    p.err(-32052, "handoff.accept", B, handoff_id="h")                    # not the recipient
    p.err(-32052, "handoff.accept", B, handoff_id="h", accepted_task_ids=[])
    p.err(-32602, "handoff.accept", B2, handoff_id="h", accepted_task_ids=[])   # A18
    p.err(-32602, "handoff.accept", B2, handoff_id="h", accepted_task_ids=["zz"])
    p.ok("participant.leave", B2)
    p.err(-32011, "handoff.accept", B2, handoff_id="h")
    p.ok("participant.join", B2, type="agent")
    p.ok("handoff.accept", B2, handoff_id="h")
    p.err(-32051, "handoff.accept", B2, handoff_id="h", accepted_task_ids=[])
    p.err(-32051, "handoff.accept", B, handoff_id="h")
    p.assert_same_state("handoffs")


def test_decline_refusals():
    p = Pair()
    p.setup()
    t = p.task()
    p.ok("handoff.propose", BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}])
    p.err(-32011, "handoff.decline", GHOST, handoff_id="h")
    p.err(-32602, "handoff.decline", B2)
    p.err(-32602, "handoff.decline", B2, handoff_id="zz")
    p.assert_same_state("handoffs")


def test_handoff_methods_are_gated_by_profile():
    p = Pair(("core/1.0", "review/1.0"))
    p.setup()
    t = p.task()
    for method, params in [
        ("handoff.propose", {"to": B2, "tasks": [{"task_id": t}]}),
        ("handoff.accept", {"handoff_id": "h"}),
        ("handoff.decline", {"handoff_id": "h"}),
    ]:
        assert p.err(-32601, method, BOT, **params)["data"]["profile"] == "handoff/1.0"
    p.assert_same_state("handoffs")


def test_ids_are_drawn_only_by_accepted_proposals():
    p = Pair()
    p.setup()
    mine, bobs = p.task(), p.task(assignee=B)
    p.err(-32050, "handoff.propose", BOT, to=B2, tasks=[{"task_id": bobs}])
    p.err(-32602, "handoff.propose", BOT, to=B2, tasks=[{"task_id": "nope"}])
    p.ok("handoff.propose", BOT, to=B2, tasks=[{"task_id": mine}])
    p.ok("handoff.propose", BOT, to=B2, tasks=[{"task_id": mine}], handoff_id="h")
    p.ok("handoff.propose", BOT, to=B2, tasks=[{"task_id": mine}])
    p.assert_same_state("handoffs")


def test_a_decline_notes_the_latest_reason_only():
    p = Pair()
    p.setup()
    t = p.task()
    p.ok("handoff.propose", BOT, to="group:g", handoff_id="g", tasks=[{"task_id": t}])
    p.ok("handoff.decline", B, handoff_id="g", reason="busy", suggested_target=B2)
    p.ok("handoff.decline", A, handoff_id="g")
    p.ok("handoff.propose", BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}],
         context_links=None, summary={"rich": 1})
    p.ok("handoff.propose", BOT, to=B2, handoff_id="h2",
         tasks=[{"task_id": t, "blockers": None, "title": 5}])
    p.assert_same_state("handoffs")


def test_a_paused_acceptor_is_refused_and_a_paused_member_may_decline():
    p = Pair()
    p.setup()
    t = p.task()
    p.ok("handoff.propose", BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}])
    p.ok("handoff.propose", BOT, to="group:g", handoff_id="g", tasks=[{"task_id": t}])
    p.pause(B2)
    p.err(-32063, "handoff.accept", B2, handoff_id="h")                    # A18, recorded
    p.err(-32063, "handoff.accept", B2, handoff_id="h", accepted_task_ids=[])
    p.err(-32063, "handoff.accept", B2, handoff_id="h", accepted_task_ids=["zz"])
    p.err(-32052, "handoff.accept", B, handoff_id="h")
    p.err(-32063, "handoff.accept", B2, handoff_id="g")
    p.ok("handoff.decline", B2, handoff_id="h", reason="paused")
    p.err(-32051, "handoff.accept", B2, handoff_id="h")
    p.assert_same_state("handoffs")


def test_a_paused_workspace_refuses_every_handoff_method():
    p = Pair()
    p.setup()
    t = p.task()
    p.ok("handoff.propose", BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}])
    p.pause()
    p.err(-32063, "handoff.propose", BOT, to=B2, tasks=[{"task_id": t}])
    p.err(-32063, "handoff.accept", B2, handoff_id="h")
    p.err(-32063, "handoff.decline", B2, handoff_id="h")
    p.err(-32011, "handoff.decline", GHOST, handoff_id="h")                # floor first
    p.assert_same_state("handoffs")


def test_a_member_paused_through_control_cannot_accept():
    p = Pair((*INTERACTION, "control/1.0"))
    p.setup()
    t = p.task()
    p.ok("handoff.propose", BOT, to=B2, handoff_id="h", tasks=[{"task_id": t}])
    p.ok("control.pause", A, scope="participant", participant_uri=B2)
    p.err(-32063, "handoff.accept", B2, handoff_id="h")
    p.ok("control.resume", A, scope="participant", participant_uri=B2)
    p.ok("handoff.accept", B2, handoff_id="h")
    p.ok("control.pause", A, scope="workspace")
    p.err(-32063, "handoff.decline", B2, handoff_id="h")
    p.assert_same_state("handoffs")
