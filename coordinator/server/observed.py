"""What a server watches of its calls: metrics, traces, call logs, health.

`Observability` is what `create_app` is given (or makes by default): the
metrics (`Metrics`, where chapline[metrics] is installed), the tracing
(`Tracing`, where an OpenTelemetry SDK is configured), the store check and
the projections `/readyz` reads, and whether each call is logged. It wraps
the two things a call passes through outside the engine, so the engine
stays free of them and a library user pays nothing (SPECIFICATION.md,
"Observability"):

- `target(coordinator)`: what the dispatcher calls; times each call, counts
  it by method and outcome, opens its span and its log context, and counts
  the size of each group committed together;
- `store(store)`: what the coordinator writes through; times each write,
  counts conflicts, and makes the write a child span of the call's.

`count_delivery` is what each notifications `Deliverer` of `serve` calls
after an attempt (the notify package knows nothing of the server).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from coordinator.engine.registry import CallCheck
from coordinator.errors import DispatcherClosed
from coordinator.extras import installed, needs
from coordinator.server.dispatcher import Dispatcher, SerialDispatcher
from coordinator.server.health import Probe, Projected, health_routes
from coordinator.server.logs import CALL, CALLS_LOGGER, calling
from coordinator.server.metrics import METRICS_PATH, Metrics
from coordinator.server.tracing import Tracing, configured
from storage import HeldWorkspace, Store, StoreChange, StoreConflictError
from storage.types import EntryFilter
from storage.waits import on_lock_wait

with needs("server"):
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute, Route

if TYPE_CHECKING:
    from coordinator.notify import Outcome

__all__ = ["Observability", "ObservedStore", "ObservedTarget"]

log = logging.getLogger(__name__)
calls_log = logging.getLogger(CALLS_LOGGER)

# Gauges (projection lag, open streams) are set this often by each worker,
# and by the worker answering a scrape just before it answers.
REFRESH_SECONDS = 5.0
# The method label of a call whose method is not one the server knows: the
# label's values stay the registry's (a client cannot mint new series).
UNKNOWN_METHOD = "unknown"


class _Params(msgspec.Struct):
    workspace: Any = None


class _Head(msgspec.Struct):
    id: Any = None
    method: Any = None
    params: msgspec.Raw = msgspec.Raw(b"")


_head = msgspec.json.Decoder(_Head)
_params = msgspec.json.Decoder(_Params)


class Lagging(Projected, Protocol):
    """An attached projection as metrics read it (`Attachment`)."""

    def lag(self) -> int: ...


class Streams(Protocol):
    """The desk's event hub, as metrics read it (`EventHub`)."""

    def open_streams(self, principal: str | None = None) -> int: ...


