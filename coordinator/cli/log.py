"""`chapline verify | inspect | export | import | migrate`: the log from a shell.

Each command opens a store (a SQLite file path, or a database URI once a
store for it exists), prints a table for people or `--json` for machines,
and shows a progress bar on stderr when stderr is a terminal (tables and
bars are drawn with rich, chapline[cli]; without it, tables are plain
columns and there is no bar). Exit status:
0 when the command did what it says (for `verify`: everything holds), 1 when
it found a problem or could not do it (one line on stderr says which), 2 for
bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import sqlite3
import sys
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from coordinator.errors import CommandError
from coordinator.extras import installed
from coordinator.model import DOCUMENT_LAYOUT
from coordinator.tools.verification import verify_store
from storage import SqliteStore, Store
from storage.records import assemble_snapshot

__all__ = ["COMMANDS", "add_commands", "opened_store", "progress_bar"]


def add_commands(commands: Any) -> None:
    """Add the log commands to the `chapline` argument parser's subparsers."""
    verify = commands.add_parser(
        "verify",
        help="check every chain, entry, head and object of a database",
        description=(
            "Check a database end to end: rows readable, entries well formed and "
            "contiguous, every chain links, stored heads and counts match the log, "
            "and replaying each log gives exactly the stored objects. Exit 0 when all "
            "holds, 1 naming the first broken workspace and seq otherwise."
        ),
    )
    _target(verify)
    verify.add_argument("--workspace", help="check only this workspace")
    _json(verify)

    inspect = commands.add_parser(
        "inspect",
        help="list workspaces: profiles, members, entries, head, last activity",
        description="List the workspaces a database holds.",
    )
    _target(inspect)
    _json(inspect)

    export = commands.add_parser(
        "export",
        help="write workspaces as snapshots or as one audit entry per line",
        description=(
            "Write to stdout: --format snapshot (default) gives the JSON that "
            "Coordinator.restore() and `chapline import` take (one workspace, or "
            '{"workspaces": [...]}); --format jsonl gives one audit entry per line, '
            'each with a "workspace" field.'
        ),
    )
    _target(export)
    export.add_argument("--workspace", help="export only this workspace")
    export.add_argument("--format", choices=("snapshot", "jsonl"), default="snapshot")

    import_ = commands.add_parser(
        "import",
        help="load snapshots or a jsonl log into a database",
        description=(
            "Load a file `chapline export` wrote (or any snapshot Coordinator.snapshot() "
            "gives) into a database. Snapshots are checked (chain included) before "
            "anything is written; a jsonl log is replayed call by call, so its objects "
            "are rebuilt from the log and its chain must come out identical. A workspace "
            "the database already holds is refused unless --overwrite."
        ),
    )
    import_.add_argument("file", help="the file to read ('-' for stdin)")
    _target(import_)
    import_.add_argument(
        "--overwrite",
        action="store_true",
        help="replace workspaces the database already holds",
    )
    _json(import_)

    migrate = commands.add_parser(
        "migrate",
        help="upgrade a SQLite file of the pre-0.3.2 layout in place, with a backup",
        description=(
            "Upgrade a SQLite file written in the pre-0.3.2 layout (one chap_workspaces "
            "table) to the shared three-table schema, in place, after copying it to "
            "FILE.bak-<time>; then verify it. A file already in the current layout is "
            "left as it is."
        ),
    )
    migrate.add_argument("db", metavar="DB", help="the SQLite file")
    _json(migrate)


def _target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("db", metavar="DB", help="a SQLite file, or a database URI")


def _json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    """Run the log command `args.command`; its exit status."""
    try:
        return COMMANDS[args.command](args)
    except CommandError as exc:
        print(f"chapline {args.command}: {exc}", file=sys.stderr)
        return 1


# -- opening ------------------------------------------------------------------


def _is_uri(target: str) -> bool:
    return "://" in target


