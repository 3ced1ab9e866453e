"""Prometheus metrics of a server, as `GET /metrics` answers them.

What is counted (SPECIFICATION.md, "Observability"): calls by method and
outcome, their latency, the store's write time and conflicts, waits for a
workspace's write turn (`storage.waits`), the size of each group the
dispatcher commits, how far each projection is behind, the open event
streams, and notification delivery attempts. Nothing here is imported by the
engine: the server observes calls around its dispatcher, writes around its
store and deliveries through its deliverers' hook
(`coordinator.server.observed`).

Under `serve --workers N` every worker counts into files of a directory the
parent makes for the run (`multiprocess_dir`, prometheus_client's
multiprocess mode), and whichever worker answers a scrape adds up all of
them. prometheus_client decides between the two modes when it is first
imported, so it is imported here only when a `Metrics` is made, after the
parent has set the directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from coordinator.extras import needs

__all__ = ["METRICS_PATH", "MULTIPROCESS_ENV", "Metrics", "forget_process", "multiprocess_dir"]

METRICS_PATH = "/metrics"
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Seconds: a call in memory takes microseconds, one through a disk sync or a
# network round trip milliseconds, a write turn queued behind others longer.
_LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
# The dispatcher takes at most 64 calls into one group (SerialDispatcher).
_GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


class Metrics:
    """One server's metrics, in a registry of their own (so several apps in
    one process, as tests make them, do not collide). `render()` is the
    body of `GET /metrics`. Lock waits reach `lock_wait_seconds` while the
    server runs (`Observability.running` registers it with `storage.waits`)."""

    def __init__(self) -> None:
        with needs("metrics"):
            import prometheus_client as prom
        self._prom = prom
        self.registry = prom.CollectorRegistry()
        r = self.registry
        self.calls = prom.Counter(
            "chapline_calls", "Calls answered, by JSON-RPC method and outcome "
            "(ok, or the error code)", ["method", "outcome"], registry=r,
        )
        self.call_seconds = prom.Histogram(
            "chapline_call_duration_seconds", "Time to answer a call, by method "
            "(on the dispatcher's thread, store write included)", ["method"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.store_write_seconds = prom.Histogram(
            "chapline_store_write_seconds", "Time of one store write (a call's, or "
            "a group's in one commit)", buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.store_conflicts = prom.Counter(
            "chapline_store_conflicts", "Store writes refused because another writer "
            "changed the workspace first (each is reloaded and run again)", registry=r,
        )
        self.lock_wait_seconds = prom.Histogram(
            "chapline_lock_wait_seconds", "Waits for a workspace's write turn after a "
            "lost race", buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.group_size = prom.Histogram(
            "chapline_group_commit_size", "Calls per group the dispatcher wrote in one "
            "store commit (1: a lone call)", buckets=_GROUP_BUCKETS, registry=r,
        )
        self.projection_lag = prom.Gauge(
            "chapline_projection_lag_entries", "Durable entries a projection has not "
            "applied yet", ["projection"], multiprocess_mode="livemax", registry=r,
        )
        self.event_streams = prom.Gauge(
            "chapline_event_streams_open", "Open event streams (GET /chap/events)",
            multiprocess_mode="livesum", registry=r,
        )
        self.webhook_deliveries = prom.Counter(
            "chapline_webhook_deliveries", "Notification delivery attempts (webhook, Slack, "
            "e-mail), by outcome (delivered or failed)", ["outcome"], registry=r,
        )

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type: this process's
        metrics, or every worker's added up in multiprocess mode."""
        prom = self._prom
        registry: Any = self.registry
        if os.environ.get(MULTIPROCESS_ENV):
            from prometheus_client import multiprocess

            registry = prom.CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return prom.generate_latest(registry), prom.CONTENT_TYPE_LATEST


@contextlib.contextmanager
def multiprocess_dir() -> Iterator[str]:
    """A fresh directory for the workers' metric files, named in the
    environment (which forked workers inherit) while inside; removed, and
    the environment restored, on the way out. Files left from an earlier run
    would be counted with this one's, hence a new directory every time."""
    previous = os.environ.get(MULTIPROCESS_ENV)
    path = tempfile.mkdtemp(prefix="chapline-metrics-")
    os.environ[MULTIPROCESS_ENV] = path
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(MULTIPROCESS_ENV, None)
        else:
            os.environ[MULTIPROCESS_ENV] = previous
        shutil.rmtree(path, ignore_errors=True)


def forget_process(pid: int) -> None:
    """A worker has exited: drop its share of the live gauges (open streams,
    projection lag), which would otherwise be added up forever. For the
    parent of `--workers`; counters and histograms keep its counts."""
    path = os.environ.get(MULTIPROCESS_ENV)
    if not path:
        return
    with needs("metrics"):
        from prometheus_client import multiprocess
    multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]
