"""What projections cost: calls/s with the analytics projection attached, and
the catch-up rate over a long log.

    .venv/bin/python -m bench.projections [--cycles N] [--entries N] [--repeat N] [--postgres]

1. Throughput: the review workload of bench/workload.py (setup, then `--cycles`
   cycles) through one Coordinator, on MemoryStore and on SqliteStore (one
   commit per call, and group commit of 64 calls per batch), with nothing
   attached, with a no-op change listener, and with the analytics projection
   on a SQLite file. With `--postgres`, also on a PostgresStore (its own
   throwaway server, tests/pgserver.py, with fsync on), the analytics
   projection then in the store's own database. Each figure is the best of
   `--repeat` runs (fresh coordinator, fresh files or database).
2. Catch-up: a SqliteStore holding a log of `--entries` entries (written by the
   same workload in batches), then a fresh AnalyticsProjection attached to a
   coordinator opening that file: entries/s of the catch-up (reading the log
   in pages of 1000 and writing the tables, cursor and all). With
   `--postgres`, the same from a PostgresStore into its own database.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from bench import workload as W
from coordinator import Coordinator
from coordinator.projections import AnalyticsProjection
from storage import MemoryStore, SqliteStore, Store
from storage.postgres import PostgresStore

# A store and the target its analytics projection writes into.
Setup = Callable[[], tuple[Store, str]]


def _run(setup: Setup, attach: str, cycles: int, group: int) -> float:
    store, target = setup()
    coord = Coordinator(store)
    if attach == "change listener":
        coord.add_change_listener(lambda change: None)
    elif attach == "analytics":
        coord.attach(AnalyticsProjection(target))
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


def throughput(cycles: int, repeat: int, tmp: str, pg: Callable[[], str] | None) -> list[tuple[str, str, float]]:
    def file(prefix: str) -> str:
        return os.path.join(tmp, f"{prefix}{time.monotonic_ns()}.db")

    def sqlite() -> tuple[Store, str]:
        return SqliteStore(file("s")), file("a")

    setups: list[tuple[str, Setup, int]] = [
        ("MemoryStore", lambda: (MemoryStore(), file("a")), 0),
        ("SqliteStore, one commit per call", sqlite, 0),
        ("SqliteStore, group commit 64", sqlite, 64),
    ]
    if pg is not None:
        def postgres() -> tuple[Store, str]:
            uri = pg()
            return PostgresStore(uri), uri

        setups += [
            ("PostgresStore, one commit per call", postgres, 0),
            ("PostgresStore, group commit 64", postgres, 64),
        ]
    rows = []
    for name, setup, group in setups:
        for attach in ("nothing", "change listener", "analytics"):
            best = max(_run(setup, attach, cycles, group) for _ in range(repeat))
            rows.append((name, attach, best))
            print(f"{name:34} {attach:16} {best:10,.0f} calls/s", flush=True)
    return rows


def catch_up(entries: int, open_store: Callable[[], Store], target: str) -> tuple[int, float]:
    """Writes a log of about `entries` entries into the store `open_store()`
    opens, then times a fresh AnalyticsProjection on `target` catching up
    with it from a coordinator opening the store again."""
    coord = Coordinator(open_store())
    for env in W.setup_envelopes():
        coord.dispatch(env)
    per_cycle = W.calls_per_cycle()
    W.drive(coord.dispatch, W.plan(0, int(entries / per_cycle) + 1, "c"), batch=coord.batch, group=500)
    held = len(coord.store.read_entries(W.WORKSPACE))
    coord.close()
    fresh = Coordinator(open_store())
    start = time.perf_counter()
    attachment = fresh.attach(AnalyticsProjection(target))
    elapsed = time.perf_counter() - start
    assert attachment.state == "live" and attachment.cursor(W.WORKSPACE) == held
    fresh.close()
    return held, held / elapsed


@contextmanager
def _postgres() -> Iterator[Callable[[], str]]:
    """A throwaway PostgreSQL server with fsync on; yields a maker of new databases."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from pgserver import PgServer

    server = PgServer()
    try:
        server.start(durable=True)
        yield lambda: server.uri(server.new_database())
    finally:
        server.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=400)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", action="store_true", help="also on PostgreSQL (a throwaway server)")
    args = parser.parse_args()
    servers = _postgres() if args.postgres else nullcontext(None)
    with tempfile.TemporaryDirectory() as tmp, servers as pg:
        throughput(args.cycles, args.repeat, tmp, pg)
        db = os.path.join(tmp, "chap.db")
        held, rate = catch_up(args.entries, lambda: SqliteStore(db), os.path.join(tmp, "analytics.db"))
        print(f"catch-up of a {held:,}-entry log, SQLite into SQLite: {rate:,.0f} entries/s", flush=True)
        if pg is not None:
            uri = pg()
            held, rate = catch_up(args.entries, lambda: PostgresStore(uri), uri)
            print(f"catch-up of a {held:,}-entry log, PostgreSQL into the same database: "
                  f"{rate:,.0f} entries/s", flush=True)


if __name__ == "__main__":
    main()
