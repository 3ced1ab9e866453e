"""Reading the three shared tables, the same way in every SQL store.

SqliteStore and PostgresStore hold the same rows (`chap_meta`,
`chap_entries`, `chap_objects`) and must read them alike: the same SELECTs
but for their SQL dialect, and the same decoding into HeldWorkspace, records
and entries, skipping a damaged workspace with the same warning. Each store
keeps its own connections, transactions and locking, and runs the queries
built here inside them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from storage._encode import decode
from storage.match import entry_matches
from storage.records import SHARED_LAYOUT, WorkspaceRecord, assemble_snapshot
from storage.types import EntryFilter, HeldWorkspace, StoreUnavailableError

__all__ = [
    "WORKSPACE_IDS",
    "Dialect",
    "Loaded",
    "decode_object",
    "entries_query",
    "load_queries",
    "matching_entries",
    "records",
]

# Rows of any of the three tables name a workspace: one whose meta row was
# lost is still listed, so a verifier can report it.
WORKSPACE_IDS = (
    "SELECT workspace FROM chap_meta UNION SELECT workspace FROM chap_entries "
    "UNION SELECT workspace FROM chap_objects ORDER BY 1"
)

_Query = tuple[str, tuple[Any, ...]]


class Dialect(msgspec.Struct, frozen=True, kw_only=True):
    """What a store's SQL spells its own way."""

    param: str  # the driver's placeholder
    data: str  # a `data` column as selected (SQLite casts it, to read bytes)
    inserted: str  # the chap_objects column in insertion order
    # EntryFilter field -> the indexed expression that narrows candidates;
    # the SQL only narrows, every row returned is checked with entry_matches.
    filters: Mapping[str, str]
    refused: str  # true for a recorded refusal, false for an accepted call
    # A table of each entry's filter fields (a column per `filters` name, and
    # `refused`) kept behind the log, where the store has one (SQLite): a
    # filtered read takes the entries it lists and scans the entries past
    # its last by the expressions. None: the expressions are indexed.
    keys: str | None = None
    keys_index: str = ""  # the prefix of the keys table's index names, before a column's


class _Unreadable(Exception):
    """A row that cannot be decoded; loading skips its workspace."""


def _decode_value(text: bytes, what: str) -> Any:
    try:
        return decode(text)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise _Unreadable(f"{what} is not valid JSON ({exc})") from None


def decode_object(text: bytes, what: str) -> dict[str, Any]:
    value = _decode_value(text, what)
    if not isinstance(value, dict):
        raise _Unreadable(f"{what} is not a JSON object")
    return value


def _entries(rows: list[tuple[int, bytes]], what: str) -> list[dict[str, Any]]:
    """Decode a run of entry rows, checking that seqs run 0, 1, 2, … ."""
    for i, (seq, _) in enumerate(rows):
        if seq != i:
            raise _Unreadable(f"{what}: seq {i} is missing (the next held is {seq})")
    # One decode of the whole run is several times faster than one per row;
    # fall back to row by row only to name the row that fails.
    try:
        out: list[dict[str, Any]] = decode(b"[" + b",".join(text for _, text in rows) + b"]")
        if all(isinstance(e, dict) for e in out):
            return out
    except (msgspec.DecodeError, UnicodeDecodeError):
        pass
    return [decode_object(text, f"the entry at seq {seq}") for seq, text in rows]


def load_queries(d: Dialect, workspace: str | None, entries: bool) -> tuple[_Query, _Query, _Query]:
    """The three SELECTs of a load (of every workspace, or of `workspace`),
    for one read transaction: meta rows, object rows in insertion order
    (members come back in join order, as 0.3.3 loads them), and the entry
    rows, or without `entries` only each log's count and seq range (the
    primary-key index alone answers that; no entry is read)."""
    only, args = ("", ()) if workspace is None else (f" WHERE workspace = {d.param}", (workspace,))
    log = (
        f"SELECT workspace, seq, {d.data} FROM chap_entries{only} ORDER BY workspace, seq"
        if entries
        else f"SELECT workspace, count(*), min(seq), max(seq) FROM chap_entries{only} GROUP BY workspace"
    )
    return (
        (f"SELECT workspace, {d.data}, version, updated_at FROM chap_meta{only} ORDER BY workspace", args),
        (f"SELECT workspace, collection, id, {d.data} FROM chap_objects{only} ORDER BY {d.inserted}", args),
        (log, args),
    )


class Loaded(msgspec.Struct):
    """The rows of one load, grouped by workspace (JSON still as text)."""

    entries: bool
    metas: list[tuple[str, bytes, int, str]]
    objects: dict[str, dict[str, dict[str, bytes]]] = msgspec.field(default_factory=dict)
    logs: dict[str, list[tuple[int, bytes]]] = msgspec.field(default_factory=dict)
    shape: dict[str, tuple[int, int, int]] = msgspec.field(default_factory=dict)

    @classmethod
    def gather(
        cls,
        entries: bool,
        metas: Iterable[tuple[str, bytes, int, str]],
        objects: Iterable[tuple[str, str, str, bytes]],
        log: Iterable[Any],
    ) -> Loaded:
        """Group the rows of the three `load_queries`, in their order."""
        out = cls(entries, list(metas))
        for wid, collection, key, text in objects:
            out.objects.setdefault(wid, {}).setdefault(collection, {})[key] = text
        if entries:
            for wid, seq, text in log:
                out.logs.setdefault(wid, []).append((seq, text))
        else:
            out.shape = {wid: (count, low, high) for wid, count, low, high in log}
        return out

    def held(
        self, log: logging.Logger, source: str
    ) -> list[tuple[HeldWorkspace, list[dict[str, Any]] | None]]:
        """Each readable workspace with its decoded log (None without
        `entries`); one with a gap in its seqs or an unreadable meta row or
        entry is skipped with a warning on `log` naming `source`."""
        out = []
        for wid, meta_text, stored_version, updated_at in self.metas:
            try:
                meta = decode_object(meta_text, "its meta row")
                entries = None
                if self.entries:
                    entries = _entries(self.logs.get(wid, []), "its audit log")
                    held = len(entries)
                else:
                    count, low, high = self.shape.get(wid, (0, 0, -1))
                    if count and (low != 0 or high != count - 1):
                        raise _Unreadable(
                            f"its audit log holds {count} entries but their seqs "
                            f"run {low}..{high}, so some seq is missing"
                        )
                    held = count
            except _Unreadable as exc:
                _skip(log, source, wid, exc)
                continue
            if stored_version != held:
                log.warning(
                    "workspace %r: chap_meta.version is %s but %d entries are held; "
                    "loading with version %d (the log decides)",
                    wid,
                    stored_version,
                    held,
                    held,
                )
            out.append((HeldWorkspace(wid, meta, held, updated_at, self.objects.get(wid, {})), entries))
        return out


