"""core/1.0, workspaces and participants (tasks.py and audit_reads.py hold the rest)."""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace

from coordinator.engine.call import Call
from coordinator.engine.canonical import ZERO_HASH
from coordinator.engine.limits import check_new_id
from coordinator.engine.registry import (
    ANY,
    FROM,
    INTEGER,
    OBJECT,
    OPEN_OBJECT,
    STRING,
    Profile,
    profile_name,
    profile_names,
    schema,
)
from coordinator.engine.wire import (
    INVALID_PARAMS,
    NOT_AUTHORISED,
    SIG_KEY_NOT_FOUND,
    SIG_KEY_REVOKED,
    invalid_params,
)
from coordinator.errors import JwkError, RpcError
from coordinator.model import (
    Member,
    WorkspaceMeta,
)
from coordinator.options import ENFORCED_BY, unenforced
from coordinator.security.attest import attest_join, key_record
from coordinator.security.signing import check_jwk

__all__ = ["PROFILE"]

PROFILE = Profile("core/1.0")

PROFILES = {"type": "array", "items": {"type": "string"}, "description": 'Such as "review/1.0".'}
MODE = {"type": "string", "enum": ["shadow", "trial", "production"]}


def _profiles_param(call: Call, default: tuple[str, ...] | None) -> list[str]:
    profiles = call.params.get("profiles")
    if profiles is None and default is not None:
        return list(default)
    if not isinstance(profiles, list) or not all(isinstance(p, str) for p in profiles):
        raise invalid_params("profiles must be an array of profile strings such as \"review/1.0\"")
    problem = call.registry.unadvertisable(profiles)
    if problem:
        raise invalid_params(f"profiles: {problem}")
    problem = unenforced(call.options, profile_names(profiles))
    if problem:
        raise invalid_params(f"profiles: {problem}")
    return profiles


def _enforced(call: Call, profiles: list[str]) -> list[str]:
    """`profiles` with the enforced profiles this coordinator enforces appended
    (refused, naming the pip command, where the extra one needs is missing)."""
    names = profile_names(profiles)
    added = [
        f"{name}/1.0"
        for name, option in ENFORCED_BY.items()
        if getattr(call.options, option) and name not in names
    ]
    problem = call.registry.unadvertisable(added)
    if problem:
        raise invalid_params(f"this coordinator enforces {', '.join(added)}, but {problem}")
    return [*profiles, *added]


def _new_workspace(call: Call, wid: str) -> WorkspaceMeta:
    """Stage a new workspace from the call's params (or the defaults)."""
    profiles = _enforced(call, _profiles_param(call, call.options.default_profiles))
    p = call.params
    # audit-scitt needs a chain to make statements about: it turns chaining on.
    chained = call.options.enable_chain or "audit-scitt" in profile_names(profiles)
    meta = WorkspaceMeta(
        id=wid,
        created=call.arrived,
        profiles=profiles,
        mode=p.get("mode") or "trial",
        mode_ceiling=p.get("mode_ceiling") or "production",
        routing_policy_uri=p.get("routing_policy_uri"),
        step_up_window_sec=p.get("step_up_window_sec") or 300,
        min_acr=p.get("min_acr"),
        chain_head=ZERO_HASH if chained else None,
        chain_enabled=chained,
    )
    for name in ("mode", "mode_ceiling"):
        if not isinstance(getattr(meta, name), str):
            raise invalid_params(f"{name} must be a string")
    if not isinstance(meta.routing_policy_uri, (str, type(None))):
        raise invalid_params("routing_policy_uri must be a string (a URI)")
    if type(meta.step_up_window_sec) is not int:
        raise invalid_params("step_up_window_sec must be an integer number of seconds")
    call.create_workspace(meta)
    return meta


