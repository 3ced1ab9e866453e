"""The names CHAP methods are offered under beside JSON-RPC: one MCP tool and
one A2A skill per implemented method, both named `chap.<method>`
(SPECIFICATION.md, "MCP and A2A"). Here, not in mcp.py, so that A2A serves
without the MCP SDK installed."""

from __future__ import annotations

from coordinator.engine.registry import Method

__all__ = ["TOOL_PREFIX", "tool_name"]

TOOL_PREFIX = "chap."


def tool_name(method: Method) -> str:
    """`chap.<method>` for a CHAP method; an extension method's own name,
    already namespaced (`x-chapline.plan.submit`)."""
    return method.name if method.extension else TOOL_PREFIX + method.name
