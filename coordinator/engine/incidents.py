"""Errors a caller cannot fix: the detail goes to the log, the caller gets an id.

A client of a server must never read the server's file paths, hosts,
credentials or exception text in an answer; an operator must be able to find
the full story of any answer a client reports. So every -32603, and every
-32900 whose cause is the store's, is logged (with its traceback) under a
log id, and the answer carries only that id: in its message and as
`data.log_id`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from coordinator.engine.ids import random_ids
from coordinator.engine.wire import INTERNAL_ERROR
from coordinator.errors import RpcError

__all__ = ["LOG_ID_PREFIX", "internal_error", "logged"]

LOG_ID_PREFIX = "log"


def logged(
    log: logging.Logger,
    what: str,
    exc: BaseException | None = None,
    ids: Callable[[str], str] = random_ids,
) -> str:
    """Log `what` (and `exc` with its traceback) under a new log id; return the id."""
    log_id = ids(LOG_ID_PREFIX)
    log.error("[%s] %s", log_id, what, exc_info=exc if exc is not None else False)
    return log_id


def internal_error(
    log: logging.Logger,
    what: str,
    exc: BaseException | None = None,
    ids: Callable[[str], str] = random_ids,
    data: dict[str, Any] | None = None,
) -> RpcError:
    """-32603 for a defect: logged in full, answered with the log id only."""
    log_id = logged(log, what, exc, ids)
    return RpcError(
        INTERNAL_ERROR,
        f"Internal error; nothing was applied. The server logged the detail as {log_id}: "
        "quote it to the operator",
        {**(data or {}), "log_id": log_id},
    )
