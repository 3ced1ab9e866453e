"""Recording work that happened outside CHAP: an MCP tool call, an A2A exchange.

The MCP and A2A transports let an outside client drive a workspace. These
helpers go the other way: when an agent already called an MCP tool, or
exchanged messages with a remote A2A agent, they put that work in the
workspace's log as a task the caller created, started and completed, whose
output cites the content hashes of what went in and what came out. Anyone
holding a copy of the call's input or output can later check it against the
log by hashing it the same way (`content_hash`).

Names, parameters and the envelopes written are those of 0.3.3's helpers,
so the same calls give the same audit entries.
"""

from __future__ import annotations

from typing import Any, Protocol

from coordinator.engine.canonical import digest
from coordinator.errors import InwardCallError

__all__ = ["content_hash", "wrap_a2a_message_exchange", "wrap_mcp_tool_call"]


class _Dispatches(Protocol):
    def dispatch(self, envelope: dict[str, Any]) -> dict[str, Any]: ...


def content_hash(value: Any) -> str:
    """`sha256:<hex>` of the CHAP canonical JSON (JCS) of `value`."""
    return digest(value)


def _call(coord: _Dispatches, envelope_id: str, method: str, params: dict[str, Any]) -> Any:
    response = coord.dispatch({"jsonrpc": "2.0", "id": envelope_id, "method": method, "params": params})
    if "error" in response:
        raise InwardCallError(method, response["error"])
    return response["result"]


def _record(
    coord: _Dispatches,
    workspace: str,
    *,
    label: str,
    actor: str,
    kind: str,
    task_input: Any,
    output: dict[str, Any],
    routing_hints: dict[str, Any] | None,
    confidence: Any,
    review_required: bool,
) -> str:
    """create -> in_progress -> complete, as `actor`; the task id."""
    create: dict[str, Any] = {
        "workspace": workspace,
        "from": actor,
        "kind": kind,
        "assignee": actor,
        "input": task_input,
    }
    if routing_hints is not None:
        create["routing_hints"] = routing_hints
    if review_required:
        create["review_required"] = True
    task_id: str = _call(coord, f"wrap-{label}-create", "task.create", create)["task_id"]
    base = {"workspace": workspace, "from": actor, "task_id": task_id}
    _call(coord, f"wrap-{label}-update", "task.update", {**base, "state": "in_progress"})
    complete: dict[str, Any] = {**base, "output": output}
    if confidence is not None:
        complete["confidence"] = confidence
    _call(coord, f"wrap-{label}-complete", "task.complete", complete)
    return task_id


def wrap_mcp_tool_call(
    coord: _Dispatches,
    workspace: str,
    *,
    caller: str,
    tool: str,
    args: dict[str, Any],
    result: Any,
    server: str | None = None,
    task_kind: str | None = None,
    routing_hints: dict[str, Any] | None = None,
    confidence: float | str | None = None,
    review_required: bool = False,
    fulfils: str | None = None,
) -> dict[str, str]:
    """Record an MCP tool call `caller` made (a member of `workspace`).

    The task's kind is `mcp_call:<tool>` unless `task_kind` is given, its
    input the call's `args`, and its output `{"result", "citations": [{kind,
    server, tool, input_hash, output_hash}]}` (plus `fulfils`, the id of a
    decision this call carries out, when given). With `review_required` the
    task goes to review when completed instead of finishing (0.3.3 accepts
    the flag but does not pass it on). Returns the task id and both hashes.
    Confidence, like every CHAP number, must be an integer or a string.
    """
    input_hash, output_hash = content_hash(args), content_hash(result)
    output: dict[str, Any] = {
        "result": result,
        "citations": [
            {
                "kind": "mcp_tool_call",
                "server": server if server is not None else "unknown",
                "tool": tool,
                "input_hash": input_hash,
                "output_hash": output_hash,
            }
        ],
    }
    if fulfils is not None:
        output["fulfils"] = fulfils
    task_id = _record(
        coord,
        workspace,
        label=tool,
        actor=caller,
        kind=task_kind if task_kind is not None else f"mcp_call:{tool}",
        task_input=args,
        output=output,
        routing_hints=routing_hints,
        confidence=confidence,
        review_required=review_required,
    )
    return {"task_id": task_id, "input_hash": input_hash, "output_hash": output_hash}


def wrap_a2a_message_exchange(
    coord: _Dispatches,
    workspace: str,
    *,
    bridge_uri: str,
    remote_agent: str,
    sent: dict[str, Any],
    received: dict[str, Any],
    task_kind: str = "a2a_exchange",
    routing_hints: dict[str, Any] | None = None,
    confidence: float | str | None = None,
    fulfils: str | None = None,
) -> dict[str, str]:
    """Record a message exchange with a remote A2A agent.

    `bridge_uri` is the workspace member that stands for the remote agent
    (`remote_agent` itself need not be a member). The task's input is
    `{"remote_agent", "sent"}` and its output `{"received", "citations":
    [{kind, remote_agent, sent_hash, received_hash}]}` (plus `fulfils`).
    Returns the task id and both hashes.
    """
    sent_hash, received_hash = content_hash(sent), content_hash(received)
    output: dict[str, Any] = {
        "received": received,
        "citations": [
            {
                "kind": "a2a_exchange",
                "remote_agent": remote_agent,
                "sent_hash": sent_hash,
                "received_hash": received_hash,
            }
        ],
    }
    if fulfils is not None:
        output["fulfils"] = fulfils
    task_id = _record(
        coord,
        workspace,
        label="a2a",
        actor=bridge_uri,
        kind=task_kind,
        task_input={"remote_agent": remote_agent, "sent": sent},
        output=output,
        routing_hints=routing_hints,
        confidence=confidence,
        review_required=False,
    )
    return {"task_id": task_id, "sent_hash": sent_hash, "received_hash": received_hash}
