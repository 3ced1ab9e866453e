"""A Coordinator runs the profiles of the registry it is given, and a profile
takes part in calls it does not own, and in sweeps, only through the hooks
its `Profile` declares (SPECIFICATION.md, "Dispatch"; the sweep: "x-chapline-work/1.0")."""

from __future__ import annotations

from typing import Any

import pytest
from client import Client
from support import ALICE, BOT

from coordinator import Coordinator, Swept
from coordinator.engine.call import Call
from coordinator.engine.registry import Method, Profile, Registry
from coordinator.engine.sweeps import Sweep
from coordinator.engine.wire import RpcError
from coordinator.profiles import audit_reads, core, tasks
from storage import StoreConflictError

# core/1.0, implemented across three modules: a registry of it alone.
CORE = [core.PROFILE, tasks.PROFILE, audit_reads.PROFILE]


def _workspace(coord: Coordinator, workspace: str) -> Client:
    c = Client(coord, workspace, ALICE)
    c.setup(members=(ALICE, BOT))
    return c


def test_a_coordinator_runs_the_registry_it_is_given() -> None:
    coord = Coordinator(registry=Registry(CORE), default_profiles=["core/1.0"])
    c = _workspace(coord, "w")
    c.new_task()
    refused = Client(coord, "w2").fail(
        -32602, "workspace.create", profiles=["core/1.0", "whisper/1.0"]
    )
    assert "whisper/1.0 not implemented by chapline; it implements core/1.0" in refused["message"]
    assert c.fail(-32601, "review.request", task_id="t", to=[ALICE])["data"]["advertised"] == [
        "core/1.0"
    ]
    with pytest.raises(ValueError, match="review/1.0 not implemented by chapline"):
        Coordinator(registry=Registry(CORE))  # the default profiles name review/1.0


def test_a_server_lists_the_methods_of_the_registry_its_coordinator_runs() -> None:
    from starlette.testclient import TestClient

    from coordinator.server import create_app

    registry = Registry(CORE)
    coord = Coordinator(registry=registry, default_profiles=["core/1.0"])
    assert coord.registry is registry
    with TestClient(create_app(coord), base_url="http://localhost") as http:
        card = http.get("/.well-known/agent-card.json").json()  # A2A: a skill per method
    names = {skill["id"] for skill in card["skills"]}
    assert "chap.task.create" in names
    assert not any(name.startswith(("chap.review.", "chap.whisper.")) for name in names), names


def test_sweep_hooks_run_in_every_held_workspace_in_id_order() -> None:
    demo = Profile("x-chapline-demo/1.0")
    seen: list[tuple[str, int | None]] = []

    @demo.on_sweep
    def loses_a_race(sweep: Sweep) -> None:
        if sweep.workspace_id == "a":
            raise StoreConflictError("a", 4, 3)  # left for the next sweep

    @demo.on_sweep
    def reclaims(sweep: Sweep) -> None:
        ws = sweep.workspace()
        seen.append((sweep.workspace_id, None if ws is None else ws.count))
        if sweep.workspace_id == "b":
            sweep.reclaimed.append("t1")

    coord = Coordinator(registry=Registry([*CORE, demo]), default_profiles=["core/1.0"])
    for workspace in ("b", "a"):
        _workspace(coord, workspace)
    assert coord.sweep() == [Swept("b", ["t1"], [])]
    assert seen == [("a", 3), ("b", 3)]  # the hook after the lost race still ran in "a"
    assert coord.check_whisper_lapses("a") == []  # no whisper profile: nothing lapses


def test_sender_and_gate_checks_run_on_every_call_while_their_option_is_on() -> None:
    """A sender check's refusal is never recorded (dispatch step 10); a gate
    check's is, as a member's refusal (step 11). Both run whatever the
    workspace advertises, and only while the option they name is on."""
    demo = Profile("x-chapline-demo/1.0")

    @demo.verify_sender(enabled_by="enable_chain")
    def unsigned(call: Call, method: Method) -> None:
        if call.params.get("note") == "unsigned":
            raise RpcError(-32070, "not signed")

    @demo.before_gate(enabled_by="enable_chain")
    def stale(call: Call, method: Method) -> None:
        if method.name == "task.create" and call.params.get("note") == "stale":
            raise RpcError(-32402, "authenticate again")

    registry = Registry([*CORE, demo])
    on = _workspace(Coordinator(registry=registry, default_profiles=["core/1.0"]), "w")
    count = on.count()
    assert on.fail(-32070, "task.create", BOT, kind="k", input={}, assignee=BOT, note="unsigned")
    assert on.count() == count  # never recorded
    assert on.fail(-32402, "task.create", BOT, kind="k", input={}, assignee=BOT, note="stale")
    refusal: dict[str, Any] = on.last()
    assert refusal["outcome"] == {"status": "refused", "code": -32402}
    off = Coordinator(registry=registry, default_profiles=["core/1.0"], enable_chain=False)
    c = _workspace(off, "w")
    for note in ("unsigned", "stale"):
        c.ok("task.create", BOT, kind="k", input={}, assignee=BOT, note=note)


def test_write_hooks_run_around_each_write_where_the_profile_is_advertised() -> None:
    """before_write before the handler of each write in a workspace that
    advertises the profile, after_write after it: a create too, once its
    handler made the workspace (there is none before). Reads, and workspaces
    that do not advertise the profile, run neither."""
    demo = Profile("x-chapline-demo/1.0")
    seen: list[tuple[str, str, str]] = []

    @demo.before_write
    def before(call: Call) -> None:
        seen.append(("before", call.method, call.params["workspace"]))

    @demo.after_write
    def after(call: Call) -> None:
        seen.append(("after", call.method, call.params["workspace"]))

    coord = Coordinator(registry=Registry([*CORE, demo]), default_profiles=["core/1.0"])
    hooked = Client(coord, "w", ALICE)
    hooked.setup(members=(ALICE,), profiles=["core/1.0", "x-chapline-demo/1.0"])
    hooked.log()
    plain = _workspace(coord, "v")
    plain.new_task()
    hooked.ok("workspace.set_profiles", profiles=["core/1.0"])  # hooked as it arrived
    hooked.ok("participant.join", BOT, type="agent")
    assert seen == [
        ("after", "workspace.create", "w"),
        ("before", "participant.join", "w"),
        ("after", "participant.join", "w"),
        ("before", "workspace.set_profiles", "w"),
        ("after", "workspace.set_profiles", "w"),
    ]
