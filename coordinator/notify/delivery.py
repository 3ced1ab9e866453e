"""Sending what the outbox holds: each row at least once, retried with
backoff, every attempt in the delivery log.

A `Deliverer` claims a due row inside a transaction (it moves its next
attempt past a lease, so another deliverer on the same database, say
another `serve --workers` process, skips it), sends it outside it, then
records the outcome. A crash between the send and the record leaves the
row to be sent again when the lease ends: the receiver knows it by its
`Idempotency-Key` header (the notice's id; the e-mail's Message-ID).
"""

from __future__ import annotations

import json
import logging
import smtplib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from email.message import EmailMessage
from email.utils import formatdate
from typing import NamedTuple
from urllib.parse import urlsplit

from coordinator import __version__
from coordinator.notify.formats import SIGNATURE_HEADER, sign
from coordinator.notify.subscriptions import Subscription, load, open_tables

__all__ = ["Deliverer", "Outcome", "send"]

log = logging.getLogger("chapline")

# Backoff after the n-th failed attempt: FIRST_DELAY * 2**(n-1), capped.
FIRST_DELAY = 1.0
MAX_DELAY = 3600.0
MAX_ATTEMPTS = 15  # about three hours of retries, then the row is given up on ("failed")
TIMEOUT = 10.0  # seconds for each socket operation of a webhook request or an SMTP exchange
# Seconds a claimed row is left to its deliverer: past what sending one can
# take (an SMTP exchange is several operations), so no other deliverer sends
# it meanwhile.
LEASE = 300.0


class Outcome(NamedTuple):
    ok: bool
    detail: str  # "HTTP 204", "250 sent", or what went wrong


def send(sub: Subscription, notice_id: str, body: str, *, now: float) -> Outcome:
    """Send one row's body to its subscription, once."""
    try:
        if sub.channel == "email":
            return _send_email(sub, notice_id, body, now)
        return _send_webhook(sub, notice_id, body, now)
    except Exception as exc:  # whatever a receiver answers, it is this attempt's outcome
        return Outcome(False, f"{type(exc).__name__}: {exc}"[:500])


def _send_webhook(sub: Subscription, notice_id: str, body: str, now: float) -> Outcome:
    data = body.encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": f"chapline/{__version__}",
        "Idempotency-Key": notice_id,
        SIGNATURE_HEADER: sign(sub.secret or "", data, int(now)),
    }
    request = urllib.request.Request(sub.target, data=data, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=TIMEOUT) as response:
            return Outcome(200 <= response.status < 300, f"HTTP {response.status}")
    except urllib.error.HTTPError as exc:
        return Outcome(False, f"HTTP {exc.code}")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is not a delivery: following it would resend the body
    (signed for this subscription) to an address nobody subscribed."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects())


def _send_email(sub: Subscription, notice_id: str, body: str, now: float) -> Outcome:
    content = json.loads(body)
    message = EmailMessage()
    message["Subject"] = content["subject"]
    message["From"] = sub.mail_from or "chapline@localhost"
    message["To"] = sub.target
    message["Date"] = formatdate(now)
    message["Message-ID"] = f"<{notice_id}.{sub.id}@chapline>"
    message["X-Chapline-Notice"] = notice_id
    message.set_content(content["text"])
    server = urlsplit(sub.smtp or "")
    with smtplib.SMTP(server.hostname or "localhost", server.port or 25, timeout=TIMEOUT) as smtp:
        refused = smtp.send_message(message)
    if refused:
        return Outcome(False, f"refused by the SMTP server: {refused}")
    return Outcome(True, "sent")


