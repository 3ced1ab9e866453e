"""The `chapline` command: `chapline serve` runs CHAP over HTTP on a SQLite file
or a PostgreSQL database, in one process or several (`copy` moves workspaces
between databases, cli/copy.py);
`verify`, `inspect`, `export`, `import` and `migrate` work on the log (cli/log.py).
`token` creates, lists and revokes the bearer tokens `serve --auth` accepts.

Exit status: 0 after a clean stop (SIGINT or SIGTERM), 1 when the database
cannot be opened or the address cannot be listened on, 2 for bad arguments
and for a command whose extra is not installed (`serve` needs
chapline[server], `mcp` chapline[mcp]; the message names the pip command).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import math
import os
import re
import signal
import socket
import sqlite3
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from coordinator import __version__
from coordinator.cli import copy as copy_command
from coordinator.cli import log as log_commands
from coordinator.cli import mcp_options
from coordinator.cli import notify as notify_commands
from coordinator.engine.registry import profile_name, profile_names
from coordinator.errors import LimitError
from coordinator.extras import MissingExtraError, installed
from coordinator.options import ENFORCED_BY, Options, unenforced
from coordinator.profiles import REGISTRY
from coordinator.server.affinity import Affinity, slots_directory
from coordinator.server.limits import ServerLimits, guarded_protocol, raise_fd_limit
from coordinator.server.metrics import multiprocess_dir
from coordinator.server.workers import run_workers

if TYPE_CHECKING:  # imported when used: `chapline --help` stays light
    import uvicorn

    from coordinator import Coordinator
    from coordinator.notify import Outcome
    from coordinator.security.identity_verifiers import OidcVerifier
    from coordinator.server.browser import BrowserPolicy

__all__ = ["ALL_PROFILES", "DEFAULT_PROFILES", "main"]

# What the conformance harness and the reference library (0.3.3's default)
# expect: core and review only. modes/1.0 in particular changes what
# `task.complete` does in a trial-mode workspace, which the harness does not
# expect (see SPECIFICATION.md, "HTTP binding").
DEFAULT_PROFILES = ("core/1.0", "review/1.0")
# How often serve reclaims expired work leases and lapses whispers on its own.
DEFAULT_SWEEP_INTERVAL = 1.0

# `--profiles all`: every profile chapline implements (the registry's
# advertisable ones), core first, but those only an option enforces:
# --require-signatures adds security-signed to every new workspace itself,
# and serve has no OIDC verifier for identity-oidc.
ALL_PROFILES = tuple(p for p in REGISTRY.advertisable if profile_name(p) not in ENFORCED_BY)


def _analytics(target: str, desk_url: str | None) -> Any:
    from coordinator.projections import AnalyticsProjection

    return AnalyticsProjection(target)


def _notifications(target: str, desk_url: str | None) -> Any:
    from coordinator.notify import NotificationProjection

    return NotificationProjection(target, desk_url=desk_url)


# The projections `serve --projection NAME=TARGET` can run (TARGET: a SQLite
# path or a postgresql:// URI), made with the desk's URL for their links.
PROJECTIONS: dict[str, Callable[[str, str | None], Any]] = {
    "analytics": _analytics,
    "notifications": _notifications,
}

_PROFILE = re.compile(r"^[a-z][a-z0-9_-]*/\d+\.\d+$")


class _Failure(Exception):
    """A start-up problem reported as one line on stderr, exit status 1."""


class _Usage(Exception):
    """A bad combination of arguments, reported like argparse's: status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _command(args)
    except MissingExtraError as missing:
        print(f"chapline: {args.command}: {missing}", file=sys.stderr)
        return 2


