"""The pipeline: one call in, one JSON-RPC response out, write-ahead.

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
import reprlib
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
from mypy_extensions import mypyc_attr

from coordinator.audit import AuditEntry, refusal_is_recorded, signed_digest
from coordinator.compat import WorkspaceState, WorkspacesView
from coordinator.engine.batch import Part, Pending, put_values, run_batch
from coordinator.engine.call import Call
from coordinator.engine.canonical import ZERO_HASH, canonical_bytes, link_hash
from coordinator.engine.clock import Clock, iso_ms, system_clock
from coordinator.engine.envelope import Request, read_envelope
from coordinator.engine.ids import IdSource, random_ids
from coordinator.engine.incidents import internal_error, logged
from coordinator.engine.log import LogReader
from coordinator.engine.registry import Handler, Method, profile_name, profile_names
from coordinator.engine.signed_calls import (
    index_signed,
    refused_before,
    replay_of,
    signed_index,
    signed_message,
)
from coordinator.engine.snapshot import restore_changes, snapshot_of, workspace_from_held
from coordinator.engine.sweeps import Swept, sweep_all
from coordinator.engine.wire import (
    METHOD_NOT_FOUND,
    NOT_AUTHORISED,
    STORE_CONFLICT,
    STORE_WRITE_FAILED,
    WORKSPACE_PAUSED,
    decode_json,
    error_response,
    result_response,
)
from coordinator.engine.workspace import Workspace
from coordinator.engine.writes import apply_change
from coordinator.errors import Rejected, RestoreError, RpcError, UnknownWorkspaceError
from coordinator.listeners import (
    AuditListener,
    ChangeListener,
    Listeners,
    Listening,
    decode_objects,
    encode_objects,
)
from coordinator.model import SIGNED_CALLS, WorkspaceMeta
from coordinator.options import Options, unenforced
from coordinator.profiles import REGISTRY, whisper
from coordinator.profiles.identity import check_step_up
from coordinator.profiles.signed import UNSIGNED_METHODS, check_signature
from coordinator.projections.cursor import Attachment, Projection
from storage import (
    MemoryStore,
    Store,
    StoreChange,
    StoreConflictError,
    StoreError,
)

__all__ = ["Pipeline"]

log = logging.getLogger("chapline")

_decode = msgspec.json.decode
_encode_sorted = msgspec.json.Encoder(order="sorted").encode
_encode = msgspec.json.Encoder().encode  # keeps key order, as results are shown


# Compiled (setup.py) as an ordinary Python class. Interpreted code cannot
# subclass it (compiled, each method takes only this very class as `self`),
# so the public `Coordinator` (coordinator/coordinator.py) holds one.
@mypyc_attr(native_class=False)
class Pipeline:
    """The engine `coordinator.Coordinator` holds and documents: one JSON-RPC
    call in, one response out, written ahead (SPECIFICATION.md, "Dispatch").

    `options` are built (coordinator/options.py); `store` None is a
    MemoryStore. Every workspace the store holds is restored here.
    """

    def __init__(
        self,
        store: Store | None,
        options: Options,
        *,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        on_audit: AuditListener | None = None,
    ) -> None:
        problem = REGISTRY.unadvertisable(options.default_profiles)
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
        self.options = options
        problem = unenforced(self.options, profile_names(list(options.default_profiles)))
        if problem:
            raise ValueError(f"default_profiles: {problem}")
        self._listeners = Listeners()
        if on_audit is not None:
            self._listeners.add_audit(on_audit)
        self._workspaces: dict[str, Workspace] = {}
        self._batch: Pending | None = None
        # Workspaces other processes changed since we loaded them (a store
        # with `changed()` tells): reloaded before their next use, so our
        # writes start from the fresh state instead of being refused.
        self._changed: Callable[[], set[str] | None] | None = getattr(self.store, "changed", None)
        self._stale: set[str] = set()
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

    def dispatch(self, envelope: Any) -> dict[str, Any]:
        """Answer one JSON-RPC envelope (a dict, or its JSON text). Never raises."""
        batch = self._batch
        if batch is not None:
            batch.current = None
        if self._changed is not None:
            self._note_changes(self._changed)
        response = self._dispatch_safe(envelope, retry=True)
        if batch is not None and batch.current is not None:
            # Anything answered from a workspace the batch changed depends on
            # that write: it is rewritten or run again with the batch's calls.
            wid, own = batch.current
            part = batch.parts.get(wid)
            if part is not None:
                part.calls.append((own, response))
        return response

    def _dispatch_safe(self, envelope: Any, retry: bool) -> dict[str, Any]:
        """`_dispatch` at a fresh clock reading (a call run again reads it
        again), with a defect answered -32603 (no traceback), never raised."""
        try:
            return self._dispatch(envelope, int(self._clock()), retry)
        except StoreError as exc:
            # A store that cannot be reached or read (a database server down)
            # leaves the call unrun, as a failed write does: retrying helps.
            # Its own words go to the log only, as for a failed write.
            log_id = logged(log, "the store failed while dispatching", exc, self._ids)
            return error_response(
                _request_id(envelope),
                RpcError(
                    STORE_WRITE_FAILED,
                    "The store could not be reached or read, so the call was not run; retry "
                    f"the call. The server logged the cause as {log_id} (quote it to the "
                    "operator if the retry fails too).",
                    {"log_id": log_id},
                ),
            )
        except Exception as defect:
            return error_response(
                _request_id(envelope),
                internal_error(log, "internal error while dispatching", defect, self._ids),
            )

    def add_audit_listener(self, listener: AuditListener) -> Listening:
        """Call `listener(workspace_id, entry)` after each entry is durable.
        The handle's `detach()` stops it."""
        return self._listeners.add_audit(listener)

    def add_change_listener(self, listener: ChangeListener) -> Listening:
        """Call `listener(change)` after each entry is durable, with what the
        call changed (`Change`: entry, objects written, result), in log order.
        The handle's `detach()` stops it."""
        return self._listeners.add_change(listener)

    def attach(self, projection: Projection, *, page_size: int = 1000) -> Attachment:
        """Catch `projection` up from its cursors (every workspace, from the
        store, in pages), then feed it every durable change. A failure is
        reported and retried with backoff, never passed to a call. The
        returned handle's `detach()` stops it; its cursors stay."""
        if self._batch is not None:
            raise RuntimeError("attach() cannot run inside batch(): finish the batch first")
        attachment = Attachment(self, projection, page_size=page_size)
        try:
            attachment.catch_up()
        except Exception as exc:
            attachment._failed(exc)
        self._listeners.add_attachment(attachment)
        return attachment

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
        """Group the calls made inside into one store write per workspace
        (see `batch.run_batch` and SPECIFICATION.md, "Batches")."""
        yield from run_batch(self)

    def snapshot(self, workspace_id: str) -> dict[str, Any]:
        """The workspace as a JSON-safe dict: meta, collections keyed by id, audit.
        Raises UnknownWorkspaceError if it is not held."""
        ws = self._workspaces.get(workspace_id)
        if ws is None:
            raise UnknownWorkspaceError(workspace_id, self.workspace_ids())
        return snapshot_of(ws, self._log_reader(ws))

    def restore(self, data: Any, *, overwrite: bool = False) -> list[str]:
        # `Any`: a compiled method would refuse another shape with a bare TypeError
        # before restore_changes could say which shapes it takes.
        """Write snapshots (one dict, a list, or `{"workspaces": [...]}`) to the
        store, replacing what it held for them, and load them. Returns the ids.

        A workspace the store holds with entries the snapshot does not have
        (its log is not a prefix of the snapshot's) is refused, since replacing
        it would lose them, unless `overwrite=True`."""
        if self._batch is not None:
            raise RestoreError("restore() cannot run inside batch(): finish the batch first")
        changes = restore_changes(data)
        if not overwrite:
            for change in changes:
                self._refuse_rollback(change)
        for change in changes:
            self.store.apply(change)
            if not self._reload(change.id) or change.id not in self._workspaces:
                raise RestoreError(f"workspace {change.id!r} was written but cannot be loaded")
        return [change.id for change in changes]

    def sweep(self) -> list[Swept]:
        """Make every decision that time alone has made due, in every held
        workspace: reclaim expired work leases (x-chapline-work/1.0; one
        `x-chapline.work.sweep` entry) and lapse overdue whispers
        (`check_whisper_lapses`), at the clock's time. Returns what was done
        where something was; a workspace with nothing due is not written.
        Safe beside other processes sweeping the same store (a lost race
        writes nothing twice); see coordinator/engine/sweeps.py."""
        return sweep_all(self)

    def check_whisper_lapses(self, workspace_id: str, now: str | None = None) -> list[dict[str, Any]]:
        """Lapse the workspace's pending whispers whose deadline is at or
        before `now` (ISO 8601 with a zone; the clock when None): each gets
        its default applied and one `notify.message` entry on the log.
        Returns those envelopes. Written to the store before memory changes;
        a store failure is raised and changes nothing."""
        if self._batch is not None:
            raise RuntimeError("check_whisper_lapses() cannot run inside batch(): finish the batch first")
        cutoff = whisper.parse_now(now) if now is not None else None
        retried = False
        while True:
            ws = self._workspace(workspace_id)
            if ws is None:
                return []
            if cutoff is None:
                cutoff = whisper.instant(int(self._clock()))
            due = [w for w in ws.values("whispers") if whisper.lapsed_by(w, cutoff)]
            if not due:
                return []
            meta = ws.meta
            entries: list[AuditEntry] = []
            lapsed: dict[str, Any] = {}
            latest = ws.latest
            for held in due:
                # 0.3.3 reads the clock for the notice's ts, then for arrived;
                # neither is earlier than the workspace's last write.
                ts = max(iso_ms(int(self._clock())), latest)
                arrived = latest = max(iso_ms(int(self._clock())), latest)
                notice = whisper.lapse_notice(ws.id, held, ts)
                prev = None
                if meta.chain_enabled:
                    prev = meta.chain_head or ZERO_HASH
                    meta = msgspec.structs.replace(
                        meta, chain_head=link_hash(canonical_bytes(notice), prev)
                    )
                entries.append(AuditEntry(ws.count + len(entries), arrived, envelope=notice, prev_hash=prev))
                lapsed[held.id] = whisper.lapse(held)
            change = StoreChange(
                id=ws.id,
                base=ws.count,
                version=ws.count + len(entries),
                updated_at=entries[-1].arrived,
                meta=meta,
                entries=entries,
                objects={"whispers": lapsed},
            )
            try:
                self.store.apply(change)
            except StoreConflictError:
                # another writer appended: sweep its state once more
                if retried or not self._reload(workspace_id):
                    raise
                retried = True
                continue
            put_values(ws, {"whispers": lapsed})
            ws.meta = meta
            ws.count += len(entries)
            ws.latest = latest
            if self._listeners.active:
                # a sweep answers no caller: the change has no result
                written = {"whispers": lapsed}
                self._listeners.notify([(ws.id, e, written, {}) for e in entries])
            return [_decode(_encode(e.envelope)) for e in entries]

    def close(self) -> None:
        """Detach every projection (closing it), then close the store."""
        for attachment in self._listeners.attachments():
            attachment.detach()
        self.store.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _refuse_rollback(self, change: StoreChange) -> None:
        """RestoreError if writing `change` would drop entries the store holds."""
        held = self.store.read_entries(change.id, 0, None)
        if not held:
            return
        given = [msgspec.to_builtins(e) for e in change.entries[: len(held)]]
        pairs = zip(held[: len(given)], given, strict=True)
        differs = next((seq for seq, (a, b) in enumerate(pairs) if a != b), None)
        if len(held) > len(change.entries) or differs is not None:
            at = differs if differs is not None else len(change.entries)
            raise RestoreError(
                f"workspace {change.id!r}: the store holds {len(held)} entries and the "
                f"snapshot has {len(change.entries)}, differing from seq {at}; restoring it "
                "would lose the store's entries. Export the stored workspace first, or pass "
                "overwrite=True to replace it."
            )

    # -- the pipeline (SPECIFICATION.md, "Dispatch") -----------------------

    def _dispatch(self, envelope: Any, now: int, retry: bool) -> dict[str, Any]:
        try:
            request = read_envelope(envelope, REGISTRY, self.options.max_envelope_bytes)
        except Rejected as rejected:  # steps 1-8
            return error_response(rejected.request_id, rejected.error)
        call = self._open(request, now, retry)
        message, digest = signed_message(call.envelope)
        if digest is not None and call.ws is not None:
            refused = refused_before(call.ws, call.log, digest)  # step 9
            if refused is not None:
                return error_response(call.request_id, refused)
        method = request.method
        if self.options.require_signatures and method.name not in UNSIGNED_METHODS:
            try:  # step 10, never recorded
                members = call.member if call.ws else None
                check_signature(call.envelope, members, call.arrived, message)
            except RpcError as err:
                return error_response(call.request_id, err)
        if digest is not None and call.ws is not None:
            # Still step 10: only now, its signature checked, may a verbatim
            # resend be answered with the accepted call's result.
            replay = replay_of(call.ws, call.log, digest, call.envelope["sig"])
            if replay is not None:
                return result_response(call.request_id, replay.result)
        try:
            if self.options.enforce_step_up:
                check_step_up(call, method)  # step 11
            handler = _route(call, method)  # steps 12-14
        except RpcError as err:
            gated = isinstance(err.data, dict) and "advertised" in err.data
            return self._refuse(call, method, err, gated)
        try:
            if not method.read and call.ws is not None and REGISTRY.before_hooks:
                advertised = profile_names(call.ws.meta.profiles)
                for profile, hook in REGISTRY.before_hooks:
                    if profile in advertised:
                        hook(call)
            result = handler(call)  # steps 15-16
            if not method.read and call.ws is not None and REGISTRY.write_hooks:
                advertised = profile_names(call.ws.meta.profiles)
                for profile, hook in REGISTRY.write_hooks:
                    if profile in advertised:
                        hook(call)
        except RpcError as err:
            return self._refuse(call, method, err, False)
        if not call.fresh_result:
            # The caller gets its own copy: results can share values with held objects.
            result = _decode(_encode(result))
        response = result_response(call.request_id, result)
        if call.ws is None or method.read or not call.recorded:
            return response
        # Step 17: 0.3.3 records a call only when params.workspace names the
        # workspace: a create with a generated id is kept, but leaves no entry.
        record = call.raw if call.params.get("workspace") == call.ws.id else None
        if record is not None and digest is not None and call.get(SIGNED_CALLS, digest) is None:
            # A verbatim resend is answered with this result (its own copy);
            # a resend run again (another `sig`) leaves the first one kept.
            kept = {"seq": call.ws.count, "result": _decode(_encode(result))}
            call.put(SIGNED_CALLS, digest, kept)
        return self._record(call, response, record, None)  # step 18

    def _open(self, request: Request, now: int, retry: bool) -> Call:
        """The call's context, on the workspace `params.workspace` names (if
        held), arriving at `now` (epoch ms) or, when the clock is behind the
        workspace's last write (another writer's clock, a clock stepped
        back), at that write's time: entry times never go backwards."""
        wid = request.params.get("workspace")
        ws = self._workspace(wid) if isinstance(wid, str) else None
        arrived = iso_ms(now)
        if ws is not None and ws.latest > arrived:  # iso_ms text sorts as time
            arrived = ws.latest
        if self._batch is not None and isinstance(wid, str):
            self._batch.current = (wid, request.envelope)
        return Call(
            request.envelope,
            request.raw,
            request.method.name,
            request.params,
            arrived,
            retry,
            ws,
            self.options,
            REGISTRY,
            self._log_reader(ws),
            self._new_id,
        )

    def _refuse(self, call: Call, method: Method, err: RpcError, gated: bool) -> dict[str, Any]:
        """Answer a refusal, recording it when a member made it (see the rules)."""
        response = error_response(call.request_id, err)
        call.unstage()
        ws = call.ws
        sender = call.params.get("from")
        if (
            ws is None
            or not isinstance(sender, str)
            or sender not in ws.objects["members"]
            or not refusal_is_recorded(method, err.code, gated)
        ):
            return response
        if isinstance(call.envelope.get("sig"), str):
            if signed_digest(call.envelope) in signed_index(ws, call.log):
                return response
        outcome = {"status": "refused", "code": err.code}
        # JCS of {"outcome", "request"}: keys in order, request already canonical.
        record = b'{"outcome":' + _encode_sorted(outcome) + b',"request":' + call.raw + b"}"
        return self._record(call, response, record, outcome)

    def _record(
        self,
        call: Call,
        response: dict[str, Any],
        record: bytes | None,
        outcome: dict[str, Any] | None,
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
            # The recorded call as its canonical bytes: immutable, and written
            # as they are instead of being encoded a second time.
            envelope = msgspec.Raw(call.raw)
            if outcome is None:
                entries.append(AuditEntry(ws.count, call.arrived, envelope=envelope, prev_hash=prev))
            else:
                entries.append(
                    AuditEntry(
                        ws.count, call.arrived, request=envelope, outcome=outcome, prev_hash=prev
                    )
                )
        change = StoreChange(
            id=ws.id,
            base=ws.count,
            version=ws.count + len(entries),
            updated_at=call.arrived,
            meta=meta,
            entries=entries,
            objects=call.staged,
            create=call.created,
        )
        if self._batch is None:
            error = apply_change(self.store, change, self._ids)
            if error is not None:
                if error.code == STORE_CONFLICT and call.retry and self._reload(ws.id):
                    # run again on the fresh state, at a fresh reading: the
                    # other writer's entries may be later than our first one
                    return self._dispatch_safe(call.envelope, retry=False)
                return error_response(call.request_id, error)
        else:
            part = self._batch.parts.get(ws.id)
            if part is None:
                part = self._batch.parts[ws.id] = Part(ws, call.created)
            part.add(ws, call, change)
            self._batch.written.extend((ws.id, e, call.staged, response) for e in entries)
            self._batch.current = (ws.id, call.envelope)
        self._commit(ws, call, meta, len(entries))
        for entry in entries:
            index_signed(ws, call.envelope, entry)
        if self._batch is None and self._listeners.active:
            self._listeners.notify([(ws.id, e, call.staged, response) for e in entries])
        return response

    # -- memory -------------------------------------------------------------

    def _commit(self, ws: Workspace, call: Call, meta: WorkspaceMeta, appended: int) -> None:
        """Swap the call's staged values into memory (after the store took them)."""
        put_values(ws, call.staged)
        ws.meta = meta
        ws.count += appended
        ws.latest = max(ws.latest, call.arrived)
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
        the store (so coordinators sharing a store see each other's); reloaded
        first if another writer changed it."""
        ws = self._workspaces.get(workspace_id)
        if (ws is None or workspace_id in self._stale) and (
            self._batch is None or workspace_id not in self._batch.parts
        ):
            if self._reload(workspace_id):
                ws = self._workspaces.get(workspace_id)
            self._stale.discard(workspace_id)
        return ws

    def _note_changes(self, changed: Callable[[], set[str] | None]) -> None:
        """Mark the held workspaces the store says others changed (all of
        them when it cannot say)."""
        try:
            ids = changed()
        except Exception:  # a hint only: the CAS still guards every write
            log.exception("the store could not tell which workspaces changed")
            ids = None
        if ids is None:
            self._stale.update(self._workspaces)
        elif ids:
            self._stale.update(wid for wid in ids if wid in self._workspaces)

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

    # -- what projections read ------------------------------------------------

    def _durable_counts(self) -> dict[str, int]:
        """Entries held per workspace, in id order (outside a batch all are durable)."""
        return {wid: self._workspaces[wid].count for wid in sorted(self._workspaces)}

    def _durable_entries(self, workspace_id: str, start: int, stop: int) -> list[AuditEntry]:
        return [
            msgspec.convert(e, AuditEntry)
            for e in self.store.read_entries(workspace_id, start, stop)
        ]

    def _current_objects(self, workspace_id: str) -> dict[str, dict[str, Any]]:
        """Every object the workspace holds, as a private copy."""
        ws = self._workspaces[workspace_id]
        held = {c: {k: ws.get(c, k) for k in list(items)} for c, items in ws.objects.items()}
        return decode_objects(encode_objects(held))

    def _log_reader(self, ws: Workspace | None) -> LogReader:
        unwritten: list[AuditEntry] = []
        if ws is not None and self._batch is not None and ws.id in self._batch.parts:
            unwritten = self._batch.parts[ws.id].entries
        return LogReader(self.store, ws, unwritten)


def _request_id(envelope: Any) -> Any:
    """The id of `envelope` (a dict, or its JSON text) as far as it can be
    read, else None: a call that failed keeps its id, whatever form it came in."""
    if isinstance(envelope, (bytes, bytearray, memoryview, str)):
        try:
            envelope = decode_json(envelope if isinstance(envelope, str) else bytes(envelope))
        except RpcError:
            return None
    return dict.get(envelope, "id") if isinstance(envelope, dict) else None


def _route(call: Call, method: Method) -> Handler:
    """Steps 12-14: the handler for the call, or the refusal a gate gives first."""
    ws = call.ws
    if ws is not None and not method.always_available and method.profile != "core/1.0":
        advertised = ws.meta.profiles
        if profile_name(method.profile) not in profile_names(advertised):
            raise RpcError(
                METHOD_NOT_FOUND,
                f"Unknown method: {method.name}",
                {"profile": method.profile, "advertised": list(advertised)},
            )
    if method.handler is None:
        raise RpcError(
            METHOD_NOT_FOUND,
            f"Method not implemented by chapline: {method.name} (profile {method.profile})",
            {"profile": method.profile, "implemented": False},
        )
    if ws is not None and method.floor:
        sender = call.params.get("from")
        if not isinstance(sender, str) or sender not in ws.objects["members"]:
            raise RpcError(
                NOT_AUTHORISED,
                f"'from' is not a participant URI of this workspace: {reprlib.repr(sender)}; "
                "join first with participant.join, then send the call again",
            )
    if ws is not None and ws.meta.state == "paused" and not method.pause_exempt:
        raise RpcError(WORKSPACE_PAUSED, f"Workspace {ws.id} is paused")
    return method.handler
