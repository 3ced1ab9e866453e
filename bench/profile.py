"""`python -m bench --profile {memory,sqlite,grouped,big}`: where the time goes.

Runs the workload once under cProfile and prints the top functions by own
time and by cumulative time, as file:line(function).
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import tempfile
import time

from bench import workload as W
from bench.impls import Impl
from bench.run import _setup


def profile(impl: Impl, mode: str, cycles: int, size: int, *, group: int = 100, top: int = 30) -> int:
    tmp = tempfile.mkdtemp(prefix="chapline-prof-")
    kind = "memory" if mode == "memory" else "sqlite"
    o = impl.open(kind, os.path.join(tmp, "p.db"))
    _setup(o, "p")
    start = 0
    if mode == "big":
        print(f"growing the log to {size:,} entries ...", flush=True)
        n = int(size / 4.25) + 1
        calls = W.plan(0, n, "grow", reads=False)
        t0 = time.perf_counter()
        W.drive(o.dispatch, calls, batch=o.batch if impl.has_batch else None, group=1000 if impl.has_batch else 0)
        print(f"  {len(calls):,} calls in {time.perf_counter() - t0:.1f} s", flush=True)
        start = n
    calls = W.plan(start, cycles, "prof", reads=mode != "big")
    g = group if mode == "grouped" else 0
    pr = cProfile.Profile()
    t0 = time.perf_counter()
    pr.enable()
    errors = W.drive(o.dispatch, calls, batch=o.batch if g else None, group=g)
    pr.disable()
    dt = time.perf_counter() - t0
    o.close()
    print(f"{impl.name} {mode}: {len(calls):,} calls, {errors} errors, {dt / len(calls) * 1e6:.1f} µs/call under the profiler")
    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        st = pstats.Stats(pr, stream=s)
        st.sort_stats(key).print_stats(top)
        text = s.getvalue()
        print(f"\n==== top {top} by {key} ====")
        print(text[text.find("   ncalls") :])
    return 0
