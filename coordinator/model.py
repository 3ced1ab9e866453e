"""The objects a workspace holds, as immutable msgspec Structs, and the name
of every collection they are held in.

Field names and shapes are the stored object bodies that the CHAP 0.3.3
reference writes and reads (its dataclass fields, `from_` included), so files
move between the two. Handlers never mutate these: they build new values with
`msgspec.structs.replace` and stage them on the call.
"""

from __future__ import annotations

from typing import Any

import msgspec

from storage.records import DocumentLayout

__all__ = [
    "COLLECTIONS",
    "COLLECTION_NAMES",
    "COLLECTION_TYPES",
    "DOCUMENT_LAYOUT",
    "EXTENSION_COLLECTIONS",
    "IDEMPOTENCY_KEYS",
    "MODES",
    "SIGNED_CALLS",
    "Deliberation",
    "Handoff",
    "HandoffTask",
    "HistoryEntry",
    "Member",
    "Override",
    "Review",
    "RouteDecision",
    "Snapshot",
    "Task",
    "WhisperPrompt",
    "WorkspaceMeta",
    "from_stored",
    "from_text",
    "mode_le",
    "to_stored",
    "trial_forces_review",
]

MODES = ("shadow", "trial", "production")


class WorkspaceMeta(msgspec.Struct, frozen=True):
    id: str
    created: str
    state: str = "active"
    profiles: list[str] = []
    mode: str = "trial"
    mode_ceiling: str = "production"
    routing_policy_uri: str | None = None
    step_up_window_sec: int = 300
    min_acr: Any = None
    chain_head: str | None = None
    chain_enabled: bool = False


class Member(msgspec.Struct, frozen=True):
    uri: str
    type: str
    role: str = "participant"
    joined: str = ""
    display_name: Any = None
    capabilities: Any = None
    scopes: Any = None
    keys: list[dict[str, Any]] = []
    oidc_sub: Any = None
    oidc_auth_time: Any = None
    oidc_acr: Any = None
    vc_holder: Any = None
    paused: bool = False


class HistoryEntry(msgspec.Struct, frozen=True):
    ts: str
    from_: Any
    state: str
    note: Any = None


class Review(msgspec.Struct, frozen=True):
    requested_at: str
    requested_to: list[str] = []
    rule: str = "any_one_approves"
    deadline: Any = None
    decisions: list[dict[str, Any]] = []


class Task(msgspec.Struct, frozen=True):
    id: str
    kind: Any
    state: str
    assignee: Any
    delegator: Any
    input: Any = None
    created_at: str = ""
    updated_at: str = ""
    mode: Any = "trial"
    history: list[HistoryEntry] = []
    deadline: Any = None
    routing_hints: Any = None
    review: Review | None = None
    review_required: Any = None
    pending_artefact: Any = None
    output: Any = None
    confidence: Any = None
    supersedes: Any = None
    superseded_by: Any = None
    parent: Any = None
    paused: bool = False
    paused_from: Any = None


class Override(msgspec.Struct, frozen=True):
    id: str
    task_id: str
    reviewer: str
    based_on_artefact: Any
    diff: Any
    result: Any
    rationale: Any
    tags: Any = None
    policy_refs: Any = None
    ts: str = ""
    logical_id: Any = None
    instance_id: Any = None
    intent_preserved: Any = None


class Snapshot(msgspec.Struct, frozen=True):
    """A `control.snapshot` artefact: the projected parts it recorded and
    `content_hash` = sha256 of the JCS of `content`."""

    id: str
    produced_by: Any
    produced_at: str
    content_hash: Any = None  # files written by 0.2 have none
    content: Any = None
    kind: str = "snapshot"


class RouteDecision(msgspec.Struct, frozen=True):
    """A routing/1.0 decision (`task.route`, `review.depth`, `escalate.auto`)."""

    id: str
    decision_type: str
    outcome: Any
    produced_by: str
    produced_at: str
    task: Any
    policy_id: Any = None
    hints_observed: Any = None
    rationale: Any = ""
    extra: Any = None


# The interaction profiles' objects. Fields the reference stores as the
# caller sent them are `Any`, so files 0.3.3 wrote load whatever they hold.


class WhisperPrompt(msgspec.Struct, frozen=True):
    id: str
    task_id: Any
    asker: Any
    askee: Any
    question: Any
    asked_at: str
    deadline_ms: Any
    default_if_lapsed: Any = None
    options: Any = None
    urgency: Any = "low"
    state: str = "pending"
    answered_at: Any = None
    answered_by: Any = None
    answer_option: Any = None
    answer_text: Any = None
    comment: Any = None
    default_applied: Any = None


class Deliberation(msgspec.Struct, frozen=True):
    id: str
    opener: Any
    participants: list[Any]
    rule: str
    task_id: Any = None
    question: Any = None
    weights: Any = None
    veto: Any = None
    deadline: Any = None
    state: str = "open"
    comments: list[Any] = []
    votes: list[dict[str, Any]] = []
    outcome: Any = None
    opened_at: str = ""


