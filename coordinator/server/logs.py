"""`chapline serve --log-format json`: one JSON object per log line.

Every record (chapline's, uvicorn's, the SDKs') becomes `{"ts", "level",
"logger", "message"}`, plus `call_id` and `workspace` when it was logged
while a call ran (the dispatcher's thread sets them, `calling`), and
`exception` with the traceback text when there is one. With JSON logs the
server also logs one `call` record per call on the `chapline.calls` logger
(method, outcome, seconds), which a log pipeline can count and search
(SPECIFICATION.md, "Observability").
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec

__all__ = ["CALL", "CALLS_LOGGER", "JsonFormatter", "calling", "current_call", "use_json_logs"]

CALLS_LOGGER = "chapline.calls"

# (call id, workspace) of the call running on this thread's context; set
# and reset around each call by the server (`calling`, or directly where a
# context manager's cost shows).
CALL: contextvars.ContextVar[tuple[Any, str | None] | None] = contextvars.ContextVar(
    "chapline_call", default=None
)
_encode = msgspec.json.Encoder().encode


@contextlib.contextmanager
def calling(call_id: Any, workspace: str | None) -> Iterator[None]:
    """Records logged inside carry this call's id and workspace."""
    token = CALL.set((call_id, workspace))
    try:
        yield
    finally:
        CALL.reset(token)


def current_call() -> tuple[Any, str | None] | None:
    """The (call id, workspace) of the call running here, or None."""
    return CALL.get()


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        call = current_call()
        if call is not None:
            call_id, workspace = call
            if call_id is not None:
                line["call_id"] = call_id
            if workspace is not None:
                line["workspace"] = workspace
        fields = getattr(record, "chap", None)  # structured fields a caller passed as extra
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return _encode(line).decode()


def use_json_logs(stream: Any = None) -> logging.Handler:
    """Send every record to `stream` (standard error) as JSON lines, from
    WARNING up as without this, and turn on the per-call records (INFO).
    Returns the handler."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger(CALLS_LOGGER).setLevel(logging.INFO)
    return handler
