"""The errors chapline raises on purpose, under one base.

Each carries its facts as attributes, and its message (and the class's
`remedy`) says what to do about it::

    ChaplineError                  base: `remedy` says what to do
     ├── RpcError                  a refusal answered as a JSON-RPC error:
     │    │                        code, message, data            (wire.py)
     │    └── StoredObjectError    -32903, a stored object cannot be read:
     │                             data {workspace, collection, key} (workspace.py)
     ├── BatchWriteError           a batch's write failed for a workspace; its calls
     │                             were undone: error (the RpcError they got)
     ├── RestoreError              restore() cannot take the snapshot; nothing was
     │                             written                         (snapshot.py)
     ├── UnknownWorkspaceError     snapshot() of a workspace not held (also a
     │                             KeyError): workspace             (snapshot.py)
     ├── CanonicalError            a value has no CHAP canonical form (canonical.py)
     ├── PatchError                a JSON Patch cannot be applied: message, data
     │    └── PatchLimitError      ... because its result would be too large (patch.py)
     ├── RegistryError             method declarations disagree with CHAP 0.3 or
     │                             with each other, at import: method (registry.py)
     ├── UnsupportedOptionError    a 0.3.3 option chapline does not take (compat.py)
     ├── MissingExtraError         what was used needs an extra not installed (also
     │                             an ImportError): extra, module  (extras.py)
     ├── CommandError              a log command cannot run        (logcli.py)
     ├── ProjectionError           a projection's target cannot be opened or
     │                             written, or its cursor does not fit: target
     │                             (projections/sql.py)
     ├── InwardCallError           recording outside work: a call was refused:
     │                             step, error (also a RuntimeError) (inward.py)
     ├── DispatcherClosed          the serving worker stopped taking calls
     │                             (transports/worker.py)
     ├── NotJsonError              text a client sent through MCP or A2A is not
     │                             strict JSON: reason   (transports/strict_json.py)
     ├── SignatureError            a signature cannot be accepted: code (signing.py)
     ├── JwkError                  a key offered for registration is not a public
     │                             Ed25519 JWK: field (signing.py; answered -32602)
     ├── IdentityRejected          a token or presentation cannot be accepted:
     │                             code                            (verifiers.py)
     ├── CoseError                 bytes that are not an acceptable COSE_Sign1 (cose.py)
     └── ScittUnreachable          the transparency service failed (-32080) (scitt.py)

`Coordinator.dispatch` never raises: every RpcError becomes the response's
`error`, and anything else is answered -32603 and logged under an incident id.
The stores' errors form their own tree under `storage.StoreError`.
JSON-RPC codes are defined once, in wire.py.
"""

from __future__ import annotations

__all__ = ["BatchWriteError", "ChaplineError"]


class ChaplineError(Exception):
    """Base of every error chapline raises on purpose."""

    remedy: str = "Read the message: it names what was wrong and what to send or change."


class BatchWriteError(ChaplineError):
    """A batch's store write failed for a workspace; its calls were undone.

    `error` is the JSON-RPC error (-32900) each of those calls is now answered
    with; the other workspaces of the batch were written.
    """

    remedy = "Check the store (disk space, permissions, connection) and run the calls again."

    def __init__(self, error: ChaplineError) -> None:  # an RpcError (wire.py imports this module)
        super().__init__(str(error))
        self.error = error
