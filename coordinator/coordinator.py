"""The Coordinator: one call in, one JSON-RPC response out, write-ahead.

The flow of a call (SPECIFICATION.md, "Dispatch"): decode and check the
envelope, route it through the profile gate, membership floor and paused gate,
run the handler on a `Call` that stages new values, build the audit entry,
write one `StoreChange`, and only then swap the staged values into memory and
tell the listeners. A refused, failed or unwritable call leaves memory as it
was.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from typing import Any, Callable, Iterator

import msgspec

from coordinator import catalogue
from coordinator.audit import (
    READS,
    AuditEntry,
    refusal_is_recorded,
    signed_digest,
)
from coordinator.batch import Part, Pending, put_values
from coordinator.call import Call, Workspace
from coordinator.canonical import (
    ZERO_HASH,
    CanonicalError,
    canonical_bytes,
    inspect,
    link_hash,
)
from coordinator.clock import Clock, iso_ms, system_clock
from coordinator.compat import (
    CoordinatorOptions,
    WorkspacesView,
    WorkspaceState,
    coordinator_settings,
)
from coordinator.ids import IdSource, random_ids
from coordinator.model import WorkspaceMeta, to_stored
from coordinator.profiles import HANDLERS
from coordinator.snapshot import RestoreError, restore_change, workspace_from_held
from coordinator.wire import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NOT_AUTHORISED,
    STORE_CONFLICT,
    STORE_WRITE_FAILED,
    WORKSPACE_PAUSED,
    RpcError,
    decode_json,
    error_response,
    result_response,
)
from storage import (
    IDEMPOTENCY_KEYS,
    EntryFilter,
    MemoryStore,
    Store,
    StoreChange,
    StoreConflictError,
    assemble_snapshot,
    entry_matches,
)

__all__ = ["AuditListener", "BatchWriteError", "Coordinator", "LogReader", "Options"]

log = logging.getLogger("chapline")

AuditListener = Callable[[str, AuditEntry], None]

MAX_DEPTH = 64
_decode = msgspec.json.decode
_decode_entry = msgspec.json.Decoder(AuditEntry).decode
_encode_sorted = msgspec.json.Encoder(order="sorted").encode
_encode = msgspec.json.Encoder().encode  # keeps key order, as results are shown

# Methods whose caller must be a member before anything else is looked at.
_FLOOR_PREFIXES = ("control.", "deliberate.", "handoff.", "whisper.")
_FLOOR_METHODS = frozenset({"task.route", "review.depth", "escalate.auto", "participant.leave"})
_PAUSE_EXEMPT = frozenset(
    {
        "workspace.create",
        "workspace.describe",
        "control.resume",
        "audit.read",
        "participant.join",
        "participant.leave",
    }
)


class Options(msgspec.Struct, frozen=True):
    """Behaviour switches a handler may consult."""

    enable_chain: bool = True
    default_profiles: tuple[str, ...] = ("core/1.0", "review/1.0")
    max_envelope_bytes: int = 1_048_576
    require_read_membership: bool = False


class BatchWriteError(Exception):
    """A batch's store write failed for a workspace; its calls were undone.

    `error` is the JSON-RPC error each of those calls is now answered with.
    """

    def __init__(self, error: RpcError) -> None:
        super().__init__(error.message)
        self.error = error


class Coordinator:
    """A CHAP coordinator: `dispatch(envelope)` answers one JSON-RPC call.

    `store` defaults to a MemoryStore; `clock` (epoch ms) and `ids`
    (`prefix -> id`) are injectable so that the same calls give byte-identical
    stores. Every workspace the store holds is restored at construction.
    """

    def __init__(
        self,
        store: Store | CoordinatorOptions | None = None,
        *,
        options: CoordinatorOptions | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        enable_chain: bool | None = None,
        default_profiles: tuple[str, ...] | list[str] | None = None,
        max_envelope_bytes: int | None = None,
        require_read_membership: bool | None = None,
        on_audit: AuditListener | None = None,
        **overrides: Any,
    ) -> None:
        if isinstance(store, CoordinatorOptions):  # 0.3.3's Coordinator(options)
            if options is not None:
                raise TypeError("Coordinator() got options twice (positionally and as options=)")
            store, options = None, store
        explicit = {
            "store": store,
            "clock": clock,
            "ids": ids,
            "enable_chain": enable_chain,
            "default_profiles": default_profiles,
            "max_envelope_bytes": max_envelope_bytes,
            "require_read_membership": require_read_membership,
            "on_audit": on_audit,
        }
        settings = coordinator_settings(options, overrides, explicit)
        store, clock, ids = settings["store"], settings["clock"], settings["ids"]
        default_profiles = settings["default_profiles"]
        on_audit = settings["on_audit"]
        problem = catalogue.unimplemented(default_profiles)
        if problem:
            raise ValueError(f"default_profiles: {problem}")
        if store is not None and not callable(getattr(store, "load_held", None)):
            raise TypeError(
                f"store must be a chapline store (storage.MemoryStore, storage.SqliteStore), "
                f"not {type(store).__module__}.{type(store).__name__}: to keep a 0.3.3 SQLite "
                "file, open it with storage.SqliteStore(path)"
            )
        self.store: Store = store if store is not None else MemoryStore()
        self._clock = clock or system_clock
        self._ids = ids or random_ids
        self.options = Options(
            enable_chain=settings["enable_chain"],
            default_profiles=tuple(default_profiles),
            max_envelope_bytes=settings["max_envelope_bytes"],
            require_read_membership=settings["require_read_membership"],
        )
        self._listeners: list[AuditListener] = [on_audit] if on_audit else []
        self._workspaces: dict[str, Workspace] = {}
        self._batch: Pending | None = None
        # Objects stay as stored text until used: a fresh collection is young
        # garbage the collector would otherwise scan again and again.
        collecting = gc.isenabled()
        gc.disable()
        try:
            for held in self.store.load_held():
                ws = workspace_from_held(held)
                if ws is not None:
                    self._workspaces[ws.id] = ws
        finally:
            if collecting:
                gc.enable()

    # -- public API ---------------------------------------------------------

    def dispatch(self, envelope: dict[str, Any] | str | bytes) -> dict[str, Any]:
        """Answer one JSON-RPC envelope (a dict, or its JSON text). Never raises."""
        batch = self._batch
        if batch is not None:
            batch.current = None
        response = self._dispatch_safe(envelope, None, retry=True)
        if batch is not None and batch.current is not None:
            # Anything answered from a workspace the batch changed depends on
            # that write: it is rewritten or run again with the batch's calls.
            wid, own, arrived = batch.current
            part = batch.parts.get(wid)
            if part is not None:
                part.calls.append((own, arrived, response))
        return response

    def _dispatch_safe(self, envelope: Any, arrived: str | None, retry: bool) -> dict[str, Any]:
        """`_dispatch`, with a defect answered -32603 (no traceback), never raised."""
        try:
            if arrived is None:
                arrived = iso_ms(int(self._clock()))
            return self._dispatch(envelope, arrived, retry)
        except Exception as exc:
            log.exception("internal error while dispatching")
            req_id = dict.get(envelope, "id") if isinstance(envelope, dict) else None
            return error_response(
                req_id, RpcError(INTERNAL_ERROR, "Internal error", {"detail": str(exc)})
            )

    def add_audit_listener(self, listener: AuditListener) -> None:
        """Call `listener(workspace_id, entry)` after each entry is durable."""
        self._listeners.append(listener)

    def workspace_ids(self) -> list[str]:
        return list(self._workspaces)

    @property
    def workspaces(self) -> WorkspacesView:
        """Workspace id -> a read-only view of it, as 0.3.3's `workspaces` is
        read (`in`, `len`, iteration, `.get`, `ws.members[uri].role`, ...).
        Views read the live state; nothing is copied ahead of time."""
        return WorkspacesView(self)

    def get_workspace(self, workspace_id: str) -> WorkspaceState | None:
        """The workspace in 0.3.3's field layout with its whole audit log, as
        plain values `dataclasses.asdict` takes; None if it is not held.
        Reads the log from the store: O(log), meant for notebooks and tests."""
        if workspace_id not in self._workspaces:
            return None
        return WorkspaceState.from_snapshot(self.snapshot(workspace_id))

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group the calls made inside into one store write per workspace.

        Calls see each other's effects at once and are answered provisionally.
        If the block raises, every call is undone and its response dict
        rewritten to an error. On exit each workspace's change is written. A workspace whose write
        conflicts with another writer is reloaded and its calls are run again,
        one by one, their response dicts updated in place. A workspace whose
        write fails is undone, its calls' response dicts are rewritten in
        place to the error, and BatchWriteError is raised once the other
        workspaces are written.
        """
        if self._batch is not None:
            yield  # nested: the outer batch writes
            return
        self._batch = pending = Pending()
        try:
            yield
        except BaseException as exc:
            self._batch = None
            abandoned = RpcError(
                INTERNAL_ERROR,
                "Internal error",
                {"detail": f"not applied: the batch was abandoned ({type(exc).__name__})"},
            )
            for wid, part in pending.parts.items():
                self._undo(wid, part)
                for _, _, response in part.calls:
                    response.pop("result", None)
                    response["error"] = abandoned.to_wire()
            raise
        self._batch = None
        failed: dict[str, RpcError] = {}
        conflicted: list[str] = []
        for wid, error in self._write_parts(pending.parts).items():
            part = pending.parts[wid]
            self._undo(wid, part)
            if error.code == STORE_CONFLICT:
                conflicted.append(wid)
            else:
                failed[wid] = error
                for _, _, response in part.calls:
                    response.pop("result", None)
                    response["error"] = error.to_wire()
        for wid, part in pending.parts.items():
            if wid not in failed and wid not in conflicted and wid in self._workspaces:
                part.settle_into(self._workspaces[wid])
        self._notify(
            [(wid, e) for wid, e in pending.written if wid not in failed and wid not in conflicted]
        )
        for wid in conflicted:
            try:
                self._reload(wid)
            except Exception:  # the re-runs conflict again and reload themselves
                log.exception("reloading workspace %s after a conflict failed", wid)
            for envelope, arrived, response in pending.parts[wid].calls:
                again = self._dispatch_safe(envelope, arrived, retry=True)
                response.clear()
                response.update(again)
        if failed:
            raise BatchWriteError(next(iter(failed.values())))

    def snapshot(self, workspace_id: str) -> dict[str, Any]:
        """The workspace as a JSON-safe dict: meta, collections keyed by id, audit."""
        ws = self._workspaces.get(workspace_id)
        if ws is None:
            raise KeyError(f"no workspace {workspace_id!r}")
        objects = [
            (c, k, to_stored(v)) for c, items in ws.objects.items() for k, v in items.items()
        ]
        entries = self._read_log(ws, 0, ws.count, None)
        return assemble_snapshot(msgspec.to_builtins(ws.meta), entries, objects)

    def restore(self, data: dict[str, Any] | list[dict[str, Any]]) -> list[str]:
        """Write snapshots (one dict, a list, or `{"workspaces": [...]}`) to the
        store, replacing what it held for them, and load them. Returns the ids."""
        if self._batch is not None:
            raise RestoreError("restore() cannot run inside batch(): finish the batch first")
        if isinstance(data, dict) and isinstance(data.get("workspaces"), list):
            data = data["workspaces"]
        items = data if isinstance(data, list) else [data]
        changes = [restore_change(item) for item in items]
        for change in changes:
            self.store.apply(change)
            if not self._reload(change.id) or change.id not in self._workspaces:
                raise RestoreError(f"workspace {change.id!r} was written but cannot be loaded")
        return [change.id for change in changes]

    def close(self) -> None:
        self.store.close()

    # -- the pipeline -------------------------------------------------------

    def _dispatch(self, envelope: Any, arrived: str, retry: bool) -> dict[str, Any]:
        if isinstance(envelope, (bytes, bytearray, memoryview, str)):
            try:
                envelope = decode_json(envelope)
            except RpcError as err:
                return error_response(None, err)
        if not isinstance(envelope, dict) or envelope.get("jsonrpc") != "2.0":
            req_id = envelope.get("id") if isinstance(envelope, dict) else None
            return error_response(req_id, RpcError(INVALID_REQUEST, "Invalid JSON-RPC 2.0 request"))
        req_id = envelope.get("id")
        method = envelope.get("method")
        if not isinstance(method, str) or not method:
            return error_response(req_id, RpcError(INVALID_REQUEST, "Invalid JSON-RPC 2.0 request"))
        shape = inspect(envelope)
        if shape.depth > MAX_DEPTH:
            return error_response(
                req_id,
                RpcError(INVALID_REQUEST, f"Envelope nests deeper than {MAX_DEPTH} levels"),
            )
        raw = b""
        if shape.error is None:
            raw = canonical_bytes(envelope, shape)
            limit = self.options.max_envelope_bytes
            if len(raw) > limit:
                return error_response(
                    req_id,
                    RpcError(
                        INVALID_REQUEST,
                        f"Envelope exceeds max_envelope_bytes ({len(raw)} > {limit})",
                    ),
                )
        params = envelope.get("params")
        if params is None:  # absent or null: no params (as 0.3.3 reads it)
            params = {}
        elif not isinstance(params, dict):
            return error_response(req_id, RpcError(INVALID_PARAMS, "Invalid params: expected an object"))
        owner = catalogue.OWNING_PROFILE.get(method)
        if owner is None:
            return error_response(req_id, RpcError(METHOD_NOT_FOUND, f"Unknown method: {method}"))
        if shape.error is not None:
            return error_response(req_id, RpcError(INVALID_PARAMS, str(shape.error)))
        # From here on we work on our own copy: the JSON of the canonical bytes.
        envelope = _decode(raw)
        params = envelope.get("params") or {}
        wid = params.get("workspace")
        ws = self._workspace(wid) if isinstance(wid, str) else None
        if self._batch is not None and isinstance(wid, str):
            self._batch.current = (wid, envelope, arrived)

        sig = envelope.get("sig")
        if ws is not None and isinstance(sig, str):
            seen = self._signed_index(ws).get(signed_digest(envelope))
            if seen is not None and seen[1] is not None:
                seq, code = seen
                return error_response(
                    req_id,
                    RpcError(code, f"This signed request was refused at seq {seq}", {"refused_at_seq": seq}),
                )

        try:
            handler = self._route(method, owner, params, ws)
        except RpcError as err:
            gated = isinstance(err.data, dict) and "advertised" in err.data
            return self._refuse(envelope, raw, method, params, ws, err, gated, arrived, retry)

        if method == "task.create" and ws is not None:
            key = params.get("idempotency_key")
            if isinstance(key, str):
                task_id = ws.get(IDEMPOTENCY_KEYS, key)
                task = ws.get("tasks", task_id) if task_id is not None else None
                if task is not None:
                    return result_response(req_id, {"task_id": task.id, "state": task.state})

        call = Call(method, params, arrived, ws, self.options, self._new_id, self._log_reader(ws))
        try:
            result = handler(call)
        except RpcError as err:
            return self._refuse(envelope, raw, method, params, ws, err, False, arrived, retry)

        # The caller gets its own copy: results can share values with held
        # objects (audit.read's entries are decoded afresh from the store).
        if method != "audit.read":
            result = _decode(_encode(result))
        if call.ws is None or method in READS:
            return result_response(req_id, result)
        # 0.3.3 records a call only when params.workspace names the workspace:
        # a create with a generated id is kept, but leaves no entry.
        record = raw if params.get("workspace") == call.ws.id else None
        return self._record(envelope, call, result_response(req_id, result), record, None, arrived, retry)

    def _route(
        self, method: str, owner: str, params: dict[str, Any], ws: Workspace | None
    ) -> Callable[[Call], Any]:
        """The handler for `method`, or the refusal the gates give first."""
        if ws is not None and method not in catalogue.ALWAYS_AVAILABLE and owner != "core/1.0":
            advertised = ws.meta.profiles
            if catalogue.profile_name(owner) not in catalogue.profile_names(advertised):
                raise RpcError(
                    METHOD_NOT_FOUND,
                    f"Unknown method: {method}",
                    {"profile": owner, "advertised": list(advertised)},
                )
        handler = HANDLERS.get(method)
        if handler is None:
            raise RpcError(
                METHOD_NOT_FOUND,
                f"Method not implemented by chapline: {method} (profile {owner})",
                {"profile": owner, "implemented": False},
            )
        if ws is not None and (method.startswith(_FLOOR_PREFIXES) or method in _FLOOR_METHODS):
            sender = params.get("from")
            if not isinstance(sender, str) or sender not in ws.objects["members"]:
                raise RpcError(
                    NOT_AUTHORISED,
                    f"'from' is not a participant URI of this workspace: {sender!r}",
                )
        if ws is not None and ws.meta.state == "paused" and method not in _PAUSE_EXEMPT:
            raise RpcError(WORKSPACE_PAUSED, f"Workspace {ws.id} is paused")
        return handler

    def _refuse(
        self,
        envelope: dict[str, Any],
        raw: bytes,
        method: str,
        params: dict[str, Any],
        ws: Workspace | None,
        err: RpcError,
        gated: bool,
        arrived: str,
        retry: bool,
    ) -> dict[str, Any]:
        req_id = envelope.get("id")
        sender = params.get("from")
        if (
            ws is None
            or not isinstance(sender, str)
            or sender not in ws.objects["members"]
            or not refusal_is_recorded(method, err.code, gated)
        ):
            return error_response(req_id, err)
        if isinstance(envelope.get("sig"), str):
            if signed_digest(envelope) in self._signed_index(ws):
                return error_response(req_id, err)
        outcome = {"status": "refused", "code": err.code}
        # JCS of {"outcome", "request"}: keys in order, request already canonical.
        record = b'{"outcome":' + _encode_sorted(outcome) + b',"request":' + raw + b"}"
        call = Call(method, params, arrived, ws, self.options, self._new_id, self._log_reader(ws))
        return self._record(envelope, call, error_response(req_id, err), record, outcome, arrived, retry)

    def _record(
        self,
        envelope: dict[str, Any],
        call: Call,
        response: dict[str, Any],
        record: bytes | None,
        outcome: dict[str, Any] | None,
        arrived: str,
        retry: bool,
    ) -> dict[str, Any]:
        """Write the call's change (with its entry, unless `record` is None),
        then commit it to memory and tell the listeners."""
        ws = call.ws
        assert ws is not None
        meta = call.meta or ws.meta
        entries: list[AuditEntry] = []
        if record is not None:
            prev = None
            if meta.chain_enabled:
                prev = meta.chain_head or ZERO_HASH
                meta = msgspec.structs.replace(meta, chain_head=link_hash(record, prev))
            if outcome is None:
                entries.append(AuditEntry(ws.count, arrived, envelope=envelope, prev_hash=prev))
            else:
                entries.append(
                    AuditEntry(ws.count, arrived, request=envelope, outcome=outcome, prev_hash=prev)
                )
        change = StoreChange(
            id=ws.id,
            base=ws.count,
            version=ws.count + len(entries),
            updated_at=arrived,
            meta=meta,
            entries=entries,
            objects=call.staged,
            create=call.created,
        )
        if self._batch is None:
            error = self._apply(change)
            if error is not None:
                if error.code == STORE_CONFLICT and retry and self._reload(ws.id):
                    return self._dispatch(envelope, arrived, retry=False)
                return error_response(envelope.get("id"), error)
        else:
            part = self._batch.parts.get(ws.id)
            if part is None:
                part = self._batch.parts[ws.id] = Part(ws, call.created)
            part.add(ws, call, change)
            self._batch.written.extend((ws.id, e) for e in entries)
            self._batch.current = (ws.id, envelope, arrived)
        self._commit(ws, call, meta, len(entries))
        for entry in entries:
            self._index_signed(ws, envelope, entry)
        if self._batch is None:
            self._notify([(ws.id, e) for e in entries])
        return response

    # -- memory -------------------------------------------------------------

    def _commit(self, ws: Workspace, call: Call, meta: WorkspaceMeta, appended: int) -> None:
        """Swap the call's staged values into memory (after the store took them)."""
        put_values(ws, call.staged)
        ws.meta = meta
        ws.count += appended
        if call.created:
            self._workspaces[ws.id] = ws

    def _new_id(self, prefix: str) -> str:
        """A generated id; a workspace id that names no workspace already."""
        candidate = self._ids(prefix)
        while prefix == "wsp" and self._workspace(candidate) is not None:
            candidate = self._ids(prefix)
        return candidate

    def _workspace(self, workspace_id: str) -> Workspace | None:
        """The workspace held in memory, or one another writer has since put in
        the store (so coordinators sharing a store see each other's)."""
        ws = self._workspaces.get(workspace_id)
        if ws is None and (self._batch is None or workspace_id not in self._batch.parts):
            if self._reload(workspace_id):
                ws = self._workspaces.get(workspace_id)
        return ws

    def _reload(self, workspace_id: str) -> bool:
        """Replace memory's copy of one workspace with the store's."""
        for held in self.store.load_held(workspace_id):
            ws = workspace_from_held(held)
            if ws is None:
                return False
            self._workspaces[workspace_id] = ws
            return True
        self._workspaces.pop(workspace_id, None)
        return True

    def _notify(self, entries: list[tuple[str, AuditEntry]]) -> None:
        if not self._listeners:
            return
        for workspace_id, entry in entries:
            text = _encode_sorted(entry)
            for listener in self._listeners:
                try:
                    # Its own copy: the envelope's values are shared with held
                    # objects, and one listener must not change what another sees.
                    listener(workspace_id, _decode_entry(text))
                except Exception:
                    log.exception("audit listener %r raised; the call is unaffected", listener)

    # -- batches ------------------------------------------------------------

    def _write_parts(self, parts: dict[str, Part]) -> dict[str, RpcError]:
        """Write each workspace's part; the errors of those not written.

        A store with `apply_many` takes them all with one commit (each still
        all or nothing on its own)."""
        changes = [part.change(wid) for wid, part in parts.items()]
        if len(changes) == 1:
            errors = {change.id: self._apply(change) for change in changes}
            return {wid: error for wid, error in errors.items() if error is not None}
        try:
            results = self.store.apply_many(changes)
        except Exception as exc:  # the commit itself failed: nothing was written
            results = [exc] * len(changes)
        return {
            change.id: _store_error(change.id, exc)
            for change, exc in zip(changes, results, strict=True)
            if exc is not None
        }

    def _apply(self, change: StoreChange) -> RpcError | None:
        """Write one change; the error to answer with if the store refused it."""
        try:
            self.store.apply(change)
        except Exception as exc:
            return _store_error(change.id, exc)
        return None

    def _undo(self, wid: str, part: Part) -> None:
        if part.created:
            self._workspaces.pop(wid, None)
        else:
            part.undo_into(self._workspaces[wid])

    # -- the log ------------------------------------------------------------

    def _log_split(self, ws: Workspace, start: int, stop: int) -> tuple[int, list[AuditEntry]]:
        """Where the durable part of `start <= seq < stop` ends, and the
        batch's unwritten entries within it."""
        unwritten: list[AuditEntry] = []
        if self._batch is not None and ws.id in self._batch.parts:
            unwritten = self._batch.parts[ws.id].entries
        durable = ws.count - len(unwritten)
        return min(stop, durable), unwritten[max(start - durable, 0) : max(stop - durable, 0)]

    def _read_log(
        self, ws: Workspace, start: int, stop: int, where: EntryFilter | None
    ) -> list[dict[str, Any]]:
        """Entries `start <= seq < stop`, including a batch's unwritten ones."""
        durable_stop, unwritten = self._log_split(ws, start, stop)
        out = self.store.read_entries(ws.id, start, durable_stop, where) if start < durable_stop else []
        for entry in unwritten:
            copy = _decode(_encode_sorted(entry))
            if where is None or entry_matches(copy, where):
                out.append(copy)
        return out

    def _read_texts(self, ws: Workspace, start: int, stop: int) -> list[bytes]:
        """The stored JSON text of entries `start <= seq < stop`."""
        durable_stop, unwritten = self._log_split(ws, start, stop)
        out = self.store.read_entry_texts(ws.id, start, durable_stop) if start < durable_stop else []
        out.extend(_encode_sorted(e) for e in unwritten)
        return out

    def _log_reader(self, ws: Workspace | None) -> "LogReader":
        return LogReader(self, ws)

    def _index_signed(self, ws: Workspace, envelope: dict[str, Any], entry: AuditEntry) -> None:
        if ws.refusal_digests is not None and isinstance(envelope.get("sig"), str):
            code = entry.outcome["code"] if entry.outcome is not None else None
            ws.refusal_digests.setdefault(signed_digest(envelope), (entry.seq, code))

    def _signed_index(self, ws: Workspace) -> dict[str, tuple[int, int | None]]:
        """Signed calls on the log: digest -> (seq, refusal code or None)."""
        index = ws.refusal_digests
        if index is None:
            index = {}
            for entry in self._read_log(ws, 0, ws.count, None):
                call = entry["envelope"] if "envelope" in entry else entry.get("request")
                if isinstance(call, dict) and isinstance(call.get("sig"), str):
                    try:
                        d = signed_digest(call)
                    except CanonicalError:
                        continue
                    outcome = entry.get("outcome")
                    code = outcome.get("code") if isinstance(outcome, dict) else None
                    index.setdefault(d, (entry["seq"], code))
            ws.refusal_digests = index
        return index


