"""`chapline mcp`'s options for who a stdio session acts as and which tools
it offers (SPECIFICATION.md, "MCP and A2A", "Bound sessions").

Over stdio nothing authenticates the client: whoever launched the process
drives it. `--as URI` binds the session to one participant; without it the
session is bound to no one and refused the human-only methods (a decision,
a privileged call), unless `--allow-unbound-humans` says the person running
it accepts that the model may act as anyone, which is then printed as a
warning. Over HTTP the bearer token binds each call, so these two are
refused with --http.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

__all__ = ["add_options", "stdio_session", "usage_problem"]

_PARTICIPANT = re.compile(r"^(human|agent|service|group):\S+$")


def add_options(mcp: argparse.ArgumentParser) -> None:
    mcp.add_argument(
        "--as",
        dest="bound_to",
        metavar="URI",
        help="act as this participant only (stdio): 'from' is filled in, a call naming "
        "anyone else is refused, and an agent is not offered decide.*",
    )
    mcp.add_argument(
        "--allow-unbound-humans",
        action="store_true",
        help="without --as, still offer the human-only methods (decide.*, the privileged "
        "ones), letting the client act as any human (stdio; prints a warning)",
    )
    mcp.add_argument(
        "--workspace",
        dest="tool_workspace",
        metavar="ID",
        help="offer only the tools this workspace's advertised profiles answer, "
        "re-announced when they change",
    )
    mcp.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="NAMES",
        help="offer only these tools: comma-separated names or globs, in either naming "
        "(chap.task.*, chap_review_request); repeatable",
    )
    mcp.add_argument(
        "--tool-names",
        choices=("chap", "safe"),
        default="chap",
        help="'chap': chap.task.create (default); 'safe': chap_task_create, for clients "
        "that accept only [a-zA-Z0-9_-] in function names",
    )


def usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with this combination of `mcp` options, or None."""
    if args.bound_to is not None and not _PARTICIPANT.match(args.bound_to):
        return (
            f"--as {args.bound_to!r} is not a participant URI; write human:NAME, agent:NAME, "
            "service:NAME or group:NAME"
        )
    if args.bound_to is not None and args.allow_unbound_humans:
        return "--as and --allow-unbound-humans exclude each other: a bound session is never unbound"
    if args.http and (args.bound_to is not None or args.allow_unbound_humans):
        return (
            "--as and --allow-unbound-humans are for stdio; over --http each call acts as "
            "its bearer token's participant (--auth)"
        )
    if args.http and (args.tool_workspace or args.tools or args.tool_names != "chap"):
        return "--workspace, --tools and --tool-names apply to stdio sessions"
    if any(not p.strip() for spec in args.tools for p in spec.split(",")):
        return "--tools takes comma-separated tool names or globs, none empty"
    return None


def stdio_session(args: argparse.Namespace) -> dict[str, Any]:
    """run_stdio's `binding` and `selection` for these options; warns on
    standard error when the session may act as any human."""
    from coordinator.server.mcp_binding import Binding
    from coordinator.server.mcp_tools import ToolSelection

    if args.allow_unbound_humans:
        print(
            "chapline: warning: --allow-unbound-humans: this MCP session is bound to no one and "
            "may approve, reject or override work as any human; bind it with --as URI instead",
            file=sys.stderr,
            flush=True,
        )
    patterns = tuple(p.strip() for spec in args.tools for p in spec.split(","))
    return {
        "binding": Binding(args.bound_to, allow_unbound_humans=args.allow_unbound_humans),
        "selection": ToolSelection(args.tool_workspace, patterns, args.tool_names),
    }
