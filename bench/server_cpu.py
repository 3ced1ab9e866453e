"""The CPU time a server process tree has used, split between its
processes' main threads and their other threads, and the CPU time the
whole machine has been busy (Linux, from /proc).

A server's calls/s moves with whatever else the machine runs; the CPU
time it spends per call moves much less, and the split shows which thread
spends it: in `chapline serve` the main thread runs the event loop and
the dispatcher's thread runs the coordinator and the store; in the
durable bound (bench/http_bound.py) the other thread is its writer. The
machine's busy time per call adds the clients and the kernel: how much of
all the cores one call takes, which caps calls/s at cores / that.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["CpuTime", "cpu_time", "machine_busy"]

_TICK = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuTime:
    """Seconds of CPU (user and system)."""

    main: float  # by the main threads (a server's event loop)
    other: float  # by every other thread

    def __add__(self, more: CpuTime) -> CpuTime:
        return CpuTime(self.main + more.main, self.other + more.other)

    def __sub__(self, earlier: CpuTime) -> CpuTime:
        return CpuTime(self.main - earlier.main, self.other - earlier.other)


def cpu_time(pid: int) -> CpuTime:
    """The CPU time used so far by process `pid` and its descendants. A
    process's own count keeps the time of its threads that have ended and
    of its children it has waited for (both count as `other`), so a thread
    or process ending between two readings takes nothing out of their
    difference."""
    main = other = 0.0
    for process in _tree(pid):
        fields = _fields(f"/proc/{process}/stat")
        if fields is None:
            continue  # ended meanwhile: its parent's count has it once waited for
        # utime, stime, cutime and cstime: fields 14 to 17.
        everything = sum(int(f) for f in fields[11:15]) * _TICK
        thread = _fields(f"/proc/{process}/task/{process}/stat")
        own = 0.0 if thread is None else (int(thread[11]) + int(thread[12])) * _TICK
        main += own
        other += everything - own
    return CpuTime(main, other)


def machine_busy() -> float:
    """Seconds of CPU time all the machine's cores have spent busy since it
    started (user, nice, system, irq, softirq and steal; not idle or I/O wait)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()  # "cpu" user nice system idle iowait irq softirq steal ...
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) * _TICK


def _fields(stat: str) -> list[str] | None:
    """The fields of a /proc stat file after the command name (which is in
    parentheses and may hold spaces), from the state (field 3) on; None if
    the process or thread has ended."""
    try:
        with open(stat) as f:
            text = f.read()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants, by their parent ids in /proc."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _fields(f"/proc/{name}/stat")
        if fields is not None:
            parents.setdefault(int(fields[1]), []).append(int(name))
    tree, todo = [], [pid]
    while todo:
        process = todo.pop()
        tree.append(process)
        todo.extend(parents.get(process, []))
    return tree
