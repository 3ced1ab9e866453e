"""The one definition of which entries an `EntryFilter` keeps."""

from __future__ import annotations

from typing import Any

from storage import EntryFilter

__all__ = ["entry_matches"]


def entry_matches(entry: dict[str, Any], where: EntryFilter) -> bool:
    call = entry.get("envelope")
    refused = call is None
    if refused:
        call = entry.get("request")
    if where.outcome is not None and where.outcome != ("refused" if refused else "accepted"):
        return False
    if not isinstance(call, dict):
        return where.method is None and where.sender is None and where.task_id is None
    if where.method is not None and call.get("method") != where.method:
        return False
    params = call.get("params")
    if not isinstance(params, dict):
        params = {}
    if where.sender is not None and params.get("from") != where.sender:
        return False
    if where.task_id is not None and params.get("task_id") != where.task_id:
        return False
    return True