class Deliverer:
    """Delivers the outbox of `target` (the notifications projection's).
    `deliver_due()` sends what is due once; `start()` runs it every
    `interval` seconds on a thread until `stop()`. `on_attempt(outcome)` is
    called after each attempt is recorded in the delivery log (a server
    counts them: `Observability.count_delivery`); what it raises is logged,
    and delivery goes on."""

    def __init__(
        self, target: str, *, clock: Callable[[], float] = time.time,
        sender: Callable[..., Outcome] = send, interval: float = 0.5,
        on_attempt: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.target = target
        self._clock = clock
        self._send = sender
        self._on_attempt = on_attempt
        self.interval = interval
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.db = open_tables(target)

    def deliver_due(self) -> int:
        """Send every row due now, one claim at a time; the number of
        attempts made."""
        made = 0
        subs: dict[str, Subscription] = {}
        while not self._stopped.is_set():
            claimed = self._claim()
            if claimed is None:
                return made
            notice, sub_id, body, attempt = claimed
            if sub_id not in subs:
                subs = {sub.id: sub for sub in load(self.db)}
            sub = subs.get(sub_id)
            if sub is None:  # removed since the row was queued
                self.db.execute("DELETE FROM notify_outbox WHERE notice = ? AND subscription = ?",
                                (notice, sub_id))
                continue
            outcome = self._send(sub, notice, body, now=self._clock())
            self._record(notice, sub_id, attempt, outcome)
            made += 1
            if self._on_attempt is not None:
                try:
                    self._on_attempt(outcome)
                except Exception:  # an observer's bug must not hold up the outbox
                    log.exception("notifications: the attempt hook failed")
        return made

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chapline-notify", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the delivery under way (if any) is recorded."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
        self.db.close()

    def _run(self) -> None:
        failing = False
        while not self._stopped.wait(self.interval):
            try:
                self.deliver_due()
            except Exception as exc:
                # The database unreachable for a while: said once, and the
                # next round tries again on a new connection.
                if not failing:
                    log.error("notifications: cannot deliver the outbox of %s (%s); retrying",
                              self.db.where, exc)
                failing = True
                self._reopen()
            else:
                if failing:
                    log.warning("notifications: delivering the outbox of %s again", self.db.where)
                failing = False

    def _reopen(self) -> None:
        try:
            fresh = open_tables(self.target)
        except Exception:
            return
        self.db.close()
        self.db = fresh

    def _claim(self) -> tuple[str, str, str, int] | None:
        """The next due row, claimed (its attempt number counted), or None."""
        now = self._clock()
        # A read first: the claim's transaction takes SQLite's write lock,
        # which an idle outbox need not take twice a second.
        if not self.db.execute("SELECT 1 FROM notify_outbox WHERE state = 'pending' AND next_at <= ? "
                               "LIMIT 1", (now,)):
            return None
        while True:
            with self.db.transaction():
                due = self.db.execute(
                    "SELECT notice, subscription, body, attempts FROM notify_outbox "
                    "WHERE state = 'pending' AND next_at <= ? ORDER BY next_at, created LIMIT 1",
                    (now,),
                )
                if not due:
                    return None
                [(notice, sub_id, body, attempts)] = due
                if attempts >= MAX_ATTEMPTS:
                    # Claimed that often without an outcome recorded (each
                    # claim ended by a crash): given up on as any other.
                    self.db.execute("UPDATE notify_outbox SET state = 'failed' "
                                    "WHERE notice = ? AND subscription = ?", (notice, sub_id))
                    continue
                # Only if no other deliverer claimed it since this one read it.
                won = self.db.execute(
                    "UPDATE notify_outbox SET attempts = attempts + 1, next_at = ? "
                    "WHERE notice = ? AND subscription = ? AND attempts = ? AND state = 'pending' "
                    "RETURNING attempts",
                    (now + LEASE, notice, sub_id, attempts),
                )
            if won:
                return str(notice), str(sub_id), str(body), int(won[0][0])

    def _record(self, notice: str, sub_id: str, attempt: int, outcome: Outcome) -> None:
        now = self._clock()
        with self.db.transaction():
            self.db.execute(
                "INSERT INTO notify_attempts (notice, subscription, attempt, at, ok, outcome) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (notice, subscription, attempt) DO NOTHING",
                (notice, sub_id, attempt, now, int(outcome.ok), outcome.detail),
            )
            if outcome.ok:
                self.db.execute(
                    "UPDATE notify_outbox SET state = 'delivered', delivered_at = ?, last_error = NULL "
                    "WHERE notice = ? AND subscription = ?", (now, notice, sub_id))
                return
            given_up = attempt >= MAX_ATTEMPTS
            self.db.execute(
                "UPDATE notify_outbox SET state = ?, next_at = ?, last_error = ? "
                "WHERE notice = ? AND subscription = ? AND state = 'pending'",
                ("failed" if given_up else "pending",
                 now + min(FIRST_DELAY * 2 ** (attempt - 1), MAX_DELAY), outcome.detail, notice, sub_id),
            )
        if given_up:
            log.warning("notifications: gave up on notice %s for subscription %s after %d attempts (%s)",
                        notice, sub_id, attempt, outcome.detail)
