"""The ready identity verifiers at the path README.md showed before
coordinator/ was grouped into folders (`coordinator.verifiers.OidcVerifier`).
They live in `coordinator.security.identity_verifiers`; this module only
re-exports them, so code written against that README keeps working."""

from coordinator.errors import IdentityRejected
from coordinator.security.identity_verifiers import (
    OIDC_CNF_MISMATCH,
    OIDC_TOKEN_INVALID,
    VC_HOLDER_BINDING_INVALID,
    VC_VP_INVALID,
    OidcVerifier,
    VcVerifier,
    same_public_key,
)

__all__ = [
    "OIDC_TOKEN_INVALID",
    "OIDC_CNF_MISMATCH",
    "VC_VP_INVALID",
    "VC_HOLDER_BINDING_INVALID",
    "IdentityRejected",
    "OidcVerifier",
    "VcVerifier",
    "same_public_key",
]
