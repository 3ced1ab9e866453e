"""hypothesis stateful, the interaction profiles: the lockstep machine of
test_stateful.py (a MemoryStore coordinator and a SqliteStore one, compared
call by call, the SQLite side restarted at random, restarts checked against
the file) with whisper, deliberation and handoff calls and lapse sweeps
added."""

from __future__ import annotations

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule
from test_stateful import PEOPLE, LockstepMachine

people = st.sampled_from(PEOPLE)
# Mostly members, so that most calls get past the membership floor.
members = st.sampled_from(["human:alice", "human:bob", "agent:bot", "agent:two"]) | people
INTERACTION = ["core/1.0", "review/1.0", "whisper/1.0", "deliberation/1.0", "handoff/1.0"]


def _pick(data: st.DataObject, known: list[tuple[str, str]]) -> tuple[str, str]:
    """A known (workspace, id), or an unknown id now and then."""
    if known and data.draw(st.integers(0, 4)):
        return data.draw(st.sampled_from(known))
    return data.draw(st.sampled_from(["wa", "wb"])), "nope"


class InteractionMachine(LockstepMachine):
    @initialize()
    def start(self):
        LockstepMachine.start(self)
        self.made: dict[str, list[tuple[str, str]]] = {"whisper": [], "deliberation": [], "handoff": []}
        self.send("workspace.set_profiles",
                  {"workspace": "wa", "from": "human:alice", "profiles": INTERACTION})
        for who in ("human:bob", "agent:two"):
            self.send("participant.join", {"workspace": "wa", "from": who, "type": who.split(":")[0]})
        for assignee in ("agent:bot", "agent:two"):
            self.send("task.create", {"workspace": "wa", "from": "human:alice", "assignee": assignee,
                                      "kind": "k", "input": {}})

    def send(self, method, params, *, raw=None):
        response = super().send(method, params, raw=raw)
        # `--hypothesis-show-statistics` shows which outcomes the runs reached.
        event(f"{method} -> {response['error']['code'] if 'error' in response else 'ok'}")
        return response

    @rule()
    def advertise_again(self):
        """set_profiles (inherited) may drop these profiles; bring them back."""
        self.send("workspace.set_profiles",
                  {"workspace": "wa", "from": "human:alice", "profiles": INTERACTION})

    def remember(self, kind: str, ws: str, response: dict) -> None:
        result = response.get("result")
        key = f"{kind}_id"
        if isinstance(result, dict) and key in result and (ws, result[key]) not in self.made[kind]:
            self.made[kind].append((ws, result[key]))

    # -- whisper ----------------------------------------------------------------

    @precondition(lambda self: self.tasks)
    @rule(
        data=st.data(),
        who=members,
        to=st.sampled_from(["human:alice", "human:alice", ["human:bob", "agent:two"], "group:g", 5]),
        deadline=st.sampled_from([1, 2500, 10**9, 10**9, "1"]),
        options=st.sampled_from([None, None, [{"id": "a"}, {"id": 1}], [], "a"]),
        chosen=st.sampled_from([None, "w1", "w2"]),
    )
    def ask(self, data, who, to, deadline, options, chosen):
        ws, task = data.draw(st.sampled_from(self.tasks))
        params = {"workspace": ws, "from": who, "to": to, "task_id": task, "question": "q",
                  "deadline_ms": deadline, "default_if_lapsed": {"d": 1}}
        if options is not None:
            params["options"] = options
        if chosen is not None:
            params["whisper_id"] = chosen
        self.remember("whisper", ws, self.send("whisper.ask", params))

    @rule(
        data=st.data(),
        who=members,
        answer=st.sampled_from([{"answer_option": "a"}, {"answer_option": 1.0},
                                {"answer_option": True}, {"answer": "text"}, {"answer": ""}, {}]),
    )
    def answer(self, data, who, answer):
        ws, wid = _pick(data, self.made["whisper"])
        self.send("whisper.answer", {"workspace": ws, "from": who, "whisper_id": wid, **answer})

    @rule(ws=st.sampled_from(["wa", "wb", "wnone"]),
          now=st.sampled_from([None, "2023-11-14T22:14:00.000Z", "2030-01-01T00:00:00Z"]))
    def sweep(self, ws, now):
        a = self.mem.check_whisper_lapses(ws, now)
        b = self.sql.check_whisper_lapses(ws, now)
        assert a == b

    # -- deliberation -----------------------------------------------------------

    @rule(
        ws=st.sampled_from(["wa", "wa", "wa", "wb"]),
        who=members,
        rule_=st.sampled_from(["any_one_approves", "all_approve", "quorum:2", "weighted_vote:2",
                               "weighted_vote_with_veto:1", "any_one_approves", "bogus", 5]),
        to=st.sampled_from([["human:alice", "agent:bot"], ["human:bob", "agent:two"], "human:bob",
                            ["human:alice", "human:bob", "agent:bot", "agent:two"], []]),
        chosen=st.sampled_from([None, "d1"]),
    )
    def open(self, ws, who, rule_, to, chosen):
        params = {"workspace": ws, "from": who, "rule": rule_, "weights": {"human:alice": 2},
                  "veto": {"agent:bot": True}}
        if to is not None:
            params["to"] = to
        if chosen is not None:
            params["deliberation_id"] = chosen
        self.remember("deliberation", ws, self.send("deliberate.open", params))

    @rule(data=st.data(), who=members,
          action=st.sampled_from([("comment", {"comment": "c"}), ("vote", {"vote": "yea"}),
                                  ("vote", {"vote": "nay", "veto_invoked": True}),
                                  ("vote", {"vote": "abstain"}), ("vote", {"vote": "maybe"}),
                                  ("close", {})]))
    def deliberate(self, data, who, action):
        ws, did = _pick(data, self.made["deliberation"])
        method, extra = action
        self.send(f"deliberate.{method}",
                  {"workspace": ws, "from": who, "deliberation_id": did, **extra})

    # -- handoff ----------------------------------------------------------------

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), who=members,
          to=st.sampled_from(["agent:two", "human:bob", "agent:bot", "group:g", "agent:nobody", 5]),
          chosen=st.sampled_from([None, "h1"]))
    def propose(self, data, who, to, chosen):
        ws, task = data.draw(st.sampled_from(self.tasks))
        params = {"workspace": ws, "from": who, "to": to, "tasks": [{"task_id": task}]}
        if chosen is not None:
            params["handoff_id"] = chosen
        self.remember("handoff", ws, self.send("handoff.propose", params))

    @rule(data=st.data(), who=members,
          action=st.sampled_from([("accept", {}), ("accept", {"accepted_task_ids": []}),
                                  ("decline", {"reason": "busy"}), ("decline", {})]))
    def respond(self, data, who, action):
        ws, hid = _pick(data, self.made["handoff"])
        method, extra = action
        self.send(f"handoff.{method}", {"workspace": ws, "from": who, "handoff_id": hid, **extra})


InteractionMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_interaction_lockstep = InteractionMachine.TestCase
