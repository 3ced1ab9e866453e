"""The benchmark: chapline and the reference side by side, in one process.

Phases (each alternates the two implementations, rep by rep):

1. throughput   calls/s of the workload on a fresh MemoryStore, on a fresh
                SqliteStore with one store write per call, and (chapline only)
                on SqliteStore with `coord.batch()` groups of --group calls,
                compared with the reference's one-write-per-call SQLite figure
                (it has no grouping).
2. log size     one SQLite workspace per implementation grown to each size in
                --sizes; at each size the write cost (µs per call of the
                workload without reads, appended to the existing log) and an
                `audit.read` filtered by one task from the middle of the log.
                At the start size (100k; 10k with --quick): `audit.verify_chain`
                time per entry, file size per 1k entries, and start-up time and
                peak RSS on that file measured in fresh interpreters.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import workload as W
from bench.impls import Impl, Opened
from bench.typescript import WARM, TypeScript, common_pattern


@dataclass
class Config:
    quick: bool = False
    reps: int = 5
    mem_cycles: int = 1500
    sql_cycles: int = 600
    group: int = 100
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
    ref_max: int = 100_000
    start_size: int = 100_000
    size_cycles: int = 300
    size_reps: int = 3
    start_reps: int = 3
    read_reps: int = 7
    phases: tuple[str, ...] = ("throughput", "sizes")
    workdir: str | None = None
    keep: bool = False
    tmpfs_dir: str | None = None  # also run the SQLite figure here (e.g. /dev/shm)
    ts_dir: str | None = None  # a TypeScript coordinator built by bench.ts_setup: a third seat

    @classmethod
    def for_quick(cls) -> Config:
        return cls(
            quick=True,
            reps=5,
            # The in-memory samples last ~0.2 s for chapline: shorter ones
            # (300 cycles took ~60 ms) moved the ratio by half with the load.
            mem_cycles=1000,
            sql_cycles=120,
            sizes=(1_000, 10_000),
            ref_max=10_000,
            start_size=10_000,
            size_cycles=120,
            size_reps=2,
            start_reps=2,
            read_reps=5,
        )


@dataclass
class Figure:
    key: str
    label: str
    unit: str
    better: str  # "higher" or "lower"
    target: str = ""
    values: dict[str, list[float]] = field(default_factory=dict)  # impl name -> samples
    notes: dict[str, str] = field(default_factory=dict)  # impl name -> note instead of a value
    compare_to: str | None = None  # the reference figure to compare with, if not this one
    target_ratio: float | None = None

    def add(self, impl: str, v: float) -> None:
        self.values.setdefault(impl, []).append(v)


class Results:
    def __init__(self) -> None:
        self.figures: dict[str, Figure] = {}
        self.meta: dict[str, Any] = {}

    def fig(self, key: str, label: str, unit: str, better: str, target: str = "", **kw) -> Figure:
        if key not in self.figures:
            self.figures[key] = Figure(key, label, unit, better, target, **kw)
        return self.figures[key]

    def to_json(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "figures": {
                k: {
                    "label": f.label,
                    "unit": f.unit,
                    "better": f.better,
                    "target": f.target,
                    "values": f.values,
                    "notes": f.notes,
                    "compare_to": f.compare_to,
                }
                for k, f in self.figures.items()
            },
        }


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _setup(o: Opened, prefix: str) -> None:
    for env in W.setup_envelopes(prefix):
        r = o.dispatch(env)
        if "result" not in r:
            raise W.WorkloadError(f"{o.name}: setup call {env['method']} failed: {r}")


def _timed(o: Opened, calls: list[W.Call], *, group: int = 0, tids: list | None = None, cpu: list | None = None) -> tuple[float, int]:
    """Wall seconds to send `calls` (and, into `cpu`, the process CPU seconds)."""
    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    errors = W.drive(o.dispatch, calls, batch=o.batch if group else None, group=group, tids=tids)
    dt = time.perf_counter() - t0
    if cpu is not None:
        cpu.append(time.process_time() - c0)
    return dt, errors


def _check_errors(o: Opened, what: str, errors: int, results: Results) -> None:
    if errors:
        msg = f"{o.name}: {errors} calls answered with an error during {what}"
        log("WARNING " + msg)
        results.meta.setdefault("warnings", []).append(msg)


# ---------------------------------------------------------------- throughput


def phase_throughput(cfg: Config, impls: list[Impl], results: Results, tmp: str) -> None:
    ts = TypeScript(cfg.ts_dir) if cfg.ts_dir else None
    try:
        if ts is not None:
            log(f"{ts.label}: {WARM} untimed passes of {cfg.mem_cycles} cycles")
            ts.start(cfg.mem_cycles, common_pattern())
            results.meta["typescript"] = ts.source()
        _throughput(cfg, impls, results, tmp, ts)
    finally:
        if ts is not None:
            ts.close()


def _throughput(cfg: Config, impls: list[Impl], results: Results, tmp: str, ts: TypeScript | None) -> None:
    chap, ref = impls
    modes = [
        ("memory", "calls/s, MemoryStore", cfg.mem_cycles, tmp, "≥10×", 10.0),
        ("sqlite", "calls/s, SqliteStore, one write per call", cfg.sql_cycles, tmp, "≥5×", 5.0),
    ]
    shm = cfg.tmpfs_dir
    if shm:
        modes.append(
            ("sqlite_tmpfs", "calls/s, SqliteStore on tmpfs (no fsync cost), one write per call",
             cfg.sql_cycles, shm, "", None)
        )  # fmt: skip
    grouped = chap.has_batch
    for rep in range(cfg.reps):
        order = impls if rep % 2 == 0 else impls[::-1]
        for kind, label, cycles, where, target, tr in modes:
            f = results.fig(f"tput_{kind}", label, "calls/s", "higher", target, target_ratio=tr)
            for impl in order:
                o = _fresh(impl, kind, where, f"{impl.name}-{kind}-{rep}")
                try:
                    calls = W.plan(0, cycles, f"r{rep}")
                    cpu: list[float] = []
                    dt, errors = _timed(o, calls, cpu=cpu)
                    _check_errors(o, f"{kind} throughput", errors, results)
                    f.add(impl.name, len(calls) / dt)
                    if kind == "memory":
                        # CPU time: what the calls cost, whatever else the machine runs
                        results.fig(
                            "tput_memory_cpu",
                            "calls/s, MemoryStore, by process CPU time",
                            "calls/s",
                            "higher",
                            "≥10×",
                            target_ratio=10.0,
                        ).add(impl.name, len(calls) / cpu[0])
                finally:
                    o.close()
        if grouped:
            f = results.fig(
                "tput_grouped",
                f"calls/s, SqliteStore, grouped ({cfg.group} calls per write)",
                "calls/s",
                "higher",
                "≥12× (vs reference one write per call)",
                compare_to="tput_sqlite",
                target_ratio=12.0,
            )
            o = _fresh(chap, "sqlite", tmp, f"{chap.name}-grouped-{rep}")
            try:
                # grouping makes the calls cheap, so send more of them
                calls = W.plan(0, cfg.mem_cycles, f"g{rep}")
                dt, errors = _timed(o, calls, group=cfg.group)
                _check_errors(o, "grouped throughput", errors, results)
                f.add(chap.name, len(calls) / dt)
            finally:
                o.close()
            f.notes.setdefault(ref.name, "no grouping")
        if ts is not None:
            _three_way(cfg, impls, ts, results, tmp, rep)
        # The disk's own bound, in the same minutes as the SQLite figures.
        results.fig(
            "bare_commit",
            "commits/s, bare two-row SQLite transaction, same disk (the bound of one write per call)",
            "calls/s",
            "higher",
        ).add("disk", bare_commits(tmp, cfg.sql_cycles * 4))
        log(
            f"throughput rep {rep + 1}/{cfg.reps}: "
            + "; ".join(
                f"{k}: " + ", ".join(f"{n} {v[-1]:,.0f}" for n, v in results.figures[k].values.items())
                for k in ("tput_memory", "tput_common", "tput_sqlite", "tput_grouped", "tput_sqlite_tmpfs")
                if k in results.figures
            )
        )


def _three_way(cfg: Config, impls: list[Impl], ts: TypeScript, results: Results, tmp: str, rep: int) -> None:
    """One repetition of the in-memory figure on the cycles all three seats
    answer alike: chapline, the reference and the warm TypeScript driver."""
    pattern = common_pattern()
    kinds = ", ".join(dict.fromkeys(pattern))
    wall = results.fig("tput_common", f"calls/s, MemoryStore, {kinds} cycles only", "calls/s", "higher")
    cpu = results.fig(
        "tput_common_cpu", f"calls/s, MemoryStore, {kinds} cycles only, by process CPU time", "calls/s", "higher"
    )
    seats: list[Impl | TypeScript] = [*impls, ts]
    for seat in seats if rep % 2 == 0 else seats[::-1]:
        calls = W.plan(0, cfg.mem_cycles, f"c{rep}", pattern=pattern)
        if isinstance(seat, TypeScript):
            sample = seat.run_pass()  # the driver's own copy of these calls
            if sample["calls"] != len(calls):
                raise W.WorkloadError(f"the TypeScript driver sent {sample['calls']} calls, not {len(calls)}")
            dt, cpu_s = sample["wall_s"], sample["cpu_s"]
        else:
            o = _fresh(seat, "memory", tmp, f"{seat.name}-common-{rep}")
            try:
                spent: list[float] = []
                dt, errors = _timed(o, calls, cpu=spent)
                _check_errors(o, "three-way throughput", errors, results)
                cpu_s = spent[0]
            finally:
                o.close()
        wall.add(seat.name, len(calls) / dt)
        cpu.add(seat.name, len(calls) / cpu_s)


def bare_commits(directory: str, n: int) -> float:
    """Commits/s of a bare two-row SQLite transaction (WAL, synchronous=FULL,
    as both implementations commit) in `directory`: the bound the disk sets
    on one write per call."""
    import sqlite3

    path = os.path.join(directory, "bare.db")
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE a (k INTEGER PRIMARY KEY, v TEXT)")
        db.execute("CREATE TABLE b (k TEXT PRIMARY KEY, v TEXT)")
        row = "x" * 600
        t0 = time.perf_counter()
        for i in range(n):
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO a VALUES (?, ?)", (i, row))
            db.execute("INSERT OR REPLACE INTO b VALUES (?, ?)", (str(i % 50), row))
            db.execute("COMMIT")
        return n / (time.perf_counter() - t0)
    finally:
        db.close()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path + suffix)


def _fresh(impl: Impl, kind: str, tmp: str, tag: str) -> Opened:
    path = None
    if kind.startswith("sqlite"):
        kind = "sqlite"
        path = os.path.join(tmp, f"{tag}.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
    o = impl.open(kind, path)
    _setup(o, tag)
    return o


# ---------------------------------------------------------------- log size


@dataclass
class Grown:
    impl: Impl
    path: str
    opened: Opened | None
    entries: int = 3  # the setup calls
    cycle: int = 0  # next workload cycle
    tids: list = field(default_factory=list)
    seg: int = 0  # envelope id prefix counter
    build_s: float = 0.0
    build_entries: int = 0

    def prefix(self) -> str:
        self.seg += 1
        return f"x{self.seg}"


def _grow(g: Grown, size: int, results: Results) -> None:
    """Append workload cycles (no reads) until the log holds >= size entries."""
    o = g.opened
    chunk_cycles = 2000
    group = 1000 if g.impl.has_batch else 0
    t0 = time.perf_counter()
    before = g.entries
    while g.entries < size:
        need = size - g.entries
        n = max(1, min(chunk_cycles, int(need / 4.25) + 1))
        calls = W.plan(g.cycle, n, g.prefix(), reads=False)
        errors = W.drive(o.dispatch, calls, batch=o.batch if group else None, group=group, tids=g.tids)
        _check_errors(o, "log growth", errors, results)
        g.cycle += n
        g.entries += len(calls)
    g.build_s += time.perf_counter() - t0
    g.build_entries += g.entries - before


def _audit_count(o: Opened) -> int | None:
    r = o.dispatch(
        {"jsonrpc": "2.0", "id": "count", "method": "workspace.describe", "params": {"workspace": W.WORKSPACE}}
    )
    return r.get("result", {}).get("audit_count")


def _write_cost(g: Grown, cfg: Config, results: Results, size: int, group: int = 0) -> float:
    """µs per call of appending a few cycles; few enough on a small log that
    all the measuring together adds well under the log's own size."""
    o = g.opened
    cycles = max(20, min(cfg.size_cycles, size // 40))
    calls = W.plan(g.cycle, cycles, g.prefix(), reads=False)
    dt, errors = _timed(o, calls, tids=g.tids, group=group)
    _check_errors(o, "write cost", errors, results)
    g.cycle += cycles
    g.entries += len(calls)
    return dt / len(calls) * 1e6


def _read_by_task(g: Grown, cfg: Config, tid: str) -> list[float]:
    o = g.opened
    out = []
    for i in range(cfg.read_reps):
        env = {
            "jsonrpc": "2.0",
            "id": f"rd{i}",
            "method": "audit.read",
            "params": {"workspace": W.WORKSPACE, "from": W.HUMAN, "filter": {"task_id": tid}},
        }
        t0 = time.perf_counter()
        r = o.dispatch(env)
        out.append((time.perf_counter() - t0) * 1e3)
        entries = r.get("result", {}).get("entries")
        if not entries:
            raise W.WorkloadError(f"{o.name}: audit.read by task {tid} returned {r}")
    return out


def _verify(g: Grown) -> tuple[float, int]:
    o = g.opened
    gc.collect()
    t0 = time.perf_counter()
    r = o.dispatch(
        {
            "jsonrpc": "2.0",
            "id": "verify",
            "method": "audit.verify_chain",
            "params": {"workspace": W.WORKSPACE, "from": W.HUMAN},
        }
    )
    dt = time.perf_counter() - t0
    res = r.get("result") or {}
    if not res.get("ok"):
        raise W.WorkloadError(f"{o.name}: audit.verify_chain did not verify: {str(r)[:500]}")
    return dt, int(res.get("entries_checked") or 0)


def _start_probe(impl: Impl, path: str) -> dict[str, Any]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-m", "bench.startprobe", impl.name, path],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=600,
    )
    if out.returncode != 0:
        raise RuntimeError(f"start probe for {impl.name} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _file_bytes(path: str) -> int:
    return sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))