def records(
    loaded: list[tuple[HeldWorkspace, list[dict[str, Any]] | None]], log: logging.Logger, source: str
) -> list[WorkspaceRecord]:
    """Whole records of the workspaces `Loaded.held` returned, skipping (with
    a warning) one whose object does not decode."""
    out = []
    for held, entries in loaded:
        try:
            items = [
                (c, k, _decode_value(text, f"object {c}/{k}"))
                for c, objs in held.objects.items()
                for k, text in objs.items()
            ]
        except _Unreadable as exc:
            _skip(log, source, held.id, exc)
            continue
        data = assemble_snapshot(held.meta, entries, items, SHARED_LAYOUT)
        out.append(WorkspaceRecord(held.id, data, held.version, held.updated_at))
    return out


def _skip(log: logging.Logger, source: str, wid: str, exc: Exception) -> None:
    log.warning(
        "workspace %r skipped while loading%s: %s; the other "
        "workspaces load. Repair or delete its rows to load it again.",
        wid,
        f" {source}" if source else "",
        exc,
    )


# The keys columns, the one usually matching fewest entries first.
_SELECTIVE = ("task_id", "sender", "method", "refused")


def entries_query(
    d: Dialect,
    columns: str,
    workspace: str,
    start: int,
    stop: int | None,
    where: EntryFilter | None = None,
) -> tuple[str, list[Any]]:
    """SELECT `columns` of one workspace's entries with `start <= seq < stop`
    in seq order, narrowed by the indexed fields of `where`. Only string
    comparisons are pushed down (SQL makes them as Python does); anything
    else is left to entry_matches."""
    p = d.param
    pushed: list[tuple[str, str, Any]] = []  # (keys column, expression, value)
    if where is not None:
        for name, expr in d.filters.items():
            value = getattr(where, name)
            if isinstance(value, str):
                pushed.append((name, expr, value))
        if where.outcome in ("accepted", "refused"):
            # SQLite binds a bool as 0/1
            pushed.append(("refused", d.refused, where.outcome == "refused"))
    bounds = f"workspace = {p} AND seq >= {p}" + ("" if stop is None else f" AND seq < {p}")
    bound_args: list[Any] = [workspace, max(start, 0)] + ([] if stop is None else [stop])
    if pushed and d.keys is not None:
        # The seqs the keys list, and those of the tail past them that
        # match; the entries are then fetched by seq, not by range.
        # Through the index of the most selective field given, whatever the
        # planner would guess without statistics.
        selective = min(pushed, key=lambda c: _SELECTIVE.index(c[0]))[0]
        keyed = f"SELECT seq FROM {d.keys} INDEXED BY {d.keys_index}{selective} WHERE {bounds}"
        # One lower bound, so the scan starts past the keys (or at `start`).
        tail = (f"SELECT seq FROM chap_entries WHERE workspace = {p} AND seq > "
                f"(SELECT max(coalesce(max(seq), -1), {p}) FROM {d.keys} WHERE workspace = {p})"
                + ("" if stop is None else f" AND seq < {p}"))
        keyed_args = [*bound_args]
        tail_args = [workspace, max(start, 0) - 1, workspace] + ([] if stop is None else [stop])
        for column, expr, value in pushed:
            keyed += f" AND {column} = {p}"
            tail += f" AND {expr} = {p}"
            keyed_args.append(value)
            tail_args.append(value)
        sql = (f"SELECT {columns} FROM chap_entries WHERE workspace = {p} "
               f"AND seq IN ({keyed} UNION ALL {tail})")
        args = [workspace, *keyed_args, *tail_args]
    else:
        sql = f"SELECT {columns} FROM chap_entries WHERE {bounds}"
        args = bound_args
        for _, expr, value in pushed:
            sql += f" AND {expr} = {p}"
            args.append(value)
    return sql + " ORDER BY seq", args


def matching_entries(
    rows: Iterable[tuple[int, bytes]], workspace: str, where: EntryFilter | None, source: str
) -> list[dict[str, Any]]:
    """The entries of (seq, text) rows that match `where`. A row that does not
    decode ends the read: StoreUnavailableError naming `source` (if any)."""
    out = []
    for seq, text in rows:
        try:
            entry = decode_object(text, f"the entry at seq {seq}")
        except _Unreadable as exc:
            raise StoreUnavailableError(
                source,
                f"workspace {workspace!r}{f' in {source}' if source else ''}: {exc}. "
                "The log cannot be read past this row; repair or delete the row.",
            ) from None
        if where is None or entry_matches(entry, where):
            out.append(entry)
    return out