@contextlib.contextmanager
def opened_store(target: str, *, create: bool = False) -> Iterator[Store]:
    """The store `target` names. An existing SQLite file is never created by
    mistake, and an old-layout file is not migrated behind the user's back."""
    if _is_uri(target):
        store = _opened_uri(target)
    else:
        store = _opened_file(target, create)
    try:
        yield store
    finally:
        store.close()


def _opened_file(target: str, create: bool) -> Store:
    if not create and not os.path.exists(target):
        raise CommandError(f"no such database file: {target}")
    if os.path.exists(target) and _old_layout(target):
        raise CommandError(
            f"{target} is in the pre-0.3.2 layout; run `chapline migrate {target}` first "
            "(it keeps a backup)"
        )
    try:
        return SqliteStore(target)
    except (sqlite3.Error, OSError) as exc:
        raise CommandError(f"cannot open {target} as a SQLite database ({exc})") from None


def _opened_uri(target: str) -> Store:
    scheme = target.split("://", 1)[0]
    if scheme not in ("postgresql", "postgres"):
        raise CommandError(
            f"no store for {scheme}:// URIs; give a SQLite file path or a postgresql:// URI"
        )
    from storage import StoreError
    from storage.postgres import PostgresStore

    try:
        return PostgresStore(target)
    except StoreError as exc:
        raise CommandError(f"cannot open the PostgreSQL database: {exc}") from None


def _tables(path: str) -> set[str]:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError as exc:
        raise CommandError(f"{path} is not a SQLite database ({exc})") from None


def _old_layout(path: str) -> bool:
    tables = _tables(path)
    return "chap_workspaces" in tables and "chap_meta" not in tables


# -- output -------------------------------------------------------------------


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def _table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    if not installed("cli"):
        _plain_table(title, columns, rows)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    # Piped output is for grep and logs: one row per line, whatever the width.
    Console(width=None if sys.stdout.isatty() else 400).print(table)