@PROFILE.method(
    "workspace.create",
    pause_exempt=True,
    records_refusals=False,
    params={
        **schema(
            workspace=STRING,
            profiles=PROFILES,
            mode={**MODE, "default": "trial"},
            mode_ceiling={**MODE, "default": "production"},
            routing_policy_uri=STRING,
            step_up_window_sec=INTEGER,
            min_acr=ANY,
        ),
        "additionalProperties": False,
    },
    title="Create a workspace",
    description="Create a workspace (with the given id, or a generated one) advertising "
    "the given profiles.",
)
def workspace_create(call: Call) -> dict[str, Any]:
    wid = call.params.get("workspace")
    if wid is None:
        wid = call.new_id("wsp")
    elif call.ws is not None:
        raise invalid_params(f"workspace already exists: {wid}")
    else:
        check_new_id(wid, "workspace", "wsp_reports")
    meta = _new_workspace(call, wid)
    return {"workspace": wid, "created": meta.created}


def _member_view(m: Member) -> dict[str, Any]:
    out: dict[str, Any] = {"uri": m.uri, "type": m.type, "role": m.role, "joined": m.joined}
    for name in ("display_name", "capabilities", "scopes"):
        value = getattr(m, name)
        if value:  # 0.3.3 leaves out empty ones too
            out[name] = value
    if m.keys:
        live = [
            k["jwk"]
            for k in m.keys
            if k.get("valid_until") is None and k.get("revoked_at") is None
        ]
        out["jwks"] = {"keys": live}
        out["key_history"] = [
            {name: value for name, value in k.items() if value is not None} for k in m.keys
        ]
    if m.paused:
        out["paused"] = True
    if m.oidc_sub is not None:
        out["oidc_sub"] = m.oidc_sub
    if m.vc_holder is not None:
        out["vc_holder"] = m.vc_holder
    return out


@PROFILE.method(
    "workspace.describe",
    read=True,
    pause_exempt=True,
    params=schema(["workspace"], from_=FROM),
    title="Describe a workspace",
    description="The workspace's state, mode, profiles, members and counts.",
)
def workspace_describe(call: Call) -> dict[str, Any]:
    call.require("workspace")
    ws = call.workspace()
    if call.options.require_read_membership:
        call.actor()
    meta = ws.meta
    out: dict[str, Any] = {
        "id": meta.id,
        "created": meta.created,
        "state": meta.state,
        "mode": meta.mode,
        "mode_ceiling": meta.mode_ceiling,
        "max_envelope_bytes": call.options.max_envelope_bytes,
        "step_up_window_sec": meta.step_up_window_sec,
        "profiles": list(meta.profiles),
        "members": [_member_view(m) for _, m in call.items("members")],
        "audit_count": ws.count,
        "task_count": call.count("tasks"),
        "override_count": call.count("overrides"),
    }
    if meta.chain_head is not None:
        out["evidence_head"] = meta.chain_head
    if meta.routing_policy_uri is not None:
        out["routing_policy_uri"] = meta.routing_policy_uri
    return out


