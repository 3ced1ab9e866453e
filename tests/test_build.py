"""The build: the modules pyproject.toml lists as compiled run as the
extensions setup.py builds (or, under CHAPLINE_PURE=1, as their sources), so
what the tests and the bench measure is what users run; and the compiled
form keeps what Python users lean on (docstrings, signatures)."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import inspect
import os
import pydoc
from pathlib import Path
from typing import Any

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


# -- the public surface, in the form installed -------------------------------
#
# A compiled class keeps no docstring and a compiled function no signature
# `inspect` can read (mypyc writes "mypyc filler docstring", and
# `inspect.signature` raises ValueError). What users introspect, `help()`,
# Jupyter's `?`, frameworks wrapping the constructor, must work on both
# builds (SPECIFICATION.md, "Public API").

# Each public method and the parameters it takes (SPECIFICATION.md, "Public API").
COORDINATOR_METHODS = {
    "dispatch": ["self", "envelope", "authorise"],
    "add_audit_listener": ["self", "listener"],
    "add_change_listener": ["self", "listener"],
    "attach": ["self", "projection", "page_size"],
    "workspace_ids": ["self"],
    "get_workspace": ["self", "workspace_id"],
    "batch": ["self"],
    "snapshot": ["self", "workspace_id"],
    "restore": ["self", "data", "overwrite"],
    "sweep": ["self"],
    "check_whisper_lapses": ["self", "workspace_id", "now"],
    "close": ["self"],
}
STORE_METHODS = {
    "apply": ["self", "change"],
    "apply_many": ["self", "changes"],
    "load_held": ["self", "workspace"],
    "read_entries": ["self", "workspace", "start", "stop", "where"],
    "read_entry_texts": ["self", "workspace", "start", "stop"],
    "workspace_ids": ["self"],
    "close": ["self"],
}


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def _help(cls: type) -> str:
    return pydoc.render_doc(cls, renderer=pydoc.plaintext)


def test_coordinator_documents_itself() -> None:
    from coordinator import Coordinator

    doc = Coordinator.__doc__ or ""
    assert doc.startswith("A CHAP coordinator: `dispatch(envelope)`"), doc[:80]
    text = _help(Coordinator)
    assert "A CHAP coordinator: `dispatch(envelope)`" in text
    assert _public(Coordinator) == {*COORDINATOR_METHODS, "workspaces", "store", "options", "registry"}
    for name in _public(Coordinator):
        member = inspect.getattr_static(Coordinator, name)
        first = (inspect.getdoc(member) or "").splitlines()
        assert first and first[0] in text, name


def test_coordinator_signatures_read() -> None:
    from coordinator import Coordinator
    from coordinator.options import OPTION_NAMES

    parameters = inspect.signature(Coordinator).parameters
    assert list(parameters) == [
        "store", "options", "clock", "ids", "on_audit", *OPTION_NAMES, "registry", "overrides",
    ]
    assert all(p.default is None for name, p in parameters.items() if name != "overrides")
    for name, expected in COORDINATOR_METHODS.items():
        assert list(inspect.signature(getattr(Coordinator, name)).parameters) == expected, name
    assert inspect.signature(Coordinator.check_whisper_lapses).parameters["now"].default is None


@pytest.mark.parametrize("name", ["MemoryStore", "SqliteStore"])
def test_the_stores_document_themselves(name: str) -> None:
    import storage

    cls = getattr(storage, name)
    doc = inspect.getdoc(cls) or ""
    assert doc.startswith("A store "), doc[:80]
    assert doc.splitlines()[0] in _help(cls)
    assert "path" in inspect.signature(cls).parameters or name == "MemoryStore"
    for method, expected in STORE_METHODS.items():
        assert list(inspect.signature(getattr(cls, method)).parameters) == expected, method


def test_an_application_subclasses_the_coordinator_and_its_methods_run_on_the_subclass() -> None:
    # Compiled, a method takes only its very class as `self`: an interpreted
    # subclass of the compiled pipeline would be refused at its first call.
    from coordinator import Coordinator

    class Counting(Coordinator):
        calls = 0

        def dispatch(self, envelope: Any) -> dict[str, Any]:
            self.calls += 1
            return super().dispatch(envelope)

    coord = Counting(enable_chain=False)
    created = coord.dispatch({"jsonrpc": "2.0", "id": 1, "method": "workspace.create",
                              "params": {"workspace": "wsp_sub"}})
    assert created["result"]["workspace"] == "wsp_sub" and coord.calls == 1
    with coord.batch():
        coord.dispatch({"jsonrpc": "2.0", "id": 2, "method": "participant.join",
                        "params": {"workspace": "wsp_sub", "from": "human:a", "type": "human"}})
    assert coord.snapshot("wsp_sub")["members"].keys() == {"human:a"}
    assert coord.sweep() == [] and coord.workspace_ids() == ["wsp_sub"]
    coord.close()
