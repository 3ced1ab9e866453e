"""The modules pyproject.toml lists as compiled run as the extensions
setup.py builds, so what the tests and the bench measure is what users run."""

from __future__ import annotations

import importlib
import importlib.machinery
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _compiled() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        paths: list[str] = tomllib.load(f)["tool"]["chapline"]["compiled"]
    return paths


@pytest.mark.parametrize("path", _compiled())
def test_each_listed_module_is_loaded_as_its_extension(path: str) -> None:
    name = path.removesuffix(".py").replace("/", ".")
    module = importlib.import_module(name)
    loaded = Path(module.__file__ or "")
    assert any(loaded.name.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES), loaded
    assert loaded.with_name(Path(path).name).is_file()  # its source beside it

