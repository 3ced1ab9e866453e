"""The modules pyproject.toml lists as compiled run as the extensions
setup.py builds, so what the tests and the bench measure is what users run."""

from __future__ import annotations

import ast
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


@pytest.mark.parametrize("path", _compiled())
def test_no_listed_module_defines_a_struct(path: str) -> None:
    # mypyc compiles a Struct's annotations into something msgspec cannot
    # read: a compiled `_Call(msgspec.Struct)` with `method: Any` refuses
    # every string ("Expected `type`"), so Structs live in interpreted modules.
    tree = ast.parse((ROOT / path).read_text())
    structs = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any("Struct" in ast.unparse(base) for base in node.bases)
    ]
    assert structs == [], f"{path} defines msgspec Structs {structs}; move them to an interpreted module"


@pytest.mark.parametrize("path", _compiled())
def test_no_listed_function_reuses_an_except_name_across_types(path: str) -> None:
    # mypyc gives a function's `except ... as name` one typed variable, so a
    # second clause of another class under the same name raises TypeError
    # instead of handling the exception (a patch bomb answered -32603 so).
    reused = []
    for fn in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            types: dict[str, set[str]] = {}
            for node in ast.walk(fn):
                if isinstance(node, ast.ExceptHandler) and node.name and node.type is not None:
                    types.setdefault(node.name, set()).add(ast.unparse(node.type))
            reused += [f"{fn.name}: {name} {sorted(t)}" for name, t in types.items() if len(t) > 1]
    assert reused == [], f"{path}: give each except clause its own name: {reused}"
