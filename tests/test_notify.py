"""Notifications (coordinator/notify/): reviews, escalations and whispers
reach the people they are addressed to by webhook, Slack format and e-mail.

Oracles: who each notice is for comes from the scenario itself (who the
test asked to review, whom it escalated to, whom it asked), never from the
projection; webhook signatures are checked by the receiver with hmac
(tests/notify_receivers.py), e-mail by a real SMTP server (aiosmtpd); what
was delivered is read at the receivers. Real SQLite files throughout.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from client import Client, Http
from notify_receivers import Delivery, SmtpReceiver, WebhookReceiver
from servers import Serve, env
from support import eventually

from coordinator import Coordinator
from coordinator.notify import (
    MAX_ATTEMPTS,
    Deliverer,
    NotificationProjection,
    NotifyError,
    Outcome,
    Subscriptions,
    sign,
    verify_signature,
)
from storage.target import open_store

WS = "wsp_n"
ALICE, BOB, CAROL, DAVE, BOT = "human:alice", "human:bob", "human:carol", "human:dave", "agent:bot"
SECRET = "whsec_test_secret"
PROFILES = ("core/1.0", "review/1.0", "whisper/1.0")
DESK = "http://desk.example:8080/"
TYPES = {"review": "review.requested", "escalation": "escalation.raised", "whisper": "whisper.asked"}


class Clock:
    """Seconds since the epoch, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    r = WebhookReceiver(SECRET, fail_first=2)
    yield r
    if r.server is not None:
        r.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store and the notification tables in one database: a SQLite
    file, or a database on the suite's PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "chap.db")
    pg = request.getfixturevalue("pg_server")
    return str(pg.uri(pg.new_database()))


@pytest.fixture
def smtp() -> Iterator[SmtpReceiver]:
    s = SmtpReceiver()
    yield s
    s.stop()


def _members(c: Client) -> None:
    c.ok("workspace.create", profiles=list(PROFILES))
    c.ok("participant.join", frm=ALICE, type="human", role="admin")
    c.ok("participant.join", frm=BOB, type="human", role="reviewer")
    c.ok("participant.join", frm=CAROL, type="human", role="reviewer")
    c.ok("participant.join", frm=BOT, type="agent", role="drafter")


def _scenario(c: Client) -> dict[str, tuple[str, str, list[str]]]:
    """Calls that address people; what each should tell whom, by the task
    its notice names: {label: (kind, task_id, to)}."""
    t1 = c.ok("task.create", frm=ALICE, assignee=BOT, kind="report", input={}, review_required=True)["task_id"]
    c.ok("task.update", frm=BOT, task_id=t1, state="in_progress")
    # task.complete opens the review for every human but the caller and the assignee
    c.ok("task.complete", frm=BOT, task_id=t1, output={"body": "Quarterly summary\nRevenue up."})
    t2 = c.ok("task.create", frm=ALICE, assignee=BOT, kind="config", input={})["task_id"]
    c.ok("task.update", frm=BOT, task_id=t2, state="in_progress")
    c.ok("review.request", frm=BOT, task_id=t2, to=["group:reviewer"], summary="Raise rpm to 300",
         artefact={"rpm": 300})
    escalated = c.ok("escalate.raise", frm=ALICE, original_task_id=t1,
                     context="needs legal review", new_task={"assignee": CAROL, "input": {}})
    c.ok("whisper.ask", frm=ALICE, to=[BOB], task_id=t2, question="Is rpm 300 safe?",
         deadline_ms=600_000, default_if_lapsed="no")
    return {
        "review t1": ("review", t1, [ALICE, BOB, CAROL]),
        "review t2": ("review", t2, ["group:reviewer"]),
        "escalation": ("escalation", escalated["new_task_id"], [CAROL]),
        "whisper": ("whisper", t2, [BOB]),
    }


def _deliver_all(deliverer: Deliverer, clock: Clock, done: Any, rounds: int = 40) -> None:
    """Deliver what is due, moving the clock past each backoff, until `done()`."""
    for _ in range(rounds):
        deliverer.deliver_due()
        if done():
            return
        clock.now += 120
    raise AssertionError("the outbox did not drain")


def test_every_notice_reaches_its_webhooks_signed_once_per_key(database: str, receiver: WebhookReceiver) -> None:
    db = database
    clock = Clock()
    subs = Subscriptions(db, clock=clock)
    subs.add_webhook(WS, receiver.url + "/all", secret=SECRET)
    subs.add_webhook(WS, receiver.url + "/slack", format="slack", kinds=["escalation"], secret=SECRET)
    subs.add_webhook("wsp_other", receiver.url + "/elsewhere", secret=SECRET)
    expected = _recorded(db, clock, desk_url=DESK)
    deliverer = Deliverer(db, clock=clock)
    try:
        _deliver_all(deliverer, clock, lambda: len(receiver.deliveries) >= 5)
        deliverer.deliver_due()
    finally:
        deliverer.stop()

    assert all(d.signed for d in receiver.deliveries)
    by_path: dict[str, list[dict[str, Any]]] = {}
    for d in receiver.deliveries:
        by_path.setdefault(d.path, []).append(json.loads(d.body))
    assert set(by_path) == {"/all", "/slack"}  # nothing for the other workspace's subscription
    told = {(b["type"], b["task_id"], tuple(b["to"])) for b in by_path["/all"]}
    assert told == {(TYPES[k], t, tuple(to)) for k, t, to in expected.values()}
    assert len(by_path["/all"]) == 4 == len({d.key for d in receiver.deliveries if d.path == "/all"})
    for body in by_path["/all"]:
        assert body["link"] == f"{DESK}#/w/{WS}/review/{body['task_id']}"
        assert body["workspace"] == WS and body["from"] in (ALICE, BOT)
    t1_review = next(b for b in by_path["/all"] if b["type"] == "review.requested" and len(b["to"]) == 3)
    assert t1_review["title"] == "Review: Quarterly summary"
    [slack] = by_path["/slack"]
    assert set(slack) == {"text"} and "Escalated to you: needs legal review" in slack["text"]
    assert f"<{DESK}#/w/{WS}/review/{expected['escalation'][1]}|Open it in the desk>" in slack["text"]