def _command(args: argparse.Namespace) -> int:
    if args.command == "serve":
        import coordinator.server.http  # noqa: F401  (needs chapline[server]: fail first)
    elif args.command == "mcp":
        import coordinator.server.mcp  # noqa: F401  (needs chapline[mcp]: fail first)
    if args.command == "token":
        return _token(args)
    if args.command == "copy":
        return copy_command.run(args)
    if args.command == "notify":
        return notify_commands.run(args)
    if args.command not in ("serve", "mcp"):
        return log_commands.run(args)
    if args.command == "mcp" and not args.http and args.auth:
        print("chapline: mcp: --auth needs --http (on stdio, whoever runs the process is its user)", file=sys.stderr)
        return 2
    if args.command == "mcp":
        problem = mcp_options.usage_problem(args)
        if problem is not None:
            print(f"chapline: mcp: {problem}", file=sys.stderr)
            return 2
    try:
        profiles = _profiles(args.profiles, args.require_signatures)
        oidc = _oidc(args)
        projections = _projections(args.projection)
        limits = _limits(args)
        if not 0 <= args.sweep_interval < math.inf:
            raise ValueError(
                f"--sweep-interval must be 0 (no timer) or a number of seconds, got {args.sweep_interval}"
            )
        if args.write_wait is not None and not 0 < args.write_wait < math.inf:
            raise ValueError(
                f"--write-wait must be a positive number of seconds, got {args.write_wait}"
            )
    except ValueError as exc:
        print(f"chapline: {exc}", file=sys.stderr)
        return 2
    try:
        if args.command == "mcp" and not args.http:
            return _mcp_stdio(args, profiles, projections)
        return _serve(
            args.db,
            args.host,
            args.port,
            profiles,
            args.auth,
            args.require_signatures,
            oidc,
            projections,
            _browser(args),
            args.insecure,
            getattr(args, "workers", 1),
            args.sweep_interval,
            args.write_wait,
            getattr(args, "log_format", "text"),
            limits,
            scope_claim=args.oidc_scope_claim,
            affinity=getattr(args, "affinity", True),
            desk_url=args.desk_url,
        )
    except _Usage as exc:
        print(f"chapline: {exc}", file=sys.stderr)
        return 2
    except _Failure as exc:
        print(f"chapline: {exc}", file=sys.stderr)
        return 1


