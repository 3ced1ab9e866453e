"""A coordinator on the other end of `chapline serve`, for agents in other
processes: `dispatch(envelope)` answers as an embedded `Coordinator` does
(the same result, the same error dict), over pooled HTTP connections, with
a bearer token and, given a key, signed envelopes. SPECIFICATION.md,
"RemoteCoordinator".

Calls are retried with backoff when nothing was applied (-32900, -32901, a
503) and when the answer was lost (a transport error; a 502, the worker of
`serve --workers` that answers the workspace having stopped before
answering), and retrying is safe
by construction: a signed call resent verbatim is answered from the
server's replay index, and every other call carries an idempotency key
(`x-chapline-idempotency-key`, "Idempotency keys") that the server answers
from its log instead of running the call twice.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import msgspec

from coordinator.client.refusals import refusal
from coordinator.compat import WorkspaceState
from coordinator.engine.idempotent_calls import IDEMPOTENCY_FIELD
from coordinator.errors import RemoteUnavailable
from coordinator.extras import needs

with needs("client"):
    import httpx

if TYPE_CHECKING:
    from coordinator.client.waiting import Decision, WhisperAnswer

__all__ = ["AsyncRemoteCoordinator", "RemoteCoordinator", "Retry", "SigningKey"]

# Nothing was applied: the store did not take the write, or other writers won twice.
_RETRIED_CODES = frozenset({-32900, -32901})
_encode = msgspec.json.Encoder().encode

# A private Ed25519 key (32 raw bytes or a cryptography key) and the kid it
# was registered under (`participant.join` jwks).
SigningKey = tuple[Any, str]


class Retry:
    """How often and how patiently a call is sent again: `attempts` in all,
    waiting `backoff` seconds after the first failure, doubling up to
    `max_backoff`, each wait scaled by a jitter in [0.5, 1) so that clients
    out-raced together do not collide again. The defaults ride out a server
    restart of ten seconds or so."""

    __slots__ = ("attempts", "backoff", "max_backoff")

    def __init__(self, attempts: int = 12, backoff: float = 0.05, max_backoff: float = 2.0) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1 (the first try)")
        self.attempts = attempts
        self.backoff = backoff
        self.max_backoff = max_backoff

    def pause(self, failures: int, jitter: float) -> float:
        """Seconds to wait after the `failures`-th failure."""
        grown: float = self.backoff * 2.0 ** (failures - 1)
        return min(self.max_backoff, grown) * (0.5 + jitter / 2)


def _endpoints(url: str) -> tuple[str, str]:
    """The server's base URL and its CHAP path, from either (`http://h:p` or
    `http://h:p/chap`)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"url must be http(s)://host:port of a chapline server, not {url!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/chap"):
        path = path[: -len("/chap")]
    return f"{parts.scheme}://{parts.netloc}{path}", f"{path}/chap"


class _Calls:
    """What the sync and async clients share: envelopes made safe to resend,
    and what an HTTP answer means."""

    def __init__(
        self,
        url: str,
        token: str | None,
        key: SigningKey | None,
        retry: Retry | None,
        keys: Callable[[], str] | None,
        jitter: Callable[[], float] | None,
    ) -> None:
        self.base, self.path = _endpoints(url)
        self.headers = {"content-type": "application/json"}
        if token is not None:
            self.headers["authorization"] = f"Bearer {token}"
        if key is not None:
            from coordinator.security.signing import sign_envelope  # [crypto], only when signing

            private, kid = key
            self._sign: Callable[[dict[str, Any]], dict[str, Any]] | None = lambda e: sign_envelope(e, private, kid)
        else:
            self._sign = None
        self.retry = retry if retry is not None else Retry()
        self._keys = keys if keys is not None else lambda: uuid.uuid4().hex
        self.jitter = jitter if jitter is not None else random.random

    def body(self, envelope: Any) -> bytes:
        """The bytes to send, the same at every attempt: a dict is signed
        (given a key, unless it carries a `sig`) or else given an idempotency
        key (unless it has one); JSON text is sent as it is."""
        if isinstance(envelope, (bytes, bytearray, memoryview)):
            return bytes(envelope)
        if isinstance(envelope, str):
            return envelope.encode("utf-8", "surrogatepass")
        if isinstance(envelope, dict) and "sig" not in envelope:
            if self._sign is not None:
                envelope = self._sign(envelope)
            elif IDEMPOTENCY_FIELD not in envelope:
                envelope = {**envelope, IDEMPOTENCY_FIELD: self._keys()}
        try:
            return _encode(envelope)
        except (TypeError, ValueError, UnicodeEncodeError) as err:
            raise ValueError(f"the envelope cannot be sent as JSON: {err}") from None

    def answer(self, reply: httpx.Response) -> tuple[dict[str, Any] | None, str]:
        """The JSON-RPC answer in `reply`, or None and why it is worth
        another try (nothing was applied, or the server is going away)."""
        try:
            body = msgspec.json.decode(reply.content)
        except msgspec.DecodeError:
            body = None
        if not isinstance(body, dict) or ("result" not in body and "error" not in body):
            return None, f"HTTP {reply.status_code} without a JSON-RPC answer"
        error = body.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        if code in _RETRIED_CODES or reply.status_code in (502, 503):
            return None, f"HTTP {reply.status_code}, {code}: {error.get('message') if isinstance(error, dict) else ''}"
        return body, ""

    def last_answer(self, reply: httpx.Response) -> dict[str, Any] | None:
        """After the last attempt: a JSON-RPC answer as it is (a -32901 too)."""
        try:
            body = msgspec.json.decode(reply.content)
        except msgspec.DecodeError:
            return None
        return body if isinstance(body, dict) and ("result" in body or "error" in body) else None


