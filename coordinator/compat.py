"""What code written against `chap-coordinator` 0.3.3 reads and passes.

- `CoordinatorOptions`: 0.3.3's option names and defaults, mapped onto
  chapline's arguments (`chapline_arguments`); a field chapline does
  not support yet is refused when set to anything but its default.
- `coord.workspaces`: a read-only mapping of read-only views over what the
  coordinator holds (nothing is copied ahead of time or kept in sync: each
  read looks at the live workspace).
- `coord.get_workspace(id)`: one workspace as a dataclass in 0.3.3's field
  layout, for `dataclasses.asdict` (chap-analytics' `from_coordinator`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from coordinator.audit import AuditEntry
from coordinator.engine.clock import StepClock
from coordinator.engine.ids import CounterIds
from coordinator.errors import UnsupportedOptionError
from coordinator.model import COLLECTIONS, IDEMPOTENCY_KEYS, from_text
from coordinator.options import OPTION_NAMES

if TYPE_CHECKING:
    from coordinator.engine.held import HeldWorkspaces
    from coordinator.engine.workspace import Workspace

__all__ = [
    "CoordinatorOptions",
    "WorkspaceState",
    "WorkspaceView",
    "WorkspacesView",
    "chapline_arguments",
]


@dataclasses.dataclass
class CoordinatorOptions:
    """0.3.3's options, with its names and defaults (`enable_chain` is off, as
    there). `Coordinator(options)` maps each field to chapline's arguments:
    `deterministic_ids` to `ids=CounterIds()`, `deterministic_clock` to
    `clock=StepClock()`, the rest by name (the routing policies and the
    signature, identity and SCITT hooks included). `on_auto_escalate` and
    `on_store_error` belong to what chapline does not implement; setting one
    raises `UnsupportedOptionError`."""

    deterministic_ids: bool = False
    deterministic_clock: bool = False
    enable_chain: bool = False
    require_signatures: bool = False
    enforce_step_up: bool = False
    require_read_membership: bool = False
    max_envelope_bytes: int = 1_048_576
    on_audit: Callable[[str, AuditEntry], None] | None = None
    on_auto_escalate: Callable[..., None] | None = None
    verify_oidc_token: Callable[..., Any] | None = None
    verify_vc: Callable[..., Any] | None = None
    scitt_submitter: Callable[..., Any] | None = None
    verify_scitt_receipt: Callable[..., Any] | None = None
    routing_policy: Callable[..., Any] | None = None
    review_depth_policy: Callable[..., Any] | None = None
    escalation_policy: Callable[..., Any] | None = None
    default_profiles: list[str] = dataclasses.field(
        default_factory=lambda: ["core/1.0", "review/1.0"]
    )
    store: Any = None
    on_store_error: Callable[[Exception, dict[str, Any]], None] | None = None


# Fields with no chapline counterpart yet, and why.
_UNSUPPORTED: dict[str, str] = {
    "on_auto_escalate": (
        "escalate.auto is implemented, but not this notification; an audit listener "
        "(on_audit) sees every accepted escalate.auto with its result in the store"
    ),
    "on_store_error": (
        "chapline writes before it answers, so a failed write is the call's own "
        "answer (-32900) rather than a report after the fact"
    ),
}
# The fields that carry one of chapline's arguments under the same name: each
# option of coordinator/options.py that 0.3.3 has, and `on_audit`.
_SAME_NAME = tuple(
    f.name
    for f in dataclasses.fields(CoordinatorOptions)
    if f.name in OPTION_NAMES or f.name == "on_audit"
)
_FIELDS = frozenset(f.name for f in dataclasses.fields(CoordinatorOptions))
_DEFAULTS = CoordinatorOptions()
# The flag that stands for an argument, where it is not the argument's own name.
_FLAGS = {"clock": "deterministic_clock", "ids": "deterministic_ids"}


def chapline_arguments(
    options: CoordinatorOptions | None,
    overrides: dict[str, Any],
    given: Mapping[str, Any],
) -> dict[str, Any]:
    """chapline's arguments (store, clock, ids, on_audit and each option of
    coordinator/options.py, by name) for `Coordinator(options, **overrides)`.

    `options` gives 0.3.3's values (its defaults included); without it only
    what `overrides` names is taken, and every other option keeps chapline's
    default. `overrides` are CoordinatorOptions fields given as keywords, as
    0.3.3 takes them; `given` holds chapline's own arguments, which win where
    they are not None. An argument left None takes its default."""
    unknown = sorted(set(overrides) - _FIELDS)
    if unknown:
        raise TypeError(
            f"Coordinator() got unexpected keyword arguments {unknown}: it takes "
            f"chapline's arguments or CoordinatorOptions fields ({', '.join(sorted(_FIELDS))})"
        )
    if options is not None and not isinstance(options, CoordinatorOptions):
        raise TypeError(
            f"options must be a CoordinatorOptions, not {type(options).__name__}"
        )
    if options is None:
        values = dict(overrides)
    else:
        chosen = dataclasses.replace(options, **overrides)
        values = {name: getattr(chosen, name) for name in _FIELDS}
    for name, why in _UNSUPPORTED.items():
        if values.get(name, getattr(_DEFAULTS, name)) != getattr(_DEFAULTS, name):
            raise UnsupportedOptionError(name, why)
    arguments: dict[str, Any] = {name: values.get(name) for name in _SAME_NAME}
    arguments["store"] = values.get("store")
    arguments["clock"] = StepClock() if values.get("deterministic_clock") else None
    arguments["ids"] = CounterIds() if values.get("deterministic_ids") else None
    for name in ("clock", "ids", "store"):
        if given.get(name) is not None and arguments[name] is not None:
            raise TypeError(
                f"Coordinator() got both {name}= and the option {_FLAGS.get(name, name)}: give one"
            )
    for name in (*OPTION_NAMES, "on_audit", "store", "clock", "ids"):
        if given.get(name) is not None:
            arguments[name] = given[name]
    return arguments


# -- read-only views ---------------------------------------------------------

_encode = msgspec.json.Encoder().encode


def _detached(collection: str, value: Any) -> Any:
    """A held value as readers get it: Structs are frozen, and their nested
    lists and dicts are fresh copies, so nothing a reader does reaches memory."""
    return from_text(collection, _encode(value))


def _live(held: HeldWorkspaces, workspace_id: str) -> Workspace:
    """The workspace as the coordinator holds it now."""
    ws = held.get(workspace_id)
    if ws is None:
        raise KeyError(f"workspace {workspace_id!r} is no longer held by this coordinator")
    return ws


class CollectionView(Mapping[str, Any]):
    """One collection of a workspace, keyed by id, read live."""

    __slots__ = ("_held", "_id", "_collection")

    def __init__(self, held: HeldWorkspaces, workspace_id: str, collection: str) -> None:
        self._held = held
        self._id = workspace_id
        self._collection = collection

    def __getitem__(self, key: str) -> Any:
        ws = _live(self._held, self._id)
        value = ws.get(self._collection, key)
        if value is None:
            raise KeyError(key)
        return _detached(self._collection, value)

    def __contains__(self, key: object) -> bool:
        try:
            return key in _live(self._held, self._id).objects[self._collection]
        except TypeError:  # an unhashable key names nothing
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(list(_live(self._held, self._id).objects[self._collection]))

    def __len__(self) -> int:
        return len(_live(self._held, self._id).objects[self._collection])

    def __repr__(self) -> str:
        return f"<{self._collection} of {self._id}: {len(self)}>"


class _NoDataclassFields:
    """`WorkspaceView.__dataclass_fields__`: absent, as on any class that is
    not a dataclass. Except to `dataclasses.asdict` and `astuple` (0.3.3's
    `workspaces` held dataclasses, and code passes them there), which are
    told what to call instead of their bare "should be called on dataclass
    instances"; they ask through `_is_dataclass_instance(obj)`, and that
    frame alone gets the TypeError."""

    def __get__(self, view: object, owner: type) -> Any:
        asking = sys._getframe(1)  # noqa: SLF001 (the one way to see who asks)
        code = asking.f_code
        if code.co_name == "_is_dataclass_instance" and code.co_filename == dataclasses.__file__:
            seen = asking.f_locals.get("obj")
            wid = repr(seen.id) if isinstance(seen, WorkspaceView) else "workspace_id"
            raise TypeError(
                "coord.workspaces holds read-only views, not dataclasses: call "
                f"coord.get_workspace({wid}) for the workspace as a dataclass in 0.3.3's "
                "field layout, which dataclasses.asdict takes"
            )
        raise AttributeError("__dataclass_fields__")


class WorkspaceView:
    """A workspace as 0.3.3's readers see it: its fields (`id`, `state`,
    `profiles`, `mode`, `mode_ceiling`, `chain_head`, ...) and each collection
    (`members` keyed by URI, `tasks`, `overrides`, ... keyed by id) as a
    read-only mapping. Each read looks at the coordinator's live state;
    `audit` reads the whole log from the store (O(log))."""

    __slots__ = ("_held", "_id")
    __dataclass_fields__ = _NoDataclassFields()

    def __init__(self, held: HeldWorkspaces, workspace_id: str) -> None:
        self._held = held
        self._id = workspace_id

    @property
    def id(self) -> str:
        return self._id

    @property
    def audit(self) -> tuple[AuditEntry, ...]:
        """The whole log, read from the store: O(log)."""
        ws = _live(self._held, self._id)
        entries = self._held.log_reader(ws).entries(0, ws.count)
        return tuple(msgspec.convert(e, AuditEntry) for e in entries)

    def __getattr__(self, name: str) -> Any:
        if name in COLLECTIONS or name == IDEMPOTENCY_KEYS:
            return CollectionView(self._held, self._id, name)
        meta = _live(self._held, self._id).meta
        if name.startswith("_") or name not in meta.__struct_fields__:
            raise AttributeError(f"a workspace view has no attribute {name!r}")
        value = getattr(meta, name)
        return list(value) if isinstance(value, list) else value

    def __repr__(self) -> str:
        return f"<workspace {self._id}>"


class WorkspacesView(Mapping[str, WorkspaceView]):
    """`coord.workspaces`: workspace id -> `WorkspaceView`, for the workspaces
    the coordinator holds; read-only, and always current."""

    __slots__ = ("_held",)

    def __init__(self, held: HeldWorkspaces) -> None:
        self._held = held

    def __getitem__(self, workspace_id: str) -> WorkspaceView:
        if workspace_id not in self:
            raise KeyError(workspace_id)
        return WorkspaceView(self._held, workspace_id)

    def __contains__(self, workspace_id: object) -> bool:
        try:
            return workspace_id in self._held
        except TypeError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._held.ids())

    def __len__(self) -> int:
        return len(self._held)

    def __repr__(self) -> str:
        return f"<workspaces: {', '.join(self)}>"


@dataclasses.dataclass(frozen=True)
class WorkspaceState:
    """One workspace in 0.3.3's `Workspace` field layout, as plain JSON values
    (collections keyed by id, `audit` the whole log in wire shape), so that
    `dataclasses.asdict` gives what 0.3.3 persists."""

    id: str
    created: str
    state: str
    profiles: list[str]
    mode: str
    mode_ceiling: str
    routing_policy_uri: str | None
    step_up_window_sec: int
    min_acr: Any
    members: dict[str, Any]
    tasks: dict[str, Any]
    overrides: dict[str, Any]
    whispers: dict[str, Any]
    deliberations: dict[str, Any]
    handoffs: dict[str, Any]
    snapshots: dict[str, Any]
    route_decisions: dict[str, Any]
    idempotency_keys: dict[str, str]
    audit: list[dict[str, Any]]
    chain_head: str | None
    chain_enabled: bool

    @classmethod
    def from_snapshot(cls, snapshot: dict[str, Any]) -> WorkspaceState:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in snapshot.items() if k in names})
