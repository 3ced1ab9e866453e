"""Store benchmark: `python -m bench.store_bench [--sizes 1k,100k] [--quick]`.

Reports, for MemoryStore and SqliteStore (a WAL file, synchronous=FULL):
- applies/s with N entries already held, one change per transaction and in
  batches (`apply_many`, one commit per batch);
- the cost of one fsync on this disk, and SqliteStore commits with
  synchronous=NORMAL for comparison (what FULL costs per commit);
- opening the N-entry file and `load(entries=False)` / `load()`;
- `read_entries` filtered by task id, by sender and by refusals.
Each change is one realistic audit entry (~450 bytes) plus one task object.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from storage import EntryFilter, MemoryStore, SqliteStore, StoreChange

__all__ = ["main"]

_TASK_EVERY = 6  # entries per task: create, update, review, approvals, …


def _entry(seq: int) -> dict:
    task = f"tsk_{seq // _TASK_EVERY:08d}"
    call = {
        "jsonrpc": "2.0",
        "id": f"req-{seq}",
        "method": ("task.create", "task.update", "review.request", "decide.approve")[seq % 4],
        "params": {
            "workspace": "wsp_bench",
            "from": ("human:alice", "agent:bot", "human:carol")[seq % 3],
            "task_id": task,
            "input": {"text": "x" * 120, "n": seq},
        },
    }
    base = {"seq": seq, "arrived": "2026-01-01T00:00:00.000Z",
            "prev_hash": "sha256:" + f"{seq:064x}"}
    if seq % 50 == 7:  # an occasional recorded refusal
        return base | {"request": call, "outcome": {"status": "refused", "code": -32011}}
    return base | {"envelope": call}


def _change(seq: int) -> StoreChange:
    task = f"tsk_{seq // _TASK_EVERY:08d}"
    return StoreChange(
        id="wsp_bench", base=seq, version=seq + 1, updated_at="2026-01-01T00:00:00.000Z",
        meta={"id": "wsp_bench", "state": "active", "chain_head": f"sha256:{seq:064x}"},
        entries=[_entry(seq)],
        objects={"tasks": {task: {"id": task, "state": "in_progress", "history": [seq]}}},
    )


def _fill(store, held: int) -> None:
    batch = 5_000
    for start in range(0, held, batch):
        results = store.apply_many(_change(s) for s in range(start, min(held, start + batch)))
        assert not any(results), results


def _rate(store, held: int, count: int, batch: int) -> float:
    seq = held
    began = time.perf_counter()
    if batch == 1:
        for seq in range(held, held + count):
            store.apply(_change(seq))
    else:
        for start in range(held, held + count, batch):
            results = store.apply_many(_change(s) for s in range(start, start + batch))
            assert not any(results), results
    return count / (time.perf_counter() - began)


def _per_call(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def _fsync_cost(directory: Path, count: int = 200) -> float:
    path = directory / "fsync.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        began = time.perf_counter()
        for _ in range(count):
            os.write(fd, b"x" * 512)
            os.fsync(fd)
        return (time.perf_counter() - began) / count
    finally:
        os.close(fd)
        path.unlink()


def _sqlite_figures(directory: Path, held: int, count: int, batch: int) -> dict[str, float]:
    path = directory / f"bench-{held}.db"
    store = SqliteStore(path)
    _fill(store, held)
    out = {"single": _rate(store, held, count, 1)}
    held += count
    out["batched"] = _rate(store, held, count * batch // 10, batch)
    held += count * batch // 10
    # synchronous=NORMAL (not durable on power loss) shows what FULL costs.
    store._db.execute("PRAGMA synchronous=NORMAL")
    out["single_normal"] = _rate(store, held, count, 1)
    store.close()

    began = time.perf_counter()
    store = SqliteStore(path)
    store.load(entries=False)
    out["open_load_light"] = time.perf_counter() - began
    began = time.perf_counter()
    store.load()
    out["load_full"] = time.perf_counter() - began
    middle = f"tsk_{held // 2 // _TASK_EVERY:08d}"
    out["read_task"] = _per_call(
        lambda: store.read_entries("wsp_bench", where=EntryFilter(task_id=middle)), 200)
    out["read_task_hits"] = len(store.read_entries("wsp_bench", where=EntryFilter(task_id=middle)))
    out["read_refused_tail"] = _per_call(
        lambda: store.read_entries("wsp_bench", held - 1000, None, EntryFilter(outcome="refused")),
        200)
    out["read_range_100"] = _per_call(lambda: store.read_entries("wsp_bench", held // 2, held // 2 + 100), 200)
    store.close()
    out["file_mib"] = path.stat().st_size / 2**20
    return out


def _memory_figures(held: int, count: int, batch: int) -> dict[str, float]:
    store = MemoryStore()
    _fill(store, held)
    out = {"single": _rate(store, held, count * 10, 1)}
    held += count * 10
    out["batched"] = _rate(store, held, count * batch // 10, batch)
    held += count * batch // 10
    middle = f"tsk_{held // 2 // _TASK_EVERY:08d}"
    out["read_task"] = _per_call(
        lambda: store.read_entries("wsp_bench", where=EntryFilter(task_id=middle)), 5)
    return out


def _sizes(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        mult = 1_000 if part.endswith("k") else 1_000_000 if part.endswith("m") else 1
        out.append(int(float(part.rstrip("km")) * mult))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.store_bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=_sizes, default=[1_000, 100_000],
                    help="entries already held, e.g. 1k,100k,1m")
    ap.add_argument("--count", type=int, default=300, help="single-change applies timed")
    ap.add_argument("--batch", type=int, default=100, help="changes per apply_many")
    ap.add_argument("--dir", type=Path, default=None, help="where the files go (a temp dir)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        fsync = _fsync_cost(directory)
        print(f"fsync of a 512-byte append on this disk: {fsync * 1e3:.3f} ms")
        for held in args.sizes:
            s = _sqlite_figures(directory, held, args.count, args.batch)
            m = _memory_figures(held, args.count, args.batch)
            print(f"\n{held:,} entries held")
            print(f"  SqliteStore  one change/commit (FULL):   {s['single']:>10,.0f} applies/s"
                  f"   ({1e3 / s['single']:.3f} ms each)")
            print(f"  SqliteStore  one change/commit (NORMAL): {s['single_normal']:>10,.0f} applies/s"
                  f"   (FULL costs {1e3 / s['single'] - 1e3 / s['single_normal']:.3f} ms/commit more)")
            print(f"  SqliteStore  batches of {args.batch}:          {s['batched']:>10,.0f} applies/s")
            print(f"  MemoryStore  one change:                 {m['single']:>10,.0f} applies/s")
            print(f"  MemoryStore  batches of {args.batch}:          {m['batched']:>10,.0f} applies/s")
            print(f"  SqliteStore  open + load(entries=False): {s['open_load_light'] * 1e3:>10.1f} ms")
            print(f"  SqliteStore  load() with every entry:    {s['load_full'] * 1e3:>10.1f} ms")
            print(f"  SqliteStore  read by task_id ({s['read_task_hits']:.0f} hits):  "
                  f"{s['read_task'] * 1e6:>10.1f} µs")
            print(f"  SqliteStore  refusals in last 1000:      {s['read_refused_tail'] * 1e6:>10.1f} µs")
            print(f"  SqliteStore  range of 100 entries:       {s['read_range_100'] * 1e6:>10.1f} µs")
            print(f"  MemoryStore  read by task_id:            {m['read_task'] * 1e6:>10.1f} µs")
            print(f"  file size: {s['file_mib']:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
