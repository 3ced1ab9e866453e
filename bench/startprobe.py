"""Start-up probe, run in a fresh interpreter by the benchmark:

    python -m bench.startprobe {chapline|reference|reference*} PATH

Prints one JSON object: seconds to import the implementation, seconds to
construct a coordinator on the SQLite file at PATH, seconds until the first
answer (`workspace.describe`, so lazy loading is counted), the RSS after
import and the peak RSS of the process (VmHWM; see below), in MiB.
"""

from __future__ import annotations

import json
import resource
import sys
import time


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main(argv: list[str]) -> None:
    name, path = argv
    from bench.impls import Chapline, Reference, ReferenceAsChapline
    from bench.workload import WORKSPACE

    impl = {"chapline": Chapline, "reference": Reference, "reference*": ReferenceAsChapline}[name]()
    t0 = time.perf_counter()
    if isinstance(impl, Chapline):
        import coordinator  # noqa: F401
        import storage  # noqa: F401
    else:
        import chap_coordinator  # noqa: F401
        import chap_coordinator.storage.sqlite  # noqa: F401
    t1 = time.perf_counter()
    rss_import = _status_mib("VmRSS")
    t2 = time.perf_counter()
    opened = impl.open("sqlite", path)
    t3 = time.perf_counter()
    r = opened.dispatch(
        {"jsonrpc": "2.0", "id": "probe", "method": "workspace.describe", "params": {"workspace": WORKSPACE}}
    )
    t4 = time.perf_counter()
    # VmHWM, the peak RSS of this process image. ru_maxrss would do on a
    # fresh login shell, but Linux carries it across fork+exec, so here it
    # would report the (large) benchmark parent instead.
    peak = _status_mib("VmHWM")
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    count = r.get("result", {}).get("audit_count")
    print(
        json.dumps(
            {
                "import_s": t1 - t0,
                "construct_s": t3 - t2,
                "first_answer_s": t4 - t2,
                "rss_after_import_mib": rss_import,
                "peak_rss_mib": peak,
                "ru_maxrss_mib": maxrss,
                "audit_count": count,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