@contextlib.contextmanager
def notifying(db: str, clock: Clock | None = None, *, desk_url: str | None = None, outbox: str | None = None,
              page_size: int = 1000) -> Iterator[Coordinator]:
    """A coordinator on `db` feeding the notifications projection of `outbox`
    (`db` itself unless given), closed at the end."""
    coord = Coordinator(open_store(db), default_profiles=PROFILES)
    try:
        coord.attach(NotificationProjection(outbox or db, desk_url=desk_url, clock=clock or time.time),
                     page_size=page_size)
        yield coord
    finally:
        coord.close()


def _recorded(db: str, clock: Clock | None = None, *, desk_url: str | None = None) -> dict[str, tuple[str, str, list[str]]]:
    """The members and `_scenario`, recorded with the projection attached."""
    with notifying(db, clock, desk_url=desk_url) as coord:
        c = Client(coord, WS)
        _members(c)
        return _scenario(c)


def _deliver(outbox: str, clock: Clock) -> None:
    """One round of delivering what is due in `outbox`."""
    deliverer = Deliverer(outbox, clock=clock)
    try:
        deliverer.deliver_due()
    finally:
        deliverer.stop()


def test_failed_deliveries_are_retried_with_backoff_and_logged(database: str, receiver: WebhookReceiver) -> None:
    db = database
    clock = Clock()
    Subscriptions(db, clock=clock).add_webhook(WS, receiver.url + "/all", secret=SECRET, kinds=["whisper"])
    _recorded(db, clock)
    deliverer = Deliverer(db, clock=clock)
    try:
        assert deliverer.deliver_due() == 1  # the receiver answers 500
        assert deliverer.deliver_due() == 0  # not due again before its backoff
        clock.now += 1.0
        assert deliverer.deliver_due() == 1  # 500 again
        clock.now += 1.9
        assert deliverer.deliver_due() == 0  # the second backoff is 2 s
        clock.now += 0.1
        assert deliverer.deliver_due() == 1
        rows = deliverer.db.execute("SELECT attempt, ok, outcome FROM notify_attempts ORDER BY attempt")
        state = deliverer.db.execute("SELECT state, attempts FROM notify_outbox")
    finally:
        deliverer.stop()
    assert [tuple(r) for r in rows] == [(1, 0, "HTTP 500"), (2, 0, "HTTP 500"), (3, 1, "HTTP 204")]
    assert [tuple(r) for r in state] == [("delivered", 3)]
    assert len(receiver.deliveries) == 1 and receiver.deliveries[0].signed


