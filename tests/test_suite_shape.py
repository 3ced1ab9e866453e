"""The suite's own shape, read from its source (ast), so that the tests keep
reading like the specification they check:

- one file per behaviour: no test name is defined in two files;
- no sleep in a test (`time.sleep`, or one in disguise): a test that
  asserts that nothing happens drives the injected clock, and a test that
  waits for another process waits for a positive signal; only the helpers
  in `MAY_SLEEP` sleep, each for the reason given there;
- one refusal assertion: a JSON-RPC refusal is asserted by
  `client.refused` (or `Client.fail`, which calls it), never by an
  `assert` of its own on an error's code.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# (module, function) -> why it may sleep.
MAY_SLEEP = {
    ("support.py", "eventually"): "polls, bounded, for a positive signal from another process or "
    "thread (a server's timer, PostgreSQL's asynchronous notification, a worker's first output)",
    ("work_worker.py", "drain"): "not a test but a worker program run as its own process: it holds "
    "each claim a moment so that the other workers claim meanwhile, and waits between polls for work",
}

# The one refusal assertion: (module, function).
REFUSAL_ASSERTION = ("client.py", "refused")


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(TESTS.glob("*.py")):
        yield path.name, ast.parse(path.read_text(), filename=str(path))


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def innermost(tree: ast.Module) -> dict[ast.AST, str]:
    """Each node's enclosing function's name ("" at module level)."""
    owner: dict[ast.AST, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else name
            owner[child] = inner
            visit(child, inner)

    visit(tree, "")
    return owner


def test_no_test_name_is_defined_in_two_files() -> None:
    where: dict[str, set[str]] = defaultdict(set)
    for module, tree in modules():
        if module.startswith("test_"):
            for function in functions(tree):
                if function.name.startswith("test"):
                    where[function.name].add(module)
    twice = {name: sorted(files) for name, files in where.items() if len(files) > 1}
    assert not twice, f"one behaviour, one file: rename or merge {twice}"


def _is_sleep(call: ast.Call, sleep_names: set[str]) -> bool:
    """`time.sleep`, `asyncio.sleep`, a `sleep` imported from either, or a
    new Event's `wait` (`threading.Event().wait(t)` sleeps `t`)."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr == "sleep":
        return isinstance(f.value, ast.Name) and f.value.id in ("time", "asyncio")
    if isinstance(f, ast.Attribute) and f.attr == "wait" and isinstance(f.value, ast.Call):
        made = f.value.func
        return isinstance(made, ast.Name) and made.id == "Event" or isinstance(made, ast.Attribute) and made.attr == "Event"
    return isinstance(f, ast.Name) and f.id in sleep_names


def test_only_the_listed_helpers_sleep() -> None:
    found = set()
    for module, tree in modules():
        sleep_names = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module in ("time", "asyncio")
            for alias in node.names
            if alias.name == "sleep"
        }
        owner = innermost(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _is_sleep(node, sleep_names):
                found.add((module, owner[node]))
    unlisted = sorted(found - set(MAY_SLEEP))
    assert not unlisted, f"drive the clock, or wait for a positive signal (support.eventually): {unlisted}"
    stale = sorted(set(MAY_SLEEP) - found)
    assert not stale, f"listed in MAY_SLEEP but sleeping no more: {stale}"


def _error_bound(function: ast.AST) -> set[str]:
    """Names a function binds to an error: `x = r["error"]`, `x = c.fail(...)`,
    `x = refused(...)`."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if (
                _is_error(value)
                or isinstance(value, ast.Call)
                and (
                    isinstance(value.func, ast.Attribute) and value.func.attr == "fail"
                    or isinstance(value.func, ast.Name) and value.func.id == "refused"
                )
            ):
                names.add(node.targets[0].id)
    return names


def _key(node: ast.AST) -> object:
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value
    return None


def _get(node: ast.AST) -> object:
    """`key` of `<x>.get(key, ...)`."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        return node.args[0].value
    return None


def _is_error(node: ast.AST) -> bool:
    """`<response>["error"]`, `<response>.get("error", ...)` or `(... or {})` of one."""
    if isinstance(node, ast.BoolOp):
        return _is_error(node.values[0])
    return _key(node) == "error" or _get(node) == "error"


def _is_error_code(node: ast.AST, errors: set[str]) -> bool:
    """An error's code: `["code"]` or `.get("code")` of an error or of a name
    bound to one (an exception's or a change's `.error` is not a response:
    asserting on it is not this)."""
    if _key(node) == "code":
        assert isinstance(node, ast.Subscript)
        of = node.value
    elif _get(node) == "code":
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        of = node.func.value
    else:
        return False
    return _is_error(of) or isinstance(of, ast.Name) and of.id in errors


def test_a_refusal_is_asserted_in_one_place() -> None:
    """An `assert` that an error's code is (or is among) something is a
    refusal assertion; `!=` and `not in` ("not an internal error") are not."""
    elsewhere = []
    for module, tree in modules():
        for function in functions(tree):
            if (module, function.name) == REFUSAL_ASSERTION:
                continue
            errors = _error_bound(function)
            for node in ast.walk(function):
                if not isinstance(node, ast.Assert):
                    continue
                for compare in ast.walk(node.test):
                    if not isinstance(compare, ast.Compare):
                        continue
                    operands = [compare.left, *compare.comparators]
                    positive = not all(isinstance(op, (ast.NotEq, ast.NotIn, ast.IsNot)) for op in compare.ops)
                    if positive and any(_is_error_code(operand, errors) for operand in operands):
                        elsewhere.append(f"{module}:{node.lineno}")
    assert not elsewhere, f"assert a refusal with client.refused(response, code) or Client.fail: {elsewhere}"
