"""Durable projections: a name, a cursor per workspace, catch-up then live.

A projection keeps, per workspace, the seq of the next entry it has not yet
applied (its cursor), durably, beside what it builds from the entries. When
attached (`Coordinator.attach`), it first catches up: every workspace the
coordinator holds, in id order, its log read from the store from the cursor
on, in pages, each page applied as one `apply`. Then it follows live calls.
The hand-over has no gap and no duplicate: a live change whose seq is past
the cursor first catches that workspace up from the store, one before it is
skipped.

- Exactly once: a projection whose cursor lives in its own target and
  advances in the same transaction as its rows (`AnalyticsProjection`, and
  any `Projection` written that way).
- At least once: `CallbackProjection` calls a function, then saves the
  cursor in a SQLite file; after a crash in between, the function sees those
  changes again and the entry's `seq` tells it so.

A failing `apply` is reported once (not once per entry) and retried with
exponential backoff, from its cursor, by later calls; it never blocks or
fails a call. While it is behind, live changes are not queued: they are in
the store, and the catch-up reads them from there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from coordinator.errors import ProjectionError
from coordinator.listeners import Change
from coordinator.projections.sql import SqliteTarget

if TYPE_CHECKING:
    from coordinator.engine.held import HeldWorkspaces

__all__ = ["Attachment", "CallbackProjection", "Projection", "unapplied"]

log = logging.getLogger("chapline")


class Projection(Protocol):
    """What `Coordinator.attach` takes."""

    name: str

    def cursors(self) -> dict[str, int]:
        """The next seq to apply, per workspace, as durably kept (0 if absent)."""
        ...

    def apply(self, changes: Sequence[Change]) -> None:
        """Apply these changes (in log order, seq consecutive per workspace)
        and advance the cursors past them; all or nothing. Raise to refuse."""
        ...

    def close(self) -> None: ...


def unapplied(changes: Sequence[Change], cursors: dict[str, int], where: str) -> list[Change]:
    """The changes at or past each workspace's cursor (the others were applied,
    by this writer or another); raises ProjectionError if they leave a gap."""
    expected = dict(cursors)
    fresh = []
    for change in changes:
        wid, seq = change.workspace, change.entry.seq
        want = expected.get(wid, 0)
        if seq < want:
            continue
        if seq > want:
            raise ProjectionError(
                where,
                f"{where}, workspace {wid!r}: the projection's cursor is at seq {want} but it was "
                f"handed seq {seq}; it catches up from its cursor on the next retry",
            )
        expected[wid] = seq + 1
        fresh.append(change)
    return fresh


class CallbackProjection:
    """`fn(changes)` for each page and each live call, at least once: the
    cursor is saved in the SQLite file `cursor_path` after `fn` returns, so
    after a crash in between `fn` sees those changes again (use `seq`)."""

    def __init__(self, name: str, fn: Callable[[Sequence[Change]], None], cursor_path: str) -> None:
        self.name = name
        self._fn = fn
        self._db = SqliteTarget(cursor_path)
        self._db.create((), {})

    def cursors(self) -> dict[str, int]:
        return self._db.load_cursors(self.name)

    def apply(self, changes: Sequence[Change]) -> None:
        self._fn(changes)
        with self._db.transaction():
            self._db.advance_cursors(self.name, {c.workspace: c.entry.seq + 1 for c in changes})

    def close(self) -> None:
        self._db.close()


class Attachment:
    """A projection attached to a coordinator: `detach()` ends it.

    `state` is "live", "behind" (a failure is being retried; `error` says
    what, `retry_at` when, on `time.monotonic()`), or "detached".
    """

    FIRST_DELAY = 0.1
    MAX_DELAY = 60.0

    def __init__(
        self,
        source: HeldWorkspaces,
        projection: Projection,
        *,
        page_size: int = 1000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.projection = projection
        self.name = projection.name
        self.page_size = page_size
        self._source = source  # the coordinator's workspaces and listeners
        self._monotonic = monotonic
        self._next: dict[str, int] = {}
        self.state = "behind"
        self.error: str | None = None
        self.failures = 0
        self.retry_at = 0.0
        self._delay = self.FIRST_DELAY

    # -- public ---------------------------------------------------------------

    def start(self) -> None:
        """Catch up, as attaching does: a failure is reported and retried
        with backoff by later calls, never raised."""
        try:
            self.catch_up()
        except Exception as exc:
            self._failed(exc)

    def catch_up(self) -> int:
        """Apply everything the store holds past the cursors; the number of
        entries applied. Raises what the projection raised (and stays behind)."""
        if self.state == "detached":
            raise RuntimeError(f"projection {self.name!r} is detached")
        self._next = dict(self.projection.cursors())
        applied = 0
        for workspace_id, durable in self._source.durable_counts().items():
            applied += self._catch_up_workspace(workspace_id, durable)
        self._recovered()
        return applied

    def detach(self) -> None:
        """Stop feeding the projection and close it; its cursors stay, so
        attaching it again later catches up from where it stopped."""
        if self.state == "detached":
            return
        self.state = "detached"
        self._source.listeners.remove_attachment(self)
        self.projection.close()

    def cursor(self, workspace_id: str) -> int:
        """The next seq this projection will apply for the workspace."""
        return self._next.get(workspace_id, 0)

    def lag(self) -> int:
        """Durable entries of the coordinator's workspaces this projection
        has not applied yet (a server's `chapline_projection_lag_entries`).
        Reads the coordinator's workspaces: call it where its calls run."""
        counts = self._source.durable_counts()
        return sum(max(0, count - self._next.get(wid, 0)) for wid, count in counts.items())

    # -- fed by the coordinator ----------------------------------------------

    def feed(self, changes: list[Change]) -> None:
        """Durable changes, in log order. Never raises."""
        if self.state == "behind":
            if self._monotonic() < self.retry_at:
                return  # the store keeps them; the retry reads them from there
            try:
                self.catch_up()
            except Exception as exc:
                self._failed(exc)
            return
        if self.state != "live":
            return
        try:
            fresh: list[Change] = []
            after: dict[str, int] = {}  # the next seq per workspace, counting `fresh`
            for change in changes:
                wid, seq = change.workspace, change.entry.seq
                expected = after.get(wid, self._next.get(wid, 0))
                if seq < expected:
                    continue  # already applied (caught up past it)
                if seq > expected:  # a gap: entries another writer appended
                    if fresh:
                        self._apply(fresh)
                        fresh = []
                    self._catch_up_workspace(wid, seq)
                fresh.append(change)
                after[wid] = seq + 1
            if fresh:
                self._apply(fresh)
        except Exception as exc:
            self._failed(exc)

    # -- internals -------------------------------------------------------------

    def _apply(self, changes: list[Change]) -> None:
        self.projection.apply(changes)
        for change in changes:
            self._next[change.workspace] = change.entry.seq + 1

    def _catch_up_workspace(self, workspace_id: str, stop: int) -> int:
        """Apply the workspace's entries from its cursor up to `stop`, in pages;
        the last page carries the workspace's current objects."""
        start = self._next.get(workspace_id, 0)
        applied = 0
        while start < stop:
            end = min(start + self.page_size, stop)
            entries = self._source.durable_entries(workspace_id, start, end)
            if len(entries) != end - start:
                raise RuntimeError(
                    f"workspace {workspace_id!r}: the store returned {len(entries)} entries "
                    f"for seq {start}..{end - 1}"
                )
            current = self._source.current_objects(workspace_id) if end == stop else None
            changes = [Change(workspace_id, entry) for entry in entries]
            if current is not None:
                last = changes[-1]
                changes[-1] = Change(workspace_id, last.entry, current=current)
            self._apply(changes)
            applied += len(changes)
            start = end
        return applied

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        problem = f"{type(exc).__name__}: {exc}"
        if self.state != "behind" or problem != self.error:
            log.error(
                "projection %r failed (%s); the calls are unaffected, and it is retried "
                "from its cursor with backoff (reported once until it recovers or fails "
                "differently)",
                self.name,
                problem,
                exc_info=(type(exc), exc, exc.__traceback__),
            )
        self.state = "behind"
        self.error = problem
        self.retry_at = self._monotonic() + self._delay
        self._delay = min(self._delay * 2, self.MAX_DELAY)

    def _recovered(self) -> None:
        if self.error is not None:
            log.warning("projection %r caught up after %d failures", self.name, self.failures)
        self.state = "live"
        self.error = None
        self.failures = 0
        self._delay = self.FIRST_DELAY

    def __repr__(self) -> str:
        return f"<projection {self.name!r}: {self.state}>"
