"""`GET /healthz` and `GET /readyz`: is the process alive, can it serve.

`/healthz` answers 200 `{"status": "alive"}` whenever the event loop runs.
`/readyz` answers 200 `{"status": "ready", "checks": {...}}` when the store
is reachable and writable and no projection is stalled, else 503 with
`"status": "unready"` and the check that failed saying why
(SPECIFICATION.md, "Observability"). Neither needs a token: a load balancer
or an orchestrator asks them, and they name no workspace.

The store is checked on a connection of the probe's own (`store_probe`),
not the coordinator's: a check must not wait behind the calls queued on the
dispatcher, and the store's own connection reconnects on its next use once
the database is back.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import quote

import msgspec

from coordinator.extras import needs
from storage.target import describe_target, is_postgres

with needs("server"):
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute, Route

__all__ = ["HEALTH_PATH", "READY_PATH", "Probe", "health_routes", "store_probe"]

log = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
# A probe that has not answered by then counts as failed: an orchestrator
# asks again, and a hung database must not hang the check.
PROBE_SECONDS = 2.0

# A store check: None when the store is reachable and writable, else why not
# (words safe to show anyone: no user, password or file contents).
Probe = Callable[[], str | None]

_encode = msgspec.json.Encoder().encode


class Projected(Protocol):
    """What readiness reads of an attached projection (`Attachment`)."""

    name: str
    state: str
    error: str | None


def store_probe(target: str, *, seconds: float = PROBE_SECONDS) -> Probe:
    """The check of the store `target` names (a `--db` value): on SQLite,
    the file opens without being created and its write lock can be taken;
    on PostgreSQL, a connection opens and the server takes writes (not a
    standby in recovery, not read-only). `:memory:` always passes."""
    if target == ":memory:":
        return lambda: None
    if is_postgres(target):
        return _postgres_probe(target, seconds)
    return _sqlite_probe(target, seconds)


def _sqlite_probe(path: str, seconds: float) -> Probe:
    uri = f"file:{quote(path)}?mode=rw"

    def probe() -> str | None:
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=seconds, isolation_level=None)
        except sqlite3.Error as exc:
            log.warning("readiness: cannot open %s: %s", path, exc)
            return f"the database file {describe_target(path)} cannot be opened for writing"
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            log.warning("readiness: cannot take the write lock of %s: %s", path, exc)
            return f"the database file {describe_target(path)} does not take writes ({exc})"
        finally:
            conn.close()
        return None

    return probe


def _postgres_probe(dsn: str, seconds: float) -> Probe:
    with needs("postgres"):
        import psycopg
    where = describe_target(dsn)

    def probe() -> str | None:
        try:
            with psycopg.connect(dsn, connect_timeout=max(1, round(seconds)), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT pg_is_in_recovery(), current_setting('transaction_read_only')"
                ).fetchone()
        except psycopg.Error as exc:
            log.warning("readiness: %s did not answer: %s", where, exc)
            return f"{where} did not answer"
        if row is None or row[0] or row[1] == "on":
            return f"{where} is read-only (a standby in recovery, or default_transaction_read_only)"
        return None

    return probe


def health_routes(probe: Probe | None, projections: Sequence[Projected]) -> list[BaseRoute]:
    """The two routes. `probe` checks the store (None: not checked, as for
    an app whose owner gave no probe); `projections` are the attachments
    whose state readiness reads."""

    async def healthz(request: Request) -> Response:
        return _json(200, {"status": "alive"})

    async def readyz(request: Request) -> Response:
        checks: dict[str, Any] = {}
        ready = True
        if probe is not None:
            problem = await _bounded(probe)
            checks["store"] = {"ok": problem is None} | ({} if problem is None else {"error": problem})
            ready = problem is None
        for projection in projections:
            # "behind" with an error: its apply fails and is being retried;
            # "behind" without one is a catch-up still running at start.
            stalled = projection.state == "behind" and projection.error is not None
            check: dict[str, Any] = {"ok": not stalled, "state": projection.state}
            if stalled:
                check["error"] = "its apply fails and is retried with backoff; see the server log"
                ready = False
            checks[f"projection:{projection.name}"] = check
        return _json(200 if ready else 503, {"status": "ready" if ready else "unready", "checks": checks})

    return [
        Route(HEALTH_PATH, healthz, methods=["GET"]),
        Route(READY_PATH, readyz, methods=["GET"]),
    ]


async def _bounded(probe: Probe) -> str | None:
    try:
        return await asyncio.wait_for(asyncio.to_thread(probe), PROBE_SECONDS + 1)
    except TimeoutError:
        return f"the store did not answer within {PROBE_SECONDS + 1:g} s"


def _json(status: int, body: dict[str, Any]) -> Response:
    # No caching: each ask must see the state now.
    return Response(
        _encode(body), status_code=status, media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )
