"""The helpers that record outside work at the path README.md showed before
coordinator/ was grouped into folders (`coordinator.inward.wrap_mcp_tool_call`).
They live in `coordinator.server.inward`; this module only re-exports them,
so code written against that README keeps working."""

from coordinator.errors import InwardCallError
from coordinator.server.inward import (
    content_hash,
    wrap_a2a_message_exchange,
    wrap_mcp_tool_call,
)

__all__ = ["InwardCallError", "content_hash", "wrap_a2a_message_exchange", "wrap_mcp_tool_call"]
