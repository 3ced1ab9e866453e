"""The build: the modules pyproject.toml lists as compiled run as the
extensions setup.py builds (or, under CHAPLINE_PURE=1, as their sources), so
what the tests and the bench measure is what users run; and the compiled
form keeps what Python users lean on (docstrings, signatures)."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import os
from pathlib import Path

import pytest
from build_sources import compiled_sources

ROOT = Path(__file__).resolve().parent.parent
PURE = os.environ.get("CHAPLINE_PURE") == "1"


@pytest.mark.parametrize("path", compiled_sources())
def test_each_listed_module_runs_in_the_form_installed(path: str) -> None:
    name = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    module = importlib.import_module(name)
    loaded = Path(module.__file__ or "")
    extension = any(loaded.name.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES)
    assert extension is not PURE, f"{name} runs from {loaded} (CHAPLINE_PURE={PURE})"
    assert loaded.with_name(Path(path).name).is_file()  # its source beside it


@pytest.mark.parametrize("path", compiled_sources())
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


@pytest.mark.parametrize("path", compiled_sources())
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
