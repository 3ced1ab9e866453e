"""Recording outside work (an MCP tool call, an A2A exchange) gives the same
entries, hashes and chain as 0.3.3's helpers for the same calls."""

from __future__ import annotations

from typing import Any

import chap_coordinator
import pytest
import rfc8785
from chap_coordinator.transports import wrap as reference_wrap
from client import Client

from coordinator import Coordinator, CounterIds, StepClock
from coordinator.errors import InwardCallError
from coordinator.server.inward import content_hash, wrap_a2a_message_exchange, wrap_mcp_tool_call

MEMBERS = (("agent:a", "agent"), ("service:bridge", "service"))


def _pair() -> tuple[Coordinator, Any]:
    ours = Coordinator(clock=StepClock(), ids=CounterIds())
    theirs = chap_coordinator.Coordinator(deterministic_ids=True, deterministic_clock=True, enable_chain=True)
    for coord in (ours, theirs):
        for uri, kind in MEMBERS:
            coord.dispatch({"jsonrpc": "2.0", "id": 1, "method": "participant.join",
                            "params": {"workspace": "w", "from": uri, "type": kind}})
    return ours, theirs


def _log(coord: Any) -> list[dict[str, Any]]:
    return coord.dispatch({"jsonrpc": "2.0", "id": 9, "method": "audit.read",
                           "params": {"workspace": "w"}})["result"]["entries"]


CALLS = [
    ("mcp", dict(caller="agent:a", tool="search", args={"q": "x", "n": 3}, result={"hits": [1, 2]},
                 server="web", confidence="0.9", fulfils="dec_1", routing_hints={"lane": "fast"})),
    ("mcp", dict(caller="agent:a", tool="noop", args={}, result=None)),
    ("a2a", dict(bridge_uri="service:bridge", remote_agent="a2a:partner/agent",
                 sent={"parts": [{"text": "hi"}]}, received={"parts": [{"text": "hello"}]}, fulfils="d2")),
]


def test_same_entries_and_hashes_as_the_reference() -> None:
    ours, theirs = _pair()
    for kind, kwargs in CALLS:
        mine_fn, ref_fn = (
            (wrap_mcp_tool_call, reference_wrap.wrap_mcp_tool_call)
            if kind == "mcp"
            else (wrap_a2a_message_exchange, reference_wrap.wrap_a2a_message_exchange)
        )
        mine_out, ref_out = mine_fn(ours, "w", **kwargs), ref_fn(theirs, "w", **kwargs)
        assert set(mine_out) == set(ref_out)
        assert {k: v for k, v in mine_out.items() if k != "task_id"} == {
            k: v for k, v in ref_out.items() if k != "task_id"
        }
    mine, ref = _log(ours), _log(theirs)
    assert [e["envelope"] for e in mine] == [_same_ids(e["envelope"], ref, mine) for e in ref]


def _same_ids(envelope: dict[str, Any], ref: list[dict[str, Any]], mine: list[dict[str, Any]]) -> Any:
    """The reference's envelope with its generated task ids replaced by ours
    (matched in order of first use): the ids are all that may differ."""
    order = lambda log: list(dict.fromkeys(  # noqa: E731
        e["envelope"]["params"]["task_id"] for e in log if "task_id" in e["envelope"]["params"]
    ))
    mapping = dict(zip(order(ref), order(mine), strict=True))
    params = envelope["params"]
    if "task_id" in params:
        return {**envelope, "params": {**params, "task_id": mapping[params["task_id"]]}}
    return envelope


def test_content_hash_is_sha256_of_jcs() -> None:
    import hashlib

    value = {"b": [1, "é", {"z": None, "a": True}], "a": "x"}
    assert content_hash(value) == "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()
    assert content_hash(value) == reference_wrap.content_hash(value)


def test_review_required_sends_the_task_to_review() -> None:
    ours, _ = _pair()
    Client(ours, "w").ok("participant.join", frm="human:rev", type="human", role="reviewer")
    out = wrap_mcp_tool_call(ours, "w", caller="agent:a", tool="t", args={}, result=1, review_required=True)
    task = ours.snapshot("w")["tasks"][out["task_id"]]
    assert task["state"] == "review_requested"
    assert _log(ours)[3]["envelope"]["params"]["review_required"] is True


def test_a_refused_step_raises_with_the_error_and_names_the_step() -> None:
    ours, _ = _pair()
    with pytest.raises(InwardCallError) as caught:
        wrap_mcp_tool_call(ours, "w", caller="agent:stranger", tool="t", args={}, result=1)
    assert caught.value.step == "task.create" and caught.value.error["code"] == -32011
    assert isinstance(caught.value, RuntimeError)  # code written for 0.3.3 catches it
    count = len(_log(ours))
    with pytest.raises(InwardCallError) as caught:
        wrap_mcp_tool_call(ours, "w", caller="agent:a", tool="t", args={}, result=1, confidence=0.5)
    assert caught.value.step == "task.complete" and caught.value.error["code"] == -32602
    # create and update were recorded: the task waits, in progress.
    assert len(_log(ours)) == count + 2
