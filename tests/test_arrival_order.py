"""Entry times never go backwards within a workspace (SPECIFICATION.md,
"Dispatch", the arrival time): two coordinators on one real SQLite file, each
with its own injected clock, racing each other's writes; a call run again
after a store conflict reads the clock again, and no arrival is earlier than
the latest time the workspace holds, whatever the clock says. The oracle is
the log itself, read back from the file by a third coordinator."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from client import Client
from hypothesis import given
from hypothesis import strategies as st

from coordinator import Coordinator
from storage import SqliteStore

W = "wsp_order"
ALICE, BOT = "human:alice", "agent:bot"
T = 1_700_000_000_000
PROFILES = ["core/1.0", "review/1.0", "whisper/1.0", "x-chapline-work/1.0"]


class Clock:
    """An injected clock: each read gives the next of `readings` (the last one
    again once they run out). `then`, when set, runs once right after the
    next read: another process writing between this coordinator's reading
    and its write, as a real race does."""

    def __init__(self, *readings: int) -> None:
        self.readings = list(readings)
        self.then: Callable[[], Any] | None = None

    def set(self, *readings: int) -> None:
        self.readings = list(readings)

    def __call__(self) -> int:
        value = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        then, self.then = self.then, None
        if then is not None:
            then()
        return value


def iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Pair:
    """Two coordinators on one SQLite file: `a` set the workspace up, `b`
    opened the file afterwards and watches it for `a`'s writes (so `a` learns
    of `b`'s only when a write conflicts, `b` of `a`'s before each call)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.ca, self.cb = Clock(T), Clock(T)
        self.a = Client(Coordinator(SqliteStore(self.path), clock=self.ca), W)
        self.a.ok("workspace.create", profiles=PROFILES)
        self.a.ok("participant.join", frm=ALICE, type="human", role="admin")
        self.a.ok("participant.join", frm=BOT, type="agent", role="writer")
        self.b = Client(Coordinator(SqliteStore(self.path, watch=True), clock=self.cb), W)

    def log(self) -> list[dict[str, Any]]:
        with Coordinator(SqliteStore(self.path)) as reader:
            entries: list[dict[str, Any]] = reader.snapshot(W)["audit"]
        return entries

    def arrivals(self) -> list[str]:
        return [e["arrived"] for e in self.log()]

    def close(self) -> None:
        self.a.target.close()
        self.b.target.close()


def _non_decreasing(times: list[str]) -> bool:
    return all(x <= y for x, y in zip(times, times[1:], strict=False))


def test_a_call_run_again_after_a_conflict_reads_the_clock_again(tmp_path: Path) -> None:
    p = Pair(tmp_path / "chap.db")
    p.ca.set(T + 200)
    p.cb.set(T, T + 300)  # b's reading, then the re-run's
    p.cb.then = p.a.new_task  # a appends after b read its clock, before b writes
    p.b.new_task()
    assert p.arrivals()[-2:] == [iso(T + 200), iso(T + 300)]
    p.close()


def test_no_entry_is_stamped_before_the_latest_time_the_workspace_holds(tmp_path: Path) -> None:
    p = Pair(tmp_path / "chap.db")
    p.ca.set(T + 200)
    p.a.new_task()
    p.cb.set(T)  # b's clock lags a's by 200 ms
    p.b.new_task()
    assert p.arrivals()[-1] == iso(T + 200)
    # a re-run whose fresh reading still lags the other writer's entry
    p.ca.set(T + 500)
    p.cb.set(T + 300, T + 400)
    p.cb.then = p.a.new_task
    p.b.new_task()
    assert p.arrivals()[-2:] == [iso(T + 500), iso(T + 500)]
    # one clock stepping back (NTP, a VM resumed): its own log stays in order
    p.ca.set(T + 100)
    p.a.new_task()
    assert p.arrivals()[-1] == iso(T + 500)
    # ... and what the call stamps inside its objects agrees with its entry
    tid = p.a.new_task()
    assert p.a.target.snapshot(W)["tasks"][tid]["created_at"] == iso(T + 500)
    assert _non_decreasing(p.arrivals())
    p.close()


