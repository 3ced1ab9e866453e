"""Idempotency keys (`x-chapline-idempotency-key`, SPECIFICATION.md,
"Idempotency keys"): a recorded call its sender sends again verbatim is
answered as the first time and not run again; kept in the store, so a key seen
before a restart is honoured after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from client import env, refused
from hypothesis import given
from hypothesis import strategies as st
from support import make

from coordinator import Coordinator
from storage import SqliteStore

KEY = "x-chapline-idempotency-key"
W, A, BOT = "wsp_i", "human:alice", "agent:bot"


def keyed(method: str, params: dict[str, Any], key: Any, rid: Any = "r1") -> dict[str, Any]:
    return {**env(method, {"workspace": W, **params}, id=rid), KEY: key}


def setup(coord: Coordinator) -> None:
    assert "result" in coord.dispatch(env("workspace.create", {"workspace": W}))
    for uri, role in ((A, "admin"), (BOT, "drafter")):
        joined = coord.dispatch(env("participant.join", {"workspace": W, "from": uri, "type": uri.split(":")[0],
                                                         "role": role}))
        assert "result" in joined


def count(coord: Coordinator) -> int:
    n: int = coord.dispatch(env("workspace.describe", {"workspace": W}))["result"]["audit_count"]
    return n


def task(key: Any, kind: str = "k", frm: str = A) -> dict[str, Any]:
    return keyed("task.create", {"from": frm, "assignee": BOT, "kind": kind, "input": {}}, key)


def test_a_resent_call_is_answered_as_the_first_and_not_run_again() -> None:
    coord = make()
    setup(coord)
    first = coord.dispatch(task("k1"))
    before = count(coord)
    again = coord.dispatch(task("k1"))
    assert again == first
    assert count(coord) == before
    assert len(coord.snapshot(W)["tasks"]) == 1


def test_the_same_key_on_another_request_is_refused_and_changes_nothing() -> None:
    coord = make()
    setup(coord)
    coord.dispatch(task("k1"))
    before = count(coord)
    error = refused(coord.dispatch(task("k1", kind="other")), -32602)
    assert KEY in error["message"] and "new key" in error["message"]
    assert error["data"] == {"field": KEY, "seq": before - 1}
    assert count(coord) == before


def test_keys_are_scoped_to_their_sender() -> None:
    coord = make()
    setup(coord)
    coord.dispatch(task("shared"))
    other = coord.dispatch(task("shared", frm=BOT))
    assert "result" in other
    assert len(coord.snapshot(W)["tasks"]) == 2


@pytest.mark.parametrize("key", ["", 5, None, ["k"], "x" * 201])
def test_a_malformed_key_is_refused_before_anything_runs(key: Any) -> None:
    coord = make()
    setup(coord)
    before = count(coord)
    error = refused(coord.dispatch(task(key)), -32602)
    assert KEY in error["message"]
    assert count(coord) == before


def test_a_recorded_refusal_is_answered_again_not_recorded_twice() -> None:
    coord = make()
    setup(coord)
    call = keyed("workspace.set_profiles", {"from": BOT, "profiles": ["core/1.0"]}, "r")
    first = coord.dispatch(call)
    refused(first, -32011)
    before = count(coord)
    assert coord.dispatch(call) == first
    assert count(coord) == before


def test_a_keyed_workspace_create_is_answered_again() -> None:
    coord = make()
    call = keyed("workspace.create", {}, "c1")
    first = coord.dispatch(call)
    assert coord.dispatch(call) == first


def test_a_key_seen_before_a_restart_is_honoured_after_it(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    coord = Coordinator(SqliteStore(db))
    setup(coord)
    first = coord.dispatch(task("durable"))
    coord.close()
    again = Coordinator(SqliteStore(db))
    before = count(again)
    assert again.dispatch(task("durable")) == first
    assert count(again) == before
    again.close()


def test_a_key_is_honoured_by_another_coordinator_on_the_same_store(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    one, two = Coordinator(SqliteStore(db)), Coordinator(SqliteStore(db))
    setup(one)
    first = one.dispatch(task("shared-store"))
    assert two.dispatch(task("shared-store")) == first
    assert len(two.snapshot(W)["tasks"]) == 1


def test_a_key_inside_a_batch_is_answered_from_the_batch() -> None:
    coord = make()
    setup(coord)
    with coord.batch():
        first = coord.dispatch(task("b"))
        again = coord.dispatch(task("b"))
    assert again == first
    assert len(coord.snapshot(W)["tasks"]) == 1


@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=12))
def test_any_sequence_of_resends_creates_one_task_per_key(keys: list[str]) -> None:
    coord = make()
    setup(coord)
    answers: dict[str, Any] = {}
    for key in keys:
        answer = coord.dispatch(task(key))
        assert answers.setdefault(key, answer) == answer
    assert len(coord.snapshot(W)["tasks"]) == len(set(keys))
