"""chapline's optional parts (extras) and the error a missing one raises.

The core (`Coordinator`, MemoryStore, SqliteStore) needs msgspec alone;
everything else is an extra of the `chapline` distribution, installed with
`pip install 'chapline[<extra>]'` and imported only where it is used
(SPECIFICATION.md, "Installing"). Code that needs one imports it inside
`needs`::

    with needs("crypto"):
        import cbor2

so that a missing package is a `MissingExtraError` naming the command that
installs it, as the first thing the caller sees, rather than a bare
ModuleNotFoundError. `installed` asks without importing: a profile whose
extra is missing is not advertised.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager

from coordinator.errors import MissingExtraError

__all__ = ["EXTRAS", "MissingExtraError", "installed", "needs"]

# extra -> the top-level modules it provides (pyproject.toml declares the
# packages; httptools and uvloop only speed uvicorn up, and [mcp] and [a2a]
# bring [server] with them).
EXTRAS: dict[str, tuple[str, ...]] = {
    "server": ("starlette", "uvicorn"),
    "mcp": ("mcp", "mcp_types", "anyio", "starlette", "uvicorn"),
    "a2a": ("a2a", "google.protobuf", "starlette", "uvicorn"),
    "postgres": ("psycopg",),
    "crypto": ("cryptography", "joserfc", "cbor2"),
    "cli": ("rich",),
    "metrics": ("prometheus_client",),
    "otel": ("opentelemetry", "opentelemetry.sdk"),
    "client": ("httpx",),
}


def _provides(extra: str, module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in EXTRAS[extra])


@contextmanager
def needs(extra: str) -> Iterator[None]:
    """Run the imports inside as the `extra` extra's: one of its packages
    missing raises MissingExtraError (anything else missing is not its
    business and passes through unchanged)."""
    if extra not in EXTRAS:
        raise ValueError(f"no extra {extra!r}: chapline's extras are {', '.join(EXTRAS)}")
    try:
        yield
    except ModuleNotFoundError as missing:
        if missing.name is None or not _provides(extra, missing.name):
            raise
        raise MissingExtraError(extra, missing.name) from missing


@functools.cache
def installed(extra: str) -> bool:
    """Whether every package of `extra` can be imported (none is imported)."""
    return all(_findable(module) for module in EXTRAS[extra])


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package (google, of google.protobuf) is missing
        return False
