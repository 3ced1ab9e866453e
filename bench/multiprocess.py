"""Several coordinator processes on one database: PostgreSQL and SQLite.

    .venv/bin/python -m bench.multiprocess [--cycles N] [--shared-calls N] [--json PATH]

Starts its own PostgreSQL server (tests/pgserver.py, with fsync on, so a
commit costs what it costs in production) and a SQLite file in the temp dir,
then measures, side by side in one run:

- calls/s with 1, 2 and 4 processes, each with its own Coordinator and its
  own workspace, running the bench workload (bench/workload.py), one store
  write per call and grouped (`batch()` around every `--group` calls);
  beside it the reference's (chap-coordinator 0.3.3) single-process SQLite
  figure on the same workload;
- the conflict rate when 4 processes write to ONE workspace (task.create
  calls), with and without change notification (`watch`): store writes
  refused by the compare-and-swap per write attempted;
- PostgresStore.apply latency (one entry per change) with 1k and 100k
  entries held, and the server-side time of a task-filtered read at 100k.

Figures are medians of the processes' own timings; the machine is shared,
so read ratios rather than absolutes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench.workload import AGENT, HUMAN, WORKSPACE, drive, plan, setup_envelopes  # noqa: E402

_spawn = multiprocessing.get_context("spawn")


def _own(env: dict[str, Any], workspace: str) -> dict[str, Any]:
    env["params"]["workspace"] = workspace
    if "to" in env["params"] and env["params"]["to"] == f"workspace:{WORKSPACE}":
        env["params"]["to"] = f"workspace:{workspace}"
    return env


def _workload_worker(target: str, index: int, cycles: int, group: int, go: Any, out: Any) -> None:
    from coordinator import Coordinator
    from storage.target import open_store

    workspace = f"wsp_bench{index}"
    coord = Coordinator(open_store(target, watch=True), default_profiles=("core/1.0", "review/1.0"))
    for env in setup_envelopes(f"s{index}"):
        assert "result" in coord.dispatch(_own(env, workspace))
    calls = [(_own(env, workspace), op, state) for env, op, state in plan(0, cycles, f"p{index}")]
    go.wait()
    start = time.time()
    errors = drive(coord.dispatch, calls, batch=coord.batch if group else None, group=group)
    end = time.time()
    coord.close()
    out.put({"calls": len(calls), "start": start, "end": end, "errors": errors})


def _shared_worker(target: str, index: int, calls: int, watch: bool, go: Any, out: Any) -> None:
    from coordinator import Coordinator
    from storage import StoreConflictError
    from storage.target import open_store

    store = open_store(target, watch=watch)
    counts = {"writes": 0, "conflicts": 0}
    apply = store.apply

    def counting_apply(change: Any) -> None:
        counts["writes"] += 1
        try:
            apply(change)
        except StoreConflictError:
            counts["conflicts"] += 1
            raise

    store.apply = counting_apply  # type: ignore[method-assign]
    coord = Coordinator(store)
    go.wait()
    start = time.time()
    refused = 0
    for k in range(calls):
        r = coord.dispatch({
            "jsonrpc": "2.0", "id": f"{index}-{k}", "method": "task.create",
            "params": {"workspace": "wsp_shared", "from": HUMAN, "assignee": AGENT,
                       "kind": "k", "input": {"k": k}},
        })
        refused += "error" in r
    end = time.time()
    coord.close()
    out.put({**counts, "calls": calls, "refused": refused, "start": start, "end": end})


def _run(worker: Any, n: int, *args: Any) -> list[dict[str, Any]]:
    go, out = _spawn.Event(), _spawn.Queue()
    procs = [_spawn.Process(target=worker, args=(args[0], i, *args[1:], go, out)) for i in range(n)]
    for p in procs:
        p.start()
    time.sleep(0.5)  # let them load
    go.set()
    results = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    return results


def _rate(results: list[dict[str, Any]]) -> float:
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    return sum(r["calls"] for r in results) / span


def _reference_sqlite(path: str, cycles: int) -> float:
    from bench.impls import Reference

    opened = Reference().open("sqlite", path)
    for env in setup_envelopes("s"):
        opened.dispatch(env)
    calls = plan(0, cycles, "r")
    start = time.perf_counter()
    drive(opened.dispatch, calls)
    elapsed = time.perf_counter() - start
    opened.close()
    return len(calls) / elapsed


def _apply_latency(dsn: str, sizes: list[int]) -> dict[str, float]:
    import psycopg

    from storage import EntryFilter, StoreChange
    from storage.postgres import PostgresStore, entries_query

    out: dict[str, float] = {}
    for size in sizes:
        wid = f"wsp_lat{size}"
        store = PostgresStore(dsn)
        held = 0
        while held < size:  # fill quickly: 1000 entries per change
            n = min(1000, size - held)
            entries = [_entry(held + i) for i in range(n)]
            store.apply(StoreChange(wid, held, held + n, "t", {"id": wid}, entries))
            held += n
        samples = []
        for _ in range(300):
            t = time.perf_counter()
            store.apply(StoreChange(wid, held, held + 1, "t", {"id": wid}, [_entry(held)],
                                    {"tasks": {f"T{held}": {"id": f"T{held}"}}}))
            samples.append(time.perf_counter() - t)
            held += 1
        out[f"apply_us_{size}"] = statistics.median(samples) * 1e6
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE chap_entries")
            sql, args = entries_query(wid, 0, None, EntryFilter(task_id="T5"))
            times = []
            for _ in range(20):
                (plan_,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, args).fetchone()
                times.append(plan_[0]["Execution Time"])
            out[f"filtered_read_server_ms_{size}"] = statistics.median(times)
        t = time.perf_counter()
        for _ in range(20):
            store.read_entries(wid, where=EntryFilter(task_id="T5"))
        out[f"filtered_read_client_us_{size}"] = (time.perf_counter() - t) / 20 * 1e6
        store.close()
    return out


def _entry(seq: int) -> dict[str, Any]:
    return {"seq": seq, "arrived": "2025-01-01T00:00:00.000Z",
            "envelope": {"jsonrpc": "2.0", "id": f"r{seq}", "method": "task.update",
                         "params": {"workspace": "w", "from": AGENT, "task_id": f"T{seq % 1000}",
                                    "state": "in_progress"}}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.multiprocess", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=200, help="workload cycles per process (default 200)")
    parser.add_argument("--group", type=int, default=50, help="calls per batch() when grouped (default 50)")
    parser.add_argument("--shared-calls", type=int, default=200, help="calls per process on the shared workspace")
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--sizes", default="1000,100000", help="entries held for the apply latency")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.processes.split(",")]

    from pgserver import PgServer

    from coordinator import Coordinator
    from storage.target import open_store

    server = PgServer()
    tmp = tempfile.mkdtemp(prefix="chapline-bench-multi-")
    figures: dict[str, Any] = {}
    try:
        server.start(durable=True)
        rows = []
        for kind in ("postgres", "sqlite"):
            for group in (0, args.group):
                for n in counts:
                    if kind == "postgres":
                        target = server.uri(server.new_database())
                    else:
                        target = os.path.join(tmp, f"own-{group}-{n}.db")
                    rate = _rate(_run(_workload_worker, n, target, args.cycles, group))
                    label = f"{kind}, {'grouped ' + str(group) if group else 'one write per call'}, {n} proc"
                    figures[label] = rate
                    rows.append((label, rate))
                    print(f"{label:50s} {rate:9.0f} calls/s", flush=True)
        ref = _reference_sqlite(os.path.join(tmp, "reference.db"), args.cycles)
        figures["reference 0.3.3, sqlite, 1 proc"] = ref
        print(f"{'reference 0.3.3, sqlite, one write per call, 1 proc':50s} {ref:9.0f} calls/s", flush=True)

        for kind in ("postgres", "sqlite"):
            for watch in (False, True):
                target = (server.uri(server.new_database()) if kind == "postgres"
                          else os.path.join(tmp, f"shared-{watch}.db"))
                coord = Coordinator(open_store(target))
                for env in ({"jsonrpc": "2.0", "id": 1, "method": "workspace.create",
                             "params": {"workspace": "wsp_shared"}},
                            {"jsonrpc": "2.0", "id": 2, "method": "participant.join",
                             "params": {"workspace": "wsp_shared", "from": HUMAN, "type": "human",
                                        "role": "admin"}},
                            {"jsonrpc": "2.0", "id": 3, "method": "participant.join",
                             "params": {"workspace": "wsp_shared", "from": AGENT, "type": "agent"}}):
                    assert "result" in coord.dispatch(env)
                coord.close()
                results = _run(_shared_worker, 4, target, args.shared_calls, watch)
                writes = sum(r["writes"] for r in results)
                conflicts = sum(r["conflicts"] for r in results)
                refused = sum(r["refused"] for r in results)
                label = f"{kind}, 4 proc on one workspace, {'with' if watch else 'without'} notification"
                figures[label] = {"calls_per_s": _rate(results), "writes": writes,
                                  "conflicts": conflicts, "conflict_rate": conflicts / writes,
                                  "refused_calls": refused}
                print(f"{label:62s} {_rate(results):7.0f} calls/s, conflicts {conflicts}/{writes} "
                      f"writes ({100 * conflicts / writes:.1f}%), refused calls {refused}", flush=True)

        latency = _apply_latency(server.dsn(server.new_database()), [int(s) for s in args.sizes.split(",")])
        figures.update(latency)
        for key, value in latency.items():
            print(f"{key:50s} {value:9.3f}", flush=True)
    finally:
        server.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
