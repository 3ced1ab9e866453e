"""Call: what a handler sees and stages, and the change the pipeline writes from it."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.engine.call import Call
from coordinator.engine.log import LogReader
from coordinator.engine.workspace import Workspace
from coordinator.model import WorkspaceMeta
from coordinator.options import Options
from coordinator.profiles import REGISTRY
from storage import MemoryStore


def _call(ws: Workspace | None) -> Call:
    return Call(
        {"jsonrpc": "2.0", "id": 1, "method": "task.update", "params": {}},
        b"",
        "task.update",
        {},
        "2026-01-01T00:00:00.000Z",
        True,
        ws,
        Options(),
        REGISTRY,
        LogReader(MemoryStore(), ws, []),
        lambda prefix: f"{prefix}_1",
    )


def _workspace(**collections: dict[str, Any]) -> Workspace:
    ws = Workspace(WorkspaceMeta(id="w", created="t"))
    for name, items in collections.items():
        ws.objects[name] = dict(items)
    return ws


def test_reads_see_staged_values_first_in_held_order() -> None:
    call = _call(_workspace(whispers={"a": {"id": "a"}, "b": {"id": "b"}, "c": {"id": "c"}}))
    call.delete("whispers", "a")
    call.put("whispers", "b", {"id": "b", "n": 2})
    call.put("whispers", "d", {"id": "d"})
    assert call.keys("whispers") == ["b", "c", "d"]
    assert call.count("whispers") == 3
    assert call.oldest("whispers") == "b"
    assert call.items("whispers") == [
        ("b", {"id": "b", "n": 2}),
        ("c", {"id": "c"}),
        ("d", {"id": "d"}),
    ]
    assert call.get("whispers", "a") is None and call.get("whispers", ["unhashable"]) is None


def test_replace_collection_stages_deletes_and_puts() -> None:
    ws = _workspace(snapshots={"s1": {"id": "s1"}, "s2": {"id": "s2"}})
    call = _call(ws)
    call.put("snapshots", "s3", {"id": "s3"})
    call.replace_collection("snapshots", {"s2": {"id": "s2", "v": 2}, "s4": {"id": "s4"}})
    assert call.staged["snapshots"] == {
        "s3": None,
        "s1": None,
        "s2": {"id": "s2", "v": 2},
        "s4": {"id": "s4"},
    }
    assert call.keys("snapshots") == ["s2", "s4"]
    assert ws.objects["snapshots"] == {"s1": {"id": "s1"}, "s2": {"id": "s2"}}  # held unchanged


def test_unstage_drops_everything_and_a_created_workspace() -> None:
    call = _call(None)
    created = call.create_workspace(WorkspaceMeta(id="new", created="t"))
    call.put("members", "m", {"uri": "m"})
    assert call.ws is created and call.created
    call.unstage()
    assert (call.ws, call.created, call.meta, call.staged) == (None, False, None, {})


def test_answer_without_recording_refuses_after_staging() -> None:
    call = _call(_workspace())
    call.answer_without_recording()
    assert call.recorded is False
    call = _call(_workspace())
    call.put("tasks", "t", {"id": "t"})
    with pytest.raises(AssertionError, match="after staging"):
        call.answer_without_recording()
