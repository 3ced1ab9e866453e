"""`Coordinator`, the public face of the pipeline.

The pipeline (coordinator/engine/pipeline.py) is compiled where a compiler
is, and a compiled class keeps neither its docstrings nor signatures that
`inspect` can read, nor can interpreted code subclass it. `Coordinator`
stays interpreted and holds one: each public method is declared here,
documented, and passes its call on in one frame, so `help()`,
`inspect.signature` and Jupyter's `?` work on both builds, and applications
subclass `Coordinator` (SPECIFICATION.md, "Public API").
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Self, overload

from coordinator.compat import CoordinatorOptions, chapline_arguments
from coordinator.engine.pipeline import Pipeline
from coordinator.options import (
    EscalationPolicy,
    ReviewDepthPolicy,
    RoutingPolicy,
    describe_options,
    options_from,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from coordinator.compat import WorkspaceState, WorkspacesView
    from coordinator.engine.clock import Clock
    from coordinator.engine.ids import IdSource
    from coordinator.engine.registry import CallCheck, Registry
    from coordinator.engine.sweeps import Swept
    from coordinator.listeners import AuditListener, ChangeListener, ListenerHandle
    from coordinator.options import Options
    from coordinator.projections.cursor import Attachment, Projection
    from storage import Store

__all__ = ["Coordinator"]


class Coordinator:
    __doc__ = f"""A CHAP coordinator: `dispatch(envelope)` answers one JSON-RPC call.

    Every call is written to `store` (a MemoryStore when None) before memory
    changes or anyone is told; every workspace the store holds is restored
    at construction. `clock` (epoch ms) and `ids` (`prefix -> id`) are
    injectable, so the same calls give byte-identical stores (`StepClock`,
    `CounterIds`). `on_audit(workspace_id, entry)` is an audit listener from
    the start.

    `Coordinator(CoordinatorOptions(...), **fields)` and
    `Coordinator(options=CoordinatorOptions(...))` build it as 0.3.3 does
    (SPECIFICATION.md, "Built as 0.3.3 is built").

    Options, each declared once in coordinator/options.py with its default
    (None, or leaving one out, takes the default):

