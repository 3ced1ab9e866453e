"""`Coordinator.sweep()` and `chapline serve --sweep-interval`: expired work
leases reclaimed and whispers lapsed without any call, written like a call
(write-ahead, under CAS), nothing written when nothing is due, nothing
recorded twice when several processes sweep one store."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from servers import env
from support import ALICE, BOT, Client
from test_work import BOT2, WORK, claim, setup, submit, task

from coordinator import Coordinator, CounterIds, Swept
from coordinator.clock import iso_ms
from coordinator.replay import replay_workspace
from storage import SqliteStore

WHISPERING = [*WORK, "whisper/1.0"]


def sweeps(c: Client) -> list[dict[str, Any]]:
    return [e for e in c.log() if e.get("envelope", {}).get("method") == "x-chapline.work.sweep"]


def test_a_sweep_reclaims_expired_leases_as_a_write_would() -> None:
    c, clock = setup()
    ids = submit(c, [task("a"), task("b"), task("c")])
    first = claim(c, BOT, ids["a"], lease_ms=1_000)
    claim(c, BOT2, ids["b"], lease_ms=5_000)
    count = len(c.log())
    assert c.target.sweep() == []  # nothing due: nothing written
    assert len(c.log()) == count
    clock.now += 1_000
    assert c.target.sweep() == [Swept(c.ws, [ids["a"]], [])]
    (entry,) = sweeps(c)
    assert entry["envelope"]["params"] == {"workspace": c.ws, "from": "service:coordinator"}
    assert entry["arrived"] == iso_ms(clock.now)  # the coordinator's clock
    described = {t["key"]: t for t in c.ok("x-chapline.plan.describe", plan="p")["tasks"]}
    assert described["a"]["holder"] is None and described["a"]["status"] == "retry"
    assert [x["outcome"] for x in described["a"]["attempts"]] == ["expired"]
    assert described["b"]["holder"] == BOT2  # its lease runs on
    # The old holder's token is stale, as after a write's own reclaim.
    err = c.err("x-chapline.work.heartbeat", **{"from": BOT}, task_id=ids["a"], token=first["token"])
    assert err["code"] == -32960
    count = len(c.log())
    assert c.target.sweep() == []  # already done: nothing more
    assert len(c.log()) == count
    assert c.ok("audit.verify_chain")["ok"] is True


def test_a_sweep_lapses_overdue_whispers() -> None:
    c, clock = setup()
    c = Client(c.target, "wsp_w")
    c.ok("workspace.create", profiles=WHISPERING)
    c.ok("participant.join", **{"from": ALICE}, type="human", role="admin")
    c.ok("participant.join", **{"from": BOT}, type="agent", role="writer")
    tid = submit(c, [task("a")])["a"]
    wid = c.ok("whisper.ask", **{"from": BOT}, to=[ALICE], task_id=tid, question="ok?",
               deadline_ms=500, default_if_lapsed="yes")["whisper_id"]
    assert c.target.sweep() == []
    clock.now += 500
    assert c.target.sweep() == [Swept("wsp_w", [], [wid])]
    assert c.log()[-1]["envelope"]["params"]["kind"] == "whisper_lapsed"
    assert c.target.sweep() == []


def test_a_paused_workspace_is_not_swept_until_resumed() -> None:
    c, clock = setup()
    ids = submit(c, [task("a")])
    claim(c, BOT, ids["a"], lease_ms=1_000)
    c.ok("control.pause", **{"from": ALICE}, scope="workspace")
    clock.now += 5_000
    count = len(c.log())
    assert c.target.sweep() == []
    assert len(c.log()) == count
    c.ok("control.resume", **{"from": ALICE}, scope="workspace")
    assert c.target.sweep() == [Swept(c.ws, [ids["a"]], [])]


def test_a_sweep_cannot_run_inside_a_batch() -> None:
    c, _ = setup()
    with c.target.batch(), pytest.raises(RuntimeError, match="inside batch"):
        c.target.sweep()


def test_a_sweep_that_loses_the_race_to_another_process_records_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    c, clock = setup(SqliteStore(path))
    ids = submit(c, [task("a")])
    claim(c, BOT, ids["a"], lease_ms=1_000)
    other = Coordinator(SqliteStore(path), clock=clock, ids=CounterIds())  # loaded before the expiry
    clock.now += 1_000
    assert c.target.sweep() == [Swept(c.ws, [ids["a"]], [])]
    count = len(c.log())
    # `other` still holds the claim in memory; its write conflicts, it
    # reloads, finds the lease reclaimed, and writes nothing.
    assert other.sweep() == []
    other.close()
    c.target.close()
    again = Client(Coordinator(SqliteStore(path), clock=clock), c.ws)
    assert len(again.log()) == count
    assert len([e for e in again.log() if e.get("envelope", {}).get("method") == "x-chapline.work.sweep"]) == 1
    again.target.close()


def test_the_log_replays_a_sweep(tmp_path: Path) -> None:
    c, clock = setup()
    ids = submit(c, [task("a"), task("b")], [{"from": "a", "to": "b"}])
    claim(c, BOT, ids["a"], lease_ms=1_000)
    clock.now += 1_000
    c.target.sweep()
    snap = c.target.snapshot(c.ws)
    meta = {k: v for k, v in snap.items() if not isinstance(v, dict) or k == "meta"}
    objects = {k: v for k, v in snap.items() if isinstance(v, dict) and k != "audit"}
    assert replay_workspace(meta, snap["audit"], objects) == []


# -- chapline serve ----------------------------------------------------------------


class Served:
    def __init__(self, url: str, process: subprocess.Popen[str]) -> None:
        self.url, self.process = url, process
        self.http = httpx.Client(timeout=30)
        self.n = 0

    def call(self, ws: str, method: str, **params: Any) -> dict[str, Any]:
        self.n += 1
        got: dict[str, Any] = self.http.post(self.url + "/chap", json={
            "jsonrpc": "2.0", "id": self.n, "method": method, "params": {"workspace": ws, **params},
        }).json()
        return got

    def ok(self, ws: str, method: str, **params: Any) -> Any:
        got = self.call(ws, method, **params)
        assert "result" in got, got
        return got["result"]

    def log(self, ws: str) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.ok(ws, "audit.read", **{"from": ALICE})["entries"]
        return entries

    def until(self, ws: str, seen: Any, what: str) -> list[dict[str, Any]]:
        """Poll the log (reads only) until `seen(entries)`; bounded."""
        deadline = time.monotonic() + 60
        while True:
            entries = self.log(ws)
            if seen(entries):
                return entries
            assert time.monotonic() < deadline, f"no {what} within 60 s: {entries[-3:]}"
            time.sleep(0.05)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Served] = []

    def start(*options: str) -> Served:
        process = subprocess.Popen(
            [sys.executable, "-m", "coordinator", "serve", "--port", "0", "--db",
             str(tmp_path / "s.db"), "--profiles", "all", *options],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
        )
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"CHAP on (http://\S+)/chap", line)
        if not found:
            process.kill()
            raise AssertionError(f"serve did not start: {line!r} {process.communicate()[1]}")
        started.append(Served(found.group(1), process))
        return started[-1]

    yield start
    for s in started:
        s.http.close()
        s.process.terminate()
        assert s.process.wait(timeout=60) == 0


def method_of(entry: dict[str, Any]) -> str | None:
    return (entry.get("envelope") or entry.get("request") or {}).get("method")


def _work_workspace(s: Served, ws: str) -> dict[str, str]:
    s.ok(ws, "workspace.create", profiles=WHISPERING)
    s.ok(ws, "participant.join", **{"from": ALICE}, type="human", role="admin")
    s.ok(ws, "participant.join", **{"from": BOT}, type="agent", role="writer")
    tasks = [task("a", retry={"max_attempts": 3, "backoff_ms": 50}), task("b")]
    got: dict[str, str] = s.ok(ws, "x-chapline.plan.submit", **{"from": ALICE}, plan="p",
                               tasks=tasks)["tasks"]
    return got


def test_serve_reclaims_a_silent_holders_lease_and_lapses_a_whisper_without_a_call(serve: Any) -> None:
    s = serve("--sweep-interval", "0.05")
    ids = _work_workspace(s, "w1")
    got = s.ok("w1", "x-chapline.work.claim", **{"from": BOT}, task_id=ids["a"], lease_ms=200)
    assert got["outcome"] == "claimed"
    s.ok("w1", "whisper.ask", **{"from": BOT}, to=[ALICE], task_id=ids["b"], question="ok?",
         deadline_ms=200, default_if_lapsed="yes")
    # The holder goes silent; nobody writes. Only reads from here on.
    entries = s.until("w1", lambda es: any(method_of(e) == "x-chapline.work.sweep" for e in es)
                      and any(method_of(e) == "notify.message" for e in es), "sweep")
    swept = [e for e in entries if method_of(e) == "x-chapline.work.sweep"]
    assert len(swept) == 1 and swept[0]["envelope"]["params"]["from"] == "service:coordinator"
    lapses = [e for e in entries if method_of(e) == "notify.message"]
    assert len(lapses) == 1 and lapses[0]["envelope"]["params"]["kind"] == "whisper_lapsed"
    described = s.ok("w1", "x-chapline.plan.describe", **{"from": ALICE}, plan="p")["tasks"][0]
    assert described["holder"] is None and [x["outcome"] for x in described["attempts"]] == ["expired"]
    late = s.call("w1", "x-chapline.work.report", **{"from": BOT}, task_id=ids["a"],
                  token=got["token"], outcome="completed")
    assert late["error"]["code"] == -32960


def test_serve_without_a_timer_leaves_the_lease_for_the_next_write(serve: Any) -> None:
    s = serve("--sweep-interval", "0")
    ids = _work_workspace(s, "w0")
    s.ok("w0", "x-chapline.work.claim", **{"from": BOT}, task_id=ids["a"], lease_ms=1)
    before = len(s.log("w0"))
    time.sleep(0.3)  # no assertion on time: only that nothing is written without a call
    assert len(s.log("w0")) == before


def test_two_serve_workers_sweeping_one_file_record_each_decision_once(serve: Any) -> None:
    s = serve("--workers", "2", "--sweep-interval", "0.02")
    ids = _work_workspace(s, "w2")
    s.ok("w2", "participant.join", **{"from": BOT2}, type="agent", role="writer")
    s.ok("w2", "x-chapline.work.claim", **{"from": BOT}, task_id=ids["a"], lease_ms=100)
    s.ok("w2", "whisper.ask", **{"from": BOT}, to=[ALICE], task_id=ids["b"], question="ok?",
         deadline_ms=100, default_if_lapsed="yes")
    s.until("w2", lambda es: any(method_of(e) == "x-chapline.work.sweep" for e in es), "first sweep")
    # A second lease, claimed once the first was reclaimed: by the time its
    # sweep is on the log both workers have swept many times over the first.
    s.ok("w2", "x-chapline.work.claim", **{"from": BOT2}, task_id=ids["b"], lease_ms=100)
    entries = s.until("w2", lambda es: sum(method_of(e) == "x-chapline.work.sweep" for e in es) >= 2
                      and any(method_of(e) == "notify.message" for e in es), "second sweep")
    swept = [e for e in entries if method_of(e) == "x-chapline.work.sweep"]
    assert len(swept) == 2
    assert len([e for e in entries if method_of(e) == "notify.message"]) == 1
    attempts = s.ok("w2", "x-chapline.plan.describe", **{"from": ALICE}, plan="p")["tasks"]
    assert [[x["outcome"] for x in t["attempts"]] for t in attempts] == [["expired"], ["expired"]]
    assert s.ok("w2", "audit.verify_chain", **{"from": ALICE})["ok"] is True