def test_the_attempt_hook_follows_each_record_and_its_failure_stops_nothing(
    tmp_path: Path, receiver: WebhookReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    """`on_attempt` (what serve counts deliveries with) is told each outcome
    once its attempt is in the delivery log; a hook that raises is logged
    and the outbox still drains."""
    db = str(tmp_path / "chap.db")
    clock = Clock()
    receiver.fail_first = 1
    subs = Subscriptions(db, clock=clock)
    for path in ("/a", "/b"):
        subs.add_webhook(WS, receiver.url + path, secret=SECRET, kinds=["whisper"])
    _recorded(db, clock)
    told: list[tuple[bool, int]] = []

    def hook(outcome: Outcome) -> None:
        with contextlib.closing(sqlite3.connect(db)) as conn:  # what another reader sees committed
            [(recorded,)] = conn.execute("SELECT count(*) FROM notify_attempts").fetchall()
        told.append((outcome.ok, recorded))
        raise RuntimeError("the observer is broken")

    deliverer = Deliverer(db, clock=clock, on_attempt=hook)
    try:
        with caplog.at_level(logging.ERROR, logger="chapline"):
            assert deliverer.deliver_due() == 2  # the first request answered 500
            clock.now += 1.0
            assert deliverer.deliver_due() == 1
        states = [state for (state,) in deliverer.db.execute("SELECT state FROM notify_outbox")]
    finally:
        deliverer.stop()
    assert told == [(False, 1), (True, 2), (True, 3)]
    assert states == ["delivered", "delivered"]
    assert [r.getMessage() for r in caplog.records] == ["notifications: the attempt hook failed"] * 3


@pytest.mark.parametrize("answer", [302, 307, 404, 429])
def test_an_answer_other_than_2xx_is_a_failure_and_no_redirect_is_followed(
    tmp_path: Path, receiver: WebhookReceiver, answer: int
) -> None:
    db = str(tmp_path / "chap.db")
    clock = Clock()
    receiver.fail_first, receiver.answer = 0, answer
    Subscriptions(db, clock=clock).add_webhook(WS, receiver.url + "/hook", secret=SECRET, kinds=["whisper"])
    _recorded(db, clock)
    deliverer = Deliverer(db, clock=clock)
    try:
        assert deliverer.deliver_due() == 1
        [(ok, outcome)] = deliverer.db.execute("SELECT ok, outcome FROM notify_attempts")
        [(state,)] = deliverer.db.execute("SELECT state FROM notify_outbox")
    finally:
        deliverer.stop()
    assert (ok, outcome, state) == (0, f"HTTP {answer}", "pending")
    assert receiver.paths == ["/hook"]


def test_a_receiver_that_never_answers_is_given_up_on(tmp_path: Path, receiver: WebhookReceiver) -> None:
    db = str(tmp_path / "chap.db")
    clock = Clock()
    receiver.stop()  # nothing listens at its address any more
    Subscriptions(db, clock=clock).add_webhook(WS, receiver.url, secret=SECRET, kinds=["whisper"])
    _recorded(db, clock)
    deliverer = Deliverer(db, clock=clock)
    try:
        for _ in range(MAX_ATTEMPTS + 3):
            deliverer.deliver_due()
            clock.now += 4000  # past the longest backoff
        attempts = deliverer.db.execute("SELECT ok, outcome FROM notify_attempts")
        state = deliverer.db.execute("SELECT state, attempts, last_error FROM notify_outbox")
    finally:
        deliverer.stop()
    assert len(attempts) == MAX_ATTEMPTS and not any(ok for ok, _ in attempts)
    assert all("Connection refused" in outcome for _, outcome in attempts)
    [(status, count, error)] = state
    assert (status, count) == ("failed", MAX_ATTEMPTS) and "Connection refused" in error


def test_email_reaches_the_named_the_role_and_not_the_others(tmp_path: Path, smtp: SmtpReceiver) -> None:
    db = str(tmp_path / "chap.db")
    clock = Clock()
    subs = Subscriptions(db, clock=clock)
    for person in (ALICE, BOB, CAROL, DAVE):
        name = person.split(":")[1]
        subs.add_email(WS, f"{name}@example.org", person, smtp=smtp.url, mail_from="desk@example.org")
    expected = _recorded(db, clock, desk_url=DESK)
    _deliver(db, clock)

    # Who should hear of what, from the scenario: named people directly;
    # group:reviewer is bob and carol (their roles); dave never joined.
    should = {
        "alice@example.org": {"review t1"},
        "bob@example.org": {"review t1", "review t2", "whisper"},
        "carol@example.org": {"review t1", "review t2", "escalation"},
    }
    got: dict[str, set[str]] = {}
    for message in smtp.messages:
        assert message["From"] == "desk@example.org"
        text = message.get_payload(decode=True).decode().replace("\r\n", "\n")
        assert message["Subject"].startswith(f"[{WS}] ")
        label = next(label for label, (kind, task, _) in expected.items()
                     if f"{TYPES[kind]} in workspace {WS}, task {task}\n" in text)
        assert f"Open it in the desk: {DESK}#/w/{WS}/review/{expected[label][1]}" in text
        got.setdefault(str(message["To"]), set()).add(label)
    assert got == should
    assert len({m["Message-ID"] for m in smtp.messages}) == len(smtp.messages) == 7


def test_a_restart_announces_only_what_is_still_open(database: str, receiver: WebhookReceiver) -> None:
    """Calls recorded while no projection ran: attaching it later catches
    up from the log, telling the open review and whisper, not the review
    decided nor the whisper answered meanwhile."""
    db = database
    clock = Clock()
    coord = Coordinator(open_store(db), default_profiles=PROFILES)
    c = Client(coord, WS)
    _members(c)
    tasks = []
    for n in range(3):
        t = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={})["task_id"]
        c.ok("task.update", frm=BOT, task_id=t, state="in_progress")
        c.ok("review.request", frm=BOT, task_id=t, to=[BOB], artefact={"n": n})
        tasks.append(t)
    c.ok("decide.approve", frm=BOB, task_id=tasks[0])
    # a review decided by revision and opened again: only its new pass is open
    c.ok("decide.reject", frm=BOB, task_id=tasks[1], reason="shorter", request_revision=True)
    c.ok("review.request", frm=BOT, task_id=tasks[1], to=[CAROL], artefact={"n": "1b"})
    asked = c.ok("whisper.ask", frm=ALICE, to=[BOB], task_id=tasks[2], question="q1?", deadline_ms=600_000,
                 default_if_lapsed="no")
    c.ok("whisper.answer", frm=BOB, whisper_id=asked["whisper_id"], answer="yes")
    c.ok("whisper.ask", frm=ALICE, to=[CAROL], task_id=tasks[2], question="q2?", deadline_ms=600_000,
         default_if_lapsed="no")
    coord.close()

    Subscriptions(db, clock=clock).add_webhook(WS, receiver.url, secret=SECRET)
    receiver.fail_first = 0
    with notifying(db, clock, page_size=4):  # catching up in several pages
        pass
    _deliver(db, clock)
    told = sorted((json.loads(d.body)["type"], json.loads(d.body)["task_id"], tuple(json.loads(d.body)["to"]))
                  for d in receiver.deliveries)
    assert told == sorted([
        ("review.requested", tasks[1], (CAROL,)),
        ("review.requested", tasks[2], (BOB,)),
        ("whisper.asked", tasks[2], (CAROL,)),
    ])