def _plain_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    widths = [max([len(column), *(len(row[i]) for row in rows)]) for i, column in enumerate(columns)]
    print(title)
    for line in [columns, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


@contextlib.contextmanager
def progress_bar(description: str) -> Iterator[Callable[[str, int, int], None]]:
    """A progress callback `(item, done, total)`: a bar on a terminal's
    stderr, nothing otherwise (pipes and CI logs stay clean) or without rich."""
    if not sys.stderr.isatty() or not installed("cli"):
        yield lambda item, done, total: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def advance(item: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=f"{description} {item}")

        yield advance


def _short(digest: str | None) -> str:
    return "-" if not digest else digest[:19] + "…"


# -- verify -------------------------------------------------------------------


def _verify(args: argparse.Namespace) -> int:
    with opened_store(args.db) as store:
        if args.workspace is not None and args.workspace not in store.workspace_ids():
            raise CommandError(f"{args.db} holds no workspace {args.workspace!r}")
        with progress_bar("verifying") as progress:
            reports = verify_store(store, args.workspace, progress)
    broken = [r for r in reports if not r.ok]
    if args.json:
        _print_json({"ok": not broken, "workspaces": [r.to_dict() for r in reports]})
    else:
        rows = []
        for r in reports:
            first = r.first()
            rows.append(
                [r.workspace, str(r.entries), _short(r.head), "ok" if first is None else first.describe()]
            )
        _table(f"{args.db}: {len(reports)} workspaces", ["workspace", "entries", "head", "verdict"], rows)
    if broken:
        first = broken[0].first()
        assert first is not None
        print(
            f"chapline verify: workspace {broken[0].workspace!r}, {first.describe()}"
            + (f" (and {len(broken) - 1} more broken workspaces)" if len(broken) > 1 else ""),
            file=sys.stderr,
        )
        return 1
    return 0


# -- inspect ------------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    with opened_store(args.db) as store:
        rows = []
        unreadable = []
        for wid in store.workspace_ids():
            held = store.load_held(wid)
            if not held:
                unreadable.append(wid)
                continue
            h = held[0]
            rows.append(
                {
                    "workspace": wid,
                    "profiles": list(h.meta.get("profiles") or []),
                    "members": len(h.objects.get("members", {})),
                    "tasks": len(h.objects.get("tasks", {})),
                    "entries": h.version,
                    "head": h.meta.get("chain_head"),
                    "last_activity": h.updated_at,
                    "state": h.meta.get("state", "active"),
                    **_work_counts(h.objects),
                }
            )
    if args.json:
        _print_json({"workspaces": rows, "unreadable": unreadable})
    else:
        _table(
            f"{args.db}: {len(rows)} workspaces",
            ["workspace", "profiles", "members", "tasks", "entries", "head", "last activity", "state",
             "work"],
            [
                [
                    r["workspace"],
                    ", ".join(r["profiles"]),
                    str(r["members"]),
                    str(r["tasks"]),
                    str(r["entries"]),
                    _short(r["head"]),
                    r["last_activity"] or "-",
                    r["state"],
                    _work_cell(r.get("work")),
                ]
                for r in rows
            ],
        )
    for wid in unreadable:
        print(f"chapline inspect: workspace {wid!r} cannot be read; run `chapline verify`", file=sys.stderr)
    return 1 if unreadable else 0


def _work_counts(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """x-chapline-work/1.0's plans, live claims and frontier (tasks whose
    dependencies have ended, waiting for a claim or a retry), when it has any."""
    work = objects.get("x_chapline_work", {})
    if not work:
        return {}
    return {"work": {
        "plans": sum(1 for key in work if key.startswith("plan:")),
        "claims": len(objects.get("x_chapline_claims", {})),
        "frontier": len(objects.get("x_chapline_frontier", {})),
    }}


def _work_cell(work: dict[str, int] | None) -> str:
    if work is None:
        return "-"
    return f"{work['plans']} plans, {work['claims']} claims, {work['frontier']} on the frontier"


# -- export / import ----------------------------------------------------------


def _snapshot(store: Store, wid: str) -> dict[str, Any]:
    held = store.load_held(wid)
    if not held:
        raise CommandError(f"workspace {wid!r} cannot be read; run `chapline verify` to see why")
    h = held[0]
    decode = msgspec.json.decode
    objects = [(c, k, decode(text)) for c, items in h.objects.items() for k, text in items.items()]
    return assemble_snapshot({"id": wid, **h.meta}, store.read_entries(wid), objects, DOCUMENT_LAYOUT)


def _export(args: argparse.Namespace) -> int:
    with opened_store(args.db) as store:
        ids = store.workspace_ids()
        if args.workspace is not None:
            if args.workspace not in ids:
                raise CommandError(f"{args.db} holds no workspace {args.workspace!r}")
            ids = [args.workspace]
        out = sys.stdout
        if args.format == "jsonl":
            for wid in ids:
                for entry in store.read_entries(wid):
                    out.write(json.dumps({"workspace": wid, **entry}, ensure_ascii=False) + "\n")
            return 0
        snapshots = [_snapshot(store, wid) for wid in ids]
    document: Any = snapshots[0] if args.workspace is not None else {"workspaces": snapshots}
    out.write(json.dumps(document, ensure_ascii=False) + "\n")
    return 0


def _read_input(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CommandError(f"{path} is not UTF-8 text") from None


def _parse_import(text: str, path: str) -> tuple[str, Any]:
    """("snapshot", snapshots) or ("jsonl", {workspace: [entries]})."""
    stripped = text.strip()
    if not stripped:
        raise CommandError(f"{path} is empty")
    try:
        document = json.loads(stripped)
    except json.JSONDecodeError:
        document = None
    if isinstance(document, dict) and "seq" not in document:
        items = document.get("workspaces") if isinstance(document.get("workspaces"), list) else [document]
        return "snapshot", items
    logs: dict[str, list[dict[str, Any]]] = {}
    for number, line in enumerate(stripped.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path}, line {number}: not JSON ({exc.msg})") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("workspace"), str):
            raise CommandError(
                f'{path}, line {number}: expected an audit entry with a "workspace" field '
                "(as `chapline export --format jsonl` writes)"
            )
        logs.setdefault(entry.pop("workspace"), []).append(entry)
    return "jsonl", logs


def _import(args: argparse.Namespace) -> int:
    from coordinator.coordinator import Coordinator
    from coordinator.errors import RestoreError
    from coordinator.tools.snapshot import restore_changes

    kind, items = _parse_import(_read_input(args.file), args.file)
    # Everything that can refuse the file runs before the database is opened,
    # so a refused import leaves no new file behind and writes nothing.
    if kind == "snapshot":
        snapshots = items
        ids = [i.get("id") if isinstance(i, dict) else None for i in items]
    else:
        snapshots = [_rebuilt(wid, entries) for wid, entries in items.items()]
        ids = list(items)
    try:
        restore_changes(snapshots)
    except RestoreError as exc:
        raise CommandError(f"nothing written: {exc}") from None
    with opened_store(args.db, create=True) as store:
        held = set(store.workspace_ids())
        clash = [wid for wid in ids if wid in held]
        if clash and not args.overwrite:
            raise CommandError(
                f"{args.db} already holds {', '.join(map(repr, clash))}; "
                "pass --overwrite to replace them"
            )
        try:
            written = Coordinator(store).restore(snapshots, overwrite=args.overwrite)
        except RestoreError as exc:
            raise CommandError(f"nothing written: {exc}") from None
    if args.json:
        _print_json({"imported": written, "format": kind})
    else:
        print(f"chapline import: {len(written)} workspaces written to {args.db} ({kind})")
    return 0


def _rebuilt(wid: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A workspace rebuilt from its log alone, when the replay reproduces
    every entry (so the chain is the one exported)."""
    from coordinator.tools.replay import rebuild_workspace

    try:
        return rebuild_workspace(wid, entries)
    except ValueError as exc:
        raise CommandError(f"nothing written: workspace {wid!r}: {exc}") from None


# -- migrate ------------------------------------------------------------------


def _migrate(args: argparse.Namespace) -> int:
    if not os.path.exists(args.db):
        raise CommandError(f"no such database file: {args.db}")
    if not _old_layout(args.db):
        message = f"{args.db} is already in the current layout; nothing to do"
        _print_json({"migrated": False, "backup": None}) if args.json else print(f"chapline migrate: {message}")
        return 0
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    backup = f"{args.db}.bak-{stamp}"
    _backup(args.db, backup)
    with _opened_for_migration(args.db) as store:
        reports = verify_store(store)
    broken = [r for r in reports if not r.ok]
    if args.json:
        _print_json(
            {"migrated": True, "backup": backup, "workspaces": [r.to_dict() for r in reports]}
        )
    else:
        print(f"chapline migrate: {args.db} upgraded ({len(reports)} workspaces); backup at {backup}")
    if broken:
        first = broken[0].first()
        raise CommandError(
            f"upgraded, but workspace {broken[0].workspace!r} does not verify: "
            f"{first.describe() if first else 'unreadable'}"
        )
    return 0


def _backup(path: str, backup: str) -> None:
    """A consistent copy, through SQLite's backup API (a live WAL file too)."""
    try:
        with contextlib.closing(sqlite3.connect(path)) as source, contextlib.closing(
            sqlite3.connect(backup)
        ) as target:
            source.backup(target)
    except sqlite3.Error as exc:
        with contextlib.suppress(OSError):
            os.remove(backup)
        raise CommandError(f"cannot back up {path} ({exc}); nothing changed") from None
    shutil.copymode(path, backup)


@contextlib.contextmanager
def _opened_for_migration(path: str) -> Iterator[Store]:
    # SqliteStore migrates an old-layout file in one transaction when it opens it.
    try:
        store = SqliteStore(path)
    except (sqlite3.Error, OSError) as exc:
        raise CommandError(f"cannot upgrade {path} ({exc}); the backup is intact") from None
    try:
        yield store
    finally:
        store.close()


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "verify": _verify,
    "inspect": _inspect,
    "export": _export,
    "import": _import,
    "migrate": _migrate,
}
