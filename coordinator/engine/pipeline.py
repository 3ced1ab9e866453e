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
import logging
import reprlib
from collections.abc import Iterator
from typing import Any

import msgspec

from coordinator.audit import signed_digest
from coordinator.compat import WorkspaceState, WorkspacesView
from coordinator.engine.call import Call
from coordinator.engine.clock import Clock, iso_ms, system_clock
from coordinator.engine.envelope import Request, read_envelope
from coordinator.engine.held import HeldWorkspaces
from coordinator.engine.idempotent_calls import earlier_answer, idempotency_slot, kept_answer
from coordinator.engine.ids import IdSource, random_ids
from coordinator.engine.incidents import internal_error, logged
from coordinator.engine.registry import (
    CallCheck,
    Handler,
    Method,
    Registry,
    profile_name,
    profile_names,
    refusal_is_recorded,
)
from coordinator.engine.signed_calls import (
    refused_before,
    replay_of,
    signed_index,
    signed_message,
)
from coordinator.engine.sweeps import Sweep, Swept, sweep_all
from coordinator.engine.wire import (
    METHOD_NOT_FOUND,
    NOT_AUTHORISED,
    STORE_WRITE_FAILED,
    WORKSPACE_PAUSED,
    decode_json,
    error_response,
    result_response,
)
from coordinator.engine.writes import WorkspaceWrite, store_error
from coordinator.errors import (
    Rejected,
    RestoreError,
    RpcError,
    UnknownWorkspaceError,
)
from coordinator.listeners import (
    AuditListener,
    ChangeListener,
    ListenerHandle,
    Listeners,
)
from coordinator.model import SIGNED_CALLS
from coordinator.options import (
    Options,
    unenforced,
)
from coordinator.projections.cursor import Attachment, Projection
from coordinator.tools.snapshot import restore_changes, snapshot_of
from storage import MemoryStore, Store, StoreChange, StoreConflictError, StoreError
from storage._mypyc import mypyc_attr

__all__ = ["Pipeline"]

log = logging.getLogger("chapline")