class HandoffTask(msgspec.Struct, frozen=True):
    task_id: str
    title: Any = None
    status_summary: Any = None
    next_action: Any = None
    blockers: Any = []


class Handoff(msgspec.Struct, frozen=True):
    id: str
    proposer: Any
    recipient: Any
    proposed_at: str
    tasks: list[HandoffTask] = []
    summary: Any = None
    context_links: Any = []
    state: str = "proposed"
    resolved_at: Any = None
    accepted_by: Any = None
    accepted_task_ids: list[Any] = []
    accept_comment: Any = None
    decline_reason: Any = None
    decline_suggested_target: Any = None


# Every collection a workspace holds, named here and nowhere else (the store
# is given them as data: DOCUMENT_LAYOUT).
#
# The one collection -> type map: memory, the store's rows, listeners and
# projections (`Change.objects`) and the 0.3.3 views all hold these objects as
# these Structs. CHAP's collections, in 0.3.3's order.
COLLECTION_TYPES: dict[str, type[msgspec.Struct]] = {
    "members": Member,
    "tasks": Task,
    "overrides": Override,
    "whispers": WhisperPrompt,
    "deliberations": Deliberation,
    "handoffs": Handoff,
    "snapshots": Snapshot,
    "route_decisions": RouteDecision,
}
COLLECTIONS: tuple[str, ...] = tuple(COLLECTION_TYPES)
# Plain JSON values from here on. idempotency key -> task id (tasks/1.0).
IDEMPOTENCY_KEYS = "idempotency_keys"
# chapline's own: signed digest -> {seq, result} of each accepted signed call,
# so that a verbatim resend is answered, not run again; and idempotency slots
# ("idem:sha256:...", engine/idempotent_calls.py) -> {seq, result | error}. 0.3.3 keeps rows of
# collections it does not know and ignores them.
SIGNED_CALLS = "signed_calls"
# The x-chapline-work/1.0 scheduler's state (coordinator/profiles/work/): per
# task and per plan, the frontier of tasks whose dependencies are met, and the
# live claims. Namespaced so that no CHAP collection can ever share the name;
# 0.3.3 keeps and ignores them like signed_calls.
EXTENSION_COLLECTIONS: tuple[str, ...] = ("x_chapline_work", "x_chapline_frontier", "x_chapline_claims")
COLLECTION_NAMES: tuple[str, ...] = (
    *COLLECTIONS,
    IDEMPOTENCY_KEYS,
    SIGNED_CALLS,
    *EXTENSION_COLLECTIONS,
)
# A workspace as one document (snapshot(), restore(), export, copy): which of
# its fields are collections, the maps among them, and those always shown.
DOCUMENT_LAYOUT = DocumentLayout(
    collections=COLLECTION_NAMES,
    maps={
        IDEMPOTENCY_KEYS: ("key -> task id", "Give it as {key: task_id}."),
        SIGNED_CALLS: (
            "signed digest or idempotency slot -> {seq, result | error}",
            "Give it as a snapshot() wrote it, or leave it out.",
        ),
    },
    shown=(*COLLECTIONS, IDEMPOTENCY_KEYS),
    keyed_by={"members": "uri"},
)
_DECODERS = {c: msgspec.json.Decoder(t) for c, t in COLLECTION_TYPES.items()}
_decode_json = msgspec.json.Decoder().decode


def from_stored(collection: str, value: Any) -> Any:
    """A stored object body (decoded JSON) as the value this coordinator holds.

    A collection no profile types stays plain JSON, kept as read so it
    round-trips unchanged.
    """
    kind = COLLECTION_TYPES.get(collection)
    if kind is None:
        return value
    return msgspec.convert(value, kind)


def from_text(collection: str, text: bytes) -> Any:
    """A stored object body (its JSON text) as the value this coordinator holds."""
    decoder = _DECODERS.get(collection)
    return _decode_json(text) if decoder is None else decoder.decode(text)


def to_stored(value: Any) -> Any:
    """The JSON body of a held value (Structs as dicts, stored text decoded)."""
    if isinstance(value, msgspec.Struct):
        return msgspec.to_builtins(value)
    if isinstance(value, bytes):
        return _decode_json(value)
    return value


def mode_le(mode: Any, ceiling: Any) -> bool:
    """Whether `mode` is at or below `ceiling` (shadow < trial < production)."""
    if mode not in MODES or ceiling not in MODES:
        return False
    return MODES.index(mode) <= MODES.index(ceiling)


def trial_forces_review(meta: WorkspaceMeta, mode: Any) -> bool:
    """Under modes/1.0 a trial task always goes through review."""
    return mode == "trial" and any(p.split("/", 1)[0] == "modes" for p in meta.profiles)