# serve's bounds: flag -> (the ServerLimits field it sets, its metavar, its
# help); server/limits.py holds the defaults and the checks.
_BOUNDS = {
    "--max-body": ("max_body_bytes", "BYTES", "the largest request body on any route (beyond: 413)"),
    "--header-timeout": ("header_timeout", "SECONDS", "how long a request's headers may take to arrive"),
    "--body-timeout": ("body_timeout", "SECONDS", "how long a request's body may take after its headers"),
    "--idle-timeout": ("idle_timeout", "SECONDS", "how long an idle keep-alive connection stays open"),
    "--max-connections": (
        "max_connections", "N",
        "connections open at once; at the cap the oldest one still sending its headers is dropped",
    ),
    "--max-connections-per-address": (
        "max_connections_per_address", "N", "connections open at once from one client address"
    ),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chapline", description="A write-ahead coordinator for CHAP."
    )
    parser.add_argument("--version", action="version", version=f"chapline {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve CHAP over HTTP (POST /chap)",
        description="Serve CHAP over HTTP: POST one JSON-RPC envelope to /chap.",
    )
    serve.add_argument(
        "--db",
        default="chap.db",
        help="SQLite file to write, or a postgresql:// URI (default: ./chap.db)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port and the database (default: 1)",
    )
    serve.add_argument(
        "--no-affinity",
        dest="affinity",
        action="store_false",
        help="with --workers N > 1: let each worker answer every call it accepts, instead of "
        "passing a workspace's calls to the one worker that answers that workspace "
        "(without --workers there is one worker: nothing to turn off)",
    )
    serve.add_argument(
        "--sweep-interval",
        type=float,
        default=DEFAULT_SWEEP_INTERVAL,
        metavar="SECONDS",
        help="reclaim expired work leases and lapse overdue whispers this often, in every "
        "workspace (0: never; every write still reclaims the leases it would touch) "
        "(default: %(default)s)",
    )
    serve.add_argument(
        "--write-wait",
        type=float,
        metavar="SECONDS",
        help="the longest a call waits for its workspace's write turn while other writers "
        "hold it; past it the call is answered -32901 (default: 30)",
    )
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: every log record as one JSON object per line on standard error, "
        "with the call's id and workspace, and one record per call (default: text)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=8080, help="port to listen on, 0 for any free one (default: 8080)"
    )
    serve.add_argument(
        "--profiles",
        default=",".join(DEFAULT_PROFILES),
        help=(
            "comma-separated profiles new workspaces get, or 'all' for every "
            "profile chapline implements (default: %(default)s)"
        ),
    )
    serve.add_argument(
        "--require-signatures",
        action="store_true",
        help="every call but workspace.create and participant.join must be signed by its "
        "sender's registered Ed25519 key (security-signed/1.0)",
    )
    serve.add_argument(
        "--auth",
        action="store_true",
        help="require a bearer token (`chapline token create`) on every call; "
        "a call may act only as its token's participant",
    )
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="serve on an address beyond loopback without --auth, where anyone who can "
        "reach the port may act as any participant (refused without this)",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name clients reach the server by (NAME or NAME:PORT), beside loopback "
        "names and IP addresses; other names are refused (DNS rebinding); repeatable",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="an origin (https://app.example.org) whose web pages may call the server "
        "(CORS); no other site's may; repeatable",
    )
    serve.add_argument(
        "--projection",
        action="append",
        default=[],
        metavar="NAME=TARGET",
        help=(
            "run a projection, caught up from the database at start and then fed "
            "every call; repeatable. NAME is 'analytics' (review figures) or "
            "'notifications' (reviews, escalations and whispers sent to the "
            "subscriptions `chapline notify` adds): tables in TARGET, a SQLite "
            "file or a postgresql:// URI (either may be the --db database)"
        ),
    )
    serve.add_argument(
        "--desk-url",
        metavar="URL",
        help="where people reach the review desk, for the links in notifications "
        "(default: the address the server listens on; this machine's name for 0.0.0.0 or ::)",
    )
    bounds = serve.add_argument_group(
        "bounds on memory and time (per server process)",
        "what one client may make the server hold, and for how long",
    )
    defaults = ServerLimits()
    for flag, (field, metavar, text) in _BOUNDS.items():
        default = getattr(defaults, field)
        bounds.add_argument(flag, dest=field, type=type(default), default=default, metavar=metavar,
                            help=f"{text} (default: %(default)s)")
    oidc = serve.add_argument_group(
        "OIDC access tokens (with --auth; all three together)",
        "also accept the identity provider's access tokens (JWTs); the participant "
        "is their chap_participant_uri claim",
    )
    oidc.add_argument("--oidc-issuer", metavar="URL", help="the provider's issuer (iss)")
    oidc.add_argument("--oidc-audience", metavar="AUD", help="this server's audience (aud)")
    oidc.add_argument(
        "--oidc-jwks", metavar="FILE", help="the provider's JWKS as a JSON file (its jwks_uri)"
    )
    oidc.add_argument(
        "--oidc-scope-claim", metavar="NAME", default="chapline_scope",
        help="the claim carrying what the token may do: {workspaces, max_role, may_create} or "
        "'workspace:ID role:NAME create'; without it a token reaches no workspace "
        "(default: %(default)s)",
    )
    mcp = commands.add_parser(
        "mcp",
        help="serve CHAP as MCP tools (stdio, or --http)",
        description=(
            "Serve every implemented CHAP method as an MCP tool chap.<method>: on "
            "stdin/stdout (what desktop MCP clients launch), or with --http as "
            "`serve` does (streamable HTTP at /mcp, beside POST /chap and the rest). "
            "Takes serve's options; --host, --port and --auth apply with --http only."
        ),
    )
    # serve's options, --help aside (argparse has no public way to share them)
    for option in serve._actions[1:]:  # noqa: SLF001
        mcp._add_action(option)  # noqa: SLF001
    mcp.add_argument("--http", action="store_true", help="serve over HTTP instead of stdio")
    mcp_options.add_options(mcp)
    token = commands.add_parser(
        "token",
        help="create, list or revoke bearer tokens for `serve --auth`",
        description="Bearer tokens for `chapline serve --auth`, kept hashed in the database.",
    )
    actions = token.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create a token and print it once")
    create.add_argument("--as", dest="principal", required=True, metavar="URI",
                        help="the participant the token acts as, e.g. human:alice")
    create.add_argument("--workspace", dest="workspaces", action="append", default=[], metavar="ID",
                        help="a workspace the token reaches; repeatable (this or --all-workspaces)")
    create.add_argument("--all-workspaces", action="store_true",
                        help="the token reaches every workspace, present and future")
    create.add_argument("--max-role", default="participant", metavar="ROLE",
                        help="the highest role it may take: observer < participant < reviewer < "
                        "admin, or a role of your own (default: %(default)s)")
    create.add_argument("--may-create", action="store_true",
                        help="it may create workspaces (only those it reaches); its participant "
                        "becomes the first admin of each")
    listing = actions.add_parser("list", help="list token ids, participants, scopes and revocations")
    revoke = actions.add_parser("revoke", help="revoke a token by its id")
    revoke.add_argument("id", help="the token id that `create` and `list` print")
    for action in (create, listing, revoke):
        action.add_argument("--db", default="chap.db",
                            help="the serve database: a SQLite file or a postgresql:// URI (default: ./chap.db)")
    log_commands.add_commands(commands)
    copy_command.add_command(commands)
    notify_commands.add_command(commands)
    return parser