_decode = msgspec.json.decode
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
        registry: Registry | None = None,
    ) -> None:
        # The profiles this coordinator runs: `registry` (engine/registry.py),
        # else every profile module's.
        self.registry = registry if registry is not None else _every_profile()
        problem = self.registry.unadvertisable(options.default_profiles)
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
        # The checks every call passes while the option that turns each on is.
        self._sender_checks = _enabled(self.registry.sender_checks, self.options)
        self._gate_checks = _enabled(self.registry.gate_checks, self.options)
        listeners = Listeners()
        if on_audit is not None:
            listeners.add_audit(on_audit)
        self._held = HeldWorkspaces(self.store, listeners)
        self._held.load_all()
        # The authorise check of each call in the open batch, by id() of the
        # envelope the batch keeps, so a call run again is authorised again.
        self._batch_checks: dict[int, CallCheck] = {}

    # -- public API ---------------------------------------------------------

    def dispatch(self, envelope: Any, authorise: CallCheck | None = None) -> dict[str, Any]:
        """Answer one JSON-RPC envelope (a dict, or its JSON text). Never raises.

        `authorise(call, method)`, when given, runs before the gate checks
        (step 11) and refuses with an RpcError, recorded as a member's
        refusal is (a server's token scopes: coordinator/server/authz.py)."""
        batch = self._held.batch
        if batch is not None:
            batch.current = None
        else:  # a batch asks the store once, as it opens
            self._held.note_changes()
        response = self._dispatch_safe(envelope, True, authorise)
        if batch is not None and batch.current is not None:
            # Anything answered from a workspace the batch changed depends on
            # that write: it is rewritten or run again with the batch's calls.
            wid, own = batch.current
            part = batch.parts.get(wid)
            if part is not None:
                part.calls.append((own, response))
                if authorise is not None:
                    self._batch_checks[id(own)] = authorise
        return response

    def _dispatch_safe(
        self, envelope: Any, retry: bool, authorise: CallCheck | None = None
    ) -> dict[str, Any]:
        """`_dispatch` at a fresh clock reading (a call run again reads it
        again), with a defect answered -32603 (no traceback), never raised."""
        try:
            return self._dispatch(envelope, int(self._clock()), retry, authorise)
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

    def add_audit_listener(self, listener: AuditListener) -> ListenerHandle:
        """Call `listener(workspace_id, entry)` after each entry is durable.
        The handle's `detach()` stops it."""
        return self._held.listeners.add_audit(listener)

    def add_change_listener(self, listener: ChangeListener) -> ListenerHandle:
        """Call `listener(change)` after each entry is durable, with what the
        call changed (`Change`: entry, objects written, result), in log order.
        The handle's `detach()` stops it."""
        return self._held.listeners.add_change(listener)

    def attach(self, projection: Projection, *, page_size: int = 1000) -> Attachment:
        """Catch `projection` up from its cursors (every workspace, from the
        store, in pages), then feed it every durable change. A failure is
        reported and retried with backoff, never passed to a call. The
        returned handle's `detach()` stops it; its cursors stay."""
        if self._held.batch is not None:
            raise RuntimeError("attach() cannot run inside batch(): finish the batch first")
        attachment = Attachment(self._held, projection, page_size=page_size)
        attachment.start()
        self._held.listeners.add_attachment(attachment)
        return attachment

    def workspace_ids(self) -> list[str]:
        return self._held.ids()

    @property
    def workspaces(self) -> WorkspacesView:
        """Workspace id -> a read-only view of it, as 0.3.3's `workspaces` is
        read (`in`, `len`, iteration, `.get`, `ws.members[uri].role`, ...).
        Views read the live state; nothing is copied ahead of time."""
        return WorkspacesView(self._held)

    # `workspace_id: Any` here and below: compiled, a `str` annotation would
    # refuse another type with a bare TypeError where the sources answer as
    # for an id not held (the same on both builds).
    def get_workspace(self, workspace_id: Any) -> WorkspaceState | None:
        """The workspace in 0.3.3's field layout with its whole audit log, as
        plain values `dataclasses.asdict` takes; None if it is not held.
        Reads the log from the store: O(log), meant for notebooks and tests."""
        if workspace_id not in self._held:
            return None
        return WorkspaceState.from_snapshot(self.snapshot(workspace_id))

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group the calls made inside into one store write per workspace
        (see `HeldWorkspaces.run_batch` and SPECIFICATION.md, "Batches")."""
        # A nested batch is part of the outer one: the checks its calls are
        # run again with are the outer batch's to drop, when it ends.
        outermost = self._held.batch is None
        try:
            yield from self._held.run_batch(self._ids, self._run_again)
        finally:
            if outermost:
                self._batch_checks.clear()

    def snapshot(self, workspace_id: Any) -> dict[str, Any]:
        """The workspace as a JSON-safe dict: meta, collections keyed by id, audit.
        Raises UnknownWorkspaceError if it is not held."""
        ws = self._held.get(workspace_id)
        if ws is None:
            raise UnknownWorkspaceError(workspace_id, self.workspace_ids())
        return snapshot_of(ws, self._held.log_reader(ws))

    def restore(self, data: Any, *, overwrite: bool = False) -> list[str]:
        # `Any`: a compiled method would refuse another shape with a bare TypeError
        # before restore_changes could say which shapes it takes.
        """Write snapshots (one dict, a list, or `{"workspaces": [...]}`) to the
        store, replacing what it held for them, and load them. Returns the ids.

        A workspace the store holds with entries the snapshot does not have
        (its log is not a prefix of the snapshot's) is refused, since replacing
        it would lose them, unless `overwrite=True`."""
        if self._held.batch is not None:
            raise RestoreError("restore() cannot run inside batch(): finish the batch first")
        changes = restore_changes(data)
        if not overwrite:
            for change in changes:
                self._refuse_rollback(change)
        for change in changes:
            self.store.apply(change)
            if not self._held.reload(change.id) or change.id not in self._held:
                raise RestoreError(f"workspace {change.id!r} was written but cannot be loaded")
        return [change.id for change in changes]

    def sweep(self) -> list[Swept]:
        """Make every decision that time alone has made due, in every held
        workspace: reclaim expired work leases (x-chapline-work/1.0; one
        `x-chapline.work.sweep` entry) and lapse overdue whispers
        (`check_whisper_lapses`), at the clock's time. Returns what was done
        where something was; a workspace with nothing due is not written.
        Safe beside other processes sweeping the same store (a lost race
        writes nothing twice); see coordinator/engine/sweeps.py. The profiles
        decide what is due, by their `on_sweep` hooks."""
        hooks = [hook for _, hook in self.registry.sweep_hooks]
        return sweep_all(self._held, hooks, self._clock, self.dispatch)

    def check_whisper_lapses(self, workspace_id: Any, now: str | None = None) -> list[dict[str, Any]]:
        """Lapse the workspace's pending whispers whose deadline is at or
        before `now` (ISO 8601 with a zone; the clock when None): each gets
        its default applied and one `notify.message` entry on the log.
        Returns those envelopes. Written to the store before memory changes;
        a store failure is raised and changes nothing."""
        if self._held.batch is not None:
            raise RuntimeError("check_whisper_lapses() cannot run inside batch(): finish the batch first")
        self._held.note_changes()  # as sweep() does: another writer's whispers too
        sweep = Sweep(self._held, self._clock, self.dispatch, workspace_id, now)
        for profile, hook in self.registry.sweep_hooks:
            if profile == "whisper":  # whisper/1.0's sweep alone, as 0.3.3's method is
                hook(sweep)
        return sweep.recorded

    def close(self) -> None:
        """Detach every projection (closing it), then close the store."""
        for attachment in self._held.listeners.attachments():
            attachment.detach()
        self.store.close()

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

    def _dispatch(
        self, envelope: Any, now: int, retry: bool, authorise: CallCheck | None
    ) -> dict[str, Any]:
        registry = self.registry
        try:
            request = read_envelope(envelope, registry, self.options.max_envelope_bytes)
        except Rejected as rejected:  # steps 1-8
            return error_response(rejected.request_id, rejected.error)
        call = self._open(request, now, retry)
        message, digest = signed_message(call.envelope)
        if digest is not None and call.ws is not None:
            refused = refused_before(call.ws, call.log, digest)  # step 9
            if refused is not None:
                return error_response(call.request_id, refused)
        method = request.method
        if self._sender_checks:
            call.signed_bytes = message
            try:  # step 10, never recorded
                for check in self._sender_checks:
                    check(call, method)
            except RpcError as err:
                return error_response(call.request_id, err)
        if digest is not None and call.ws is not None:
            # Still step 10: only now, its signature checked, may a verbatim
            # resend be answered with the accepted call's result.
            replay = replay_of(call.ws, call.log, digest, call.envelope["sig"])
            if replay is not None:
                return result_response(call.request_id, replay.result)
        try:
            if authorise is not None:
                authorise(call, method)  # step 11, the server's scopes first
            for check in self._gate_checks:
                check(call, method)  # step 11
            # Still step 11, the caller authorised: a recorded call resent
            # with its idempotency key gets its first answer ("Idempotency keys").
            slot = idempotency_slot(call.envelope, call.params)
            if slot is not None and call.ws is not None:
                earlier = earlier_answer(call.ws, call.log, slot, call.envelope)
                if earlier is not None:
                    if earlier.error is not None:
                        return error_response(call.request_id, earlier.error)
                    return result_response(call.request_id, earlier.result)
            handler = _route(call, method)  # steps 12-14
        except RpcError as err:
            gated = isinstance(err.data, dict) and "advertised" in err.data
            return self._refuse(call, method, err, gated, authorise)
        try:
            # The workspace's profiles, read once: a handler only stages a new
            # meta (the held one changes at the write), except that a create
            # has a workspace only once its handler ran.
            advertised: frozenset[str] | None = None
            if not method.read and call.ws is not None and registry.before_hooks:
                advertised = _advertised(call.ws.meta.profiles)
                for profile, hook in registry.before_hooks:
                    if profile in advertised:
                        hook(call)
            result = handler(call)  # steps 15-16
            if not method.read and call.ws is not None and registry.write_hooks:
                if advertised is None:
                    advertised = _advertised(call.ws.meta.profiles)
                for profile, hook in registry.write_hooks:
                    if profile in advertised:
                        hook(call)
        except RpcError as err:
            return self._refuse(call, method, err, False, authorise)
        if not call.fresh_result:
            # The caller gets its own copy: results can share values with held objects.
            result = _decode(_encode(result))
        response = result_response(call.request_id, result)
        if call.ws is None or method.read or not call.recorded:
            return response
        # Step 17: 0.3.3 records a call only when params.workspace names the
        # workspace: a create with a generated id is kept, but leaves no entry.
        logged = call.params.get("workspace") == call.ws.id
        if logged and digest is not None and call.get(SIGNED_CALLS, digest) is None:
            # A verbatim resend is answered with this result (its own copy);
            # a resend run again (another `sig`) leaves the first one kept.
            kept = {"seq": call.ws.count, "result": _decode(_encode(result))}
            call.put(SIGNED_CALLS, digest, kept)
        if logged and slot is not None:
            call.put(SIGNED_CALLS, slot, kept_answer(call.ws.count, result, None))
        return self._record(call, response, logged, None, authorise)  # step 18

    def _open(self, request: Request, now: int, retry: bool) -> Call:
        """The call's context, on the workspace `params.workspace` names (if
        held), arriving at `now` (epoch ms) or, when the clock is behind the
        workspace's last write (another writer's clock, a clock stepped
        back), at that write's time: entry times never go backwards."""
        held = self._held
        wid = request.params.get("workspace")
        ws = held.find(wid) if isinstance(wid, str) else None
        arrived = iso_ms(now)
        if ws is not None and ws.latest > arrived:  # iso_ms text sorts as time
            arrived = ws.latest
        if held.batch is not None and isinstance(wid, str):
            held.batch.current = (wid, request.envelope)
        return Call(
            request.envelope,
            request.raw,
            request.method.name,
            request.params,
            arrived,
            retry,
            ws,
            self.options,
            self.registry,
            held.log_reader(ws),
            self._new_id,
        )

    def _refuse(
        self, call: Call, method: Method, err: RpcError, gated: bool, authorise: CallCheck | None
    ) -> dict[str, Any]:
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
        try:
            slot = idempotency_slot(call.envelope, call.params)
        except RpcError:  # a malformed key: refused before it could be kept
            slot = None
        if slot is not None and ws.get(SIGNED_CALLS, slot) is None:
            call.put(SIGNED_CALLS, slot, kept_answer(ws.count, None, err))
        return self._record(call, response, True, {"status": "refused", "code": err.code}, authorise)

    def _record(
        self,
        call: Call,
        response: dict[str, Any],
        logged: bool,
        outcome: dict[str, Any] | None,
        authorise: CallCheck | None,
    ) -> dict[str, Any]:
        """Write what the call staged, with its entry when `logged` (accepted,
        or refused with `outcome`), through the one append path; a write the
        store refused because another writer moved on runs the call again on
        the fresh state, in the workspace's write turn, authorised again."""
        ws = call.ws
        assert ws is not None
        write = WorkspaceWrite(ws, call.meta or ws.meta, call.staged, call.arrived, call.created)
        if logged:
            write.add_entry(call.arrived, call.envelope, call.raw, outcome)
        held = self._held
        refused = held.append(write, response)
        if refused is not None:
            if isinstance(refused, StoreConflictError) and call.retry:
                return self._run_in_turn(call, ws.id, refused, authorise)
            return error_response(call.request_id, store_error(ws.id, refused, self._ids))
        if held.batch is not None:
            held.batch.current = (ws.id, call.envelope)
        return response

    def _run_in_turn(
        self, call: Call, workspace_id: str, lost: StoreConflictError, authorise: CallCheck | None
    ) -> dict[str, Any]:
        """A call whose write lost the race to another writer: wait for the
        workspace's write turn (at most the store's wait), reload what
        changed, and run the call again on it, at a fresh clock reading (the
        other writer's entries may be later than our first one); its write
        commits inside the turn, so it cannot lose again (SPECIFICATION.md,
        "Write-ahead persistence")."""
        held = self._held
        try:
            with self.store.write_turn(workspace_id):
                if held.reload(workspace_id):
                    return self._dispatch_safe(call.envelope, False, authorise)
                error = store_error(workspace_id, lost, self._ids)  # unreadable now
        except StoreError as exc:
            error = store_error(workspace_id, exc, self._ids)
        return error_response(call.request_id, error)

    def _run_again(self, envelope: dict[str, Any]) -> dict[str, Any]:
        """A batch's call whose write lost to another writer, run again on the
        fresh state (see `HeldWorkspaces.run_batch`)."""
        return self._dispatch_safe(envelope, True, self._batch_checks.get(id(envelope)))

    def _new_id(self, prefix: str) -> str:
        """A generated id; a workspace id that names no workspace already."""
        candidate = self._ids(prefix)
        while prefix == "wsp" and self._held.find(candidate) is not None:
            candidate = self._ids(prefix)
        return candidate


