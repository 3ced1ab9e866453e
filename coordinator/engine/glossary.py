"""What each CHAP parameter is, in a sentence and an example: the words a
method's declaration does not give its parameters itself.

`Profile.method` passes every declaration's params through `described`, so
each parameter of each method carries a `description` (the declaration's
own, or this glossary's) and `examples` (JSON Schema's keyword): an MCP
client's model reads them to fill the arguments (SPECIFICATION.md, "MCP and
A2A"). Examples are JSON values of the parameter's declared type; where one
name takes different shapes in different methods, the glossary gives one
example per shape and the first that fits the declared type is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["GLOSSARY", "described"]

_TASK = "tsk_01J9Z3QK7Y"
_ALICE = "human:alice"

# name -> (description, examples in order of preference).
GLOSSARY: Mapping[str, tuple[str, tuple[Any, ...]]] = {
    "accepted_task_ids": ("The offered tasks you take; the rest stay with the proposer.", ([_TASK],)),
    "agent_max": ("At most this many tasks held by one agent at once; null: no limit.", (2,)),
    "answer": ("The answer, as free text or the value asked for.", ("Use the Q3 figures.",)),
    "answer_option": ("The id of the chosen option.", ("approve",)),
    "answer_text": ("The answer in words, beside or instead of an option.", ("Yes, ship it.",)),
    "approved_artefact_digest": ("The digest of the artefact decided on.", ("sha256:" + "0" * 64,)),
    "artefact": (
        "The draft submitted for review: any JSON value, usually an object; the decision "
        "and any override patch apply to it.",
        ({"title": "Q3 summary", "text": "Revenue grew 4%."},),
    ),
    "artefact_routing_hints": ("Routing hints about the artefact.", ({"criticality": "high"},)),
    "assignee": ("The member the task is for (participant URI).", ("agent:drafter",)),
    "candidates": ("Participant URIs, in preference order.", (["agent:drafter", _ALICE],)),
    "capabilities": ("What the member can do, as free-form tags.", (["summarise", "translate"],)),
    "category": ("Why you abstain.", ("out_of_scope",)),
    "comment": ("A comment kept with the decision or message in the log.", ("Looks right.",)),
    "confidence": ("Confidence in the result, a decimal as a string.", ("0.9",)),
    "context": ("Background the participants should see.", ({"doc": "https://example.org/rfc"},)),
    "context_links": ("Links to what the new holder should read.", (["https://example.org/notes"],)),
    "context_summary": ("A short summary of the situation for the person asked.", ("Draft 2 of the Q3 summary.",)),
    "deadline": ("When it is due, as an RFC 3339 time.", ("2026-12-31T17:00:00Z",)),
    "deadline_ms": ("Milliseconds from now until it lapses.", (3_600_000,)),
    "default_escalation_target": ("A member or group URI.", ("group:reviewers",)),
    "default_if_lapsed": ("What applies if nobody answers in time.", ("proceed",)),
    "deliberation_id": ("The deliberation, as deliberate.open answered it.", ("dlb_01J9Z3QK7Y",)),
    "diff": (
        "RFC 6902 JSON Patch operations applied to the artefact under review.",
        ([{"op": "replace", "path": "/text", "value": "Revenue grew 5%."}],),
    ),
    "display_name": ("The name people see.", ("Alice Martin",)),
    "edges": ("Dependencies between plan tasks.", ([{"from": "draft", "to": "review", "type": "strong"}],)),
    "error": ("What went wrong, for a failed report.", ({"message": "source unreachable"},)),
    "filter": ("Keep only matching entries.", ({"outcome": "accepted"},)),
    "for": ("Only what this member may claim.", ("agent:drafter",)),
    "from": ("The caller's participant URI.", (_ALICE,)),
    "handoff_id": ("The handoff, as handoff.propose answered it.", ("hof_01J9Z3QK7Y",)),
    "idempotency_key": ("A key of your own: a retry with the same key creates nothing new.", ("draft-q3-1",)),
    "in_flight_policy": ("What happens to work already running.", ("allow_to_complete",)),
    "include": ("The parts to record.", (["members", "mode_ceiling"],)),
    "input": ("The task's input, an object.", ({"topic": "Q3 summary"},)),
    "instance_id": ("An id of your own for this override.", ("ovr-1",)),
    "intent_preserved": ("Whether the edit keeps the draft's intent.", (True,)),
    "issuer": ("The issuer named in the statement.", ("https://chap.example.org",)),
    "jwks": ("Public keys to register, as a JWK Set.", ({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "..."}]},)),
    "kid": ("A key id.", ("key-2026-01",)),
    "kind": ("What kind of task it is, in your own words.", ("summary",)),
    "label": ("A name for the snapshot.", ("before-rollout",)),
    "lease_ms": ("Lease length in milliseconds.", (60_000,)),
    "limit": ("At most this many.", (10,)),
    "logical_id": ("An id of your own naming what the override changes.", ("q3-summary",)),
    "min_acr": ("The least authentication context class a privileged call needs.", ("urn:mace:incommon:iap:silver",)),
    "mode": ("shadow, trial or production.", ("trial",)),
    "mode_ceiling": ("The highest mode tasks may run in.", ("production",)),
    "new_ceiling": ("The new highest mode tasks may run in.", ("trial",)),
    "new_jwk": ("The replacement public key as a JWK, with a kid.", ({"kty": "OKP", "crv": "Ed25519", "x": "...", "kid": "key-2"},)),
    "new_task": ("The successor task.", ({"assignee": _ALICE, "kind": "summary"},)),
    "oidc_token": ("An OIDC ID token from the identity provider.", ("eyJhbGciOi...",)),
    "old_kid": ("The id of the key being replaced.", ("key-1",)),
    "options": ("The answers to choose from.", ([{"id": "approve", "label": "Approve"}, {"id": "hold", "label": "Hold"}],)),
    "original_task_id": ("The task being escalated.", (_TASK,)),
    "outcome": ("How the work ended.", ("completed",)),
    "output": ("The task's output: any JSON value, usually an object.", ({"text": "Revenue grew 4%."},)),
    "participant_uri": ("The member, for scope participant.", ("agent:drafter",)),
    "participants": ("Who votes (participant URIs).", ([_ALICE, "human:bob"],)),
    "plan": ("The plan's name.", ("q3-report",)),
    "policy_id": ("The routing policy to apply.", ("default",)),
    "policy_refs": ("The policies the decision rests on.", (["style-guide-v2"],)),
    "profiles": ("Profiles to advertise.", (["core/1.0", "review/1.0"],)),
    "progress_note": ("A note on progress, kept in the log.", ("Outline done.",)),
    "question": ("The question, in words.", ("Should the summary cover Q2 too?",)),
    "range": ("The entries to read, by seq: from_seq inclusive, to_seq exclusive.", ({"from_seq": 0, "to_seq": 50},)),
    "rationale": ("Why, in words kept in the log.", ("Tighter wording.",)),
    "reason": ("Why, in words kept in the log.", ("Out of my area.",)),
    "receipt": ("The SCITT receipt to check.", ({"seq": 3, "receipt": "..."},)),
    "request_revision": ("Send the task back for another draft instead of declining it.", (True,)),
    "retryable": ("Whether a failed attempt may be retried.", (True,)),
    "review_required": ("Whether the task's output must be reviewed.", (True,)),
    "role": ("The member's role in the workspace.", ("admin", "worker")),
    "routing_hints": ("Hints for routing.", ({"criticality": "high"},)),
    "routing_policy_uri": ("Where the routing policy is.", ("https://example.org/routing.json",)),
    "rule": ("How many approvals complete it.", ("any_one_approves",)),
    "scope": ("What to act on.", ("workspace",)),
    "scopes": ("The scopes the member holds.", (["tasks:write"],)),
    "snapshot_artefact_id": ("Alias of to_snapshot_artefact_id.", ("art_01J9Z3QK7Y",)),
    "snapshot_id": ("Alias of to_snapshot_artefact_id.", ("art_01J9Z3QK7Y",)),
    "state": ("The task's new state.", ("in_progress",)),
    "step_up_window_sec": ("Seconds a step-up authentication stays fresh.", (300,)),
    "successor_task": ("The task that replaces the superseded one.", ({"assignee": "agent:drafter", "kind": "summary"},)),
    "suggested_target": ("Who might take it instead (participant URI).", ("human:bob",)),
    "summary": ("What the handoff is about.", ("Handing over the Q3 summary.",)),
    "tags": ("Labels kept with the decision.", (["style"],)),
    "target_uri": ("The member whose key is revoked.", ("agent:drafter",)),
    "task_id": ("The task, as task.create answered it.", (_TASK,)),
    "tasks": ("The tasks.", ([{"task_id": _TASK}],)),
    "text": ("The comment, in words.", ("I'd vote yes with one change.",)),
    "to": ("Who it is addressed to: participant URIs (a group: or workspace: URI for any member).", ([_ALICE], _ALICE)),
    "to_snapshot_artefact_id": ("The snapshot to roll back to, as control.snapshot answered it.", ("art_01J9Z3QK7Y",)),
    "token": ("The fencing token x-chapline.work.claim answered.", (1,)),
    "type": ("What kind of participant joins.", ("agent",)),
    "urgency": ("How soon an answer is needed.", ("high",)),
    "uri": ("Alias of participant_uri.", ("agent:drafter",)),
    "vc_presentation": ("A verifiable presentation proving the member's identity.", ({"type": "VerifiablePresentation"},)),
    "veto": ("Who may veto.", ({_ALICE: True},)),
    "veto_invoked": ("Whether this vote is a veto.", (False,)),
    "vote": ("Your vote.", ("yea",)),
    "weight": ("Recorded only: weights come from the opener.", (1,)),
    "weights": ("Each voter's weight.", ({_ALICE: 2, "human:bob": 1},)),
    "what_to_restore": ("What the rollback restores.", (["mode_ceiling", "members"],)),
    "whisper_id": ("The whisper, as whisper.ask answered it (or your own id when asking).", ("wsp_q1",)),
    "workspace": ("The workspace id.", ("wsp_team",)),
    "workspace_max": ("At most this many tasks held at once in the workspace; null: no limit.", (5,)),
}

_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object", list: "array"}


def _fits(value: Any, schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    wanted = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()
    for option in schema.get("oneOf") or schema.get("anyOf") or ():
        if isinstance(option, Mapping) and isinstance(option.get("type"), str):
            wanted.add(option["type"])
    if not wanted:
        return True
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        return False
    found = "null" if value is None else _TYPES.get(type(value), "")
    return found in wanted or (found == "integer" and "number" in wanted)


def described(params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` (a params object's schema) with each property given the
    glossary's description where it has none, and an example where it has
    none (the first of the glossary's that fits its type)."""
    properties = params.get("properties")
    if not isinstance(properties, Mapping):
        return dict(params)
    out: dict[str, Any] = {}
    for name, prop in properties.items():
        entry = GLOSSARY.get(name)
        prop = dict(prop)
        if entry is not None:
            words, examples = entry
            prop.setdefault("description", words)
            if "examples" not in prop:
                enum = prop.get("enum")
                fitting = [e for e in examples if _fits(e, prop)]
                if fitting:
                    prop["examples"] = [fitting[0]]
                elif isinstance(enum, list) and enum:
                    prop["examples"] = [enum[0]]
        out[name] = prop
    return {**params, "properties": out}