def _token(args: argparse.Namespace) -> int:
    from coordinator.server.auth import TokenStore, check_participant
    from coordinator.server.scopes import Grant
    from storage import StoreError
    from storage.target import is_postgres

    if args.action != "create" and not is_postgres(args.db) and not os.path.exists(args.db):
        # Opening would create an empty file at a mistyped path.
        print(f"chapline: no such database file: {args.db} (give the --db that "
              "`chapline token create` and `serve --auth` use)", file=sys.stderr)
        return 1
    try:
        tokens = TokenStore(args.db)
    except (sqlite3.Error, StoreError, ValueError) as exc:
        print(f"chapline: cannot open the token table in {_quoted(args.db)}: {exc}", file=sys.stderr)
        return 1
    try:
        if args.action == "create":
            try:
                check_participant(args.principal)
                if bool(args.workspaces) == args.all_workspaces:
                    raise ValueError(
                        "say which workspaces the token reaches: --workspace ID (repeatable) "
                        "or --all-workspaces, one of the two"
                    )
                grant = Grant.of(None if args.all_workspaces else args.workspaces,
                                 args.max_role, args.may_create)
                secret, info = tokens.create(args.principal, grant)
            except ValueError as exc:
                print(f"chapline: {exc}", file=sys.stderr)
                return 2
            print(secret)
            print(
                f"chapline: token {info.id} acts as {info.principal} ({grant.describe()}); it is "
                f"shown only once (revoke: chapline token revoke --db {args.db} {info.id})",
                file=sys.stderr,
            )
        elif args.action == "list":
            for info in tokens.all():
                state = f"revoked {info.revoked}" if info.revoked else "active"
                print(f"{info.id}  {info.principal}  created {info.created}  "
                      f"{info.grant.describe()}  {state}")
        else:
            try:
                info = tokens.revoke(args.id)
            except KeyError as exc:
                print(f"chapline: {exc.args[0]}", file=sys.stderr)
                return 1
            print(f"chapline: token {info.id} ({info.principal}) revoked at {info.revoked}")
    finally:
        tokens.close()
    return 0


