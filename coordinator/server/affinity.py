"""Workspace affinity under `serve --workers N` (SPECIFICATION.md, "Several
processes on one database", Affinity).

Each worker holds a slot, 0 to N-1, and besides the shared port listens on a
Unix socket of its slot, in a directory only the server's user may enter. A
POST /chap call naming a workspace whose slot (`slot_of`) is another
worker's is passed to that worker over its socket and its answer returned,
so one workspace's calls run in one process, one after another, instead of
racing for the workspace's write turn across processes.

Calls are answered where they arrived when they name no workspace (a batch,
a create without an id, a body that is not a call: the answer is the same
anywhere), when they came over a slot's socket (never passed on twice), and
when the slot's worker cannot be reached (dead, or not started yet: the
write turn keeps that correct, only slower) or stopped before reading the
whole call (see `Affinity.forward`). A call passed on whose worker read it
and stops before answering, or does not answer in time, is answered 502,
-32603, saying that whether it was applied is unknown: what a client learns
from a connection broken mid-call; a resend with the same idempotency key
or signature is answered as the first was, or applied once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import msgspec

from coordinator.engine.wire import INTERNAL_ERROR, error_response
from coordinator.errors import RpcError
from storage.types import DEFAULT_WAIT

__all__ = ["FORWARD_MARGIN", "Affinity", "Answer", "Elsewhere", "slot_of", "slots_directory"]

# Request headers that belong to one connection, not to the call.
_HOP_BY_HOP = frozenset(
    (b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"te", b"upgrade",
     b"proxy-connection", b"expect")
)
# Answer headers the owner's answer carries that mean something to the
# client; the rest (security headers, CORS) the forwarding worker adds itself.
_PASSED_BACK = frozenset((b"content-type", b"retry-after", b"www-authenticate"))
_HEAD_LIMIT = 64 * 1024
# How much longer than a write may wait for its turn (--write-wait) a worker
# waits for the worker it passed a call to: only one stopped or stuck takes that long.
FORWARD_MARGIN = 30.0

_encode = msgspec.json.Encoder().encode


class _Params(msgspec.Struct):
    workspace: Any = None


class _Call(msgspec.Struct):
    id: Any = None
    params: _Params | None = None


class Elsewhere(NamedTuple):
    """A call another worker answers: its slot, the workspace, the call's id."""

    slot: int
    workspace: str
    request_id: Any


