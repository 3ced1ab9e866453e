"""`chapline copy SOURCE TARGET`: every workspace from one database to another.

SOURCE and TARGET are each a SQLite file or a `postgresql://` URI, so this
moves a deployment from SQLite to PostgreSQL and back. Every workspace of
SOURCE is verified first, as `chapline verify` would (rows, chain, head and
count, a replay of its log against its objects): if any does not verify,
nothing is copied (and a missing TARGET is not created). Then each workspace
is written to the target whole (one replace, one transaction) and verified
again there. A target that already holds workspaces is refused unless
`--replace` is given (then the workspaces being copied replace those with the
same id; others are kept). Exit status: 0 when every workspace arrived and
verifies, 1 otherwise (one line on stderr per problem), 2 for bad arguments."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import msgspec

from coordinator.cli.log import opened_store, progress_bar
from coordinator.errors import CommandError
from coordinator.tools.verification import verify_workspace
from storage import Store, StoreChange

__all__ = ["add_command", "run"]


def add_command(commands: Any) -> None:
    copy = commands.add_parser(
        "copy",
        help="copy every workspace from one database to another (SQLite <-> PostgreSQL)",
        description=(
            "Copy every workspace from SOURCE to TARGET (each a SQLite file or a "
            "postgresql:// URI): every workspace of SOURCE is verified first, and "
            "nothing is copied if any does not verify; each is verified again on "
            "arrival. A TARGET that holds workspaces is refused unless --replace is given."
        ),
    )
    copy.add_argument("source", metavar="SOURCE", help="a SQLite file or a postgresql:// URI")
    copy.add_argument("target", metavar="TARGET", help="a SQLite file or a postgresql:// URI")
    copy.add_argument(
        "--replace",
        action="store_true",
        help="write into a TARGET that holds workspaces: those with a copied id are "
        "replaced, the others kept",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return _copy(args.source, args.target, args.replace)
    except CommandError as exc:
        print(f"chapline copy: {exc}", file=sys.stderr)
        return 1


def _copy(source_name: str, target_name: str, replace: bool) -> int:
    if _same(source_name, target_name):
        raise CommandError("SOURCE and TARGET are the same database; nothing was copied")
    with opened_store(source_name) as source:
        _refuse_a_held_target(target_name, replace)
        ids = source.workspace_ids()
        _refuse_a_broken_source(source, ids)
        with opened_store(target_name, create=True) as target:
            failed = 0
            entries = 0
            with progress_bar("copying") as progress:
                for done, wid in enumerate(ids, 1):
                    problem, count = _copy_one(source, target, wid)
                    if problem is not None:
                        failed += 1
                        print(f"chapline copy: workspace {wid}: {problem}", file=sys.stderr)
                    entries += count
                    progress(wid, done, len(ids))
    print(
        f"copied {len(ids) - failed} of {len(ids)} workspaces ({entries} audit entries), "
        "each verified in TARGET"
    )
    return 1 if failed else 0


def _refuse_a_held_target(target_name: str, replace: bool) -> None:
    """Refuse a TARGET that holds workspaces, unless `replace`; a file that
    does not exist holds none (and is not created here)."""
    if replace or ("://" not in target_name and not os.path.exists(target_name)):
        return
    with opened_store(target_name) as target:
        held = target.workspace_ids()
    if held:
        raise CommandError(
            f"TARGET already holds {len(held)} workspace(s); nothing was copied. "
            "Pass --replace to write into it (workspaces with a copied id are "
            "replaced, the others kept), or give an empty TARGET."
        )


def _refuse_a_broken_source(source: Store, ids: list[str]) -> None:
    """Verify every workspace of SOURCE before anything is written: a copy
    carries only what verifies, and all of it or nothing."""
    broken = []
    with progress_bar("verifying SOURCE") as progress:
        for done, wid in enumerate(ids, 1):
            report = verify_workspace(source, wid)
            if not report.ok:
                first = report.first()
                broken.append(wid)
                print(
                    f"chapline copy: workspace {wid} does not verify in SOURCE: "
                    f"{first.describe() if first else 'see chapline verify'}",
                    file=sys.stderr,
                )
            progress(wid, done, len(ids))
    if broken:
        raise CommandError(
            f"nothing was copied: {len(broken)} of {len(ids)} workspace(s) do not verify in "
            "SOURCE (above). Run `chapline verify` on SOURCE, repair or delete them, then copy again."
        )


def _copy_one(source: Store, target: Store, wid: str) -> tuple[str | None, int]:
    """Copy one workspace, every collection it holds, as one replace change,
    and verify it on arrival; (problem or None, entries)."""
    held = source.load_held(wid)
    try:
        objects = {
            collection: {key: msgspec.json.decode(text) for key, text in items.items()}
            for h in held
            for collection, items in h.objects.items()
        }
    except msgspec.DecodeError:
        held = []
    if not held:
        return "cannot be read in SOURCE any more; not copied", 0
    (workspace,) = held
    entries = source.read_entries(wid)
    meta = dict(workspace.meta)
    meta.setdefault("id", wid)
    target.apply(
        StoreChange(
            id=wid,
            base=0,
            version=len(entries),
            updated_at=workspace.updated_at,
            meta=meta,
            entries=entries,
            objects=objects,
            replace=True,
        )
    )
    arrived = verify_workspace(target, wid)
    if arrived.ok:
        return None, len(entries)
    first = arrived.first()
    return (
        f"does not verify in TARGET after the copy "
        f"({first.describe() if first else 'see chapline verify'}); check TARGET",
        len(entries),
    )


def _same(a: str, b: str) -> bool:
    if "://" in a or "://" in b:
        return a == b
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)