def test_a_batch_run_again_after_a_conflict_reads_the_clock_again(tmp_path: Path) -> None:
    p = Pair(tmp_path / "chap.db")
    p.ca.set(T + 200)
    p.cb.set(T, T, T + 300, T + 310)  # two provisional calls, then their re-runs
    with p.b.target.batch():
        p.b.new_task()
        p.a.new_task()  # a writes while b's batch is open
        p.b.new_task()
    assert p.arrivals()[-3:] == [iso(T + 200), iso(T + 300), iso(T + 310)]
    # re-runs whose readings lag are held at the workspace's latest time
    p.ca.set(T + 900)
    p.cb.set(T + 400)
    with p.b.target.batch():
        p.b.new_task()
        p.a.new_task()
    assert p.arrivals()[-2:] == [iso(T + 900), iso(T + 900)]
    p.close()


def test_a_lapse_notice_is_never_stamped_before_the_log(tmp_path: Path) -> None:
    p = Pair(tmp_path / "chap.db")
    task = p.a.new_task()
    p.a.ok("whisper.ask", frm=BOT, task_id=task, question="q", to=ALICE, deadline_ms=1000,
           default_if_lapsed="d", whisper_id="wh")
    p.ca.set(T + 5000)
    p.a.new_task()
    p.cb.set(T + 2000)  # past the deadline by b's clock, but behind a's entry
    swept = p.b.target.sweep()  # check_whisper_lapses at b's clock
    assert [s.lapsed for s in swept] == [["wh"]]
    assert p.arrivals()[-1] == iso(T + 5000) and _non_decreasing(p.arrivals())
    p.close()


def test_a_claim_is_never_granted_with_a_lease_already_over_by_the_log(tmp_path: Path) -> None:
    p = Pair(tmp_path / "chap.db")
    tid = p.a.ok("x-chapline.plan.submit", frm=ALICE, plan="p", edges=[],
                 tasks=[{"key": "k", "kind": "k", "input": {}, "role": "writer"}])["tasks"]["k"]
    p.ca.set(T + 200)
    p.cb.set(T, T + 1)
    p.cb.then = p.a.new_task  # a writes at T+200 while b claims
    claimed = p.b.ok("x-chapline.work.claim", frm=BOT, task_id=tid, lease_ms=100)
    assert claimed["outcome"] == "claimed"
    latest = max(p.arrivals())
    assert claimed["lease_expires_at"] > latest
    p.close()


# (coordinator, clock step in ms, what it does); the clocks step back as well as on
STEPS = st.lists(
    st.tuples(
        st.sampled_from("ab"),
        st.integers(-400, 400),
        st.sampled_from(["write", "race", "batch", "lapse"]),
    ),
    min_size=1,
    max_size=12,
)


@given(STEPS)
def test_two_writers_with_wandering_clocks_keep_the_log_in_time_order(steps: list[tuple[str, int, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        p = Pair(Path(tmp) / "chap.db")
        task = p.a.new_task()
        now = {"a": T, "b": T}
        for n, (who, step, action) in enumerate(steps):
            other = "b" if who == "a" else "a"
            me, them = (p.a, p.b) if who == "a" else (p.b, p.a)
            clock = p.ca if who == "a" else p.cb
            now[who] += step
            clock.set(now[who], now[who] + 7)
            (p.ca if other == "a" else p.cb).set(now[other])
            if action == "write":
                me.new_task()
            elif action == "race":
                clock.then = them.new_task
                me.new_task()
            elif action == "batch":
                with me.target.batch():
                    me.new_task()
                    them.new_task()
                    me.new_task()
            else:
                me.ok("whisper.ask", frm=BOT, task_id=task, question="q", to=ALICE, deadline_ms=1,
                      default_if_lapsed="d", whisper_id=f"wh{n}")
                them.target.sweep()
        assert _non_decreasing(p.arrivals()), p.arrivals()
        p.close()