def _snapshot_answer(reply: httpx.Response) -> dict[str, Any] | None:
    """The snapshot in `reply`; None for a workspace the server does not hold."""
    if reply.status_code == 404:
        return None
    if reply.status_code != 200:
        raise refusal(reply)
    snapshot: dict[str, Any] = msgspec.json.decode(reply.content)
    return snapshot


class RemoteCoordinator:
    """`chapline serve` at `url` as a coordinator: `dispatch`, `snapshot`,
    `get_workspace`, `workspaces`, and waiting for people (`wait_for_decision`,
    `wait_for_whisper_answer`). `token` is the bearer token (`chapline token
    create`), `key` a `(private_key, kid)` pair to sign every envelope with.
    `retry`, `keys` (idempotency keys), `jitter`, `sleep` and the httpx
    `transport` are injectable. Connections are pooled; `close()` (or `with`) releases them."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        key: SigningKey | None = None,
        *,
        retry: Retry | None = None,
        timeout: float = 30.0,
        keys: Callable[[], str] | None = None,
        jitter: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._calls = _Calls(url, token, key, retry, keys, jitter)
        self._sleep = sleep
        self.url = self._calls.base
        self.http = httpx.Client(
            base_url=self._calls.base, headers=self._calls.headers, timeout=timeout, transport=transport
        )

    def dispatch(self, envelope: Any) -> dict[str, Any]:
        """Send one envelope; its answer, as `Coordinator.dispatch` answers
        it. Retried (see the module docstring); RemoteUnavailable once the
        attempts are spent without an answer."""
        calls = self._calls
        body = calls.body(envelope)
        reason = ""
        for attempt in range(1, calls.retry.attempts + 1):
            try:
                reply = self.http.post(calls.path, content=body)
            except httpx.TransportError as err:
                reason = f"{type(err).__name__}: {err}"
            else:
                answer, reason = calls.answer(reply)
                if answer is not None:
                    return answer
                if attempt == calls.retry.attempts:
                    last = calls.last_answer(reply)
                    if last is not None:
                        return last
            if attempt < calls.retry.attempts:
                self._sleep(calls.retry.pause(attempt, calls.jitter()))
        raise RemoteUnavailable(self.url, calls.retry.attempts, reason)

    def snapshot(self, workspace_id: str) -> dict[str, Any]:
        """The workspace as the embedded `snapshot()` gives it (the desk's
        snapshot read); KeyError if the server holds no such workspace."""
        found = self._snapshot(workspace_id)
        if found is None:
            raise KeyError(workspace_id)
        return found

    def _snapshot(self, workspace_id: str) -> dict[str, Any] | None:
        reply = self._get("/desk/api/snapshot", {"workspace": workspace_id})
        return _snapshot_answer(reply)

    def workspace_ids(self) -> list[str]:
        """The ids of the workspaces the server holds (that the token may read)."""
        reply = self._get("/desk/api/workspaces", {})
        if reply.status_code != 200:
            raise refusal(reply)
        ids: list[str] = msgspec.json.decode(reply.content)["workspaces"]
        return ids

    def get_workspace(self, workspace_id: str) -> WorkspaceState | None:
        """As the embedded `get_workspace`: 0.3.3's field layout, or None."""
        found = self._snapshot(workspace_id)
        return None if found is None else WorkspaceState.from_snapshot(found)

    @property
    def workspaces(self) -> Any:
        """Workspace id -> a read-only view, as the embedded `workspaces`
        (each read asks the server)."""
        from coordinator.client.views import RemoteWorkspaces

        return RemoteWorkspaces(self.workspace_ids, self._snapshot)

    def _get(self, path: str, query: dict[str, str]) -> httpx.Response:
        """A read, retried on transport errors and 503s as calls are."""
        retry = self._calls.retry
        reason = ""
        for attempt in range(1, retry.attempts + 1):
            try:
                reply = self.http.get(path, params=query)
            except httpx.TransportError as err:
                reason = f"{type(err).__name__}: {err}"
            else:
                if reply.status_code != 503:
                    return reply
                reason = "HTTP 503"
            if attempt < retry.attempts:
                self._sleep(retry.pause(attempt, self._calls.jitter()))
        raise RemoteUnavailable(self.url, retry.attempts, reason)

    def wait_for_decision(self, workspace: str, task_id: str, timeout: float) -> Decision:
        """Block until the review of `task_id` is decided; the `Decision`
        (see coordinator/client/waiting.py). WaitTimedOut after `timeout` s."""
        from coordinator.client.waiting import decision_of, follow

        return follow(self, workspace, task_id, decision_of, timeout)

    def wait_for_whisper_answer(self, workspace: str, whisper_id: str, timeout: float) -> WhisperAnswer:
        """Block until the whisper is answered or lapses; the `WhisperAnswer`."""
        from coordinator.client.waiting import follow, whisper_answer_of

        return follow(self, workspace, whisper_id, whisper_answer_of, timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RemoteCoordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _async_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


class AsyncRemoteCoordinator:
    """The async twin of `RemoteCoordinator` (httpx.AsyncClient): the same
    arguments, `await` on each call."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        key: SigningKey | None = None,
        *,
        retry: Retry | None = None,
        timeout: float = 30.0,
        keys: Callable[[], str] | None = None,
        jitter: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = _async_sleep,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._calls = _Calls(url, token, key, retry, keys, jitter)
        self._sleep = sleep
        self._token = token
        self._timeout = timeout
        self.url = self._calls.base
        self.http = httpx.AsyncClient(
            base_url=self._calls.base, headers=self._calls.headers, timeout=timeout, transport=transport
        )

    async def dispatch(self, envelope: Any) -> dict[str, Any]:
        """As `RemoteCoordinator.dispatch`."""
        calls = self._calls
        body = calls.body(envelope)
        reason = ""
        for attempt in range(1, calls.retry.attempts + 1):
            try:
                reply = await self.http.post(calls.path, content=body)
            except httpx.TransportError as err:
                reason = f"{type(err).__name__}: {err}"
            else:
                answer, reason = calls.answer(reply)
                if answer is not None:
                    return answer
                if attempt == calls.retry.attempts:
                    last = calls.last_answer(reply)
                    if last is not None:
                        return last
            if attempt < calls.retry.attempts:
                await self._sleep(calls.retry.pause(attempt, calls.jitter()))
        raise RemoteUnavailable(self.url, calls.retry.attempts, reason)

    async def snapshot(self, workspace_id: str) -> dict[str, Any]:
        """As `RemoteCoordinator.snapshot`."""
        reply = await self.http.get("/desk/api/snapshot", params={"workspace": workspace_id})
        found = _snapshot_answer(reply)
        if found is None:
            raise KeyError(workspace_id)
        return found

    async def get_workspace(self, workspace_id: str) -> WorkspaceState | None:
        """As `RemoteCoordinator.get_workspace`."""
        reply = await self.http.get("/desk/api/snapshot", params={"workspace": workspace_id})
        found = _snapshot_answer(reply)
        return None if found is None else WorkspaceState.from_snapshot(found)

    async def wait_for_decision(self, workspace: str, task_id: str, timeout: float) -> Decision:
        """As `RemoteCoordinator.wait_for_decision`, on a worker thread (the
        event loop stays free while a person decides)."""
        return await asyncio.to_thread(self._waiting, "wait_for_decision", workspace, task_id, timeout)

    async def wait_for_whisper_answer(self, workspace: str, whisper_id: str, timeout: float) -> WhisperAnswer:
        """As `RemoteCoordinator.wait_for_whisper_answer`, on a worker thread."""
        return await asyncio.to_thread(self._waiting, "wait_for_whisper_answer", workspace, whisper_id, timeout)

    def _waiting(self, how: str, workspace: str, subject: str, timeout: float) -> Any:
        with RemoteCoordinator(self.url, self._token, timeout=self._timeout, retry=self._calls.retry) as sync:
            return getattr(sync, how)(workspace, subject, timeout)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncRemoteCoordinator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