def test_signatures_fail_for_another_body_secret_or_an_old_time() -> None:
    body = b'{"id":"ntc_1"}'
    header = sign(SECRET, body, 1_800_000_000)
    assert verify_signature(SECRET, header, body, now=1_800_000_100)
    assert not verify_signature(SECRET, header, body + b" ", now=1_800_000_100)
    assert not verify_signature("whsec_other", header, body, now=1_800_000_100)
    assert not verify_signature(SECRET, header, body, now=1_800_000_000 + 301)
    assert not verify_signature(SECRET, "v1=" + header.split("v1=")[1], body, now=1_800_000_000)
    assert not verify_signature(SECRET, "garbage", body, now=1_800_000_000)
    assert not verify_signature(SECRET, "t=1800000000,v1=é", body, now=1_800_000_000)


@pytest.mark.parametrize(("call", "message"), [
    (lambda s: s.add_webhook(WS, "ftp://example.org/hook"), "http:// or https://"),
    (lambda s: s.add_webhook(WS, "https://example.org/hook", format="xml"), "json or slack"),
    (lambda s: s.add_webhook(WS, "https://example.org/hook", kinds=["reviews"]), "kinds are among"),
    (lambda s: s.add_webhook("", "https://example.org/hook"), "name a workspace"),
    (lambda s: s.add_email(WS, "alice", ALICE, smtp="smtp://localhost"), "not an e-mail address"),
    (lambda s: s.add_email(WS, "a@example.org\r\nBcc: x@y", ALICE, smtp="smtp://localhost"), "not an e-mail"),
    (lambda s: s.add_email(WS, "a@example.org", "alice", smtp="smtp://localhost"), "a URI"),
    (lambda s: s.add_email(WS, "a@example.org", ALICE, smtp="localhost:25"), "smtp://HOST"),
    (lambda s: s.add_webhook(WS, "http://[::1"), "cannot be read"),
    (lambda s: s.add_webhook(WS, "https://example.org:99999/hook"), "cannot be read"),
    (lambda s: s.add_webhook(WS, "https://example.org/ho\x00ok"), "control character"),
    (lambda s: s.add_email(WS, "a@example.org", ALICE, smtp="smtp://localhost",
                           mail_from="x@y\r\nBcc: z@w"), "not a From address"),
    (lambda s: s.remove("sub_missing"), "no subscription"),
])
def test_a_subscription_that_cannot_work_is_refused_with_the_reason(
    tmp_path: Path, call: Any, message: str
) -> None:
    subs = Subscriptions(str(tmp_path / "n.db"))
    try:
        with pytest.raises(NotifyError, match=message):
            call(subs)
        assert subs.all() == []
    finally:
        subs.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coordinator", "notify", *args],
                          capture_output=True, text=True, env=env(), timeout=120)


