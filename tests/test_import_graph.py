"""The modules of coordinator/ and storage/ import each other without a
cycle, and the engine knows the profiles only through the registry it is
given (SPECIFICATION.md, "Dispatch").

An import counts wherever it is written: at module level, inside a function
(it runs when the function first does, and a cycle through it is a cycle
then) and under `if TYPE_CHECKING:` (the type checker and mypyc follow it:
two modules that name each other's types are one design, whatever runs).
`import a.b.c` and `from a.b import c` (c a module) depend on `a.b.c` only:
its packages are imported first by Python itself, not by the importer.
`coordinator/profiles/__init__.py` imports every profile module of its
folder by scanning it (the registry's scan), so it depends on each of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("coordinator", "storage")
_SCANNING = "coordinator.profiles"


def _modules() -> dict[str, Path]:
    """Every module's dotted name -> its source file."""
    found = {}
    for package in _PACKAGES:
        for path in sorted((_ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of coordinator/ and storage/ that module `name` imports."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the importer's package
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + [node.module or ""])
            else:
                base = node.module or ""
            base = base.strip(".")
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules.keys()
            out.update(submodules)
            if base in modules and len(submodules) < len(node.names):
                out.add(base)  # a name defined by the module (or package) itself
    if name == _SCANNING:
        prefix = f"{_SCANNING}."
        out.update(
            m for m in modules
            if m.startswith(prefix) and "." not in m[len(prefix):] and not m[len(prefix):].startswith("_")
        )
    out.discard(name)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def _a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it (the first one repeated at
    the end), or None: a depth-first walk in name order."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path = [start]
        todo = [iter(sorted(graph[start]))]
        while todo:
            step = next(todo[-1], None)
            if step is None:
                todo.pop()
                done.add(path.pop())
            elif step in path:
                return [*path[path.index(step):], step]
            elif step not in done:
                path.append(step)
                todo.append(iter(sorted(graph[step])))
    return None


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = _graph()
    assert "coordinator.engine.workspace" in graph["coordinator.engine.call"]  # the walk reads imports
    assert "coordinator.profiles.whisper" in graph[_SCANNING]  # and the registry's scan
    cycle = _a_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_names_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"b", "d"}, "d": set()}
    assert _a_cycle(graph) == ["b", "c", "b"]
    assert _a_cycle({"a": {"b"}, "b": set()}) is None


def test_the_engine_reaches_the_profiles_only_through_the_registry() -> None:
    """engine/ names no profile module: a profile takes part by the hooks its
    `Profile` declares (before and after a write, the sender and step-up
    checks, the sweep), and the pipeline is given the registry, or takes
    the one `coordinator.profiles` builds by its scan."""
    graph = _graph()
    reached = {
        (name, imported)
        for name, imports in graph.items()
        if name.startswith("coordinator.engine.")
        for imported in imports
        if imported.startswith(_SCANNING)
    }
    assert reached == {("coordinator.engine.pipeline", _SCANNING)}
