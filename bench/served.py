"""`chapline serve` started for a benchmark: the process and its port."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

__all__ = ["start_serve"]

ROOT = Path(__file__).resolve().parent.parent


def start_serve(db: str, *options: str) -> tuple[subprocess.Popen[str], int]:
    """`python -m coordinator serve --port 0 --db DB OPTIONS...`, once it has
    printed its start-up line; its port is read from that line."""
    server = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--port", "0", "--db", db, *options],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    line = server.stdout.readline() if server.stdout else ""
    found = re.search(r"http://127\.0\.0\.1:(\d+)/chap", line)
    if not found:
        server.kill()
        raise RuntimeError(f"chapline serve did not start: {line!r}")
    return server, int(found.group(1))
