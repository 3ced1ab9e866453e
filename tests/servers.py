"""Servers for transport tests, each on a free loopback port: `LiveServer`
runs an app in a thread of the test process, `Serve` runs `chapline serve`
as a process, and the `served` fixtures share one such process across a
module."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import uvicorn

ROOT = Path(__file__).resolve().parents[1]


def env() -> dict[str, str]:
    """The environment a `python -m coordinator` child needs to import this
    tree; with faulthandler on, a child that hangs can be made to print its
    threads' stacks on standard error (SIGABRT) before the test fails."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"}


class LiveServer:
    """uvicorn on a pre-bound loopback socket, in a background thread.

    The socket listens before the thread starts, so a client can connect at
    once: the kernel queues the connection until uvicorn accepts it.
    `stop()` ends the desk's event streams first: they never finish on their
    own, and uvicorn waits for every open response before it stops.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.app.state.events.close()
        self.server.should_exit = True
        self.thread.join()
        self.sock.close()


class Serve:
    """`python -m coordinator serve --port 0 --db DB ...` (or `program`
    instead of `python -m coordinator`: the console script, say), its address
    read from the start-up line (`line`); `base` is http://127.0.0.1:PORT and
    `url` the CHAP endpoint under it. `db` is a file or a postgresql:// URI.
    As a context manager it stops the server at the end and asserts exit 0."""

    def __init__(
        self, db: Path | str, *options: str, program: Sequence[str] = (sys.executable, "-m", "coordinator")
    ) -> None:
        self.db = db
        self.proc = subprocess.Popen(
            [*program, "serve", "--port", "0", "--db", str(db), *options],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        )
        assert self.proc.stdout is not None
        self.line = self.proc.stdout.readline()
        found = re.search(r"CHAP on (http://127\.0\.0\.1:\d+)/chap", self.line)
        assert found, f"serve did not start: {self.line!r} {self.stop_now()}"
        self.base = found.group(1)
        self.url = self.base + "/chap"

    def __enter__(self) -> Serve:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """SIGTERM; unless the block failed already, the stop must be clean."""
        code, err = self.stop()
        if kind is None:
            assert code == 0, err

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        """Send `sig` and wait: the exit code and everything on stderr."""
        self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=120)
        return self.proc.returncode, err

    def stop_now(self) -> str:
        self.proc.kill()
        return self.proc.communicate()[1]


class Served(NamedTuple):
    url: str  # http://127.0.0.1:PORT
    db: Path
    tokens: dict[str, str]  # participant URI -> bearer token, with --auth


# The participants `served_with_auth` makes tokens for.
TOKEN_HOLDERS = ("human:alice", "agent:bot")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server shared by a module's tests (each uses its own workspace); it
    must stop cleanly (exit 0) at the end."""
    yield from _serve(tmp_path_factory.mktemp("served") / "s.db", {})


@pytest.fixture(scope="module")
def served_with_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The same with `--auth`, and a token for each of TOKEN_HOLDERS."""
    db = tmp_path_factory.mktemp("served") / "s.db"
    tokens = {}
    for uri in TOKEN_HOLDERS:
        made = subprocess.run(
            [sys.executable, "-m", "coordinator", "token", "create", "--db", str(db), "--as", uri,
             # what every token could do before scopes: these tests are about authentication
             "--all-workspaces", "--max-role", "admin", "--may-create"],
            capture_output=True, text=True, env=env(), timeout=120, check=True,
        )
        tokens[uri] = made.stdout.strip()
    yield from _serve(db, tokens, "--auth")


def _serve(db: Path, tokens: dict[str, str], *options: str) -> Iterator[Served]:
    server = Serve(db, *options)
    try:
        yield Served(server.base, db, tokens)
    finally:
        code, err = server.stop()
        assert code == 0, err
