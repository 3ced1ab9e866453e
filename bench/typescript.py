"""The TypeScript coordinator (@brightbeamai/chap-coordinator) as a bench seat.

`python -m bench --ts DIR` runs it in the throughput phase's in-memory
figure beside chapline and the reference. DIR is what `python -m
bench.ts_setup PATH` built from a fetched CHAP repository; nothing of that
repository is in this project. The coordinator runs in one long-lived Node
process (bench/ts_driver.mjs) that is handed the same workload the Python
side sends, exported as JSON by `export_workload`, warms up on untimed
passes that check every answer, then times one pass per request; so the
JIT is warm and no call crosses a process boundary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench import workload as W

DRIVER = Path(__file__).resolve().parent / "ts_driver.mjs"
WARM = 2  # untimed passes before the first timed one

# The cycle kinds the TypeScript coordinator (0.2.10) answers as the other
# two do. Its task.complete completes a review_required task instead of
# opening the task's review, so the approve and decline cycles fail at their
# decision there; the three-way figure leaves those kinds out for all three.
KINDS = ("override", "revise", "posthoc", "direct")


def common_pattern() -> tuple[str, ...]:
    """The workload's pattern without the kinds outside `KINDS`, in order."""
    return tuple(k for k in W.PATTERN if k in KINDS)


def export_workload(cycles: int, prefix: str, pattern: tuple[str, ...]) -> dict[str, Any]:
    """The workload as plain JSON: the setup envelopes and the planned calls
    as [envelope, op, expected state], with the op codes by name."""
    return {
        "profiles": list(W.PROFILES),
        "ops": {"CREATE": W.CREATE, "TASK": W.TASK, "READ": W.READ},
        "setup": W.setup_envelopes(prefix),
        "calls": [[env, op, state] for env, op, state in W.plan(0, cycles, prefix, pattern=pattern)],
    }


class TypeScript:
    name = "typescript"

    def __init__(self, built: str) -> None:
        self.built = Path(built)
        self.dist = self.built / "coordinator" / "dist"
        self.label = "TypeScript coordinator"
        package = self.built / "coordinator" / "package.json"
        if package.is_file():
            self.label += " " + json.loads(package.read_text())["version"]
        self._proc: subprocess.Popen[str] | None = None
        self._tmp: str | None = None

    def available(self) -> str | None:
        if shutil.which("node") is None:
            return "node is not on PATH"
        if not (self.dist / "index.js").is_file():
            return f"no build in {self.built} (python -m bench.ts_setup /path/to/chap builds one)"
        return None

    def source(self) -> dict[str, Any]:
        """What was built (bench.ts_setup's source.json), for the results."""
        path = self.built / "source.json"
        built: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
        return {"label": self.label, **built}

    def start(self, cycles: int, pattern: tuple[str, ...]) -> None:
        """Start the driver on `cycles` workload cycles of `pattern`; returns
        once its warm-up passes have all succeeded."""
        self._tmp = tempfile.mkdtemp(prefix="chapline-bench-ts-")
        path = os.path.join(self._tmp, "workload.json")
        with open(path, "w") as f:
            json.dump(export_workload(cycles, "ts", pattern), f)
        # stderr is left on ours: a failed call is printed where the bench prints
        self._proc = subprocess.Popen(
            ["node", "--expose-gc", str(DRIVER), str(self.dist), path, str(WARM)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self._read("warm-up")

    def run_pass(self) -> dict[str, Any]:
        """One timed pass on a fresh coordinator: calls, wall_s, cpu_s."""
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write("pass\n")
        self._proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self._read("a timed pass"))
        return answer

    def _read(self, what: str) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait()
            raise RuntimeError(f"the TypeScript driver failed during {what} (its message is above)")
        return line

    def close(self) -> None:
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()  # the driver's command loop ends
            self._proc.wait(timeout=60)
            self._proc = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