def _every_profile() -> Registry:
    """The registry of every profile module (coordinator/profiles scans its
    folder): what a coordinator runs unless it is given one."""
    from coordinator.profiles import REGISTRY

    return REGISTRY


def _enabled(checks: tuple[tuple[str, CallCheck], ...], options: Options) -> tuple[CallCheck, ...]:
    """The checks whose option (`Options` field) is on, in declared order."""
    return tuple(check for option, check in checks if getattr(options, option))


def _request_id(envelope: Any) -> Any:
    """The id of `envelope` (a dict, or its JSON text) as far as it can be
    read, else None: a call that failed keeps its id, whatever form it came in."""
    if isinstance(envelope, (bytes, bytearray, memoryview, str)):
        try:
            envelope = decode_json(envelope if isinstance(envelope, str) else bytes(envelope))
        except RpcError:
            return None
    return dict.get(envelope, "id") if isinstance(envelope, dict) else None


# The last held profiles list asked about, and its names. A workspace's meta
# keeps its list from call to call, and no held list is changed in place (a
# new meta gets a new list), so the list itself identifies the answer:
# `profile_names` would hash it into a tuple on every call.
_last_advertised: tuple[list[str], frozenset[str]] = ([], frozenset())


def _advertised(profiles: list[str]) -> frozenset[str]:
    """`profile_names` of a held workspace's profiles."""
    global _last_advertised
    last = _last_advertised  # one read: another thread may replace it meanwhile
    if last[0] is profiles:
        return last[1]
    names = profile_names(profiles)
    _last_advertised = (profiles, names)
    return names


def _route(call: Call, method: Method) -> Handler:
    """Steps 12-14: the handler for the call, or the refusal a gate gives first."""
    ws = call.ws
    if ws is not None and not method.always_available and method.profile != "core/1.0":
        advertised = ws.meta.profiles
        if profile_name(method.profile) not in _advertised(advertised):
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
