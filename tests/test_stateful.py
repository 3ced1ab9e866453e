"""hypothesis stateful: random call sequences through a coordinator on a
MemoryStore and one on a durable store (SQLite, then PostgreSQL), in
lockstep, give identical responses and identical stored state; a coordinator
restarted from the durable store shows the same describe, chain head and
count."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import msgspec
from client import env
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from support import make

from coordinator import Coordinator, CounterIds, StepClock
from storage import MemoryStore, PostgresStore, SqliteStore, Store

WORKSPACES = ("wa", "wb")
PEOPLE = ("human:alice", "human:bob", "agent:bot", "agent:two", "human:ghost")
STATES = ("in_progress", "completed", "declined", "cancelled", "paused", "review_requested", "bogus")

people = st.sampled_from(PEOPLE)
workspaces = st.sampled_from(WORKSPACES)


def sqlite_database() -> tuple[Callable[[], Store], Callable[[], None]]:
    """A new SQLite file: how to open a store on it, how to remove it."""
    directory = tempfile.mkdtemp(prefix="chapline-stateful-")
    path = os.path.join(directory, "s.db")
    return (lambda: SqliteStore(path)), (lambda: shutil.rmtree(directory, ignore_errors=True))


class LockstepMachine(RuleBasedStateMachine):
    """Every rule sends one envelope to both coordinators and compares."""

    # Makes the durable side's database (a subclass picks another store).
    database: Callable[[], tuple[Callable[[], Store], Callable[[], None]]] = staticmethod(sqlite_database)

    @initialize()
    def start(self):
        self.open_durable, self.remove_durable = self.database()
        self.mem_store = MemoryStore()
        self.sql_store = self.open_durable()
        self.mem = make(self.mem_store)
        # the SQLite side keeps its clock and ids across restarts
        self.sql_clock, self.sql_ids = StepClock(), CounterIds()
        self.sql = Coordinator(self.sql_store, clock=self.sql_clock, ids=self.sql_ids)
        self.tasks: list[tuple[str, str]] = []  # (workspace, task id)
        self.reloaded_tasks: set[str] = set()  # held through a restart of the SQLite side
        self.n = 0
        self.send("workspace.create", {"workspace": "wa"})
        self.send("participant.join", {"workspace": "wa", "from": "human:alice", "type": "human", "role": "admin"})
        self.send("participant.join", {"workspace": "wa", "from": "agent:bot", "type": "agent"})

    def teardown(self):
        if hasattr(self, "sql_store"):
            self.sql_store.close()
            self.remove_durable()

    # -- the lockstep -----------------------------------------------------

    def send(self, method, params, *, raw=None):
        self.n += 1
        envelope = raw if raw is not None else env(method, params, id=self.n)
        a = self.mem.dispatch(envelope)
        b = self.sql.dispatch(envelope)
        if isinstance(params, dict) and params.get("task_id") in self.reloaded_tasks:
            # A task read back from the SQLite file lists its routing hints in
            # the stored (sorted) order, as 0.3.3's does after a restart
            # (SPECIFICATION.md, "Control and routing"); memory keeps the
            # caller's order.
            a, b = _hints_sorted(a), _hints_sorted(b)
        assert a == b, (envelope, a, b)
        assert "error" not in a or a["error"]["code"] != -32603, a
        result = a.get("result")
        if isinstance(result, dict) and method == "task.create" and "task_id" in result:
            pair = (params["workspace"], result["task_id"])
            if pair not in self.tasks:
                self.tasks.append(pair)
        return a

    # -- rules ------------------------------------------------------------

    @rule(ws=workspaces, who=people, role=st.sampled_from([None, "admin", "reviewer"]))
    def join(self, ws, who, role):
        params = {"workspace": ws, "from": who, "type": who.split(":")[0]}
        if role:
            params["role"] = role
        self.send("participant.join", params)

    @rule(ws=workspaces, who=people)
    def leave(self, ws, who):
        self.send("participant.leave", {"workspace": ws, "from": who})

    @rule(
        ws=workspaces,
        who=people,
        assignee=people,
        review=st.sampled_from([None, True, False]),
        key=st.sampled_from([None, "k1", "k2"]),
    )
    def create_task(self, ws, who, assignee, review, key):
        params = {"workspace": ws, "from": who, "assignee": assignee, "kind": "k", "input": {"n": self.n}}
        if review is not None:
            params["review_required"] = review
        if key is not None:
            params["idempotency_key"] = key
        self.send("task.create", params)

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), who=people, state=st.sampled_from(STATES))
    def update_task(self, data, who, state):
        ws, tid = data.draw(st.sampled_from(self.tasks))
        self.send("task.update", {"workspace": ws, "from": who, "task_id": tid, "state": state})

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), who=people, output=st.sampled_from([None, {"o": 1}, "text"]))
    def complete_task(self, data, who, output):
        ws, tid = data.draw(st.sampled_from(self.tasks))
        params = {"workspace": ws, "from": who, "task_id": tid}
        if output is not None:
            params["output"] = output
        self.send("task.complete", params)

    @rule(ws=workspaces, who=people, profiles=st.sampled_from([["core/1.0"], ["review/1.0", "modes/1.0"], "x"]))
    def set_profiles(self, ws, who, profiles):
        self.send("workspace.set_profiles", {"workspace": ws, "from": who, "profiles": profiles})

    @rule(
        ws=workspaces,
        start=st.integers(-2, 12),
        stop=st.one_of(st.none(), st.integers(0, 40)),
        flt=st.sampled_from([None, {"outcome": "refused"}, {"method": "task.create"}, {"from": "agent:bot"}]),
    )
    def read(self, ws, start, stop, flt):
        rng = {"from_seq": start}
        if stop is not None:
            rng["to_seq"] = stop
        params = {"workspace": ws, "range": rng}
        if flt is not None:
            params["filter"] = flt
        self.send("audit.read", params)

    @rule(ws=workspaces)
    def describe_and_verify(self, ws):
        self.send("workspace.describe", {"workspace": ws})
        self.send("audit.verify_chain", {"workspace": ws})

    @rule(
        bad=st.sampled_from(
            [
                {"jsonrpc": "2.0", "id": "x", "method": ""},
                {"jsonrpc": "1.0", "id": "x", "method": "workspace.describe"},
                {"jsonrpc": "2.0", "id": "x", "method": "task.create", "params": [1]},
                {"jsonrpc": "2.0", "id": "x", "method": "nope.nope", "params": {"workspace": "wa"}},
                {"jsonrpc": "2.0", "id": "x", "method": "task.create",
                 "params": {"workspace": "wa", "from": "human:alice", "kind": "k", "input": {"f": 0.5}}},
                {"jsonrpc": "2.0", "id": "x", "method": "whisper.ask",
                 "params": {"workspace": "wa", "from": "human:alice"}},
                {"jsonrpc": "2.0", "id": "x", "method": "control.pause",
                 "params": {"workspace": "wa", "from": "human:alice", "scope": "workspace"}},
                {"jsonrpc": "2.0", "id": "x", "method": "workspace.create", "params": {"workspace": "wa"}},
            ]
        )
    )
    def invalid(self, bad):
        self.send(bad.get("method"), bad.get("params"), raw=bad)

    @rule()
    def restart_sqlite_side(self):
        """Replace the SQLite coordinator by a new one on the same file; the
        lockstep must carry on as if nothing happened."""
        self.sql_store.close()
        self.sql_store = self.open_durable()
        self.sql = Coordinator(self.sql_store, clock=self.sql_clock, ids=self.sql_ids)
        self.reloaded_tasks.update(task for _, task in self.tasks)

    # -- invariants ---------------------------------------------------------

    @invariant()
    def same_stored_state(self):
        if not hasattr(self, "mem_store"):
            return
        assert msgspec.to_builtins(self.mem_store.load()) == msgspec.to_builtins(self.sql_store.load())

    @invariant()
    def restart_reproduces(self):
        if not hasattr(self, "sql_store") or self.n % 5:
            return
        restarted = make(self.open_durable())
        try:
            for ws in self.sql.workspace_ids():
                probe = env("workspace.describe", {"workspace": ws}, id="probe")
                # every dispatch ticks the clock: probe both, keep them in step
                live = self.sql.dispatch(probe)
                assert self.mem.dispatch(probe) == live
                assert restarted.dispatch(probe) == live
                assert self.mem.snapshot(ws) == restarted.snapshot(ws)
        finally:
            restarted.close()


def _hints_sorted(value: Any) -> Any:
    """`value` with every `hints_used` list sorted."""
    if isinstance(value, dict):
        return {k: sorted(v) if k == "hints_used" and isinstance(v, list) else _hints_sorted(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_hints_sorted(v) for v in value]
    return value


# max_examples comes from the hypothesis profile (tests/conftest.py).
_SETTINGS = settings(
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_lockstep_sqlite() -> None:
    run_state_machine_as_test(LockstepMachine, settings=_SETTINGS)


def test_lockstep_postgres(pg_schema: Callable[[], str]) -> None:
    class OnPostgres(LockstepMachine):
        @staticmethod
        def database() -> tuple[Callable[[], Store], Callable[[], None]]:
            dsn = pg_schema()
            return (lambda: PostgresStore(dsn)), (lambda: None)

    run_state_machine_as_test(OnPostgres, settings=_SETTINGS)