class LogReader:
    """A call's view of its workspace's log (store plus a batch's unwritten part)."""

    __slots__ = ("_coordinator", "_ws")

    def __init__(self, coordinator: Coordinator, ws: Workspace | None) -> None:
        self._coordinator = coordinator
        self._ws = ws

    def entries(self, start: int, stop: int, where: EntryFilter | None = None) -> list[dict[str, Any]]:
        if self._ws is None:
            return []
        return self._coordinator._read_log(self._ws, start, stop, where)

    def texts(self, start: int, stop: int) -> list[bytes]:
        if self._ws is None:
            return []
        return self._coordinator._read_texts(self._ws, start, stop)


def _store_error(workspace_id: str, exc: Exception) -> RpcError:
    """The answer to a call whose write the store refused."""
    if isinstance(exc, StoreConflictError):
        return _conflict_error(exc)
    log.error("store write failed for workspace %s: %s", workspace_id, exc)
    return _write_error(workspace_id, exc)


def _conflict_error(exc: StoreConflictError) -> RpcError:
    return RpcError(
        STORE_CONFLICT,
        f"Another writer changed workspace {exc.workspace} and the call could not be "
        "applied on the fresh state; nothing was recorded. Retry the call.",
        {"workspace": exc.workspace, "held": exc.held, "base": exc.base},
    )


def _write_error(workspace_id: str, exc: Exception) -> RpcError:
    return RpcError(
        STORE_WRITE_FAILED,
        f"The store did not accept the write for workspace {workspace_id}, so the call "
        f"was not applied: {exc}. Check the store (disk space, permissions, connection) "
        "and retry the call.",
        {"workspace": workspace_id},
    )
