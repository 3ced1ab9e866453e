"""What projections cost: calls/s with the analytics projection attached, and
the catch-up rate over a long log.

    .venv/bin/python -m bench.projections [--cycles N] [--entries N] [--repeat N]

1. Throughput: the review workload of bench/workload.py (setup, then `--cycles`
   cycles) through one Coordinator, on MemoryStore and on SqliteStore (one
   commit per call, and group commit of 64 calls per batch), with nothing
   attached, with a no-op change listener, and with the analytics projection
   on a SQLite file. Each figure is the best of `--repeat` runs (fresh
   coordinator, fresh files).
2. Catch-up: a SqliteStore holding a log of `--entries` entries (written by the
   same workload in batches), then a fresh AnalyticsProjection attached to a
   coordinator opening that file: entries/s of the catch-up (reading the log
   in pages of 1000 and writing the tables, cursor and all).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench import workload as W
from coordinator import Coordinator
from coordinator.projections import AnalyticsProjection
from storage import MemoryStore, SqliteStore


def _run(store: Any, attach: str, tmp: str, cycles: int, group: int) -> float:
    coord = Coordinator(store)
    if attach == "change listener":
        coord.add_change_listener(lambda change: None)
    elif attach == "analytics":
        coord.attach(AnalyticsProjection(os.path.join(tmp, f"a{time.monotonic_ns()}.db")))
    for env in W.setup_envelopes():
        coord.dispatch(env)
    calls = W.plan(0, cycles, "b")
    start = time.perf_counter()
    errors = W.drive(coord.dispatch, calls, batch=coord.batch, group=group)
    elapsed = time.perf_counter() - start
    coord.close()
    if errors:
        raise W.WorkloadError(f"{errors} calls answered with an error")
    return len(calls) / elapsed


def throughput(cycles: int, repeat: int) -> list[tuple[str, str, float]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        stores: list[tuple[str, Callable[[], Any], int]] = [
            ("MemoryStore", MemoryStore, 0),
            ("SqliteStore, one commit per call", lambda: SqliteStore(os.path.join(tmp, f"s{time.monotonic_ns()}.db")), 0),
            ("SqliteStore, group commit 64", lambda: SqliteStore(os.path.join(tmp, f"g{time.monotonic_ns()}.db")), 64),
        ]
        for name, make, group in stores:
            for attach in ("nothing", "change listener", "analytics"):
                best = max(_run(make(), attach, tmp, cycles, group) for _ in range(repeat))
                rows.append((name, attach, best))
                print(f"{name:34} {attach:16} {best:10,.0f} calls/s", flush=True)
    return rows


def catch_up(entries: int) -> tuple[int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "chap.db")
        coord = Coordinator(SqliteStore(db))
        for env in W.setup_envelopes():
            coord.dispatch(env)
        per_cycle = W.calls_per_cycle()
        W.drive(coord.dispatch, W.plan(0, int(entries / per_cycle) + 1, "c"), batch=coord.batch, group=500)
        held = len(coord.store.read_entries(W.WORKSPACE))
        coord.close()
        fresh = Coordinator(SqliteStore(db))
        start = time.perf_counter()
        attachment = fresh.attach(AnalyticsProjection(os.path.join(tmp, "analytics.db")))
        elapsed = time.perf_counter() - start
        assert attachment.state == "live" and attachment.cursor(W.WORKSPACE) == held
        fresh.close()
    return held, held / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=400)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    throughput(args.cycles, args.repeat)
    held, rate = catch_up(args.entries)
    print(f"catch-up of a {held:,}-entry log: {rate:,.0f} entries/s", flush=True)


if __name__ == "__main__":
    main()
