"""The sources the build compiles, as setup.py lists them (folders expanded),
for the stale-build check (conftest.py) and the build tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def compiled_sources() -> list[str]:
    """Paths relative to the repository root, sorted."""
    spec = importlib.util.spec_from_file_location("chapline_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)  # not __main__: defines, builds nothing
    sources: list[str] = setup.compiled_sources()
    return sources