def _projections(specs: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for spec in specs:
        name, _, path = spec.partition("=")
        if name not in PROJECTIONS or not path:
            raise ValueError(
                f"--projection {spec!r}: expected NAME=TARGET with NAME one of "
                f"{', '.join(sorted(PROJECTIONS))}"
            )
        if name == "notifications" and path == ":memory:":
            raise ValueError(
                "--projection notifications=:memory: would keep the outbox where its deliverer "
                "cannot read it (each connection to :memory: is a database of its own): name a "
                "file or a postgresql:// URI, such as the --db database"
            )
        out.append((name, path))
    return out


def _profiles(text: str, require_signatures: bool) -> tuple[str, ...]:
    if text.strip() == "all":
        return ALL_PROFILES
    profiles = tuple(p.strip() for p in text.split(",") if p.strip())
    for profile in profiles:
        if not _PROFILE.match(profile):
            raise ValueError(f"--profiles: {profile!r} is not of the form name/MAJOR.MINOR")
    if "core/1.0" not in profiles:
        raise ValueError("--profiles must include core/1.0: every CHAP workspace speaks Core")
    problem = REGISTRY.unadvertisable(profiles) or unenforced(
        Options(require_signatures=require_signatures), profile_names(list(profiles))
    )
    if problem:
        raise ValueError(f"--profiles: {problem}")
    return profiles


def _oidc(args: argparse.Namespace) -> OidcVerifier | None:
    """The verifier the --oidc-* options describe, or None without them."""
    given = [args.oidc_issuer, args.oidc_audience, args.oidc_jwks]
    if not any(given):
        return None
    if not all(given):
        raise ValueError("--oidc-issuer, --oidc-audience and --oidc-jwks go together")
    if not args.auth:
        raise ValueError("--oidc-* options need --auth")
    from coordinator.security.identity_verifiers import OidcVerifier

    try:
        with open(args.oidc_jwks, encoding="utf-8") as f:
            jwks = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--oidc-jwks: cannot read {args.oidc_jwks!r} as JSON: {exc}") from None
    try:
        return OidcVerifier(jwks, issuer=args.oidc_issuer, audience=args.oidc_audience)
    except Exception as exc:  # joserfc's errors for a malformed key set
        raise ValueError(f"--oidc-jwks: {args.oidc_jwks!r} is not a usable JWKS: {exc}") from None


def _browser(args: argparse.Namespace) -> BrowserPolicy:
    from coordinator.server.browser import BrowserPolicy

    try:
        return BrowserPolicy(tuple(args.allowed_host), tuple(args.allow_origin))
    except ValueError as exc:
        raise _Usage(str(exc)) from None


def _serve(
    db: str,
    host: str,
    port: int,
    profiles: tuple[str, ...],
    auth: bool,
    require_signatures: bool,
    oidc: OidcVerifier | None,
    projections: list[tuple[str, str]],
    browser: BrowserPolicy,
    insecure: bool,
    workers: int = 1,
    sweep_interval: float = DEFAULT_SWEEP_INTERVAL,
    write_wait: float | None = None,
    log_format: str = "text",
    limits: ServerLimits | None = None,
    *,
    scope_claim: str = "chapline_scope",
    affinity: bool = True,
    desk_url: str | None = None,
) -> int:
    from storage import StoreError
    from storage.target import describe_target, open_store

    if workers < 1:
        raise _Usage(f"--workers must be at least 1, got {workers}")
    if workers > 1 and db == ":memory:":
        raise _Usage("--workers N needs a database the processes share: a file or a postgresql:// URI")
    if workers > 1 and any(target == ":memory:" for _, target in projections):
        raise _Usage(
            "--projection NAME=:memory: would give each worker tables of its own: with "
            "--workers N, name a file or a postgresql:// URI the workers share"
        )
    limits = limits or ServerLimits()
    raise_fd_limit(limits)  # the workers inherit it
    sock = _listen(host, port)
    try:
        if not auth and not _loopback(sock):
            if not insecure:
                raise _Usage(
                    f"refusing to listen on {_url(sock, '')} without --auth: anyone who can "
                    "reach this port could act as any participant. Add --auth (tokens: "
                    "`chapline token create`), listen on 127.0.0.1, or accept the risk with --insecure"
                )
            print(
                f"chapline: warning: listening on {_url(sock)} without --auth (--insecure): anyone "
                "who can reach this port may act as any participant",
                file=sys.stderr,
                flush=True,
            )

        # MCP and A2A are served where their extras are installed (create_app).
        agents = ", ".join(
            f"{name} on {_url(sock, path)}"
            for name, path, extra in (("MCP", "/mcp", "mcp"), ("A2A", "/a2a", "a2a"))
            if installed(extra)
        )

        def announce(workers_text: str, projected: str) -> str:
            return (
                f"chapline: serving CHAP on {_url(sock)} ({', '.join(profiles)}), "
                f"{workers_text}writing {describe_target(db)}"
                f"{', tokens required' if auth else ''}"
                f"{', signatures required' if require_signatures else ''}{projected}; "
                f"{agents + '; ' if agents else ''}review desk at {_url(sock, '/')}"
            )

        def serve_one(
            projections: list[tuple[str, str]],
            say: Callable[[str], str] | None,
            ready: Callable[[], None] | None = None,
            routing: Affinity | None = None,
        ) -> int:
            return _serve_one(
                db, sock, profiles, auth, require_signatures, oidc, projections, say,
                sweep_interval, browser, scope_claim, write_wait, log_format, limits, ready, routing,
                desk_url or _desk_url(sock),
            )

        if log_format == "json":
            from coordinator.server.logs import use_json_logs

            use_json_logs()

        if workers == 1:
            return serve_one(projections, lambda projected: announce("", projected))
        # Open it once here: a bad --db fails before any worker starts, and
        # the schema exists before the workers race to create it.
        try:
            open_store(db).close()
        except (sqlite3.Error, OSError, StoreError) as exc:
            raise _Failure(f"cannot open the database {_quoted(db)}: {exc}") from None
        # Likewise each projection's target: its tables exist before the
        # workers attach to it, each catching up and feeding it; its cursors,
        # decided inside each transaction, make them take turns.
        for name, target in projections:
            _open_projection(name, target, None).close()
        projected = "".join(
            f", projecting {name} into {describe_target(target)}" for name, target in projections
        )
        print(announce(f"{workers} workers ", projected), flush=True)
        # The workers count into files of one directory, added up by whichever
        # answers a scrape of /metrics (SPECIFICATION.md, "Observability").
        with contextlib.ExitStack() as run:
            if installed("metrics"):
                run.enter_context(multiprocess_dir())
            # Each workspace's calls answered by one worker (server/affinity.py).
            slots = run.enter_context(slots_directory(workers)) if affinity else None

            def serve_worker(ready: Callable[[], None], slot: int) -> int:
                routing = None if slots is None else Affinity(slots, slot, workers, write_wait=write_wait)
                return serve_one(projections, None, ready, routing)

            return run_workers(workers, serve_worker)
    finally:
        sock.close()


def _serve_one(
    db: str,
    sock: socket.socket,
    profiles: tuple[str, ...],
    auth: bool,
    require_signatures: bool,
    oidc: OidcVerifier | None,
    projections: list[tuple[str, str]],
    announce: Callable[[str], str] | None,
    sweep_interval: float,
    browser: BrowserPolicy,
    scope_claim: str,
    write_wait: float | None,
    log_format: str,
    limits: ServerLimits,
    ready: Callable[[], None] | None = None,
    affinity: Affinity | None = None,
    desk_url: str | None = None,
) -> int:
    """One server process: its own coordinator on `db`, serving `sock`;
    prints `announce(what the projections say)` once it is ready, and calls
    `ready()` once it accepts connections. With `affinity` (a worker), it
    also serves its slot's socket and passes on the calls of workspaces
    another worker answers."""
    # Imported here so `chapline --help` works without loading the coordinator.
    import uvicorn

    from coordinator import Coordinator
    from coordinator.server.auth import Authenticator, TokenStore
    from coordinator.server.health import store_probe
    from coordinator.server.http import AppServer, create_app
    from coordinator.server.observed import Observability
    from storage import StoreError
    from storage.target import open_store

    observed = Observability(probe=store_probe(db), log_calls=log_format == "json")
    try:
        # watch: reload a workspace another process (a worker, another
        # server on the same database) changed before using it.
        coord = Coordinator(
            store=observed.store(open_store(db, watch=True, wait=write_wait)),
            default_profiles=profiles,
            require_signatures=require_signatures,
        )
    except (sqlite3.Error, OSError, StoreError) as exc:
        raise _Failure(f"cannot open the database {_quoted(db)}: {exc}") from None
    tokens = None
    deliverers: list[Any] = []
    try:
        authenticator = None
        if auth:
            try:
                tokens = TokenStore(db)
            except (sqlite3.Error, StoreError, ValueError) as exc:
                raise _Failure(f"--auth: {exc}") from None
            authenticator = Authenticator(
                tokens, oidc=oidc, signatures=require_signatures, scope_claim=scope_claim
            )
        projected, observed.projections = _attach(coord, projections, desk_url)
        deliverers = _deliverers(observed.projections, on_attempt=observed.count_delivery)
        app = create_app(
            coord,
            auth=authenticator,
            browser=browser,
            public_url=_url(sock, ""),
            sweep_interval=sweep_interval,
            observability=observed,
            max_body_bytes=limits.max_body_bytes,
            affinity=affinity,
        )
        sockets = [sock]
        if affinity is not None:
            try:
                sockets.append(affinity.listen())
            except OSError as exc:
                raise _Failure(f"cannot listen on the worker socket in {affinity.directory}: {exc}") from None
            ready = _publishing(affinity, ready)
        try:
            server = AppServer(
                uvicorn.Config(
                    app,
                    log_level="warning",
                    # JSON logs: uvicorn's records go to the root logger's JSON lines.
                    log_config=None if log_format == "json" else uvicorn.config.LOGGING_CONFIG,
                    access_log=False,
                    lifespan="on",
                    timeout_graceful_shutdown=30,
                    http=guarded_protocol(limits),
                    timeout_keep_alive=limits.idle_timeout,
                ),
                stop=_signalled,
                ready=ready,
            )
            _run(server, sockets, None if announce is None else announce(projected))
        finally:
            for extra in sockets[1:]:
                extra.close()
            # The lifespan has normally closed the dispatcher already; a forced
            # stop skips it. Either way every queued call has run and nothing
            # writes any more when the store closes.
            app.state.dispatcher.close()
    finally:
        for deliverer in deliverers:
            deliverer.stop()
        coord.close()
        if tokens is not None:
            tokens.close()
    return 0


def _limits(args: argparse.Namespace) -> ServerLimits:
    """serve's bounds from its flags; a LimitError (a ValueError) names the flag."""
    fields = {field: getattr(args, field) for field, _, _ in _BOUNDS.values()}
    try:
        return ServerLimits(**fields)
    except LimitError as exc:
        flag = next(f for f, (field, _, _) in _BOUNDS.items() if field == exc.name)
        raise LimitError(flag, exc.value, exc.wanted) from None


def _quoted(db: str) -> str:
    from storage.target import describe_target, is_postgres

    return describe_target(db) if is_postgres(db) else repr(db)


def _open_projection(name: str, target: str, desk_url: str | None) -> Any:
    from coordinator.projections import ProjectionError

    try:
        return PROJECTIONS[name](target, desk_url)
    except ProjectionError as exc:
        raise _Failure(f"cannot open the {name} projection's target: {exc}") from None
    except (sqlite3.Error, OSError) as exc:
        raise _Failure(f"cannot open the {name} projection's target {_quoted(target)}: {exc}") from None


def _attach(
    coord: Coordinator, projections: list[tuple[str, str]], desk_url: str | None
) -> tuple[str, tuple[Any, ...]]:
    """Attach each projection (caught up before serving); what the start-up
    line says of them, and the attachments."""
    from storage.target import describe_target

    said = ""
    attachments = []
    for name, target in projections:
        try:
            projection = _open_projection(name, target, desk_url)
        except _Failure:
            coord.close()
            raise
        attachment = coord.attach(projection)
        attachments.append(attachment)
        said += f", projecting {name} into {describe_target(target)} ({attachment.state})"
    return said, tuple(attachments)


def _deliverers(
    attachments: Sequence[Any], on_attempt: Callable[[Outcome], None] | None = None
) -> list[Any]:
    """A running Deliverer for each notifications projection's outbox, each
    attempt recorded passed to `on_attempt` (serve's metrics count them)."""
    from coordinator.notify import Deliverer, NotificationProjection

    deliverers = []
    for attachment in attachments:
        if isinstance(attachment.projection, NotificationProjection):
            deliverer = Deliverer(attachment.projection.target, on_attempt=on_attempt)
            deliverer.start()
            deliverers.append(deliverer)
    return deliverers


def _mcp_stdio(
    args: argparse.Namespace, profiles: tuple[str, ...], projections: list[tuple[str, str]]
) -> int:
    """MCP on stdin/stdout until the client closes it (or SIGINT/SIGTERM)."""
    from coordinator import Coordinator
    from coordinator.server.mcp import run_stdio
    from storage import StoreError
    from storage.target import describe_target, open_store

    try:
        coord = Coordinator(
            store=open_store(args.db, wait=args.write_wait),
            default_profiles=profiles,
            require_signatures=args.require_signatures,
        )
    except (sqlite3.Error, OSError, StoreError) as exc:
        raise _Failure(f"cannot open the database {_quoted(args.db)}: {exc}") from None
    projected, attachments = _attach(coord, projections, args.desk_url)
    deliverers = _deliverers(attachments)
    print(
        f"chapline: serving CHAP as MCP tools on stdio, writing {describe_target(args.db)}{projected}",
        file=sys.stderr,
        flush=True,
    )
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_stdio(coord, coord.sweep, args.sweep_interval, **mcp_options.stdio_session(args))
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for deliverer in deliverers:
            deliverer.stop()
        coord.close()
    return 0


def _loopback(sock: socket.socket) -> bool:
    return _loopback_address(sock.getsockname()[0])


def _loopback_address(address: str) -> bool:
    """Whether only this machine can reach `address` (0.0.0.0 and :: cannot say so)."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int) -> socket.socket:
    """Bind before anything else, so a taken port fails fast and plainly."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise _Failure(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        hint = " (is another server running? pick another --port)" if port else ""
        raise _Failure(f"cannot listen on {host}:{port}: {exc.strerror}{hint}") from None
    return sock


def _publishing(affinity: Affinity, ready: Callable[[], None] | None) -> Callable[[], None]:
    """`ready`, taking the worker's slot first: calls are passed to it only
    once it accepts them."""

    def publish_then_ready() -> None:
        affinity.publish()
        if ready is not None:
            ready()

    return publish_then_ready


def _run(server: uvicorn.Server, sockets: list[socket.socket], started: str | None) -> None:
    """Print `started` (if any), run until SIGINT or SIGTERM, then return once
    the server has drained. The line is printed once our handlers are in
    place, so a signal sent as soon as it is read still stops the server cleanly.

    uvicorn handles both signals while serving (stop accepting, finish the
    requests in flight, run the lifespan shutdown) and, once stopped, re-sends
    the signal to the handler that was there before it; that handler is ours,
    so the signal ends up as a KeyboardInterrupt we catch here instead of the
    default SIGTERM action killing the process before the store is closed.
    """
    _signalled.clear()
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if started is not None:
            print(started, flush=True)
        server.run(sockets=sockets)
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# Set by `_interrupt`: the KeyboardInterrupt it raises is dropped when it
# lands in a finalizer or a weakref callback, so the server checks this too
# (AppServer's `stop`).
_signalled = threading.Event()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    _signalled.set()
    raise KeyboardInterrupt


def _desk_url(sock: socket.socket) -> str:
    """Where the desk is, for links sent to people: the address listened on,
    or this machine's name when that is every address (0.0.0.0, ::), which
    no one can reach as such."""
    host, port = sock.getsockname()[:2]
    if ipaddress.ip_address(host).is_unspecified:
        return f"http://{socket.getfqdn()}:{port}/"
    return _url(sock, "/")


def _url(sock: socket.socket, path: str = "/chap") -> str:
    host, port = sock.getsockname()[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"
