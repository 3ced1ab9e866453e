"""The one definition of which entries an `EntryFilter` keeps."""

from __future__ import annotations

from typing import Any

from storage import EntryFilter

__all__ = ["entry_keys", "entry_matches", "indexed_keys"]


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


def entry_keys(entry: dict[str, Any]) -> list[tuple[str, str]]:
    """The (EntryFilter field, value) pairs an index may file `entry` under.

    An entry can match a filter whose `method`, `sender` or `task_id` is a
    string, or whose `outcome` is set, only if the pair is listed here, so an
    index built from these keys narrows a read without changing its result.
    """
    call = entry.get("envelope")
    refused = call is None
    if refused:
        call = entry.get("request")
    keys = [("outcome", "refused" if refused else "accepted")]
    if isinstance(call, dict):
        if isinstance(call.get("method"), str):
            keys.append(("method", call["method"]))
        params = call.get("params")
        if isinstance(params, dict):
            for field, name in (("sender", "from"), ("task_id", "task_id")):
                if isinstance(params.get(name), str):
                    keys.append((field, params[name]))
    return keys


def indexed_keys(where: EntryFilter) -> list[tuple[str, str]]:
    """The pairs of `where` an index built with `entry_keys` can look up."""
    keys = [
        (field, value)
        for field in ("method", "sender", "task_id")
        if isinstance(value := getattr(where, field), str)
    ]
    if where.outcome is not None:
        keys.append(("outcome", where.outcome))
    return keys