def test_the_cli_adds_lists_tests_and_removes(tmp_path: Path, receiver: WebhookReceiver) -> None:
    db = str(tmp_path / "chap.db")
    receiver.fail_first = 0
    added = _cli("add-webhook", receiver.url + "/hook", "--workspace", WS, "--format", "slack", "--db", db)
    assert added.returncode == 0, added.stderr
    sub_id = added.stdout.strip()
    secret = added.stderr.split("(shown once): ")[1].strip()
    assert secret.startswith("whsec_") and secret not in _cli("list", "--db", db).stdout
    assert _cli("list", "--db", db).stdout.startswith(f"{sub_id}  slack {receiver.url}/hook")

    receiver.secret = secret
    tested = _cli("test", sub_id, "--db", db)
    assert tested.returncode == 0 and "delivered (HTTP 204)" in tested.stderr
    [delivery] = receiver.deliveries
    assert delivery.signed and "test notification" in json.loads(delivery.body)["text"]

    receiver.stop()
    assert _cli("test", sub_id, "--db", db).returncode == 1
    bad = _cli("add-webhook", "hook", "--workspace", WS, "--db", db)
    assert bad.returncode == 2 and "http:// or https://" in bad.stderr and "Traceback" not in bad.stderr
    assert _cli("remove", sub_id, "--db", db).returncode == 0
    assert _cli("list", "--db", db).stdout == ""
    gone = _cli("remove", sub_id, "--db", db)
    assert gone.returncode == 1 and "no subscription" in gone.stderr
    missing = _cli("list", "--db", str(tmp_path / "nope.db"))
    assert missing.returncode == 1 and "no such database file" in missing.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_delivers_every_notice_through_a_killed_receiver_and_a_killed_server(
    tmp_path: Path, workers: str
) -> None:
    """`serve --projection notifications=DB`: the receiver fails its first
    deliveries, is stopped mid-run and started again; the server is
    SIGKILLed mid-run and restarted. Every review arrives, signed, and
    every delivery of one notice carries the same key and the same body.
    With two workers, each runs the projection and a deliverer on the one
    database: no notice is sent twice while both are up."""
    db = tmp_path / "chap.db"
    receiver = WebhookReceiver(SECRET, fail_first=3)
    added = _cli("add-webhook", receiver.url + "/hook", "--workspace", WS, "--secret", SECRET, "--db", str(db))
    assert added.returncode == 0, added.stderr
    asked: list[str] = []

    def reviews(server: Serve, count: int) -> None:
        with httpx.Client(base_url=server.base, timeout=60) as http:
            c = Client(Http(http), WS)
            if not asked:
                _members(c)
            for _ in range(count):
                t = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={})["task_id"]
                c.ok("task.update", frm=BOT, task_id=t, state="in_progress")
                c.ok("review.request", frm=BOT, task_id=t, to=[BOB], artefact={"n": len(asked)})
                asked.append(t)

    options = ("--projection", f"notifications={db}", "--workers", workers,
               "--desk-url", "https://desk.example.org/")
    first = Serve(db, *options)
    try:
        reviews(first, 8)
        eventually(lambda: len(receiver.keys()) >= 2, "deliveries past the receiver's failures")
        receiver.stop()
        reviews(first, 8)
    finally:
        first.stop(signal.SIGKILL)
    # A kill that lands during a send leaves that row claimed for the lease
    # (300 s): end it as its passing would, so the wait below need not outlast
    # it. Rows waiting out a backoff wait far less than 200 s here.
    now = time.time()
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE notify_outbox SET next_at = ? WHERE state = 'pending' AND next_at > ?", (now, now + 200))
    receiver.start()
    with Serve(db, *options) as second:
        reviews(second, 4)
        eventually(lambda: len(receiver.keys()) == 20, "every notice at the receiver", timeout=150)
    receiver.stop()

    bodies: dict[str, set[bytes]] = {}
    for d in receiver.deliveries:
        assert d.signed and d.path == "/hook"
        bodies.setdefault(d.key, set()).add(d.body)
    assert all(len(same) == 1 for same in bodies.values())  # a resend is the same notice
    # Nothing was sent twice: the kill came while the receiver was down (no
    # delivery between an answer and its record), and two deliverers never
    # claim one row.
    assert len(receiver.deliveries) == len(bodies)
    told = sorted((json.loads(b)["task_id"], tuple(json.loads(b)["to"])) for [b] in map(list, bodies.values()))
    for [body] in map(list, bodies.values()):
        notice = json.loads(body)
        assert notice["link"] == f"https://desk.example.org/#/w/{WS}/review/{notice['task_id']}"
    assert told == sorted((t, (BOB,)) for t in asked)
    log = _cli("deliveries", "--db", str(db), "--limit", "1000")
    assert log.returncode == 0 and "failed: HTTP 500" in log.stdout and log.stdout.count(" ok: HTTP 204") >= 20


