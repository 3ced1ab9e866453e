"""Who is told, and how: the notification tables and their subscriptions.

The tables live in a projection target (a SQLite file or a PostgreSQL
database, `projections.sql`), normally the serve database itself:

- `notify_subscriptions`: per workspace (or `*`, every workspace), a
  webhook (URL, format `json` or `slack`, HMAC secret) or an e-mail address
  (the participant it is for, the SMTP server), and the kinds it wants;
- `notify_outbox`: one row per notice and subscription, with its state
  (pending, delivered, or failed: given up on), kept after delivery;
- `notify_attempts`: the delivery log, one row per attempt;
- `notify_members` and `notify_pending`: what the projection keeps to
  address notices (members' roles; replayed entries waiting for the
  workspace's current objects).

A webhook's secret is kept as given (signing needs it), like the database's
other credentials: protect the database file.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable
from urllib.parse import SplitResult, urlsplit

import msgspec

from coordinator.errors import NotifyError
from coordinator.notify.notices import KINDS
from coordinator.projections.sql import SqlTarget, open_target

__all__ = ["Subscription", "Subscriptions", "open_tables"]

_TABLES = (
    "CREATE TABLE IF NOT EXISTS notify_subscriptions ("
    "id TEXT PRIMARY KEY, workspace TEXT NOT NULL, format TEXT NOT NULL, target TEXT NOT NULL, "
    "kinds TEXT NOT NULL, participant TEXT, secret TEXT, smtp TEXT, mail_from TEXT, "
    "created DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS notify_outbox ("
    "notice TEXT NOT NULL, subscription TEXT NOT NULL, workspace TEXT NOT NULL, "
    "body TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL, "
    "next_at DOUBLE PRECISION NOT NULL, created DOUBLE PRECISION NOT NULL, "
    "delivered_at DOUBLE PRECISION, last_error TEXT, PRIMARY KEY (notice, subscription))",
    "CREATE TABLE IF NOT EXISTS notify_attempts ("
    "notice TEXT NOT NULL, subscription TEXT NOT NULL, attempt INTEGER NOT NULL, "
    "at DOUBLE PRECISION NOT NULL, ok INTEGER NOT NULL, outcome TEXT NOT NULL, "
    "PRIMARY KEY (notice, subscription, attempt))",
    "CREATE TABLE IF NOT EXISTS notify_members ("
    "workspace TEXT NOT NULL, uri TEXT NOT NULL, role TEXT NOT NULL, PRIMARY KEY (workspace, uri))",
    "CREATE TABLE IF NOT EXISTS notify_pending ("
    "workspace TEXT NOT NULL, seq BIGINT NOT NULL, candidate TEXT NOT NULL, "
    "PRIMARY KEY (workspace, seq))",
    "CREATE INDEX IF NOT EXISTS notify_outbox_due ON notify_outbox (state, next_at)",
)


def open_tables(target: str) -> SqlTarget:
    """The target, with the notification tables created where missing."""
    db = open_target(target)
    try:
        db.create(_TABLES, {})
    except BaseException:
        db.close()
        raise
    return db


class Subscription(msgspec.Struct, frozen=True):
    """One subscription. `target` is the webhook URL or the e-mail address."""

    id: str
    workspace: str
    format: str
    target: str
    kinds: tuple[str, ...]
    participant: str | None = None
    secret: str | None = None
    smtp: str | None = None
    mail_from: str | None = None
    created: float = 0.0

    @property
    def channel(self) -> str:
        return "email" if self.format == "email" else "webhook"

    def wants(self, kind: str) -> bool:
        return kind in self.kinds

    def describe(self) -> str:
        where = "every workspace" if self.workspace == "*" else f"workspace {self.workspace}"
        whom = f" for {self.participant} via {self.smtp}" if self.participant else ""
        return f"{self.id}  {self.format} {self.target}{whom}  {where}  {','.join(self.kinds)}"


_COLUMNS = "id, workspace, format, target, kinds, participant, secret, smtp, mail_from, created"


def _row(row: tuple[object, ...]) -> Subscription:
    sid, workspace, fmt, target, kinds, participant, secret, smtp, mail_from, created = row
    return Subscription(
        str(sid), str(workspace), str(fmt), str(target), tuple(str(kinds).split(",")),
        participant if isinstance(participant, str) else None,
        secret if isinstance(secret, str) else None,
        smtp if isinstance(smtp, str) else None,
        mail_from if isinstance(mail_from, str) else None,
        float(created),  # type: ignore[arg-type]
    )


class Subscriptions:
    """Adding, listing and removing subscriptions in a target's tables."""

    def __init__(self, target: str, *, clock: Callable[[], float] = time.time) -> None:
        self.db = open_tables(target)
        self._clock = clock

    def add_webhook(
        self, workspace: str, url: str, *, format: str = "json",
        kinds: Iterable[str] = KINDS, secret: str | None = None,
    ) -> Subscription:
        """A webhook; `secret` (the HMAC key) is made when not given."""
        if format not in ("json", "slack"):
            raise NotifyError(f"a webhook's format is json or slack, not {format!r}")
        parts = _parts(url, "the webhook's URL")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise NotifyError(f"a webhook needs an http:// or https:// URL with a host, not {url!r}")
        return self._add(Subscription(
            _new_id(), _workspace(workspace), format, url, _kinds(kinds),
            secret=secret or "whsec_" + secrets.token_urlsafe(24), created=self._clock(),
        ))

    def add_email(
        self, workspace: str, address: str, participant: str, *, smtp: str,
        mail_from: str = "chapline@localhost", kinds: Iterable[str] = KINDS,
    ) -> Subscription:
        """E-mail to `address` for the notices addressed to `participant`
        (by name, by role or to the whole workspace), sent through `smtp`
        (smtp://host:port)."""
        for given, what in ((address, "an e-mail address"), (mail_from, "a From address")):
            if "@" not in given or any(not c.isprintable() or c in " <>" for c in given):
                raise NotifyError(f"not {what}: {given!r}")
        if ":" not in participant or not participant.isprintable():
            raise NotifyError(f"the participant is a URI such as human:alice, not {participant!r}")
        parts = _parts(smtp, "the SMTP server")
        if parts.scheme != "smtp" or not parts.hostname:
            raise NotifyError(f"the SMTP server is smtp://HOST[:PORT], not {smtp!r}")
        return self._add(Subscription(
            _new_id(), _workspace(workspace), "email", address, _kinds(kinds),
            participant=participant, smtp=smtp, mail_from=mail_from, created=self._clock(),
        ))

    def all(self) -> list[Subscription]:
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM notify_subscriptions ORDER BY created, id")
        return [_row(row) for row in rows]

    def get(self, subscription_id: str) -> Subscription:
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM notify_subscriptions WHERE id = ?",
                               (subscription_id,))
        if not rows:
            raise NotifyError(f"no subscription {subscription_id!r} (`chapline notify list` shows them)")
        return _row(rows[0])

    def remove(self, subscription_id: str) -> Subscription:
        """Remove it and what it had not delivered yet."""
        with self.db.transaction():
            gone = self.get(subscription_id)
            self.db.execute("DELETE FROM notify_outbox WHERE subscription = ? AND state = 'pending'",
                            (subscription_id,))
            self.db.execute("DELETE FROM notify_subscriptions WHERE id = ?", (subscription_id,))
        return gone

    def close(self) -> None:
        self.db.close()

    def _add(self, sub: Subscription) -> Subscription:
        with self.db.transaction():
            self.db.execute(
                f"INSERT INTO notify_subscriptions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (sub.id, sub.workspace, sub.format, sub.target, ",".join(sub.kinds), sub.participant,
                 sub.secret, sub.smtp, sub.mail_from, sub.created),
            )
        return sub


def load(db: SqlTarget) -> list[Subscription]:
    """Every subscription in `db` (inside the caller's transaction)."""
    return [_row(row) for row in db.execute(f"SELECT {_COLUMNS} FROM notify_subscriptions")]


def _parts(url: str, what: str) -> SplitResult:
    """`url` split, its port checked: refused now rather than failing every delivery."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port out of range)
    except ValueError as exc:
        raise NotifyError(f"{what} {url!r} cannot be read: {exc}") from None
    if not url.isprintable():
        raise NotifyError(f"{what} {url!r} holds a control character")
    return parts


def _new_id() -> str:
    return "sub_" + secrets.token_hex(8)


def _workspace(workspace: str) -> str:
    if not workspace or any(c.isspace() for c in workspace):
        raise NotifyError(f"name a workspace id (or * for every workspace), not {workspace!r}")
    return workspace


def _kinds(kinds: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(kinds))
    unknown = [k for k in chosen if k not in KINDS]
    if unknown or not chosen:
        raise NotifyError(f"kinds are among {', '.join(KINDS)}; got {', '.join(chosen) or 'none'}")
    return chosen