@PROFILE.method(
    "workspace.set_profiles",
    params=schema(["workspace", "profiles"], from_=FROM, profiles=PROFILES),
    title="Set a workspace's profiles",
    description="Replace the profiles a workspace advertises (admin only); core/1.0 is "
    "always kept.",
    annotations={"destructiveHint": True},
)
def workspace_set_profiles(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.require("profiles")
    ws = call.workspace()
    actor = call.actor()
    if actor.role != "admin":
        raise RpcError(NOT_AUTHORISED, "workspace.set_profiles requires the admin role")
    profiles = _profiles_param(call, None)
    if not any(profile_name(p) == "core" for p in profiles):
        profiles = [*profiles, "core/1.0"]
    meta = replace(ws.meta, profiles=profiles)
    if "audit-scitt" in profile_names(profiles) and not meta.chain_enabled:
        # Chaining starts here: this call's entry is the first chained one.
        meta = replace(meta, chain_enabled=True, chain_head=ZERO_HASH)
    call.set_meta(meta)
    return {"profiles": profiles}


@PROFILE.method(
    "participant.join",
    pause_exempt=True,
    records_refusals=False,
    params=schema(
        ["workspace", "from", "type"],
        type={"type": "string", "enum": ["human", "agent", "service", "group", "workspace"]},
        role=STRING,
        display_name=STRING,
        capabilities=ANY,
        scopes=ANY,
        jwks=OBJECT,
        oidc_token=STRING,
        vc_presentation=ANY,
    ),
    title="Join a workspace",
    description="Join as a participant (creating the workspace if it does not exist).",
    annotations={"idempotentHint": True},
)
def participant_join(call: Call) -> dict[str, Any]:
    call.require("workspace")
    sender = call.require("from")
    kind = call.require("type")
    wid = call.params["workspace"]
    if not isinstance(wid, str):
        raise invalid_params("workspace must be a string id")
    if not isinstance(sender, str):
        raise invalid_params("from must be a participant URI string")
    if not isinstance(kind, str):
        raise invalid_params("type must be a string: human, agent, service, group or workspace")
    role = call.params.get("role")
    if role is not None and not isinstance(role, str):
        raise invalid_params("role must be a string, such as \"reviewer\"")
    # Checked even when they will not be registered (a re-join, a pinned
    # key): the call is recorded, and a private key must never be.
    offered = _offered_keys(call.params.get("jwks"))
    if call.ws is None:
        check_new_id(wid, "workspace", "wsp_reports")
        _new_workspace_for_join(call, wid)
    existing = call.member(sender)
    options = call.options
    attested = attest_join(
        call.envelope, existing, call.arrived, options.verify_oidc_token, options.verify_vc, call.new_id
    )
    if existing is None:
        check_new_id(sender, "from", "human:alice")
        p = call.params
        # Self-asserted keys only when no identity profile pinned one.
        keys = attested.keys or [key_record(k, call.arrived) for k in offered]
        call.put(
            "members",
            sender,
            Member(
                uri=sender,
                type=kind,
                role=p.get("role") or "participant",
                joined=call.arrived,
                display_name=p.get("display_name"),
                capabilities=p.get("capabilities"),
                scopes=p.get("scopes"),
                keys=keys,
                **attested.fields,
            ),
        )
    elif attested.fields or attested.keys:
        # A re-join is additive: what the evidence binds merges in.
        known = {k.get("kid") for k in existing.keys}
        keys = [*existing.keys, *(k for k in attested.keys if k["kid"] not in known)]
        call.put("members", sender, replace(existing, keys=keys, **attested.fields))
    return {"joined": True, "as": sender}


# A join registers a handful of keys at most; each costs about a millisecond
# to check (coordinator/security/ed25519.py), so the count is bounded ("Bounds").
MAX_JOIN_KEYS = 16


def _offered_keys(jwks: Any) -> list[dict[str, Any]]:
    """The self-asserted keys of a join's `jwks` (none when absent), each
    checked; -32602 naming the field at fault."""
    if jwks is None:
        return []
    try:
        if not isinstance(jwks, dict):
            raise JwkError("jwks", "must be an object: {keys: [jwk, ...]}")
        keys = jwks.get("keys")
        if not isinstance(keys, list):
            raise JwkError("jwks.keys", "must be an array of JWKs: {keys: [jwk, ...]}")
        if len(keys) > MAX_JOIN_KEYS:
            raise JwkError("jwks.keys", f"holds {len(keys)} keys; a join registers at most {MAX_JOIN_KEYS}")
        first: dict[str, int] = {}
        for i, jwk in enumerate(keys):
            kid = check_jwk(jwk, f"jwks.keys[{i}]")["kid"]
            if kid in first:
                raise JwkError(
                    f"jwks.keys[{i}].kid",
                    f"{kid!r} already names jwks.keys[{first[kid]}]; give each key its own kid",
                )
            first[kid] = i
    except JwkError as exc:
        raise _invalid_key(exc) from None
    return keys


def _invalid_key(exc: JwkError) -> RpcError:
    return RpcError(INVALID_PARAMS, exc.message, {"field": exc.field})


def _new_workspace_for_join(call: Call, wid: str) -> None:
    """A join on an unknown workspace creates it with the default profiles."""
    saved = call.params
    call.params = {}  # the join's own params are not workspace settings
    try:
        _new_workspace(call, wid)
    finally:
        call.params = saved


@PROFILE.method(
    "participant.leave",
    floor=True,
    pause_exempt=True,
    params=schema(["workspace", "from"]),
    title="Leave a workspace",
    description="Stop being a participant of the workspace.",
    annotations={"destructiveHint": True, "idempotentHint": True},
)
def participant_leave(call: Call) -> dict[str, Any]:
    call.require("workspace")
    call.workspace()
    actor = call.actor()
    call.delete("members", actor.uri)
    return {"left": True}


def _key_index(member: Member, kid: Any) -> int | None:
    for i, k in enumerate(member.keys):
        if k.get("kid") == kid:
            return i
    return None


@PROFILE.method(
    "participant.rotate_key",
    params=schema(["workspace", "from", "old_kid", "new_jwk"], old_kid=STRING, new_jwk=OPEN_OBJECT),
    title="Rotate a signing key",
    description="Retire one of the caller's keys and add a new one.",
)
def participant_rotate_key(call: Call) -> dict[str, Any]:
    call.require("workspace")
    old_kid = call.require("old_kid")
    new_jwk = call.require("new_jwk")
    call.workspace()
    sender = call.params.get("from")
    member = call.member(sender)
    if member is None:
        raise RpcError(SIG_KEY_NOT_FOUND, f"Unknown participant: {sender}")
    i = _key_index(member, old_kid)
    if i is None:
        raise RpcError(SIG_KEY_NOT_FOUND, f"No key {old_kid} for {sender}")
    if member.keys[i].get("revoked_at") is not None:
        raise RpcError(SIG_KEY_REVOKED, f"Key {old_kid} is revoked")
    # Checked after the key lookups, as 0.3.3 does: an unknown or revoked
    # old key is reported first.
    try:
        kid = check_jwk(new_jwk, "new_jwk")["kid"]
        if _key_index(member, kid) is not None:
            # Two records under one kid: the rotated-out one would refuse
            # every call signed with it (coordinator.security.signing.key_for_call).
            raise JwkError(
                "new_jwk.kid",
                f"{kid!r} already names a key of {member.uri}; a kid is never reused: choose a new one",
            )
    except JwkError as exc:
        raise _invalid_key(exc) from None
    keys = list(member.keys)
    keys[i] = {**keys[i], "valid_until": call.arrived}
    keys.append(
        {
            "jwk": new_jwk,
            "kid": kid,
            "valid_from": call.arrived,
            "valid_until": None,
            "revoked_at": None,
            "revoked_reason": None,
        }
    )
    call.put("members", member.uri, replace(member, keys=keys))
    return {"rotated": True, "old_kid": old_kid, "new_kid": kid, "valid_from": call.arrived}


@PROFILE.method(
    "participant.revoke_key",
    params=schema(
        ["workspace", "from", "target_uri", "kid"], target_uri=STRING, kid=STRING, reason=STRING
    ),
    title="Revoke a signing key",
    description="Revoke a key of the caller's (or, as admin, of another member's).",
    annotations={"destructiveHint": True},
)
def participant_revoke_key(call: Call) -> dict[str, Any]:
    call.require("workspace")
    target_uri = call.require("target_uri")
    kid = call.require("kid")
    call.workspace()
    sender = call.params.get("from")
    if sender != target_uri:
        actor = call.member(sender)
        if actor is None or actor.role != "admin":
            raise RpcError(NOT_AUTHORISED, "Revoking another member's key requires the admin role")
    target = call.member(target_uri)
    if target is None:
        raise RpcError(SIG_KEY_NOT_FOUND, f"Unknown target: {target_uri}")
    i = _key_index(target, kid)
    if i is None:
        raise RpcError(SIG_KEY_NOT_FOUND, f"No key {kid} for target")
    reason = call.params.get("reason") or "unspecified"
    keys = list(target.keys)
    keys[i] = {**keys[i], "revoked_at": call.arrived, "revoked_reason": reason}
    call.put("members", target.uri, replace(target, keys=keys))
    return {"revoked": True, "kid": kid, "revoked_at": call.arrived, "reason": reason}
