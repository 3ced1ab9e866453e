"""identity-vc/1.0: a member's identity from a Verifiable Presentation.

The profile owns no method. `participant.join` takes a `vc_presentation`,
checked by the coordinator's `verify_vc` hook and bound to the member
(coordinator/security/attest.py; a ready verifier is `coordinator.security.identity_verifiers.VcVerifier`).
A presentation that does not verify refuses the join (-32410). As in 0.3.3 the
profile may be advertised with or without the hook; without it, a join's
presentation is refused too (nothing can check it).
"""

from __future__ import annotations

from coordinator.engine.registry import Profile

__all__ = ["PROFILE"]

# As identity-oidc/1.0: proof of a pinned key, and the ready verifier, need it.
PROFILE = Profile("identity-vc/1.0", extra="crypto")
