"""OpenTelemetry traces of a server's calls (chapline[otel]).

One span per call, named by its method, with the workspace and the outcome,
and the store write as a child span (SPECIFICATION.md, "Observability").
Spans are made only when an OpenTelemetry SDK tracer provider is in place:
one given to `Tracing`, or the process's global one (as
`opentelemetry-instrument` or an embedding application sets it up). With
the API alone, or nothing configured, `configured()` is None and calls pay
nothing for tracing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from coordinator.extras import installed, needs

__all__ = ["Tracing", "configured"]

# Outcomes that are the server's fault, not the caller's: the span's status
# is an error (a refusal is a correct answer, its span is not).
_SERVER_SIDE = frozenset({-32603, -32903, -32900, -32901})


class Tracing:
    """Spans from `provider` (an SDK TracerProvider)."""

    def __init__(self, provider: Any) -> None:
        with needs("otel"):
            from opentelemetry import trace
        from coordinator import __version__

        self._trace = trace
        self._tracer = provider.get_tracer("chapline", __version__)

    @contextlib.contextmanager
    def call(self, method: str, call_id: Any, workspace: str | None) -> Iterator[Any]:
        """The span of one call, current while it runs; `outcome(span, code)`
        completes it."""
        attributes: dict[str, Any] = {"rpc.system": "jsonrpc", "rpc.method": method}
        if isinstance(call_id, (str, int)) and not isinstance(call_id, bool):
            attributes["rpc.jsonrpc.request_id"] = str(call_id)
        if workspace is not None:
            attributes["chap.workspace"] = workspace
        with self._tracer.start_as_current_span(
            method or "chap.call", kind=self._trace.SpanKind.SERVER, attributes=attributes
        ) as span:
            yield span

    def outcome(self, span: Any, code: int | None) -> None:
        """Mark the call's span with its outcome: "ok", or the error code."""
        span.set_attribute("chap.outcome", "ok" if code is None else str(code))
        if code is not None:
            span.set_attribute("rpc.jsonrpc.error_code", code)
            if code in _SERVER_SIDE:
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))

    @contextlib.contextmanager
    def group(self) -> Iterator[Any]:
        """The span of a group of calls the dispatcher commits together:
        their call spans and the one store write are its children. The
        caller sets `chap.group.size` once the group is complete."""
        with self._tracer.start_as_current_span("chap.group") as span:
            yield span

    @contextlib.contextmanager
    def store_write(self, workspaces: list[str], entries: int) -> Iterator[Any]:
        """The span of one store write, a child of whatever span is current."""
        attributes: dict[str, Any] = {"chap.store.entries": entries}
        if len(workspaces) == 1:
            attributes["chap.workspace"] = workspaces[0]
        else:
            attributes["chap.store.workspaces"] = len(workspaces)
        with self._tracer.start_as_current_span(
            "chap.store.write", kind=self._trace.SpanKind.CLIENT, attributes=attributes
        ) as span:
            yield span


def configured() -> Tracing | None:
    """Tracing from the process's tracer provider, if the SDK is installed
    and one is set; else None."""
    if not installed("otel"):
        return None
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    provider = trace.get_tracer_provider()
    return Tracing(provider) if isinstance(provider, TracerProvider) else None
