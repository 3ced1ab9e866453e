"""SerialDispatcher: every call of one coordinator on one worker thread.

A coordinator is single-writer: its calls must run one at a time and in
arrival order. A server on an event loop must not run them on the loop thread
either, because a call waits for the store's disk sync. So transports hand
each request body to this queue and await the response; one thread takes the
calls off the queue in order and dispatches them.

Group commit: the worker takes every call already waiting (up to `max_group`)
as one group and dispatches a group of several inside `Coordinator.batch()`,
so they cost one store write; their answers are released only after that
write succeeded (or, if it failed, rewritten to its error), which keeps the
server write-ahead. A lone call is dispatched on its own.

`run(fn)` queues a read of the coordinator (a snapshot, the workspace ids)
behind the calls already waiting, so it runs on the same thread, after their
write, and sees their effects.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from coordinator.engine.incidents import internal_error
from coordinator.engine.registry import CallCheck
from coordinator.engine.wire import error_response
from coordinator.errors import BatchWriteError, DispatcherClosed

__all__ = ["Dispatcher", "SerialDispatcher", "sweep_every"]

log = logging.getLogger(__name__)


class Dispatcher(Protocol):
    """What a transport needs from a coordinator."""

    def dispatch(
        self, envelope: dict[str, Any] | str | bytes, *, authorise: CallCheck | None = None
    ) -> dict[str, Any]: ...

    def batch(self) -> AbstractContextManager[None]: ...


# A request body with the server's authorise check for it (None: none).
_Body = tuple[bytes, CallCheck | None]
# One queued job: a request (or a read to run), and the loop and future
# awaiting its answer.
_Job = tuple[_Body | Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]
_Call = tuple[_Body, asyncio.AbstractEventLoop, "asyncio.Future[Any]"]
# A future and its outcome: (result, None), or (None, the exception).
_Settled = tuple["asyncio.Future[Any]", tuple[Any, BaseException | None]]
_STOP = None
_T = TypeVar("_T")


class SerialDispatcher:
    """Runs `target.dispatch` for every submitted call on one thread, in order.

    `start()` before the first call; `close()` stops taking calls, runs the
    ones already queued, and waits for the thread, so every call that was
    answered, or will be, has been dispatched when it returns.
    """

    def __init__(self, target: Dispatcher, *, max_group: int = 64) -> None:
        if max_group < 1:
            raise ValueError(f"max_group must be at least 1, got {max_group}")
        self._target = target
        self._max_group = max_group
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="chap-dispatch", daemon=True)
        # Held while checking `_closed` and queueing, so no call can be queued
        # behind the stop marker and left unanswered.
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> None:
        self._thread.start()

    async def dispatch(self, body: bytes, authorise: CallCheck | None = None) -> dict[str, Any]:
        """Queue one request body and wait for the coordinator's response;
        `authorise` is passed to `Coordinator.dispatch` (server/authz.py)."""
        response: dict[str, Any] = await self._submit((body, authorise))
        return response

    async def run(self, read: Callable[[], _T]) -> _T:
        """Run `read` on the worker thread, after the calls queued before it.

        For reads, and for writes that must not run inside a batch
        (`Coordinator.sweep`): it runs outside any batch, and an exception
        it raises is raised here.
        """
        result: _T = await self._submit(read)
        return result

    async def _submit(self, job: _Body | Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._closed:
                raise DispatcherClosed("the dispatcher is closed; no more calls are taken")
            self._queue.put((job, loop, future))
        # A client that disconnects cancels its request task, and with it
        # this future; the call is already queued and still runs, and its
        # answer is dropped (`_settle` skips a future that is done).
        return await future

    def close(self) -> None:
        """Stop taking calls, finish the queued ones, and join the thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        if self._thread.is_alive():
            self._thread.join()

    # -- the worker thread ---------------------------------------------------

    def _work(self) -> None:
        while True:
            group, stop = self._take_group()
            if group:
                self._run(group)
            if stop:
                return

    def _take_group(self) -> tuple[list[_Job], bool]:
        """Block for one call, then take the calls already waiting behind it."""
        first = self._queue.get()
        if first is _STOP:
            return [], True
        group = [first]
        while len(group) < self._max_group:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is _STOP:
                return group, True
            group.append(job)
        return group, False

    def _run(self, jobs: list[_Job]) -> None:
        group: list[_Call] = []
        reads: list[tuple[Callable[[], Any], asyncio.AbstractEventLoop, asyncio.Future[Any]]] = []
        for job, loop, future in jobs:
            if callable(job):
                reads.append((job, loop, future))
            else:
                group.append((job, loop, future))
        if group:
            self._run_calls(group)
        # After the calls' write, so a read sees them, and never inside a batch.
        for read, loop, future in reads:
            try:
                outcome: tuple[Any, BaseException | None] = (read(), None)
            except Exception as exc:
                outcome = (None, exc)
            _post(loop, [(future, outcome)])

    def _run_calls(self, group: list[_Call]) -> None:
        if len(group) == 1:
            responses = [self._dispatch(group[0][0])]
        else:
            try:
                with self._target.batch():
                    responses = [self._dispatch(request) for request, _, _ in group]
            except BatchWriteError:
                # The write failed and was undone; the batch has already
                # rewritten each recorded call's response to the write error.
                pass
            except Exception as exc:
                error = internal_error(log, "group commit failed; answering -32603 to the whole group", exc)
                responses = [error_response(None, error) for _ in group]
        # One wake-up of each waiting loop for the whole group.
        answers: dict[asyncio.AbstractEventLoop, list[_Settled]] = {}
        for (_, loop, future), response in zip(group, responses, strict=True):
            answers.setdefault(loop, []).append((future, (response, None)))
        for loop, settled in answers.items():
            _post(loop, settled)

    def _dispatch(self, request: _Body) -> dict[str, Any]:
        body, authorise = request
        try:
            if authorise is None:  # a target of its own need not take the keyword
                return self._target.dispatch(body)
            return self._target.dispatch(body, authorise=authorise)
        except Exception as exc:
            # dispatch promises not to raise; if it does, the caller still
            # gets a JSON-RPC answer and the worker keeps serving.
            return error_response(None, internal_error(log, "dispatch raised; answering -32603", exc))


async def sweep_every(dispatcher: SerialDispatcher, sweep: Callable[[], object], seconds: float) -> None:
    """Run `sweep` (`Coordinator.sweep`) on the dispatcher's thread every
    `seconds`, between calls, until cancelled or the dispatcher closes. A
    failing sweep is logged and tried again next time (a store that is down
    now may be back then). Cancelling abandons only the wait: a sweep
    already queued still runs before the dispatcher stops."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await dispatcher.run(sweep)
        except DispatcherClosed:
            return
        except Exception:
            log.exception("the timed sweep failed; it runs again in %s s", seconds)


def _post(loop: asyncio.AbstractEventLoop, settled: list[_Settled]) -> None:
    """Settle the futures of `loop` with their outcomes, in one wake-up of it."""
    try:
        loop.call_soon_threadsafe(_settle, settled)
    except RuntimeError:
        # The loop is already closed: nobody is waiting for these answers.
        pass


def _settle(settled: list[_Settled]) -> None:
    for future, (result, error) in settled:
        if future.done():
            continue  # its caller stopped waiting
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
