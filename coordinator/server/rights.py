"""Rights re-checked while they are used: a token revoked (by `chapline token
revoke`, perhaps from another process) or expired ends what it holds open.

A request is authenticated when it arrives; an event stream or an MCP session
outlives that moment. `RightsWatch` looks up, every `interval` seconds, each
credential that holds something open (one lookup per token, however much it
holds) and ends the holdings of the ones that no longer authenticate, saying
whether the token was revoked or expired (SPECIFICATION.md, "Authentication").
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable

from coordinator.errors import RpcError
from coordinator.server.auth import Authenticator, bearer
from coordinator.server.desk.events import EndReason
from storage import StoreError

__all__ = ["RECHECK_SECONDS", "RightsWatch", "why_refused"]

log = logging.getLogger(__name__)

RECHECK_SECONDS = 0.5

Holder = Callable[[], set[str]]
"""The credentials (Authorization headers) something holds open now."""
Ender = Callable[[str, EndReason], object]
"""Ends everything a credential holds open, for a reason."""


def why_refused(credential: str, now: float) -> EndReason:
    """Why a credential that once authenticated no longer does: an OIDC
    token (a JWT) past its `exp` expired; anything else was revoked."""
    token = bearer(credential) or ""
    parts = token.split(".")
    if len(parts) == 3:
        try:
            payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
            exp = json.loads(payload).get("exp")
        except (binascii.Error, ValueError, AttributeError):
            exp = None
        if isinstance(exp, (int, float)) and not isinstance(exp, bool) and exp <= now:
            return "token_expired"
    return "token_revoked"


class RightsWatch:
    """Re-checks the credentials that `holders` report, and has `enders`
    end what a refused one holds. Runs while something is held: `poke()`
    (on the event loop) starts it when it is not running."""

    def __init__(
        self,
        auth: Authenticator,
        *,
        interval: float = RECHECK_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self._auth = auth
        self._interval = interval
        self._clock = clock
        self._pairs: list[tuple[Holder, Ender]] = []
        self._task: asyncio.Task[None] | None = None

    def watch(self, holder: Holder, ender: Ender) -> None:
        """Re-check what `holder` reports; end a refused credential with `ender`."""
        self._pairs.append((holder, ender))

    def poke(self) -> None:
        """On the event loop, after something was opened: make sure the watch runs."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while any(holder() for holder, _ in self._pairs):
            await asyncio.sleep(self._interval)
            await self.check()

    async def check(self) -> dict[str, EndReason]:
        """One round: each credential held looked up once; those refused ended."""
        held = set().union(*(holder() for holder, _ in self._pairs)) if self._pairs else set()
        refused: dict[str, EndReason] = {}
        for credential in held:
            reason = await asyncio.to_thread(self._refused, credential)
            if reason is not None:
                refused[credential] = reason
        for credential, reason in refused.items():
            for _, ender in self._pairs:
                ender(credential, reason)
        return refused

    def _refused(self, credential: str) -> EndReason | None:
        try:
            self._auth.principal(credential)
        except RpcError:
            return why_refused(credential, self._clock())
        except (StoreError, sqlite3.Error) as exc:
            # The token table did not answer: keep what is open and ask again
            # next round rather than end every stream on a database hiccup.
            log.warning("re-checking a bearer token failed (%s); will retry", exc)
        return None
