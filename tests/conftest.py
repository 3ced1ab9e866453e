"""Hypothesis profiles: "ci" (selected when the environment has CI=true, as
.ci/run sets it) explores more and stays bounded; "dev", the default for local
runs, is quicker. HYPOTHESIS_PROFILE=<name> picks one explicitly.

Fixtures shared by the test modules: a throwaway PostgreSQL server.

The run stops at once when the compiled modules (setup.py) are older than
their sources: the tests would otherwise exercise the code as last built."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from build_sources import compiled_sources
from hypothesis import HealthCheck, settings
from pgserver import PgServer, stop_stale_servers

# `chapline serve` as a process, for the transport tests.
from servers import served, served_with_auth  # noqa: F401

_ROOT = Path(__file__).resolve().parent.parent


def _stale_build() -> str | None:
    """What to do when the built extensions are not those of the sources."""
    import coordinator.engine.canonical

    module = Path(coordinator.engine.canonical.__file__).resolve()
    if module.suffix == ".py" or not module.is_relative_to(_ROOT):
        return None  # the sources run as they are, or an installed copy runs
    digest = hashlib.sha256()
    for path in compiled_sources():
        digest.update((_ROOT / path).read_bytes())
    built = _ROOT / "build" / "compiled.sha256"
    if built.is_file() and built.read_text() == digest.hexdigest():
        return None
    return (
        "the compiled modules (setup.py) are older than their sources; "
        "`./run test` rebuilds them (or `.venv/bin/pip install -e '.[test]'`)"
    )


_STALE = _stale_build()
if _STALE is not None:
    pytest.exit(_STALE, returncode=2)

settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "dev")
)

# The PostgreSQL tests name their server in full: PG* variables from outside
# (another host, a password file, an SSL mode) must not reach them or the
# processes they start.
for _name in [name for name in os.environ if name.startswith("PG")]:
    del os.environ[_name]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server for the whole run of this process (each pytest-xdist
    worker starts its own), removed at the end. Fails (does not skip) when it
    cannot start: see tests/pgserver.py."""
    stop_stale_servers()
    server = PgServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


_schemas = itertools.count()


@pytest.fixture
def pg_schema(pg_server: PgServer) -> Callable[[], str]:
    """Makes empty schemas on the session's server: each call returns the
    DSN of a new one (a schema is much cheaper to make than a database)."""
    import psycopg

    def new() -> str:
        name = f"t{next(_schemas)}"
        with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
            conn.execute(f"CREATE SCHEMA {name}")
        return pg_server.dsn(options=f"-c search_path={name}")

    return new


@pytest.fixture
def pg_dsn(pg_schema: Callable[[], str]) -> str:
    """The DSN of an empty schema of its own on the session's server."""
    return pg_schema()
