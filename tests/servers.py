"""`chapline serve` as a real process on a free port, for transport tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]


def env() -> dict[str, str]:
    """The environment a `python -m coordinator` child needs to import this tree."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


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
            [sys.executable, "-m", "coordinator", "token", "create", "--db", str(db), "--as", uri],
            capture_output=True, text=True, env=env(), timeout=120, check=True,
        )
        tokens[uri] = made.stdout.strip()
    yield from _serve(db, tokens, "--auth")


def _serve(db: Path, tokens: dict[str, str], *options: str) -> Iterator[Served]:
    process = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--port", "0", "--db", str(db), *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"CHAP on (http://\S+)/chap", line)
        if not found:
            process.kill()
            raise AssertionError(f"serve did not start: {line!r} {process.communicate()[1]}")
        yield Served(found.group(1), db, tokens)
    finally:
        process.terminate()
        assert process.wait(timeout=60) == 0
