"""The lockstep machine of test_stateful.py (MemoryStore and SqliteStore side
by side, restarts of the SQLite side, identical stored state) with the
control/1.0 and routing/1.0 methods added to its rules."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule
from test_stateful import PEOPLE, LockstepMachine

PROFILES = ["core/1.0", "review/1.0", "control/1.0", "routing/1.0", "modes/1.0"]
# Mostly members of "wa" (which advertises both profiles), so that calls
# succeed as well as being refused.
actors = st.sampled_from(["human:alice", "human:alice", "agent:bot", *PEOPLE])
spaces = st.sampled_from(["wa", "wa", "wa", "wb"])
HINTS = st.sampled_from(
    [None, {"criticality": "critical"}, {"criticality": "high", "confidence": "0.5"}, {"criticality": "low"}]
)


class ControlRoutingMachine(LockstepMachine):
    @initialize()
    def start(self):
        super().start()
        self.snapshots: list[tuple[str, str]] = []
        self.send("workspace.set_profiles", {"workspace": "wa", "from": "human:alice", "profiles": PROFILES})
        first = {"workspace": "wa", "from": "human:alice", "include": ["members", "mode_ceiling"]}
        self.remember("wa", self.send("control.snapshot", first))

    def remember(self, ws, response):
        result = response.get("result")
        if not isinstance(result, dict):
            return
        if "new_task_id" in result:
            self.tasks.append((ws, result["new_task_id"]))
        if "snapshot_artefact_id" in result:
            self.snapshots.append((ws, result["snapshot_artefact_id"]))

    @rule(ws=spaces, who=actors, assignee=actors, hints=HINTS)
    def create_hinted_task(self, ws, who, assignee, hints):
        params = {"workspace": ws, "from": who, "assignee": assignee, "kind": "k", "input": {}}
        if hints is not None:
            params["routing_hints"] = hints
        self.send("task.create", params)

    @rule(
        data=st.data(),
        method=st.sampled_from(["control.pause", "control.resume"]),
        scope=st.sampled_from(["task", "participant", "workspace", None]),
        who=actors,
        member=actors,
    )
    def pause_or_resume(self, data, method, scope, who, member):
        ws = data.draw(spaces)
        params = {"workspace": ws, "from": who}
        if scope is not None:
            params["scope"] = scope
        if scope in ("task", None) and self.tasks:
            params["task_id"] = data.draw(st.sampled_from(self.tasks))[1]
        if scope == "participant":
            params["participant_uri"] = member
        self.send(method, params)

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), who=actors, reason=st.sampled_from([None, "r"]))
    def cancel(self, data, who, reason):
        ws, tid = data.draw(st.sampled_from(self.tasks))
        params = {"workspace": ws, "from": who, "task_id": tid}
        if reason is not None:
            params["reason"] = reason
        self.send("control.cancel", params)

    @rule(ws=spaces, who=actors,
          include=st.sampled_from([None, ["members"], ["mode_ceiling", "audit"], [], "members"]))
    def snapshot(self, ws, who, include):
        params = {"workspace": ws, "from": who, "label": "s"}
        if include is not None:
            params["include"] = include
        self.remember(ws, self.send("control.snapshot", params))

    @rule(data=st.data(), who=actors, what=st.sampled_from([None, ["members"], ["mode_ceiling"], []]))
    def rollback(self, data, who, what):
        ws, sid = data.draw(st.sampled_from(self.snapshots + [("wa", "art_unknown")]))
        params = {"workspace": ws, "from": who, "to_snapshot_artefact_id": sid}
        if what is not None:
            params["what_to_restore"] = what
        self.send("control.rollback", params)

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), who=actors, assignee=st.sampled_from([None, *PEOPLE]),
          mode=st.sampled_from([None, "shadow", "production", 5]))
    def supersede(self, data, who, assignee, mode):
        ws, tid = data.draw(st.sampled_from(self.tasks))
        spec = {"kind": "k2"}
        if assignee is not None:
            spec["assignee"] = assignee
        if mode is not None:
            spec["mode"] = mode
        self.remember(ws, self.send("control.supersede",
                                    {"workspace": ws, "from": who, "task_id": tid, "successor_task": spec}))

    @rule(ws=spaces, who=actors, ceiling=st.sampled_from(["shadow", "trial", "production", "bogus"]))
    def set_mode_ceiling(self, ws, who, ceiling):
        self.send("control.set_mode_ceiling", {"workspace": ws, "from": who, "new_ceiling": ceiling})

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), who=actors, candidates=st.lists(actors, max_size=3))
    def route(self, data, who, candidates):
        ws, tid = data.draw(st.sampled_from(self.tasks))
        self.send("task.route", {"workspace": ws, "from": who, "task_id": tid, "candidates": candidates})

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), who=actors, method=st.sampled_from(["review.depth", "escalate.auto"]),
          to=st.sampled_from([None, "human:alice", "group:ops", "human:nobody"]))
    def depth_or_escalate(self, data, who, method, to):
        ws, tid = data.draw(st.sampled_from(self.tasks))
        params = {"workspace": ws, "from": who, "task_id": tid}
        if to is not None:
            params["default_escalation_target"] = to
        self.send(method, params)


ControlRoutingMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=35,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_control_routing_lockstep = ControlRoutingMachine.TestCase