def test_a_notice_sent_but_not_recorded_before_a_crash_is_sent_again_with_its_key(tmp_path: Path) -> None:
    """The window at-least-once delivery is for: the receiver has a notice
    and answers 2xx, but the server dies (SIGKILLed by the receiver itself,
    before its answer) before it records the delivery. A server restarted on
    the database sends that notice again, same key and same body, so that
    the receiver, deduplicating by key, has every notice exactly once; the
    delivery log has it delivered once acknowledged, and nothing else is
    sent twice. The crash leaves the row claimed for the claim's lease (300 s
    of wall clock, SPECIFICATION.md, "Notifications"): the test ends the
    lease, as its passing would, instead of waiting five minutes."""
    db = tmp_path / "chap.db"
    receiver = WebhookReceiver(SECRET)
    added = _cli("add-webhook", receiver.url + "/hook", "--workspace", WS, "--secret", SECRET, "--db", str(db))
    assert added.returncode == 0, added.stderr
    sub_id = added.stdout.strip()
    # Asked before any server runs: the first server decides these notices as
    # it catches up, so no call of the test is in flight when it is killed.
    expected: set[tuple[str, str, tuple[str, ...]]] = set()  # (type, task, to)
    coord = Coordinator(open_store(str(db)), default_profiles=PROFILES)
    try:
        c = Client(coord, WS)
        _members(c)
        for n in range(3):
            t = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={})["task_id"]
            c.ok("task.update", frm=BOT, task_id=t, state="in_progress")
            c.ok("review.request", frm=BOT, task_id=t, to=[BOB], artefact={"n": n})
            expected.add(("review.requested", t, (BOB,)))
        c.ok("whisper.ask", frm=ALICE, to=[CAROL], task_id=t, question="Ship it?", deadline_ms=600_000,
             default_if_lapsed="no")
        expected.add(("whisper.asked", t, (CAROL,)))
    finally:
        coord.close()

    options = ("--projection", f"notifications={db}", "--desk-url", DESK)
    started = threading.Event()
    servers: list[Serve] = []
    crashed: list[Delivery] = []

    def crash(delivery: Delivery) -> None:
        """The first delivery: its sender killed before it hears the answer."""
        if crashed:
            return
        crashed.append(delivery)
        assert started.wait(60), "serve did not start"
        servers[0].proc.kill()
        servers[0].proc.wait()

    receiver.before_answer = crash
    try:
        first = Serve(db, *options)
        servers.append(first)
        started.set()
        try:
            eventually(lambda: crashed and first.proc.returncode is not None, "the server killed mid-delivery")
        finally:
            first.stop(signal.SIGKILL)  # reaped already, unless the wait above failed
        receiver.before_answer = None
        assert first.proc.returncode == -signal.SIGKILL
        [sent] = crashed
        assert receiver.requests == 1  # one delivery at a time: nothing else was sent

        with contextlib.closing(sqlite3.connect(db)) as conn:
            outbox = {notice: (state, attempts, next_at) for notice, sub, state, attempts, next_at in conn.execute(
                "SELECT notice, subscription, state, attempts, next_at FROM notify_outbox") if sub == sub_id}
            # Claimed (its attempt counted, held for the lease), never recorded:
            # the server died between the receiver's 2xx and its record.
            assert len(outbox) == len(expected) and sent.key in outbox
            state, attempts, lease_end = outbox[sent.key]
            assert (state, attempts) == ("pending", 1) and lease_end > time.time() + 60
            assert {key: row[:2] for key, row in outbox.items() if key != sent.key} == {
                key: ("pending", 0) for key in outbox if key != sent.key}
            assert conn.execute("SELECT count(*) FROM notify_attempts").fetchone() == (0,)
            with conn:  # the lease over, as 300 s would end it
                ended = conn.execute("UPDATE notify_outbox SET next_at = ? WHERE notice = ? AND subscription = ?",
                                     (time.time(), sent.key, sub_id))
                assert ended.rowcount == 1

        def all_recorded() -> bool:
            with contextlib.closing(sqlite3.connect(db)) as conn:
                [(delivered,)] = conn.execute("SELECT count(*) FROM notify_outbox WHERE state = 'delivered'")
            return bool(delivered == len(expected))

        with Serve(db, *options) as second:
            with httpx.Client(base_url=second.base, timeout=60) as http:  # and a live one, after the restart
                c = Client(Http(http), WS)
                t = c.ok("task.create", frm=ALICE, assignee=BOT, kind="k", input={})["task_id"]
                c.ok("task.update", frm=BOT, task_id=t, state="in_progress")
                c.ok("review.request", frm=BOT, task_id=t, to=[CAROL], artefact={"n": "live"})
                expected.add(("review.requested", t, (CAROL,)))
            eventually(all_recorded, "every notice delivered and recorded")
    finally:
        if receiver.server is not None:
            receiver.stop()

    # At the receiver: the killed delivery's notice twice, same key and body;
    # every other once; deduplicated by key, exactly the notices asked for.
    assert receiver.requests == len(receiver.deliveries)  # every request answered 2xx
    assert all(d.signed and d.path == "/hook" for d in receiver.deliveries)
    times: dict[str, int] = {}
    bodies: dict[str, set[bytes]] = {}
    for d in receiver.deliveries:
        times[d.key] = times.get(d.key, 0) + 1
        bodies.setdefault(d.key, set()).add(d.body)
    assert times == {key: 2 if key == sent.key else 1 for key in times}
    assert all(len(same) == 1 for same in bodies.values())  # the resend is the same notice
    notices = {key: json.loads(body) for key, [body] in ((k, list(v)) for k, v in bodies.items())}
    assert all(notice["id"] == key for key, notice in notices.items())
    told = {(n["type"], n["task_id"], tuple(n["to"])) for n in notices.values()}
    assert told == expected and len(notices) == len(expected)

    # In the delivery log: each row delivered; the killed notice's first
    # attempt (the claim the crash ended) counted but without a record, its
    # second acknowledged; every other delivered on its first attempt.
    with contextlib.closing(sqlite3.connect(db)) as conn:
        outbox_rows = conn.execute("SELECT notice, subscription, state, attempts FROM notify_outbox").fetchall()
        logged = conn.execute("SELECT notice, subscription, attempt, ok, outcome FROM notify_attempts").fetchall()
    first_ok = {key: 2 if key == sent.key else 1 for key in notices}
    assert sorted(outbox_rows) == sorted((key, sub_id, "delivered", n) for key, n in first_ok.items())
    assert sorted(logged) == sorted((key, sub_id, n, 1, "HTTP 204") for key, n in first_ok.items())


