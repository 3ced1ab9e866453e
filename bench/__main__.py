"""`python -m bench` (or `./run bench`): chapline against chap-coordinator 0.3.3.

    python -m bench              full run (~10 min): throughput, 1k..1M log sizes
    python -m bench --quick      subset (<1 min): throughput, 1k and 10k logs
    python -m bench --profile sqlite   cProfile of chapline on the workload
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from bench import run as R
from bench import workload as W
from bench.impls import implementations
from bench.typescript import KINDS, WARM, TypeScript, common_pattern


def _sizes(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        mult = 1
        if part.endswith("k"):
            mult, part = 1_000, part[:-1]
        elif part.endswith("m"):
            mult, part = 1_000_000, part[:-1]
        out.append(int(float(part) * mult))
    return tuple(sorted(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a subset that runs in under a minute")
    ap.add_argument("--phases", default=None, help="comma list of: throughput, sizes (default both)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions of each throughput figure")
    ap.add_argument("--group", type=int, default=None, help="calls per coord.batch() in the grouped figure (100)")
    ap.add_argument("--sizes", type=_sizes, default=None, help="log sizes, e.g. 1k,10k,100k,1m")
    ap.add_argument("--ref-max", type=_sizes, default=None, help="largest log the reference is grown to (100k)")
    ap.add_argument("--start-size", type=_sizes, default=None, help="log size for start/verify/file size (100k)")
    ap.add_argument("--json", metavar="PATH", help="also write all samples as JSON")
    ap.add_argument("--workdir", help="put the database files here (kept) instead of a temp dir")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument(
        "--tmpfs",
        default="/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else "",
        help="also measure SQLite one-write-per-call in this tmpfs dir, to separate fsync from code "
        "(default /dev/shm when writable; '' to skip)",
    )
    ap.add_argument(
        "--pattern",
        help="comma list of cycle kinds to use instead of the standard mix "
        f"(kinds: {', '.join(sorted(set(W.PATTERN)))}; e.g. 'direct' for a core-only workload)",
    )
    ap.add_argument(
        "--ts",
        metavar="DIR",
        help="also run the TypeScript coordinator built in DIR (python -m bench.ts_setup) in memory, "
        "warm, beside the other two (throughput phase)",
    )
    ap.add_argument("--self-test", action="store_true", help="run the reference in chapline's seat (harness test)")
    ap.add_argument(
        "--profile",
        choices=["memory", "sqlite", "grouped", "big"],
        help="profile chapline on the workload instead of benchmarking",
    )
    ap.add_argument("--profile-impl", choices=["chapline", "reference"], default="chapline")
    ap.add_argument("--profile-cycles", type=int, default=2000)
    ap.add_argument("--profile-size", type=_sizes, default=(100_000,), help="log size for --profile big")
    args = ap.parse_args(argv)

    if args.pattern:
        kinds = tuple(k.strip() for k in args.pattern.split(",") if k.strip())
        unknown = set(kinds) - set(W.PATTERN)
        if unknown or not kinds:
            ap.error(f"unknown cycle kinds: {', '.join(sorted(unknown)) or '(none given)'}")
        W.PATTERN = kinds
    impls = list(implementations(args.self_test))
    if args.profile:
        from bench.profile import profile

        impl = impls[0] if args.profile_impl == "chapline" else impls[1]
        return profile(impl, args.profile, args.profile_cycles, args.profile_size[0], group=args.group or 100)

    cfg = R.Config.for_quick() if args.quick else R.Config()
    if args.phases:
        cfg.phases = tuple(p.strip() for p in args.phases.split(","))
    if args.reps:
        cfg.reps = args.reps
    if args.group:
        cfg.group = args.group
    if args.sizes:
        cfg.sizes = args.sizes
    if args.ref_max:
        cfg.ref_max = args.ref_max[0]
    if args.start_size:
        cfg.start_size = args.start_size[0]
    elif cfg.start_size not in cfg.sizes:
        cfg.start_size = max((s for s in cfg.sizes if s <= cfg.ref_max), default=max(cfg.sizes))
    cfg.workdir = args.workdir
    cfg.tmpfs_dir = args.tmpfs or None
    cfg.keep = args.keep

    if args.ts:
        if "throughput" not in cfg.phases:
            ap.error("--ts runs in the throughput phase")
        if not common_pattern():
            ap.error(f"--ts: the pattern has none of the cycle kinds all three answer alike ({', '.join(KINDS)})")
        why = TypeScript(args.ts).available()
        if why:
            print(f"cannot run the TypeScript coordinator: {why}", file=sys.stderr)
            return 2
        cfg.ts_dir = args.ts

    for impl in impls:
        why = impl.available()
        if why:
            print(f"cannot run {impl.name}: {why}", file=sys.stderr)
            print("(use --self-test to exercise the harness with the reference on both sides)", file=sys.stderr)
            return 2

    results = R.run(cfg, impls)
    chap, ref = impls[0].name, impls[1].name
    m = results.meta["machine"]
    print()
    print(
        f"chapline vs {impls[1].label} — {m['date']}, {m.get('cpu', '?')}, {m['nproc']} cores, "
        f"Python {m['python']}, chapline {m.get('chapline_commit', '?')}"
        + (" — QUICK subset" if cfg.quick else "")
    )
    print(f"workload: {W.calls_per_cycle():.2f} calls per task cycle"
          + (f" (pattern: {','.join(W.PATTERN)})" if args.pattern else "")
          + ", chain on, profiles core+review; "
          "'chapline ×' = how many times better chapline is (higher is better)")
    print()
    print(R.table(results, chap, ref))
    if "typescript" in results.meta:
        print()
        print(f"three ways, in memory ({results.meta['typescript']['label']}, warm: {WARM} untimed passes first):")
        print()
        print(R.ts_table(results, chap, ref, TypeScript.name))
    for n in results.meta.get("notes", []):
        print(f"note: {n}")
    for w in results.meta.get("warnings", []):
        print(f"WARNING: {w}")
    print(
        f"\n(elapsed {results.meta.get('elapsed_s', 0):.0f} s; load average before "
        f"{results.meta.get('loadavg_before')}, after {results.meta.get('loadavg_after')} — "
        "on a busy machine trust the CPU-time row and the ratios more than absolute calls/s)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results.to_json(), f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