class Observability:
    """What one server observes; see the module docstring.

    `metrics`: a `Metrics`; None or False for none; True (the default)
    for one where chapline[metrics] is installed. `tracing`: a `Tracing`;
    None or False for none; True (the default) for the process's configured
    SDK provider, if any. `probe`: the
    store check `/readyz` runs (`health.store_probe`; None: not checked).
    `projections`: the attachments `/readyz` and the lag gauge read.
    `log_calls`: one `chapline.calls` record per call. `clock`: seconds, for
    durations.
    """

    def __init__(
        self,
        *,
        metrics: Metrics | None | bool = True,
        tracing: Tracing | None | bool = True,
        probe: Probe | None = None,
        projections: Sequence[Lagging] = (),
        log_calls: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if metrics is True:
            metrics = Metrics() if installed("metrics") else None
        if tracing is True:
            tracing = configured()
        self.metrics = metrics or None
        self.tracing = tracing or None
        self.probe = probe
        self.projections = tuple(projections)
        self.log_calls = log_calls
        self.clock = clock

    def store(self, store: Store) -> Store:
        """`store`, its writes timed and traced (itself when nothing watches)."""
        if self.metrics is None and self.tracing is None:
            return store
        return ObservedStore(store, self)

    def target(self, target: Dispatcher, methods: Iterable[str]) -> Dispatcher:
        """`target` (a Coordinator) as the dispatcher should call it: each
        call observed. `methods` are the names the method label may take."""
        if self.metrics is None and self.tracing is None and not self.log_calls:
            return target
        return ObservedTarget(target, self, methods)

    def count_delivery(self, outcome: Outcome) -> None:
        """One notification delivery attempt, recorded in the delivery log:
        counted as `delivered` or `failed` (a `Deliverer`'s `on_attempt`)."""
        if self.metrics is not None:
            self.metrics.webhook_deliveries.labels("delivered" if outcome.ok else "failed").inc()

    def routes(self, dispatcher: SerialDispatcher, hub: Streams) -> list[BaseRoute]:
        """`/healthz`, `/readyz` and, with metrics, `/metrics`."""
        routes = health_routes(self.probe, self.projections)
        metrics = self.metrics
        if metrics is not None:
            refresh = self._refresher(metrics, dispatcher, hub)

            async def scrape(request: Request) -> Response:
                with contextlib.suppress(DispatcherClosed):  # stopping: the last values stand
                    await refresh()
                body, kind = metrics.render()
                return Response(body, media_type=kind, headers={"Cache-Control": "no-store"})

            routes.append(Route(METRICS_PATH, scrape, methods=["GET"]))
        return routes

    @contextlib.asynccontextmanager
    async def running(self, dispatcher: SerialDispatcher, hub: Streams) -> AsyncIterator[None]:
        """While the app serves: lock waits counted (`storage.waits`) and
        the gauges refreshed every REFRESH_SECONDS (each worker its own
        share)."""
        metrics = self.metrics
        if metrics is None:
            yield
            return
        refresh = self._refresher(metrics, dispatcher, hub)

        async def every() -> None:
            while True:
                try:
                    await refresh()
                except DispatcherClosed:
                    return
                except Exception:
                    log.exception("refreshing the gauges failed; tried again in %s s", REFRESH_SECONDS)
                await asyncio.sleep(REFRESH_SECONDS)

        stop_waits = on_lock_wait(metrics.lock_wait_seconds.observe)
        task = asyncio.create_task(every())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            stop_waits()

    def _refresher(
        self, metrics: Metrics, dispatcher: SerialDispatcher, hub: Streams
    ) -> Callable[[], Awaitable[None]]:
        projections = self.projections

        def lags() -> list[int]:
            return [p.lag() for p in projections]

        async def refresh() -> None:
            metrics.event_streams.set(hub.open_streams())
            if projections:
                # The lag reads the coordinator's workspaces: on its thread.
                for projection, lag in zip(projections, await dispatcher.run(lags), strict=True):
                    metrics.projection_lag.labels(projection.name).set(lag)

        return refresh


_Pending = tuple[Any, str | None, str, float, dict[str, Any]]


class ObservedTarget:
    """A coordinator as the dispatcher calls it, each call observed."""

    def __init__(self, target: Dispatcher, observability: Observability, methods: Iterable[str]) -> None:
        self._target = target
        self._obs = observability
        self._methods = frozenset(methods)
        # Calls of the group being committed: (id, workspace, method label,
        # started, response); counted once the group's write has settled
        # their answers.
        self._group: list[_Pending] | None = None
        # The labelled series each call lands in, looked up once (a lookup
        # takes prometheus_client's lock).
        self._counters: dict[tuple[str, str], Any] = {}
        self._timers: dict[str, Any] = {}

    def dispatch(
        self, envelope: dict[str, Any] | str | bytes, *, authorise: CallCheck | None = None
    ) -> dict[str, Any]:
        obs = self._obs
        # The server's authorisation check goes on to the coordinator (server/authz.py).
        run = (
            self._target.dispatch  # a target of its own need not take the keyword
            if authorise is None
            else partial(self._target.dispatch, authorise=authorise)
        )
        call_id, method, workspace = _head_of(envelope)
        label = method if method in self._methods else UNKNOWN_METHOD
        started = obs.clock()
        context = CALL.set((call_id, workspace))  # for the records logged meanwhile
        try:
            if obs.tracing is None:
                response = run(envelope)
            else:
                with obs.tracing.call(label, call_id, workspace) as span:
                    response = run(envelope)
                    obs.tracing.outcome(span, _code(response))
            if self._group is None:
                self._count(label, started, response, obs.clock())
                if obs.metrics is not None:
                    obs.metrics.group_size.observe(1)
        finally:
            CALL.reset(context)
        if self._group is not None:
            self._group.append((call_id, workspace, label, started, response))
        return response

    def batch(self) -> AbstractContextManager[None]:
        return self._batch()

    @contextlib.contextmanager
    def _batch(self) -> Iterator[None]:
        obs = self._obs
        group: list[_Pending] = []
        self._group = group
        span_of = obs.tracing.group() if obs.tracing is not None else contextlib.nullcontext()
        try:
            with span_of as span, self._target.batch():
                yield
                if span is not None:
                    span.set_attribute("chap.group.size", len(group))
        finally:
            self._group = None
            done = obs.clock()
            if obs.log_calls:  # its record carries the call's id and workspace
                for call_id, workspace, label, started, response in group:
                    with calling(call_id, workspace):
                        self._count(label, started, response, done)
            else:
                for _, _, label, started, response in group:
                    self._count(label, started, response, done)
            if obs.metrics is not None:
                obs.metrics.group_size.observe(len(group))

    def _count(self, label: str, started: float, response: dict[str, Any], done: float) -> None:
        obs = self._obs
        code = _code(response)
        outcome = "ok" if code is None else str(code)
        seconds = done - started
        metrics = obs.metrics
        if metrics is not None:
            counter = self._counters.get((label, outcome))
            if counter is None:
                counter = self._counters[label, outcome] = metrics.calls.labels(label, outcome)
            counter.inc()
            timer = self._timers.get(label)
            if timer is None:
                timer = self._timers[label] = metrics.call_seconds.labels(label)
            timer.observe(seconds)
        if obs.log_calls:
            calls_log.info(
                "call %s %s in %.6f s", label, outcome, seconds,
                extra={"chap": {"method": label, "outcome": outcome, "seconds": seconds}},
            )


class ObservedStore:
    """A store whose writes are timed, traced and checked for conflicts;
    everything else is the store's own (`changed()` included)."""

    def __init__(self, store: Store, observability: Observability) -> None:
        self._store = store
        self._obs = observability

    def apply(self, change: StoreChange) -> None:
        with self._write([change.id], len(change.entries)):
            self._store.apply(change)

    def apply_many(self, changes: Iterable[StoreChange]) -> list[Exception | None]:
        changes = list(changes)
        with self._write([c.id for c in changes], sum(len(c.entries) for c in changes)):
            results = self._store.apply_many(changes)
        metrics = self._obs.metrics
        if metrics is not None:
            for result in results:
                if isinstance(result, StoreConflictError):
                    metrics.store_conflicts.inc()
        return results

    @contextlib.contextmanager
    def _write(self, workspaces: list[str], entries: int) -> Iterator[None]:
        obs = self._obs
        started = obs.clock()
        span_of = (
            obs.tracing.store_write(workspaces, entries)
            if obs.tracing is not None
            else contextlib.nullcontext()
        )
        try:
            with span_of as span:
                try:
                    yield
                except StoreConflictError:
                    if span is not None:
                        span.set_attribute("chap.store.outcome", "conflict")
                    if obs.metrics is not None:
                        obs.metrics.store_conflicts.inc()
                    raise
                if span is not None:
                    span.set_attribute("chap.store.outcome", "ok")
        finally:
            if obs.metrics is not None:
                obs.metrics.store_write_seconds.observe(obs.clock() - started)

    # -- the rest of the Store protocol, as the store does it --------------------

    def workspace_ids(self) -> list[str]:
        return self._store.workspace_ids()

    def load_held(self, workspace: str | None = None) -> list[HeldWorkspace]:
        return self._store.load_held(workspace)

    def read_entries(
        self, workspace: str, start: int = 0, stop: int | None = None, where: EntryFilter | None = None
    ) -> list[dict[str, Any]]:
        return self._store.read_entries(workspace, start, stop, where)

    def read_entry_texts(self, workspace: str, start: int = 0, stop: int | None = None) -> list[bytes]:
        return self._store.read_entry_texts(workspace, start, stop)

    def delete(self, workspace: str) -> None:
        self._store.delete(workspace)

    def close(self) -> None:
        self._store.close()

    def __getattr__(self, name: str) -> Any:
        # What only some stores have: `changed()` (watching), `path`, `load`.
        return getattr(self._store, name)


def _head_of(envelope: dict[str, Any] | str | bytes) -> tuple[Any, str, str | None]:
    """(id, method, workspace) of a request, as far as it has them; the
    engine decodes and checks it properly, this only labels it."""
    if isinstance(envelope, dict):
        params = envelope.get("params")
        workspace = params.get("workspace") if isinstance(params, dict) else None
        method = envelope.get("method")
        return (
            envelope.get("id"),
            method if isinstance(method, str) else "",
            workspace if isinstance(workspace, str) else None,
        )
    try:
        head = _head.decode(envelope)
    except msgspec.MsgspecError:
        return None, "", None
    workspace = None
    if head.params:
        try:
            workspace = _params.decode(head.params).workspace
        except msgspec.MsgspecError:
            pass
    return (
        head.id,
        head.method if isinstance(head.method, str) else "",
        workspace if isinstance(workspace, str) else None,
    )


def _code(response: dict[str, Any]) -> int | None:
    error = response.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        return code if isinstance(code, int) else None
    return None