{textwrap.indent(describe_options(), "    ")}

    Single-writer: call it from one thread at a time. Several coordinators
    may share a store. `with Coordinator(...) as coord:` closes it.
    """

    @overload
    def __init__(self, options: CoordinatorOptions, /, **overrides: Any) -> None: ...

    @overload
    def __init__(
        self,
        store: Store | None = None,
        *,
        options: CoordinatorOptions | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        on_audit: AuditListener | None = None,
        enable_chain: bool | None = None,
        default_profiles: Sequence[str] | None = None,
        max_envelope_bytes: int | None = None,
        require_read_membership: bool | None = None,
        routing_policy: RoutingPolicy | None = None,
        review_depth_policy: ReviewDepthPolicy | None = None,
        escalation_policy: EscalationPolicy | None = None,
        require_signatures: bool | None = None,
        enforce_step_up: bool | None = None,
        verify_oidc_token: Callable[[Any], Any] | None = None,
        verify_vc: Callable[[Any], Any] | None = None,
        scitt_submitter: Callable[[dict[str, Any]], Any] | None = None,
        verify_scitt_receipt: Callable[[Any], Any] | None = None,
        scitt_issuer_key: Ed25519PrivateKey | None = None,
        scitt_issuer_kid: str | None = None,
        max_read_bytes: int | None = None,
        registry: Registry | None = None,
        **overrides: Any,
    ) -> None: ...

    # The first form's overrides are CoordinatorOptions fields, `store` among
    # them; given with a positional CoordinatorOptions, it is a TypeError
    # (store given twice), which the overloads cannot say.
    def __init__(  # type: ignore[misc]
        self,
        store: Store | CoordinatorOptions | None = None,
        *,
        options: CoordinatorOptions | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        on_audit: AuditListener | None = None,
        enable_chain: bool | None = None,
        default_profiles: Sequence[str] | None = None,
        max_envelope_bytes: int | None = None,
        require_read_membership: bool | None = None,
        routing_policy: RoutingPolicy | None = None,
        review_depth_policy: ReviewDepthPolicy | None = None,
        escalation_policy: EscalationPolicy | None = None,
        require_signatures: bool | None = None,
        enforce_step_up: bool | None = None,
        verify_oidc_token: Callable[[Any], Any] | None = None,
        verify_vc: Callable[[Any], Any] | None = None,
        scitt_submitter: Callable[[dict[str, Any]], Any] | None = None,
        verify_scitt_receipt: Callable[[Any], Any] | None = None,
        scitt_issuer_key: Ed25519PrivateKey | None = None,
        scitt_issuer_kid: str | None = None,
        max_read_bytes: int | None = None,
        registry: Registry | None = None,
        **overrides: Any,
    ) -> None:
        if isinstance(store, CoordinatorOptions):  # 0.3.3's Coordinator(options)
            if options is not None:
                raise TypeError("Coordinator() got options twice (positionally and as options=)")
            options, store = store, None
        # Every argument by its name: their values, defaults and checks come
        # from coordinator/options.py and coordinator/compat.py.
        arguments = chapline_arguments(options, overrides, locals())
        self._pipeline = Pipeline(
            arguments["store"],
            options_from(arguments),
            clock=arguments["clock"],
            ids=arguments["ids"],
            on_audit=arguments["on_audit"],
            registry=registry,
        )

    @property
    def store(self) -> Store:
        """The store every call is written to."""
        return self._pipeline.store

    @property
    def registry(self) -> Registry:
        """The profiles and methods this coordinator runs (`registry=`, else
        every profile module's); servers list their tools from it."""
        return self._pipeline.registry

    @property
    def options(self) -> Options:
        """The options this coordinator was built with (coordinator/options.py)."""
        return self._pipeline.options

    def dispatch(self, envelope: Any, *, authorise: CallCheck | None = None) -> dict[str, Any]:
        """Answer one JSON-RPC envelope (a dict, or its JSON text as str or
        bytes) with the response dict. Never raises: a refusal is the
        response's `error`, and a defect is answered -32603 and logged.

        `authorise(call, method)`, when given, may refuse the call by raising
        an RpcError before the profile gate (step 11); the refusal is recorded
        as a member's refusal is (SPECIFICATION.md, "Authorisation")."""
        return self._pipeline.dispatch(envelope, authorise)

    def add_audit_listener(self, listener: AuditListener) -> ListenerHandle:
        """Call `listener(workspace_id, entry)` after each entry is durable,
        in log order. The handle's `detach()` stops it."""
        return self._pipeline.add_audit_listener(listener)

    def add_change_listener(self, listener: ChangeListener) -> ListenerHandle:
        """Call `listener(change)` after each entry is durable, with what the
        call changed (`Change`: entry, objects written, result), in log order.
        The handle's `detach()` stops it."""
        return self._pipeline.add_change_listener(listener)

    def attach(self, projection: Projection, *, page_size: int = 1000) -> Attachment:
        """Catch `projection` up from its cursors (every workspace, from the
        store, in pages of `page_size` entries), then feed it every durable
        change. A failure is reported and retried with backoff, never passed
        to a call. The returned handle's `detach()` stops it; its cursors
        stay. Refused inside `batch()`."""
        return self._pipeline.attach(projection, page_size=page_size)

    def workspace_ids(self) -> list[str]:
        """The ids of the workspaces this coordinator holds."""
        return self._pipeline.workspace_ids()

    @property
    def workspaces(self) -> WorkspacesView:
        """Workspace id -> a read-only view of it, as 0.3.3's `workspaces` is
        read (`in`, `len`, iteration, `.get`, `ws.members[uri].role`, ...).
        Views read the live state; nothing is copied ahead of time."""
        return self._pipeline.workspaces

    def get_workspace(self, workspace_id: str) -> WorkspaceState | None:
        """The workspace in 0.3.3's field layout with its whole audit log, as
        plain values `dataclasses.asdict` takes; None if it is not held.
        Reads the log from the store: O(log), meant for notebooks and tests."""
        return self._pipeline.get_workspace(workspace_id)

    def batch(self) -> AbstractContextManager[None]:
        """A context manager: the calls made inside are written as one store
        change per workspace; if a workspace's write fails, its calls are
        undone together and `BatchWriteError` is raised (SPECIFICATION.md,
        "Batches")."""
        return self._pipeline.batch()

    def snapshot(self, workspace_id: str) -> dict[str, Any]:
        """The workspace as a JSON-safe dict: its own fields, each collection
        keyed by id, `idempotency_keys` and `audit` (the whole log, read from
        the store). Raises UnknownWorkspaceError if it is not held."""
        return self._pipeline.snapshot(workspace_id)

    def restore(self, data: Any, *, overwrite: bool = False) -> list[str]:
        """Write snapshots (one dict, a list, or `{"workspaces": [...]}`) to the
        store, replacing what it held for them, and load them. Returns the ids.

        Every one is checked first (a chained one must verify); RestoreError,
        writing nothing, if any cannot be taken. A workspace the store holds
        with entries the snapshot does not have (its log is not a prefix of
        the snapshot's) is refused, since replacing it would lose them,
        unless `overwrite=True`."""
        return self._pipeline.restore(data, overwrite=overwrite)

    def sweep(self) -> list[Swept]:
        """Make every decision that time alone has made due, in every held
        workspace, at the clock's time: reclaim expired work leases and lapse
        overdue whispers, each recorded. Returns a `Swept` per workspace where
        something was done; a workspace with nothing due is not written.
        Safe beside other processes sweeping the same store."""
        return self._pipeline.sweep()

    def check_whisper_lapses(self, workspace_id: str, now: str | None = None) -> list[dict[str, Any]]:
        """Lapse the workspace's pending whispers whose deadline is at or
        before `now` (ISO 8601 with a zone; the clock when None): each gets
        its default applied and one `notify.message` entry on the log.
        Returns those envelopes. Written to the store before memory changes;
        a store failure is raised and changes nothing."""
        if now is not None and not isinstance(now, str):
            raise TypeError(
                "check_whisper_lapses() argument 'now' must be an ISO 8601 time with a "
                f"zone as a str (e.g. 2024-01-01T00:00:00Z) or None, not {type(now).__name__}"
            )
        return self._pipeline.check_whisper_lapses(workspace_id, now)

    def close(self) -> None:
        """Detach every projection (closing it), then close the store."""
        self._pipeline.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