def test_serve_tells_a_review_by_webhook_slack_and_email_without_the_desk(
    tmp_path: Path, smtp: SmtpReceiver
) -> None:
    """One review asked over HTTP of `chapline serve --projection
    notifications=DB` reaches its reviewer by each channel set up with
    `chapline notify`: a JSON webhook, a Slack-format one and an e-mail,
    each signed or marked with the same notice id and linking to the
    review in the desk; nobody opened the desk."""
    db = tmp_path / "chap.db"
    hook, slack = WebhookReceiver(SECRET), WebhookReceiver(SECRET)
    try:
        for url, form in ((hook.url + "/json", "json"), (slack.url + "/slack", "slack")):
            added = _cli("add-webhook", url, "--format", form, "--workspace", WS, "--secret", SECRET,
                         "--kinds", "review", "--db", str(db))
            assert added.returncode == 0, added.stderr
        added = _cli("add-email", "bob@example.org", "--for", BOB, "--smtp", smtp.url, "--workspace", WS,
                     "--kinds", "review", "--db", str(db))
        assert added.returncode == 0, added.stderr
        with Serve(db, "--projection", f"notifications={db}", "--desk-url", DESK) as served, \
                httpx.Client(base_url=served.base, timeout=60) as http:
            c = Client(Http(http), WS)
            _members(c)
            task = c.ok("task.create", frm=ALICE, assignee=BOT, kind="memo", input={})["task_id"]
            c.ok("task.update", frm=BOT, task_id=task, state="in_progress")
            c.ok("review.request", frm=BOT, task_id=task, to=[BOB], summary="Renewal terms",
                 artefact={"text": "Renewal terms for Acme\nSecond line"})
            eventually(lambda: hook.deliveries and slack.deliveries and smtp.messages, "every channel")
    finally:
        hook.stop()
        slack.stop()
    link = f"{DESK}#/w/{WS}/review/{task}"
    [json_hook], [slack_hook], [mail] = hook.deliveries, slack.deliveries, smtp.messages
    notice = json.loads(json_hook.body)
    assert json_hook.signed and slack_hook.signed
    assert (notice["type"], notice["task_id"], notice["to"], notice["link"]) == ("review.requested", task, [BOB], link)
    assert json_hook.key == slack_hook.key == mail["X-Chapline-Notice"] == notice["id"]
    text = json.loads(slack_hook.body)["text"]
    assert f"<{link}|Open it in the desk>" in text and notice["title"] in text
    assert mail["To"] == "bob@example.org" and mail["Subject"] == f"[{WS}] {notice['title']}"
    assert f"Open it in the desk: {link}" in mail.get_payload(decode=True).decode()


def test_serve_refuses_an_outbox_its_deliverer_could_not_read(tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "coordinator", "serve", "--port", "0", "--db", str(tmp_path / "chap.db"),
         "--projection", "notifications=:memory:"],
        capture_output=True, text=True, env=env(), timeout=120)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "notifications=:memory:" in refused.stderr and "postgresql://" in refused.stderr


def test_a_receiver_answering_what_is_not_http_is_a_failed_attempt(tmp_path: Path) -> None:
    """A receiver that answers garbage fails that attempt only: it is
    recorded and retried, and the next notice is still delivered."""
    garbage = socket.socket()
    garbage.bind(("127.0.0.1", 0))
    garbage.listen(8)

    def answer() -> None:
        while True:
            try:
                conn, _ = garbage.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"HELLO THERE\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    good = WebhookReceiver(SECRET)
    db = str(tmp_path / "chap.db")
    clock = Clock()
    subs = Subscriptions(db, clock=clock)
    subs.add_webhook(WS, f"http://127.0.0.1:{garbage.getsockname()[1]}/hook", secret=SECRET, kinds=["whisper"])
    subs.add_webhook(WS, good.url + "/hook", secret=SECRET, kinds=["whisper"])
    _recorded(db, clock)
    deliverer = Deliverer(db, clock=clock)
    try:
        assert deliverer.deliver_due() == 2
        rows = deliverer.db.execute("SELECT ok, outcome FROM notify_attempts ORDER BY ok")
        states = sorted(r[0] for r in deliverer.db.execute("SELECT state FROM notify_outbox"))
    finally:
        deliverer.stop()
        garbage.close()
        good.stop()
    assert [r[0] for r in rows] == [0, 1] and "BadStatusLine" in rows[0][1]
    assert states == ["delivered", "pending"] and len(good.deliveries) == 1


