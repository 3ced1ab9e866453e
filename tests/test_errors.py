"""One exception tree per package, and every JSON-RPC code defined once."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import coordinator
import storage
from coordinator import ChaplineError
from coordinator.engine import wire
from storage import StoreError

ROOT = Path(__file__).resolve().parent.parent


def _modules(package: object) -> list[object]:
    path = package.__path__  # type: ignore[attr-defined]
    prefix = package.__name__ + "."  # type: ignore[attr-defined]
    return [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(path, prefix)
        if info.name.rsplit(".", 1)[-1] != "__main__"
    ]


def _public_errors(package: object) -> set[type[BaseException]]:
    found = set()
    for module in _modules(package):
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and not name.startswith("_")
                and value.__module__.startswith(package.__name__)  # type: ignore[attr-defined]
            ):
                found.add(value)
    return found


def test_every_coordinator_error_has_the_common_base_and_a_remedy() -> None:
    errors = _public_errors(coordinator)
    assert len(errors) >= 10
    for error in errors:
        assert issubclass(error, ChaplineError), error
        assert error.remedy, error
    # The tree is drawn in errors.py's docstring: every class is named there.
    drawn = importlib.import_module("coordinator.errors").__doc__ or ""
    assert {e.__name__ for e in errors} - {"ChaplineError", "Rejected"} <= set(
        re.findall(r"\b([A-Z]\w+)\b", drawn)
    )


def test_every_coordinator_error_is_defined_in_errors_under_the_tree_it_draws() -> None:
    errors = _public_errors(coordinator)
    assert {e.__module__ for e in errors} == {"coordinator.errors"}, sorted(
        f"{e.__module__}.{e.__name__}" for e in errors if e.__module__ != "coordinator.errors"
    )
    # The drawing names each class under its base: a line's indent is its depth.
    module = importlib.import_module("coordinator.errors")
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in (module.__doc__ or "").splitlines():
        drawn = re.match(r"^(\s*(?:[│ ]*[├└]── )?)([A-Z]\w+)\b", line)
        if drawn is None or not (drawn.group(1).strip() or drawn.group(2) == "ChaplineError"):
            continue
        depth = len(drawn.group(1))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[drawn.group(2)] = stack[-1][1]
        stack.append((depth, drawn.group(2)))
    assert set(parents) == {e.__name__ for e in errors} - {"ChaplineError"}
    for error in errors:
        if error.__name__ != "ChaplineError":
            assert error.__mro__[1].__name__ == parents[error.__name__], error


def test_every_store_error_has_the_common_base_and_a_remedy() -> None:
    errors = _public_errors(storage)
    assert {e.__name__ for e in errors} == {
        "StoreError",
        "StoreConflictError",
        "WorkspaceExistsError",
        "WriteTurnTimeoutError",
        "MalformedChangeError",
        "StoreUnavailableError",
        "DatabaseEncodingError",
    }
    assert {e.__module__ for e in errors} == {"storage.types"}
    for error in errors:
        assert issubclass(error, StoreError) and error.remedy, error


def test_every_json_rpc_code_is_defined_once_in_wire() -> None:
    codes = {name: value for name, value in vars(wire).items() if name.isupper() and isinstance(value, int)}
    assert len(set(codes.values())) == len(codes), "two names for one code"
    # No other module assigns a code of its own.
    assignment = re.compile(r"^[A-Z_]+ = -3\d{4}\b", re.M)
    for path in sorted((ROOT / "coordinator").rglob("*.py")):
        if path.name != "wire.py":
            assert not assignment.findall(path.read_text()), path
