"""An agent function made reviewed: `reviewed(remote, workspace, agent=...,
reviewer=...)(draft)` gives a function that drafts (calls `draft`), asks for
a review of the draft on a new task, waits for a person's decision and
returns it (`Decision.output` is the approved or patched output).
SPECIFICATION.md, "Waiting for people"."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec

from coordinator.client.remote import RemoteCoordinator
from coordinator.client.waiting import Decision
from coordinator.errors import RpcError

__all__ = ["reviewed"]

P = ParamSpec("P")


def reviewed(
    remote: RemoteCoordinator,
    workspace: str,
    *,
    agent: str,
    reviewer: str | list[str],
    kind: str = "draft",
    timeout: float = 3600.0,
) -> Callable[[Callable[P, Any]], Callable[P, Decision]]:
    """A decorator: the function's result becomes the artefact `reviewer`
    (a member URI, or several) reviews on a task `agent` creates for itself;
    the call returns the `Decision`. A refused call raises its RpcError."""

    def call(method: str, **params: Any) -> Any:
        answer = remote.dispatch(
            {"jsonrpc": "2.0", "id": method, "method": method,
             "params": {"workspace": workspace, "from": agent, **params}}
        )
        if "error" in answer:
            error = answer["error"]
            raise RpcError(error["code"], error["message"], error.get("data"))
        return answer["result"]

    def decorate(draft: Callable[P, Any]) -> Callable[P, Decision]:
        @functools.wraps(draft)
        def run(*args: P.args, **kwargs: P.kwargs) -> Decision:
            task_id = call("task.create", assignee=agent, kind=kind, input={"args": list(args), "kwargs": kwargs},
                           review_required=True)["task_id"]
            artefact = draft(*args, **kwargs)
            to = [reviewer] if isinstance(reviewer, str) else list(reviewer)
            call("review.request", task_id=task_id, to=to, artefact=artefact)
            return remote.wait_for_decision(workspace, task_id, timeout)

        return run

    return decorate
