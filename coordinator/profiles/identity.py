"""identity-oidc/1.0: a member's identity from an OpenID Connect ID token, and
step-up authentication for privileged calls.

The profile owns no method. `participant.join` takes an `oidc_token`, checked
by the coordinator's `verify_oidc_token` hook and bound to the member
(coordinator/security/attest.py; a ready verifier is `coordinator.security.identity_verifiers.OidcVerifier`).
A token that does not verify, or that no hook can check, refuses the join
(-32403): it is never taken as no token.

With `enforce_step_up`, a privileged call (the seven `control.*`,
`workspace.set_profiles`, `participant.rotate_key`, `participant.revoke_key`)
from a member who is human or OIDC-bound needs a recent authentication
(dispatch step 11, after the signature check, before the profile gate):
its bound `auth_time` no older than the workspace's `step_up_window_sec`, and,
when the workspace sets `min_acr`, its bound `acr` equal to it; else -32402,
which is recorded like any member's refusal.
"""

from __future__ import annotations

from coordinator.engine.call import Call
from coordinator.engine.clock import epoch_seconds
from coordinator.engine.registry import Method, Profile
from coordinator.engine.wire import OIDC_STEP_UP_REQUIRED
from coordinator.errors import RpcError

__all__ = ["PROFILE", "check_step_up"]

# A join's pinned key is proved by an Ed25519 signature, and the ready
# verifiers read JOSE (coordinator/security/attest.py, identity_verifiers.py).
PROFILE = Profile("identity-oidc/1.0", extra="crypto")


@PROFILE.before_gate(enabled_by="enforce_step_up")
def check_step_up(call: Call, method: Method) -> None:
    """-32402 when a privileged call's sender has not authenticated recently enough."""
    ws = call.ws
    if ws is None or not method.privileged:
        return
    member = call.member(call.params.get("from"))
    if member is None or (member.type != "human" and member.oidc_sub is None):
        return
    window = ws.meta.step_up_window_sec
    auth_time = member.oidc_auth_time
    if type(auth_time) is not int:
        raise RpcError(
            OIDC_STEP_UP_REQUIRED,
            "Step-up authentication required: re-join with a fresh OIDC token",
            {"window_sec": window},
        )
    age = epoch_seconds(call.arrived) - auth_time
    if age > window:
        raise RpcError(
            OIDC_STEP_UP_REQUIRED,
            f"Step-up authentication required: the last authentication is {age} s old "
            f"(window {window} s); re-join with a fresh OIDC token",
            {"window_sec": window, "age_sec": age},
        )
    required = ws.meta.min_acr
    if required is not None and member.oidc_acr != required:
        raise RpcError(
            OIDC_STEP_UP_REQUIRED,
            "Step-up required: acr below the workspace minimum; authenticate at "
            f"acr {required!r} and re-join",
            {"required_acr": required, "acr": member.oidc_acr},
        )