def test_reviews_are_told_once_per_pass_to_whom_they_ask(tmp_path: Path, receiver: WebhookReceiver) -> None:
    """A revision and its second pass; an amendment adding a reviewer, one
    naming a reviewer already asked; a summary with a line break. Live, each
    pass is told to its reviewers and an amendment to those it names; a
    replay tells each open review once, to all its reviewers."""
    db = str(tmp_path / "chap.db")
    clock = Clock()
    receiver.fail_first = 0
    Subscriptions(db, clock=clock).add_webhook(WS, receiver.url, secret=SECRET, kinds=["review"])
    with notifying(db, clock) as coord:
        c = Client(coord, WS)
        _members(c)
        t1 = c.ok("task.create", frm=ALICE, assignee=BOT, kind="report", input={}, review_required=True)["task_id"]
        c.ok("task.update", frm=BOT, task_id=t1, state="in_progress")
        c.ok("task.complete", frm=BOT, task_id=t1, output={"body": "v1"})
        c.ok("decide.reject", frm=BOB, task_id=t1, reason="more", request_revision=True)
        c.ok("task.complete", frm=BOT, task_id=t1, output={"body": "v2"})
        t2 = c.ok("task.create", frm=ALICE, assignee=BOT, kind="config", input={})["task_id"]
        c.ok("task.update", frm=BOT, task_id=t2, state="in_progress")
        c.ok("review.request", frm=BOT, task_id=t2, to=[BOB], artefact={"rpm": 1}, summary="Line one\r\nBcc: x@y")
        c.ok("review.request", frm=BOT, task_id=t2, to=[BOB], artefact={"rpm": 1})  # bob asked again
        c.ok("review.request", frm=BOT, task_id=t2, to=[CAROL], artefact={"rpm": 1})  # carol added
    _deliver(db, clock)
    live = [json.loads(d.body) for d in receiver.deliveries]
    everyone = (ALICE, BOB, CAROL)
    assert sorted((b["task_id"], tuple(b["to"])) for b in live) == sorted(
        [(t1, everyone), (t1, everyone), (t2, (BOB,)), (t2, (BOB,)), (t2, (CAROL,))])
    assert sorted(b["title"] for b in live if b["task_id"] == t2) == [
        "Review: Line one Bcc: x@y", "Review: config " + t2, "Review: config " + t2]

    # The same log replayed into a fresh outbox: one notice per open review.
    replayed = tmp_path / "replayed.db"
    receiver.deliveries.clear()
    Subscriptions(str(replayed), clock=clock).add_webhook(WS, receiver.url, secret=SECRET, kinds=["review"])
    with notifying(db, clock, outbox=str(replayed)):  # catching up into a fresh outbox
        pass
    _deliver(str(replayed), clock)
    again = [json.loads(d.body) for d in receiver.deliveries]
    assert sorted((b["task_id"], tuple(b["to"])) for b in again) == sorted([(t1, everyone), (t2, (BOB, CAROL))])


def test_email_goes_only_to_members(tmp_path: Path, smtp: SmtpReceiver) -> None:
    """A stranger's workspace naming a subscriber (CHAP does not check that
    those a review names are members) sends that subscriber nothing."""
    db = str(tmp_path / "chap.db")
    clock = Clock()
    Subscriptions(db, clock=clock).add_email("*", "dave@example.org", DAVE, smtp=smtp.url)
    with notifying(db, clock) as coord:
        c = Client(coord, "wsp_stranger")
        c.ok("workspace.create")
        c.ok("participant.join", frm="human:mallory", type="human", role="admin")
        t = c.ok("task.create", frm="human:mallory", assignee="human:mallory", kind="k", input={})["task_id"]
        c.ok("task.update", frm="human:mallory", task_id=t, state="in_progress")
        c.ok("review.request", frm="human:mallory", task_id=t, to=[DAVE], artefact={"x": 1},
             summary="Your account is locked, click here")
        c.ok("participant.join", frm=DAVE, type="human", role="reviewer")
        t = c.ok("task.create", frm="human:mallory", assignee="human:mallory", kind="k", input={})["task_id"]
        c.ok("task.update", frm="human:mallory", task_id=t, state="in_progress")
        c.ok("review.request", frm="human:mallory", task_id=t, to=[DAVE], artefact={"x": 2}, summary="Now a member")
    _deliver(db, clock)
    assert [m["Subject"] for m in smtp.messages] == ["[wsp_stranger] Review: Now a member"]


def test_the_deliverer_comes_back_after_postgresql_drops_its_connection(
    pg_server: Any, receiver: WebhookReceiver
) -> None:
    import psycopg

    db = str(pg_server.uri(pg_server.new_database()))
    receiver.fail_first = 0
    Subscriptions(db).add_webhook(WS, receiver.url, secret=SECRET, kinds=["whisper"])
    deliverer = Deliverer(db, interval=0.05)
    deliverer.start()
    try:
        with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
            dropped = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()", (db.rsplit("/", 1)[1],)).fetchall()
        assert dropped  # the deliverer's connection (and the Subscriptions' one) went
        _recorded(db)
        eventually(lambda: receiver.deliveries, "the whisper delivered on a new connection")
    finally:
        deliverer.stop()
    assert json.loads(receiver.deliveries[0].body)["type"] == "whisper.asked"


def test_links_name_this_machine_when_serve_listens_on_every_address(tmp_path: Path) -> None:
    """`serve --host 0.0.0.0`: 0.0.0.0 is nobody's address in an e-mail."""
    db = tmp_path / "chap.db"
    receiver = WebhookReceiver(SECRET)
    assert _cli("add-webhook", receiver.url, "--workspace", WS, "--secret", SECRET, "--db", str(db)).returncode == 0
    server = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--port", "0", "--host", "0.0.0.0", "--insecure",
         "--db", str(db), "--projection", f"notifications={db}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    try:
        assert server.stdout is not None
        port = re.search(r"CHAP on http://0\.0\.0\.0:(\d+)/chap", server.stdout.readline())
        assert port, server.stderr
        base = f"http://127.0.0.1:{port.group(1)}"
        with httpx.Client(base_url=base, timeout=60) as http:
            c = Client(Http(http), WS)
            _members(c)
            _scenario(c)
        eventually(lambda: len(receiver.deliveries) == 4, "the four notices")
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=120)
        receiver.stop()
    links = {json.loads(d.body)["link"].split("#")[0] for d in receiver.deliveries}
    assert links == {f"http://{socket.getfqdn()}:{port.group(1)}/"}