class Answer(NamedTuple):
    """What a worker answered a call passed on: its status, the headers
    that concern the client, the body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


_peek = msgspec.json.Decoder(_Call).decode


def slot_of(workspace: str, slots: int) -> int:
    """The slot whose worker answers `workspace`'s calls: the same in every
    process and every run (a CRC, not Python's salted hash)."""
    return zlib.crc32(workspace.encode("utf-8", "surrogatepass")) % slots


# A Unix socket's path holds at most this many bytes (sun_path, Linux).
_PATH_BYTES = 107
# The longest name a worker's socket takes in the directory (`K.PID`).
_LONGEST_PID = 4194304  # Linux's pid_max ceiling


@contextlib.contextmanager
def slots_directory(slots: int) -> Iterator[str | None]:
    """A fresh directory for `slots` workers' sockets (only this user may
    enter it), in the temporary directory or, if its path is too long for a
    socket's, in /tmp; removed on the way out. None (with a warning on
    standard error) when neither is short enough or writable."""
    path = None
    for parent in dict.fromkeys((tempfile.gettempdir(), "/tmp")):
        longest = os.path.join(parent, "chapline-slots-XXXXXXXX", f"{slots - 1}.{_LONGEST_PID}")
        if len(os.fsencode(longest)) > _PATH_BYTES:
            continue
        try:
            path = tempfile.mkdtemp(prefix="chapline-slots-", dir=parent)
            break
        except OSError:
            continue
    if path is None:
        print("chapline: no directory with a path short enough for the workers' sockets "
              "(set TMPDIR to a shorter one); each worker answers every call it accepts",
              file=sys.stderr, flush=True)
    try:
        yield path
    finally:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


class Affinity:
    """One worker's part: its slot, its socket, and where the others' are.

    `directory` holds one socket per slot (named `K`); `listen()` makes this
    worker's, under a name of its own (`K.PID`), and `publish()` (once it
    accepts connections) moves it to its slot's name, taking the slot over
    from a worker it replaces in one step."""

    def __init__(self, directory: str, slot: int, slots: int, *, write_wait: float | None = None) -> None:
        """`write_wait`: how long the store waits for a write turn (None: its default)."""
        if write_wait is None:
            write_wait = DEFAULT_WAIT
        if not 0 <= slot < slots:
            raise ValueError(f"slot must be in 0..{slots - 1}, got {slot}")
        if not write_wait > 0:
            raise ValueError(f"write_wait must be a positive number of seconds, got {write_wait}")
        self.directory = directory
        self.slot = slot
        self.slots = slots
        self.timeout = write_wait + FORWARD_MARGIN
        self._own = os.path.join(directory, f"{slot}.{os.getpid()}")

    def path(self, slot: int) -> str:
        return os.path.join(self.directory, str(slot))

    def listen(self) -> socket.socket:
        """This worker's socket, listening (not yet its slot's: `publish`)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self._own)
            sock.listen(2048)
        except OSError:
            sock.close()
            raise
        return sock

    def publish(self) -> None:
        """Answer for the slot from now on (rename is atomic: a worker
        connecting finds the old socket or this one, never none). If that
        fails, this worker still serves; the others answer its slot's calls."""
        try:
            os.rename(self._own, self.path(self.slot))
        except OSError as exc:
            print(f"chapline: worker {os.getpid()} cannot take slot {self.slot}: {exc}; "
                  "its workspaces' calls are answered where they arrive", file=sys.stderr, flush=True)

    @staticmethod
    def passed_on(scope: Mapping[str, Any]) -> bool:
        """Whether the request came over a slot's socket: uvicorn gives a Unix
        socket's connections no server address, or (path, None); a TCP
        connection's always has a port."""
        server = scope.get("server")
        return server is None or server[1] is None

    def elsewhere(self, body: bytes) -> Elsewhere | None:
        """Where the call in `body` is answered, if by another worker."""
        try:
            call = _peek(body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None  # not one call (a batch), or not JSON: answered here
        workspace = call.params.workspace if call.params is not None else None
        if not isinstance(workspace, str):
            return None
        slot = slot_of(workspace, self.slots)
        return None if slot == self.slot else Elsewhere(slot, workspace, call.id)

    async def forward(
        self, call: Elsewhere, target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes
    ) -> Answer | None:
        """Send the request to the call's worker on a new connection and
        return its answer; None when that worker cannot be reached, or
        stopped before it read the whole request (nothing was applied: the
        call is answered here). A worker that has not answered within
        `timeout` seconds (the store's write wait and a margin: it is
        stopped or stuck), or that closed the connection after reading the
        request, is answered for as one that died: 502, applied unknown."""
        try:
            reader, writer = await asyncio.open_unix_connection(self.path(call.slot), limit=_HEAD_LIMIT)
        except OSError:
            return None
        try:
            head = [b"POST %s HTTP/1.1\r\n" % target]
            head += [b"%s: %s\r\n" % (name, value) for name, value in headers
                     if name.lower() not in _HOP_BY_HOP]
            head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
            writer.write(b"".join(head))
            writer.write(body)
            async with asyncio.timeout(self.timeout):
                answer = await _read_answer(reader)
        except (ConnectionResetError, BrokenPipeError):
            # A Unix socket closed with data still unread resets its peer; one
            # that read everything ends it. So a reset says the worker never
            # read the whole request: one left in a stopping worker's backlog
            # (a reload), or one it stopped before reading. A broken pipe says
            # it closed before the request was even sent. Nothing was applied.
            return None
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
                IndexError):
            answer = None
        finally:
            writer.close()
        return answer if answer is not None else _lost(call)


async def _read_answer(reader: asyncio.StreamReader) -> Answer | None:
    """A whole HTTP/1.1 answer with a Content-Length; None if cut short."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = head[:-4].split(b"\r\n")
    status = int(status_line.split(b" ", 2)[1])
    passed: list[tuple[bytes, bytes]] = []
    length = None
    for line in lines:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip()
        if name == b"content-length":
            length = int(value)
        elif name in _PASSED_BACK:
            passed.append((name, value))
    if length is None:
        return None
    body = await reader.readexactly(length)
    return Answer(status, passed, body)


def _lost(call: Elsewhere) -> Answer:
    error = RpcError(
        INTERNAL_ERROR,
        f"The worker that answers workspace {call.workspace} stopped before answering; "
        "whether the call was applied is unknown. Resend it with the same idempotency key "
        "or signature: it is answered as the first was, or applied once",
        {"workspace": call.workspace, "applied": "unknown"},
    )
    return Answer(502, [(b"content-type", b"application/json")], _encode(error_response(call.request_id, error)))
