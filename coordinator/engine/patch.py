"""RFC 6902 JSON Patch with the CHAP guards (used by ``decide.override``).

An override must give the same artefact, and so the same content hash, in
every conforming implementation; the CHAP vectors and the 0.3.3 reference
fix the edge cases RFC 6902 leaves open. On top of the RFC:

- the path segments ``__proto__``, ``constructor`` and ``prototype`` are
  refused anywhere in ``path`` or ``from`` (a patch written for us must not
  pollute prototypes in a JavaScript implementation replaying it);
- an array index is ``0`` or a decimal without leading zeros (``"01"``,
  ``"+1"``, ``"1e1"`` are refused instead of being read as numbers);
- ``test`` compares JSON types strictly: ``true`` is not ``1``, ``false`` is
  not ``0``, while ``1`` equals ``1.0``;
- at most ``MAX_OPS`` operations, and at most ``MAX_NODES`` JSON values in
  the document after every operation (a copy bomb doubles the document per
  op; counting per op refuses it before it can exhaust memory) — both as
  0.3.3 bounds them, refused with ``PatchError``;
- at most ``MAX_DEPTH`` levels and ``MAX_CHARS`` characters of strings (keys
  included) in the document after every operation (a subtree copied into its
  own descendant deepens the document per op, a long string copied around
  grows it per op without adding values): ``PatchLimitError``, which the
  coordinator answers -32602 — 0.3.3 has no such bound and fails later;
- removing the root and moving a location into its own child are refused;
- ``~`` must be followed by ``0`` or ``1`` (RFC 6901 §3); the 0.3.3
  reference reads ``~2`` literally, we refuse it rather than guess.

The patch is applied to a private copy, so the caller's document is never
touched and a failing patch changes nothing (all-or-nothing).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

from coordinator.errors import PatchError, PatchLimitError

__all__ = ["MAX_CHARS", "MAX_DEPTH", "MAX_NODES", "MAX_OPS", "apply_patch", "json_type"]

MAX_OPS: Final = 1000
MAX_NODES: Final = 100_000
# The patched artefact is sent back inside an envelope (params.artefact, two
# levels below the envelope's 64), so it may nest no deeper than 62 levels.
MAX_DEPTH: Final = 62
# Characters of string content (values and keys), about 4 MiB of JSON.
MAX_CHARS: Final = 4 * 1_048_576

_UNSAFE_SEGMENTS = frozenset({"__proto__", "constructor", "prototype"})
_ARRAY_INDEX = re.compile(r"(0|[1-9][0-9]*)")
_BAD_TILDE = re.compile(r"~(?![01])")
_OPS: Final = ("add", "remove", "replace", "move", "copy", "test")


def json_type(value: Any) -> str:
    """The JSON type name of a decoded value, as messages should name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _quote(value: Any) -> str:
    """A value in JSON form for an error message, cut short if it is long."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Fail(Exception):
    """Internal: a failure whose op context is added by ``apply_patch``."""


class _Limit(Exception):
    """Internal: a bound of ``PatchLimitError`` reached; ``data`` says which."""

    def __init__(self, message: str, data: dict[str, Any]) -> None:
        super().__init__(message)
        self.data = data


class _Size:
    """What the working document holds: JSON values and string characters."""

    __slots__ = ("nodes", "chars")

    def __init__(self, nodes: int, chars: int) -> None:
        self.nodes = nodes
        self.chars = chars

    def add(self, nodes: int, chars: int) -> None:
        self.nodes += nodes
        self.chars += chars


def apply_patch(document: Any, ops: Any) -> Any:
    """Apply the RFC 6902 patch ``ops`` to ``document`` and return the result.

    ``document`` is never mutated and the result shares no containers with it
    or with ``ops``. Raises ``PatchError`` (nothing applied) on any failure,
    ``PatchLimitError`` when the result would pass ``MAX_DEPTH`` or ``MAX_CHARS``.
    """
    if not isinstance(ops, list):
        raise PatchError(f"A patch must be an array of operations, got {json_type(ops)}")
    if len(ops) > MAX_OPS:
        raise PatchError(
            f"Patch has too many operations ({len(ops)} > {MAX_OPS}); split it into smaller overrides",
            {"ops": len(ops), "limit": MAX_OPS},
        )
    try:
        doc, nodes, chars, _ = _copy_counted(document)
    except _Fail as exc:
        raise PatchError(f"The document is not JSON: {exc}") from None
    size = _Size(nodes, chars)
    for index, op in enumerate(ops):
        name = op.get("op") if isinstance(op, dict) else None
        path = op.get("path") if isinstance(op, dict) else None
        data: dict[str, Any] = {"op_index": index}
        if isinstance(name, str):
            data["op"] = name
        if isinstance(path, str):
            data["path"] = path
        try:
            doc = _apply_one(doc, size, op)
        except _Fail as exc:
            raise PatchError(f"Operation {index}: {exc}", data) from None
        except _Limit as limit:
            raise PatchLimitError(f"Operation {index}: {limit}", {**data, **limit.data}) from None
        if size.nodes > MAX_NODES:
            raise PatchError(
                f"Operation {index}: the patched document would hold {size.nodes} JSON values, "
                f"more than the limit of {MAX_NODES}",
                {"op_index": index, "op": name, "path": path, "nodes": size.nodes, "limit": MAX_NODES},
            )
        if size.chars > MAX_CHARS:
            raise PatchLimitError(
                f"Operation {index}: the patched document would hold {size.chars} characters of "
                f"strings, more than the limit of {MAX_CHARS}; send a smaller change",
                {**data, "chars": size.chars, "limit": MAX_CHARS},
            )
    return doc


def _check_depth(path: list[str], depth: int) -> None:
    """Refuse a value of ``depth`` levels placed at ``path`` if the document
    would pass ``MAX_DEPTH`` (the root is level 1)."""
    if len(path) + depth > MAX_DEPTH:
        raise _Limit(
            f"the patched document would nest {len(path) + depth} levels deep, more than the "
            f"limit of {MAX_DEPTH}; flatten the value or place it higher",
            {"depth": len(path) + depth, "limit": MAX_DEPTH},
        )


def _apply_one(doc: Any, size: _Size, op: Any) -> Any:
    """Apply one operation in place on the private copy; keep ``size`` current."""
    if not isinstance(op, dict):
        raise _Fail(f"an operation must be an object, got {json_type(op)} {_quote(op)}")
    name = op.get("op")
    if name not in _OPS:
        raise _Fail(f"unknown op {_quote(name)}; expected one of {', '.join(_OPS)}")
    path = _pointer(op, "path")
    if name in ("add", "replace", "test") and "value" not in op:
        raise _Fail(f"{name!s} at {_quote(op['path'])} needs a 'value'")

    if name == "test":
        actual = _get(doc, path, op["path"])
        if not _json_equal(actual, op["value"]):
            raise _Fail(
                f"test failed at {_quote(op['path'])}: expected {_quote(op['value'])} "
                f"({json_type(op['value'])}), found {_quote(actual)} ({json_type(actual)})"
            )
        return doc

    if name == "remove":
        if not path:
            raise _Fail("cannot remove the root of the document; replace it instead")
        removed, key_chars = _remove(doc, path, op["path"])
        nodes, chars, _ = _count(removed)
        size.add(-nodes, -chars - key_chars)
        return doc

    if name == "replace":
        value, nodes, chars, depth = _copy_counted(op["value"])
        _check_depth(path, depth)
        if not path:
            size.nodes, size.chars = nodes, chars
            return value
        old_nodes, old_chars, _ = _count(_replace(doc, path, op["path"], value))
        size.add(nodes - old_nodes, chars - old_chars)
        return doc

    if name == "add":
        value, nodes, chars, depth = _copy_counted(op["value"])
        _check_depth(path, depth)
        return _add(doc, size, path, op["path"], value, nodes, chars)

    source = _pointer(op, "from")
    if name == "move":
        if not source:
            raise _Fail('cannot move the root of the document; replace path "" instead')
        if source == path:
            _get(doc, source, op["from"])  # RFC 6902 §4.4: still must exist
            return doc
        if path[: len(source)] == source:
            raise _Fail(f"cannot move {_quote(op['from'])} into its own child {_quote(op['path'])}")
        nodes, chars, depth = _count(_get(doc, source, op["from"]))
        _check_depth(path, depth)
        value, key_chars = _remove(doc, source, op["from"])
        size.add(-nodes, -chars - key_chars)
        return _add(doc, size, path, op["path"], value, nodes, chars)

    # copy: measure first so that a copy bomb is refused before it is built;
    # the would-be size makes the caller's limit check refuse it.
    original = _get(doc, source, op["from"])
    nodes, chars, depth = _count(original)
    _check_depth(path, depth)
    if size.nodes + nodes > MAX_NODES or size.chars + chars > MAX_CHARS:
        size.add(nodes, chars)
        return doc
    return _add(doc, size, path, op["path"], _copy(original), nodes, chars)


def _pointer(op: dict[str, Any], field: str) -> list[str]:
    """Parse the JSON Pointer in ``op[field]`` into unescaped segments."""
    if field not in op:
        raise _Fail(f"{op['op']} needs a '{field}' JSON Pointer")
    text = op[field]
    if not isinstance(text, str):
        raise _Fail(f"'{field}' must be a JSON Pointer string, got {json_type(text)} {_quote(text)}")
    if text == "":
        return []
    if not text.startswith("/"):
        raise _Fail(f"'{field}' {_quote(text)} is not a JSON Pointer: it must be empty or start with '/'")
    segments = []
    for raw in text[1:].split("/"):
        if _BAD_TILDE.search(raw):
            raise _Fail(f"'{field}' {_quote(text)} has '~' not followed by 0 or 1 (write ~0 for '~', ~1 for '/')")
        segment = raw.replace("~1", "/").replace("~0", "~")
        if segment in _UNSAFE_SEGMENTS:
            raise _Fail(f"'{field}' {_quote(text)} uses the refused segment {_quote(segment)}")
        segments.append(segment)
    return segments


def _index(container: list[Any], segment: str, text: str, *, allow_end: bool) -> int:
    """The array index named by ``segment``; ``allow_end`` admits len and '-'."""
    if segment == "-" and allow_end:
        return len(container)
    if not _ARRAY_INDEX.fullmatch(segment):
        raise _Fail(
            f"{_quote(text)}: {_quote(segment)} is not an array index "
            "(0 or a decimal without leading zeros" + (", or '-' to append)" if allow_end else ")")
        )
    index = int(segment)
    limit = len(container) if allow_end else len(container) - 1
    if index > limit:
        raise _Fail(f"{_quote(text)}: index {index} is out of range for an array of length {len(container)}")
    return index


def _parent(doc: Any, path: list[str], text: str) -> Any:
    """The container holding the last segment of ``path``."""
    node = doc
    for depth, segment in enumerate(path[:-1]):
        if isinstance(node, dict):
            if segment not in node:
                where = "/" + "/".join(path[: depth + 1])
                raise _Fail(f"{_quote(text)}: no member {_quote(segment)} (missing at {_quote(where)})")
            node = node[segment]
        elif isinstance(node, list):
            node = node[_index(node, segment, text, allow_end=False)]
        else:
            raise _Fail(f"{_quote(text)}: cannot descend into a {json_type(node)} at segment {_quote(segment)}")
    return node


def _get(doc: Any, path: list[str], text: str) -> Any:
    if not path:
        return doc
    parent = _parent(doc, path, text)
    last = path[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _Fail(f"{_quote(text)}: no member {_quote(last)}")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, text, allow_end=False)]
    raise _Fail(f"{_quote(text)}: a {json_type(parent)} has no member {_quote(last)}")


def _add(
    doc: Any, size: _Size, path: list[str], text: str, value: Any, nodes: int, chars: int
) -> Any:
    if not path:
        size.nodes, size.chars = nodes, chars
        return value
    parent = _parent(doc, path, text)
    last = path[-1]
    if isinstance(parent, dict):
        if last in parent:
            old_nodes, old_chars, _ = _count(parent[last])
            size.add(-old_nodes, -old_chars)
        else:
            size.add(0, len(last))
        parent[last] = value
        size.add(nodes, chars)
        return doc
    if isinstance(parent, list):
        parent.insert(_index(parent, last, text, allow_end=True), value)
        size.add(nodes, chars)
        return doc
    raise _Fail(f"{_quote(text)}: cannot add a member to a {json_type(parent)}")


def _remove(doc: Any, path: list[str], text: str) -> tuple[Any, int]:
    """The removed value, and the characters of the member name it had."""
    parent = _parent(doc, path, text)
    last = path[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _Fail(f"{_quote(text)}: no member {_quote(last)} to remove")
        return parent.pop(last), len(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, text, allow_end=False)), 0
    raise _Fail(f"{_quote(text)}: a {json_type(parent)} has no member {_quote(last)} to remove")


def _replace(doc: Any, path: list[str], text: str, value: Any) -> Any:
    parent = _parent(doc, path, text)
    last = path[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _Fail(f"{_quote(text)}: no member {_quote(last)} to replace (use add to create it)")
        old, parent[last] = parent[last], value
        return old
    if isinstance(parent, list):
        index = _index(parent, last, text, allow_end=False)
        old, parent[index] = parent[index], value
        return old
    raise _Fail(f"{_quote(text)}: a {json_type(parent)} has no member {_quote(last)} to replace")


def _json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: types must match, but 1 equals 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_json_equal, a, b))
    return type(a) is type(b) and a == b


def _count(value: Any) -> tuple[int, int, int]:
    """JSON values, characters of strings (keys included) and levels in ``value``."""
    nodes = chars = depth = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        nodes += 1
        if level > depth:
            depth = level
        if isinstance(node, dict):
            for key, child in node.items():
                chars += len(key)
                stack.append((child, level + 1))
        elif isinstance(node, list):
            stack.extend((child, level + 1) for child in node)
        elif isinstance(node, str):
            chars += len(node)
    return nodes, chars, depth


def _copy(value: Any) -> Any:
    return _copy_counted(value)[0]


def _copy_counted(value: Any) -> tuple[Any, int, int, int]:
    """A deep copy of a JSON value and its ``_count``, in one walk.

    Iterative so that a deeply nested artefact cannot overflow the stack.
    """
    root = _fresh(value)
    nodes, chars, depth = 1, len(value) if isinstance(value, str) else 0, 1
    stack = [(value, root, 1)] if isinstance(root, (dict, list)) else []
    while stack:
        source, target, level = stack.pop()
        children: Any = source.items() if isinstance(source, dict) else enumerate(source)
        for key, child in children:
            if level + 1 > depth:
                depth = level + 1
            copied = _fresh(child)
            if isinstance(target, dict):
                target[key] = copied
                chars += len(key)
            else:
                target.append(copied)
            nodes += 1
            if isinstance(copied, (dict, list)):
                stack.append((child, copied, level + 1))
            elif isinstance(copied, str):
                chars += len(copied)
    return root, nodes, chars, depth


def _fresh(node: Any) -> Any:
    """A scalar itself, or an empty container of the same JSON type."""
    if isinstance(node, dict):
        return {}
    if isinstance(node, list):
        return []
    if isinstance(node, float) and not math.isfinite(node):
        raise _Fail(f"{node!r} is not a JSON number")
    if node is None or isinstance(node, (str, int, float)):
        return node
    raise _Fail(f"a Python {type(node).__name__} is not a JSON value")