def phase_sizes(cfg: Config, impls: list[Impl], results: Results, tmp: str) -> None:
    grown = []
    for impl in impls:
        path = os.path.join(tmp, f"{impl.name}-log.db")
        o = impl.open("sqlite", path)
        _setup(o, f"{impl.name}-log")
        grown.append(Grown(impl, path, o))
    chap, ref = grown
    cap = {chap.impl.name: max(cfg.sizes), ref.impl.name: cfg.ref_max}
    for size in cfg.sizes:
        active = [g for g in grown if size <= cap[g.impl.name]]
        for g in active:
            if g.opened is None:
                g.opened = g.impl.open("sqlite", g.path)
            log(f"growing {g.impl.name} to {size:,} entries")
            _grow(g, size, results)
            n = _audit_count(g.opened)
            if n != g.entries:
                raise W.WorkloadError(f"{g.impl.name}: expected {g.entries} entries, describe says {n}")
            log(f"  {g.impl.name}: {g.entries:,} entries; built at {g.build_entries / g.build_s:,.0f} calls/s")
        fw = results.fig(
            f"write_{size}", f"write µs/call, log at {_k(size)} entries (SQLite)", "µs", "lower", "flat 1k→1M"
        )
        for rep in range(cfg.size_reps):
            for g in active if rep % 2 == 0 else active[::-1]:
                fw.add(g.impl.name, _write_cost(g, cfg, results, size))
        if any(g.impl.has_batch for g in active):
            fg = results.fig(
                f"wgroup_{size}",
                f"write µs/call, log at {_k(size)} entries, grouped ({cfg.group} per write)",
                "µs",
                "lower",
                "flat 1k→1M",
                compare_to=f"write_{size}",
            )
            for _ in range(cfg.size_reps):
                for g in active:
                    if g.impl.has_batch:
                        fg.add(g.impl.name, _write_cost(g, cfg, results, size, group=cfg.group))
            for g in grown:
                if not g.impl.has_batch:
                    fg.notes[g.impl.name] = "no grouping"
        fr = results.fig(
            f"read_{size}",
            f"audit.read by task, log at {_k(size)} entries",
            "ms",
            "lower",
            "<1 ms at 100k" if size == 100_000 else "",
        )
        for g in active:
            tid = g.tids[len(g.tids) // 2]
            for v in _read_by_task(g, cfg, tid):
                fr.add(g.impl.name, v)
        for g in grown:
            if g not in active:
                fw.notes[g.impl.name] = "not run"
                fr.notes[g.impl.name] = "not run"
        log(
            f"size {size:,}: write µs/call "
            + ", ".join(f"{n} {statistics.median(v):.0f}" for n, v in fw.values.items())
            + "; read ms "
            + ", ".join(f"{n} {statistics.median(v):.2f}" for n, v in fr.values.items())
        )
        if size == cfg.start_size:
            _at_start_size(cfg, grown, results, size)
    for g in grown:
        if g.opened is not None:
            g.opened.close()
            g.opened = None
    big = max(cfg.sizes)
    if big > cfg.start_size:
        # one probe on the biggest log: how start-up scales (chapline only
        # where the reference was not grown this far)
        ft = results.fig("start_s_big", f"start on a {_k(big)}-entry file", "s", "lower")
        fm = results.fig("start_rss_big", f"peak RSS after start on a {_k(big)}-entry file", "MiB", "lower")
        for g in grown:
            if big <= cap[g.impl.name]:
                p = _start_probe(g.impl, g.path)
                ft.add(g.impl.name, p["first_answer_s"])
                fm.add(g.impl.name, p["peak_rss_mib"])
                log(f"start on {_k(big)}: {g.impl.name} {p['first_answer_s']:.2f} s / {p['peak_rss_mib']:.0f} MiB")
            else:
                ft.notes[g.impl.name] = fm.notes[g.impl.name] = "not run"
    _extrapolate(cfg, grown, results)


def _k(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else f"{n // 1000}k"


def _at_start_size(cfg: Config, grown: list[Grown], results: Results, size: int) -> None:
    k = _k(size)
    fv = results.fig(
        "verify", f"audit.verify_chain µs/entry, {k} entries", "µs", "lower", "≥10×", target_ratio=10.0
    )
    for g in grown:
        dt, n = _verify(g)
        fv.add(g.impl.name, dt / max(n, 1) * 1e6)
        log(f"verify {g.impl.name}: {dt:.2f} s for {n:,} entries")
    # close, so the file is complete (WAL checkpointed) for size and start-up
    for g in grown:
        g.opened.close()
        g.opened = None
    fs = results.fig("file_kib", "file size per 1k entries", "KiB", "lower")
    for g in grown:
        fs.add(g.impl.name, _file_bytes(g.path) / 1024 / (g.entries / 1000))
    ft = results.fig("start_s", f"start on a {k}-entry file (construct + first answer)", "s", "lower", "<0.5 s")
    fm = results.fig("start_rss", f"peak RSS after start on a {k}-entry file", "MiB", "lower", "<150 MiB")
    fb = results.fig("start_rss_base", "  RSS after import, before construct", "MiB", "lower")
    fi = results.fig("start_import", "import time", "s", "lower")
    for rep in range(cfg.start_reps):
        for g in grown if rep % 2 == 0 else grown[::-1]:
            p = _start_probe(g.impl, g.path)
            if p.get("audit_count") != g.entries:
                raise W.WorkloadError(f"{g.impl.name}: start probe saw {p.get('audit_count')} entries, not {g.entries}")
            ft.add(g.impl.name, p["first_answer_s"])
            fm.add(g.impl.name, p["peak_rss_mib"])
            fi.add(g.impl.name, p["import_s"])
            fb.add(g.impl.name, p["rss_after_import_mib"])
            results.meta.setdefault("start_probe", {}).setdefault(g.impl.name, []).append(p)
    log(
        "start: "
        + ", ".join(
            f"{n} {statistics.median(ft.values[n]):.2f} s / {statistics.median(fm.values[n]):.0f} MiB"
            for n in ft.values
        )
    )


def _extrapolate(cfg: Config, grown: list[Grown], results: Results) -> None:
    """Sizes the reference skipped: say so, with a clearly labelled estimate."""
    ref = grown[1]
    done = [s for s in cfg.sizes if s <= cfg.ref_max]
    skipped = [s for s in cfg.sizes if s > cfg.ref_max]
    if not skipped or not done:
        return
    last = done[-1]
    w = results.figures.get(f"write_{last}")
    r = results.figures.get(f"read_{last}")
    rate = ref.build_entries / ref.build_s if ref.build_s else float("nan")
    for s in skipped:
        factor = s / last
        build_min = s / rate / 60 if rate == rate else float("nan")
        if w and ref.impl.name in w.values:
            v = statistics.median(w.values[ref.impl.name])
            results.figures[f"write_{s}"].notes[ref.impl.name] = (
                f"not run (build ≈{build_min:.0f} min); est. ≥{v:,.0f}"
            )
            results.meta.setdefault("notes", []).append(
                f"reference not grown to {_k(s)}: at its measured {rate:,.0f} calls/s the build alone takes "
                f"≈{build_min:.0f} min and its memory grows with the log (it holds every entry); "
                f"its {_k(s)} figures are estimates from {_k(last)} (write cost assumed flat, reads linear)"
            )
        if r and ref.impl.name in r.values:
            v = statistics.median(r.values[ref.impl.name])
            results.figures[f"read_{s}"].notes[ref.impl.name] = f"not run; est. ≈{v * factor:,.0f}"


# ---------------------------------------------------------------- table


def _fmt(v: float, unit: str) -> str:
    if unit == "calls/s":
        return f"{v:,.0f}"
    if unit in ("µs", "KiB", "MiB"):
        return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"
    if unit in ("ms", "s"):
        return f"{v:.3f}" if v < 1 else f"{v:.2f}"
    return f"{v:.3g}"


def _cell(f: Figure, name: str) -> str:
    if name in f.values:
        vs = f.values[name]
        med = statistics.median(vs)
        s = _fmt(med, f.unit)
        if len(vs) > 1:
            s += f" [{_fmt(min(vs), f.unit)}–{_fmt(max(vs), f.unit)}]"
        return s
    return f.notes.get(name, "—")


def ratio(f: Figure, results: Results, chap: str, ref: str) -> float | None:
    if chap not in f.values:
        return None
    src = results.figures.get(f.compare_to) if f.compare_to else f
    if src is None or ref not in src.values:
        return None
    c = statistics.median(f.values[chap])
    r = statistics.median(src.values[ref])
    if c == 0 or r == 0:
        return None
    return c / r if f.better == "higher" else r / c


def table(results: Results, chap: str, ref: str) -> str:
    rows = [("figure", "unit", f"{chap} median [min–max]", f"{ref} median [min–max]", "chapline ×", "target")]
    for f in results.figures.values():
        if f.key in ("start_import", "start_rss_base"):
            continue
        if f.key == "bare_commit":
            rows.append(_bound_row(f, results, chap, ref))
            continue
        rt = ratio(f, results, chap, ref)
        rs = "" if rt is None else f"{rt:,.1f}×"
        if f.compare_to and rt is not None:
            rs += " vs ref SQLite"
        rows.append((f.label, f.unit, _cell(f, chap), _cell(f, ref), rs, f.target))
    for prefix, what in (("write_", "one write per call"), ("wgroup_", "grouped")):
        flat = _flatness(results, chap, prefix)
        if flat:
            rows.append((f"write cost {what}, largest / smallest log", "×", flat, "", "", "flat (≈1×)"))
    return _markdown(rows)


def ts_table(results: Results, chap: str, ref: str, ts: str) -> str:
    """The three-way figures: each seat's calls/s and chapline's ratio to the
    other two (calls/s over calls/s: above 1, chapline is faster)."""
    rows = [("figure", f"{chap} median [min–max]", f"{ref} median [min–max]", f"{ts} median [min–max]",
             f"{chap} / {ts}", f"{chap} / {ref}")]  # fmt: skip
    for key in ("tput_common", "tput_common_cpu"):
        f = results.figures.get(key)
        if f is None or not all(n in f.values for n in (chap, ref, ts)):
            continue
        c, r, t = (statistics.median(f.values[n]) for n in (chap, ref, ts))
        rows.append((f.label, _cell(f, chap), _cell(f, ref), _cell(f, ts), f"{c / t:,.2f}", f"{c / r:,.2f}"))
    return _markdown(rows)


def _markdown(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for j, r in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(r)) + " |")
        if j == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _bound_row(bare: Figure, results: Results, chap: str, ref: str) -> tuple[str, ...]:
    """The disk's bare-commit rate, and how close each implementation's one
    write per call comes to it."""
    bound = statistics.median(bare.values["disk"])
    sql = results.figures.get("tput_sqlite")
    share = ""
    if sql is not None:
        share = ", ".join(
            f"{n} at {100 * statistics.median(sql.values[n]) / bound:.0f}%"
            for n in (chap, ref)
            if n in sql.values
        )
    return (bare.label, bare.unit, _cell(bare, "disk"), "", share, "")


def _flatness(results: Results, chap: str, prefix: str) -> str:
    ws = [(int(k.split("_")[1]), f) for k, f in results.figures.items() if k.startswith(prefix)]
    ws = [(s, f) for s, f in sorted(ws) if chap in f.values]
    if len(ws) < 2:
        return ""
    a = statistics.median(ws[0][1].values[chap])
    b = statistics.median(ws[-1][1].values[chap])
    return f"{b / a:.2f} ({_k(ws[-1][0])} vs {_k(ws[0][0])})"


def machine() -> dict[str, Any]:
    import platform

    info = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "python": platform.python_version(),
        "nproc": os.cpu_count(),
        "platform": platform.platform(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import chap_coordinator

        info["reference"] = chap_coordinator.__version__
    except Exception:
        pass
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        ).stdout.strip()
        info["chapline_commit"] = rev
    except Exception:
        pass
    return info


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def run(cfg: Config, impls: list[Impl]) -> Results:
    results = Results()
    results.meta = {"machine": machine(), "config": {k: v for k, v in cfg.__dict__.items()}}
    results.meta["loadavg_before"] = loadavg()
    tmp = cfg.workdir or tempfile.mkdtemp(prefix="chapline-bench-")
    os.makedirs(tmp, exist_ok=True)
    shm_root = cfg.tmpfs_dir
    if shm_root:
        cfg.tmpfs_dir = tempfile.mkdtemp(prefix="chapline-bench-", dir=shm_root)
    try:
        t0 = time.perf_counter()
        if "throughput" in cfg.phases:
            log(f"throughput: {cfg.reps} reps, alternating {impls[0].name} / {impls[1].name}")
            phase_throughput(cfg, impls, results, tmp)
        if "sizes" in cfg.phases:
            log(f"log sizes {', '.join(_k(s) for s in cfg.sizes)} (reference up to {_k(cfg.ref_max)})")
            phase_sizes(cfg, impls, results, tmp)
        results.meta["elapsed_s"] = time.perf_counter() - t0
        results.meta["loadavg_after"] = loadavg()
    finally:
        if shm_root:
            shutil.rmtree(cfg.tmpfs_dir, ignore_errors=True)
            cfg.tmpfs_dir = shm_root
        if not cfg.keep and not cfg.workdir:
            shutil.rmtree(tmp, ignore_errors=True)
        elif cfg.keep:
            log(f"files kept in {tmp}")
    return results
