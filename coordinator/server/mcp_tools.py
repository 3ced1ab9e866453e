"""Which tools an MCP session is offered, and under what names
(SPECIFICATION.md, "MCP and A2A", "Tools a session is offered").

A session lists only what it may use: no human-only method for a session
bound to an agent (or for an unbound stdio session without
`--allow-unbound-humans`, `mcp_binding.may_call`); when tied to a workspace
(`chapline mcp --workspace`), only the methods its advertised profiles
answer; and, with `--tools`, only the names or globs given. Names are
`chap.<method>`, or with `--tool-names safe` the same with every `.` made
`_` (`chap_task_create`), for clients whose function calling accepts only
`[a-zA-Z0-9_-]`. A bound session's tools do not require `from`: it is
filled in from the binding.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.engine.registry import Method, profile_name, profile_names
from coordinator.server.catalogue import tool_name
from coordinator.server.mcp_binding import Binding, may_call

__all__ = ["NAMINGS", "ToolSelection", "available", "bound_schema", "offered", "session_tool_name"]

# --tool-names: CHAP's dotted names, or names in [a-zA-Z0-9_-].
NAMINGS = ("chap", "safe")


@dataclass(frozen=True)
class ToolSelection:
    """What narrows a session's tools beside its binding: the workspace it is
    tied to, the `--tools` names or globs (either naming), and the naming."""

    workspace: str | None = None
    patterns: tuple[str, ...] = ()
    naming: str = "chap"

    def __post_init__(self) -> None:
        if self.naming not in NAMINGS:
            raise ValueError(f"tool names are one of {', '.join(NAMINGS)}, got {self.naming!r}")

    def wanted(self, method: Method) -> bool:
        """Whether `--tools` (if given) names the method's tool."""
        if not self.patterns:
            return True
        names = (tool_name(method), _safe(tool_name(method)))
        return any(fnmatch.fnmatchcase(n, p) for p in self.patterns for n in names)


def _safe(name: str) -> str:
    return name.replace(".", "_")


def session_tool_name(method: Method, naming: str) -> str:
    """The tool's name under `naming` (`chap.task.create` or `chap_task_create`)."""
    name = tool_name(method)
    return _safe(name) if naming == "safe" else name


def available(method: Method, profiles: Iterable[str] | None) -> bool:
    """Whether a workspace advertising `profiles` answers `method` (None: not
    known, so anything may be)."""
    # As the dispatch gate decides (SPECIFICATION.md, "Dispatch"): core answers everywhere.
    if profiles is None or method.always_available or method.profile == "core/1.0":
        return True
    return profile_name(method.profile) in profile_names(list(profiles))


def offered(
    methods: Iterable[Method], binding: Binding, selection: ToolSelection, profiles: Iterable[str] | None
) -> list[Method]:
    """The implemented methods a session may use, in the registry's order."""
    profiles = None if profiles is None else list(profiles)
    return [
        m
        for m in methods
        if m.handler is not None
        and may_call(m, binding) is None
        and selection.wanted(m)
        and available(m, profiles)
    ]


def bound_schema(params: Mapping[str, Any], principal: str) -> dict[str, Any]:
    """A method's input schema for a session bound to `principal`: `from` is
    no longer required, and says it is filled in."""
    out = dict(params)
    properties = dict(out.get("properties") or {})
    if "from" not in properties:
        return out
    properties["from"] = {
        **properties["from"],
        "description": f"The caller's participant URI; leave it out: this session acts as {principal}.",
    }
    out["properties"] = properties
    required = [name for name in out.get("required") or () if name != "from"]
    if required:
        out["required"] = required
    else:
        out.pop("required", None)
    return out
