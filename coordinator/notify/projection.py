"""The notifications projection: notices decided from the log, into an
outbox, in the same transaction as the projection's cursor.

Attached to a coordinator (`coord.attach(NotificationProjection(target))`,
or `chapline serve --projection notifications=TARGET`), it reads every
recorded call once (`projections.cursor`: catch-up from the store, then
live) and writes one outbox row per notice and subscription that wants it,
keyed by the notice's id and the subscription. Rows and cursor commit
together, so a notice is decided exactly once across crashes and restarts;
`delivery.Deliverer` then sends each row at least once.

Entries replayed from the store carry no objects: their candidates wait in
`notify_pending` until the catch-up's last change brings the workspace's
current objects, and are decided against those (so a review decided while
the server was down is not announced).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from coordinator.listeners import Change
from coordinator.notify.formats import render
from coordinator.notify.notices import Candidate, Notice, candidate, resolve
from coordinator.notify.subscriptions import Subscription, load, open_tables
from coordinator.projections.cursor import unapplied
from coordinator.projections.sql import SqlTarget

__all__ = ["NotificationProjection", "addressed"]

_PUT_OUTBOX = (
    "INSERT INTO notify_outbox (notice, subscription, workspace, body, state, attempts, next_at, "
    "created) VALUES (?, ?, ?, ?, 'pending', 0, ?, ?) ON CONFLICT (notice, subscription) DO NOTHING"
)
_PUT_MEMBER = (
    "INSERT INTO notify_members (workspace, uri, role) VALUES (?, ?, ?) "
    "ON CONFLICT (workspace, uri) DO UPDATE SET role = excluded.role"
)


class NotificationProjection:
    """Notices for the subscriptions in `target` (a SQLite file or a
    postgresql:// URI; normally the serve database). `desk_url` is where
    the desk is served, for the links in the notices (none without it)."""

    def __init__(
        self, target: str, *, desk_url: str | None = None, name: str = "notifications",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.target = target
        self.desk_url = desk_url
        self._clock = clock
        self.db: SqlTarget = open_tables(target)

    def cursors(self) -> dict[str, int]:
        return self.db.load_cursors(self.name)

    def apply(self, changes: Sequence[Change]) -> None:
        db = self.db
        with db.transaction():
            held = db.lock_cursors(self.name, {change.workspace for change in changes})
            fresh = unapplied(changes, held, db.where)
            notices: list[Notice] = []
            next_seqs: dict[str, int] = {}
            for change in fresh:
                wid = change.workspace
                next_seqs[wid] = change.entry.seq + 1
                if change.objects is not None:
                    self._members(wid, change.objects.get("members", {}), whole=False)
                found = candidate(wid, change.entry.seq, change.entry.arrived, change.entry.envelope,
                                  change.result)
                if found is not None:
                    if change.objects is not None:
                        notices.extend(_some(resolve(found, change.objects)))
                    else:
                        db.execute("INSERT INTO notify_pending (workspace, seq, candidate) VALUES (?, ?, ?) "
                                   "ON CONFLICT (workspace, seq) DO NOTHING",
                                   (wid, found.seq, msgspec.json.encode(found).decode()))
                if change.current is not None:
                    notices.extend(self._settle_pending(wid, change.current))
            self._queue(notices)
            db.advance_cursors(self.name, next_seqs)

    def close(self) -> None:
        self.db.close()

    def _members(self, wid: str, members: dict[str, Any], *, whole: bool) -> None:
        if whole:
            self.db.execute("DELETE FROM notify_members WHERE workspace = ?", (wid,))
        for uri, member in members.items():
            if member is None:
                self.db.execute("DELETE FROM notify_members WHERE workspace = ? AND uri = ?", (wid, uri))
            else:
                role = member.get("role") if isinstance(member, dict) else getattr(member, "role", None)
                self.db.execute(_PUT_MEMBER, (wid, uri, str(role or "participant")))

    def _settle_pending(self, wid: str, current: dict[str, dict[str, Any]]) -> list[Notice]:
        """Decide the workspace's waiting candidates against its objects now."""
        self._members(wid, current.get("members", {}), whole=True)
        rows = self.db.execute(
            "SELECT candidate FROM notify_pending WHERE workspace = ? ORDER BY seq", (wid,))
        self.db.execute("DELETE FROM notify_pending WHERE workspace = ?", (wid,))
        waiting = [msgspec.json.decode(row[0], type=Candidate) for row in rows]
        # One notice per open review, from its last entry, to all its
        # reviewers: earlier entries of the task were earlier passes, or what
        # that last one completes.
        last_review = {c.params.get("task_id"): c.seq for c in waiting if c.kind == "review"}
        return [n for c in waiting
                if c.kind != "review" or last_review[c.params.get("task_id")] == c.seq
                for n in _some(resolve(c, current, whole=True))]

    def _queue(self, notices: list[Notice]) -> None:
        if not notices:
            return
        subscriptions = load(self.db)
        roles: dict[str, dict[str, str]] = {}
        now = self._clock()
        rows = []
        for notice in notices:
            wid = notice.workspace
            if wid not in roles:
                roles[wid] = dict(self.db.execute(
                    "SELECT uri, role FROM notify_members WHERE workspace = ?", (wid,)))
            for sub in subscriptions:
                if addressed(sub, notice, roles[wid]):
                    rows.append((notice.id, sub.id, wid, render(notice, sub.format, self.desk_url), now, now))
        self.db.executemany(_PUT_OUTBOX, rows)


def addressed(sub: Subscription, notice: Notice, roles: dict[str, str]) -> bool:
    """Whether `sub` receives `notice`. A webhook takes every notice of its
    workspaces and kinds; an e-mail only those addressed to its participant,
    a member of the notice's workspace: by name, by role (`group:<role>`),
    or to the whole workspace (no one named, or `workspace:...`)."""
    if sub.workspace not in ("*", notice.workspace) or not sub.wants(notice.kind):
        return False
    if sub.channel == "webhook":
        return True
    # Only to a member: CHAP does not check that those a call names are
    # members, so a stranger's call must not reach a subscriber's inbox.
    person = sub.participant or ""
    if person not in roles:
        return False
    if not notice.to:
        return True
    return any(
        uri == person
        or uri.startswith("workspace:")
        or (uri.startswith("group:") and roles[person] == uri[len("group:"):])
        for uri in notice.to
    )


def _some(notice: Notice | None) -> list[Notice]:
    return [] if notice is None else [notice]
