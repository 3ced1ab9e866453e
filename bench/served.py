"""A server started for a benchmark (`chapline serve`, or another that
prints the same start-up line): the process and its port."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

__all__ = ["start_server", "start_serve"]

ROOT = Path(__file__).resolve().parent.parent


def start_serve(db: str, *options: str) -> tuple[subprocess.Popen[str], int]:
    """`python -m coordinator serve --port 0 --db DB OPTIONS...`, once it has
    printed its start-up line."""
    return start_server([sys.executable, "-m", "coordinator", "serve", "--port", "0", "--db", db, *options],
                        "chapline serve")


def start_server(argv: list[str], what: str) -> tuple[subprocess.Popen[str], int]:
    """`argv` run from the repository root, once it has printed a line naming
    `http://127.0.0.1:PORT/chap`; PORT is read from that line."""
    server = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline() if server.stdout else ""
    found = re.search(r"http://127\.0\.0\.1:(\d+)/chap", line)
    if not found:
        server.kill()
        raise RuntimeError(f"{what} did not start: {line!r}")
    return server, int(found.group(1))
