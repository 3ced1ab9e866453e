"""`Coordinator.sweep()` and `chapline serve --sweep-interval`: expired work
leases reclaimed and whispers lapsed without any call, written like a call
(write-ahead, under CAS), nothing written when nothing is due, nothing
recorded twice when several processes sweep one store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from client import Client, Http, refused
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from servers import LiveServer, Serve
from support import ALICE, BOT, eventually, make
from test_work import BOT2, WORK, ManualClock, claim, setup, submit, task

from coordinator import Coordinator, CounterIds, Swept, public_jwk, sign_envelope
from coordinator.cli import main
from coordinator.engine.clock import iso_ms
from coordinator.server import create_app
from coordinator.tools.replay import replay_workspace
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
    assert c.target.sweep() == [Swept(c.workspace, [ids["a"]], [])]
    (entry,) = sweeps(c)
    assert entry["envelope"]["params"] == {"workspace": c.workspace, "from": "service:coordinator"}
    assert entry["arrived"] == iso_ms(clock.now)  # the coordinator's clock
    described = {t["key"]: t for t in c.ok("x-chapline.plan.describe", plan="p")["tasks"]}
    assert described["a"]["holder"] is None and described["a"]["status"] == "retry"
    assert [x["outcome"] for x in described["a"]["attempts"]] == ["expired"]
    assert described["b"]["holder"] == BOT2  # its lease runs on
    # The old holder's token is stale, as after a write's own reclaim.
    c.fail(-32960, "x-chapline.work.heartbeat", frm=BOT, task_id=ids["a"], token=first["token"])
    count = len(c.log())
    assert c.target.sweep() == []  # already done: nothing more
    assert len(c.log()) == count
    assert c.ok("audit.verify_chain")["ok"] is True


def test_a_sweep_lapses_overdue_whispers() -> None:
    c, clock = setup()
    c = Client(c.target, "wsp_w")
    c.ok("workspace.create", profiles=WHISPERING)
    c.ok("participant.join", frm=ALICE, type="human", role="admin")
    c.ok("participant.join", frm=BOT, type="agent", role="writer")
    tid = submit(c, [task("a")])["a"]
    wid = c.ok("whisper.ask", frm=BOT, to=[ALICE], task_id=tid, question="ok?",
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
    c.ok("control.pause", frm=ALICE, scope="workspace")
    clock.now += 5_000
    count = len(c.log())
    assert c.target.sweep() == []
    assert len(c.log()) == count
    c.ok("control.resume", frm=ALICE, scope="workspace")
    assert c.target.sweep() == [Swept(c.workspace, [ids["a"]], [])]


def test_a_sweep_needs_no_signature_where_every_call_must_be_signed() -> None:
    key = Ed25519PrivateKey.generate()
    clock = ManualClock()
    coord = Coordinator(clock=clock, ids=CounterIds(), require_signatures=True)
    n = iter(range(1000))

    def send(method: str, sign: bool = True, **params: Any) -> Any:
        envelope = {"jsonrpc": "2.0", "id": next(n), "method": method, "params": {"workspace": "s", **params}}
        reply = coord.dispatch(sign_envelope(envelope, key, "bot-1") if sign else envelope)
        assert "result" in reply, reply
        return reply["result"]

    send("workspace.create", sign=False, profiles=WORK)
    send("participant.join", sign=False, **{"from": BOT}, type="agent", role="writer",
         jwks={"keys": [public_jwk(key, "bot-1")]})
    tid = send("x-chapline.plan.submit", **{"from": BOT}, plan="p", tasks=[task("a")])["tasks"]["a"]
    send("x-chapline.work.claim", **{"from": BOT}, task_id=tid, lease_ms=1_000)
    clock.now += 1_000
    assert coord.sweep() == [Swept("s", [tid], [])]


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
    assert c.target.sweep() == [Swept(c.workspace, [ids["a"]], [])]
    count = len(c.log())
    # `other` still holds the claim in memory; its write conflicts, it
    # reloads, finds the lease reclaimed, and writes nothing.
    assert other.sweep() == []
    other.close()
    c.target.close()
    again = Client(Coordinator(SqliteStore(path), clock=clock), c.workspace)
    assert len(again.log()) == count
    assert len([e for e in again.log() if e.get("envelope", {}).get("method") == "x-chapline.work.sweep"]) == 1
    again.target.close()


def test_the_log_replays_a_sweep(tmp_path: Path) -> None:
    c, clock = setup()
    ids = submit(c, [task("a"), task("b")], [{"from": "a", "to": "b"}])
    claim(c, BOT, ids["a"], lease_ms=1_000)
    clock.now += 1_000
    c.target.sweep()
    snap = c.target.snapshot(c.workspace)
    meta = {k: v for k, v in snap.items() if not isinstance(v, dict) or k == "meta"}
    objects = {k: v for k, v in snap.items() if isinstance(v, dict) and k != "audit"}
    assert replay_workspace(meta, snap["audit"], objects) == []


# -- chapline serve ----------------------------------------------------------------


Start = Callable[..., httpx.Client]  # serve(*options): a client of a new server


def entries_of(w: Client) -> list[dict[str, Any]]:
    return w.log(frm=ALICE)


def until(w: Client, seen: Any, what: str) -> list[dict[str, Any]]:
    """The log, read (reads only) until `seen(entries)`."""

    def check() -> list[dict[str, Any]] | None:
        entries = entries_of(w)
        return entries if seen(entries) else None

    return eventually(check, what)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Start]:
    """Starts `chapline serve --profiles all OPTIONS...` on one file; each
    must stop cleanly (exit 0) at the end."""
    started: list[tuple[Serve, httpx.Client]] = []

    def start(*options: str) -> httpx.Client:
        server = Serve(tmp_path / "s.db", "--profiles", "all", *options)
        started.append((server, httpx.Client(base_url=server.base, timeout=30)))
        return started[-1][1]

    yield start
    for server, http in started:
        http.close()
        code, err = server.stop()
        assert code == 0, err


def method_of(entry: dict[str, Any]) -> str | None:
    return (entry.get("envelope") or entry.get("request") or {}).get("method")


def _work_workspace(s: Client) -> dict[str, str]:
    s.ok("workspace.create", profiles=WHISPERING)
    s.ok("participant.join", frm=ALICE, type="human", role="admin")
    s.ok("participant.join", frm=BOT, type="agent", role="writer")
    tasks = [task("a", retry={"max_attempts": 3, "backoff_ms": 50}), task("b")]
    got: dict[str, str] = s.ok("x-chapline.plan.submit", frm=ALICE, plan="p",
                               tasks=tasks)["tasks"]
    return got


def test_serve_reclaims_a_silent_holders_lease_and_lapses_a_whisper_without_a_call(serve: Start) -> None:
    s = Client(Http(serve("--sweep-interval", "0.05")), "w1")
    ids = _work_workspace(s)
    got = s.ok("x-chapline.work.claim", frm=BOT, task_id=ids["a"], lease_ms=200)
    assert got["outcome"] == "claimed"
    s.ok("whisper.ask", frm=BOT, to=[ALICE], task_id=ids["b"], question="ok?",
         deadline_ms=200, default_if_lapsed="yes")
    # The holder goes silent; nobody writes. Only reads from here on.
    entries = until(s, lambda es: any(method_of(e) == "x-chapline.work.sweep" for e in es)
                      and any(method_of(e) == "notify.message" for e in es), "sweep")
    swept = [e for e in entries if method_of(e) == "x-chapline.work.sweep"]
    assert len(swept) == 1 and swept[0]["envelope"]["params"]["from"] == "service:coordinator"
    lapses = [e for e in entries if method_of(e) == "notify.message"]
    assert len(lapses) == 1 and lapses[0]["envelope"]["params"]["kind"] == "whisper_lapsed"
    described = s.ok("x-chapline.plan.describe", frm=ALICE, plan="p")["tasks"][0]
    assert described["holder"] is None and [x["outcome"] for x in described["attempts"]] == ["expired"]
    late = s.call("x-chapline.work.report", frm=BOT, task_id=ids["a"],
                  token=got["token"], outcome="completed")
    refused(late, -32960)


def test_serve_without_a_timer_leaves_the_lease_for_the_next_write() -> None:
    """The app `serve --sweep-interval 0` runs, on a coordinator whose clock
    the test drives: a minute past the lease, reads write nothing; the next
    write reclaims the lease in its own entry, with no sweep entry."""
    clock = ManualClock()
    coord = make(clock=clock)
    live = LiveServer(create_app(coord, sweep_interval=0))
    try:
        with httpx.Client(base_url=live.url, timeout=30) as http:
            s = Client(Http(http), "w0")
            ids = _work_workspace(s)
            s.ok("x-chapline.work.claim", frm=BOT, task_id=ids["a"], lease_ms=1)
            before = len(entries_of(s))
            clock.now += 60_000
            assert len(entries_of(s)) == before
            s.ok("x-chapline.work.claim", frm=BOT, task_id=ids["b"])
            entries = entries_of(s)
            assert len(entries) == before + 1
            assert not any(method_of(e) == "x-chapline.work.sweep" for e in entries)
            reclaimed = s.ok("x-chapline.plan.describe", frm=ALICE, plan="p")["tasks"][0]
            assert reclaimed["holder"] is None and [x["outcome"] for x in reclaimed["attempts"]] == ["expired"]
    finally:
        live.stop()
        coord.close()


def test_two_serve_workers_sweeping_one_file_record_each_decision_once(serve: Start) -> None:
    s = Client(Http(serve("--workers", "2", "--sweep-interval", "0.02")), "w2")
    ids = _work_workspace(s)
    s.ok("participant.join", frm=BOT2, type="agent", role="writer")
    s.ok("x-chapline.work.claim", frm=BOT, task_id=ids["a"], lease_ms=100)
    s.ok("whisper.ask", frm=BOT, to=[ALICE], task_id=ids["b"], question="ok?",
         deadline_ms=100, default_if_lapsed="yes")
    until(s, lambda es: any(method_of(e) == "x-chapline.work.sweep" for e in es), "first sweep")
    # A second lease, claimed once the first was reclaimed: by the time its
    # sweep is on the log both workers have swept many times over the first.
    s.ok("x-chapline.work.claim", frm=BOT2, task_id=ids["b"], lease_ms=100)
    entries = until(s, lambda es: sum(method_of(e) == "x-chapline.work.sweep" for e in es) >= 2
                      and any(method_of(e) == "notify.message" for e in es), "second sweep")
    swept = [e for e in entries if method_of(e) == "x-chapline.work.sweep"]
    assert len(swept) == 2
    assert len([e for e in entries if method_of(e) == "notify.message"]) == 1
    attempts = s.ok("x-chapline.plan.describe", frm=ALICE, plan="p")["tasks"]
    assert [[x["outcome"] for x in t["attempts"]] for t in attempts] == [["expired"], ["expired"]]
    assert s.ok("audit.verify_chain", frm=ALICE)["ok"] is True


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_sweep_interval_that_is_not_a_duration_is_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--db", ":memory:", "--port", "0", "--sweep-interval", value]) == 2
    assert "--sweep-interval must be 0 (no timer) or a number of seconds" in capsys.readouterr().err
