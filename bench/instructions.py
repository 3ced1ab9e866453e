"""`python -m bench.instructions`: instructions per call of the in-memory
workload, chapline and the reference, counted by valgrind.

A count of executed instructions does not move with the machine's load, so
its ratio is the steady companion of the wall-clock ratio `python -m bench`
measures on a shared machine. Each implementation runs in two fresh
interpreters under `valgrind --tool=cachegrind` (Debian's `valgrind`
package): both set up the workspace, warm up and build the same plan of
calls; one then sends its first quarter and the other all of it, so
the difference of the two counts divided by the difference of the calls is
the cost of `dispatch` alone (start-up, imports and plan building cancel
out). Expect a few minutes: valgrind runs Python about 50 times slower.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# Run inside valgrind: argv = impl, cycles planned, "whole" or "prefix".
_CHILD = """
import gc, sys
from bench import workload as W
from bench.impls import implementations
from bench.run import _setup
name, planned, whole = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "whole"
chap, ref = implementations()
o = (chap if name == "chapline" else ref).open("memory")
_setup(o, "i")
W.drive(o.dispatch, W.plan(0, 20, "warm"))
calls = W.plan(20, planned, "run")
prefix = W.plan(20, planned // 4, "run")  # built in both runs: its cost cancels
calls = calls if whole else calls[: len(prefix)]
gc.collect()
errors = W.drive(o.dispatch, calls)
print("CALLS", len(calls), errors)
"""


def count(impl: str, planned: int, part: str) -> tuple[int, int]:
    """(instructions, calls sent) of one child run under cachegrind."""
    out = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            "-c",
            _CHILD,
            impl,
            str(planned),
            part,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    refs = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    calls = re.search(r"CALLS (\d+) (\d+)", out.stdout)
    if refs is None or calls is None:
        raise RuntimeError(f"{impl}: no count in valgrind's output:\n{out.stderr[-2000:]}")
    if calls.group(2) != "0":
        raise RuntimeError(f"{impl}: {calls.group(2)} calls answered with an error")
    return int(refs.group(1).replace(",", "")), int(calls.group(1))


def per_call(impl: str, cycles: int) -> float:
    with ThreadPoolExecutor(2) as pool:
        short = pool.submit(count, impl, cycles, "prefix")
        whole = pool.submit(count, impl, cycles, "whole")
        (i_short, n_short), (i_whole, n_whole) = short.result(), whole.result()
    return (i_whole - i_short) / (n_whole - n_short)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    ap.add_argument("--cycles", type=int, default=400, help="task cycles in the longer run (400)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    chapline = per_call("chapline", args.cycles)
    reference = per_call("reference", args.cycles)
    print(f"instructions per call, in memory, chain on ({args.cycles} cycles):")
    print(f"  chapline   {chapline:12,.0f}")
    print(f"  reference  {reference:12,.0f}")
    print(f"  ratio      {reference / chapline:12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
