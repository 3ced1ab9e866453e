"""The behaviour switches a coordinator is built with, each declared once.

`Options` is the one declaration of every option: its name, type, default
and meaning (the field's `description`). `Coordinator(...)` takes each as a
keyword argument (None, or leaving it out, takes the default declared here),
0.3.3's `CoordinatorOptions` maps its fields of the same name onto them
(coordinator/compat.py), and handlers read the built `Options`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import msgspec
from msgspec import Meta

__all__ = [
    "ENFORCED_BY",
    "OPTION_NAMES",
    "EscalationPolicy",
    "Options",
    "ReviewDepthPolicy",
    "RoutingPolicy",
    "describe_options",
    "options_from",
    "unenforced",
]

# routing/1.0 policy hooks; each gets the held task (an immutable model.Task).
RoutingPolicy = Callable[[Any, list[Any]], dict[str, Any]]
"""`(task, candidates) -> {"selected": uri, "rationale": {...}}`"""
ReviewDepthPolicy = Callable[[Any, dict[str, Any]], dict[str, Any]]
"""`(task, hints) -> {"depth": ..., "sampling_probability"?: p, "rationale"?: {...}}`"""
EscalationPolicy = Callable[[Any, dict[str, Any]], dict[str, Any]]
"""`(task, hints) -> {"escalate": bool, "to"?: uri, "triggered_rule"?: {...}}`"""


class Options(msgspec.Struct, frozen=True):
    """Behaviour switches a handler may consult; one field per option of
    `Coordinator(...)`, with its default and meaning."""

    enable_chain: Annotated[
        bool,
        Meta(description="hash-link each new workspace's entries (SPECIFICATION.md, "
             '"Audit entries and the chain")'),
    ] = True
    default_profiles: Annotated[
        tuple[str, ...],
        Meta(description="the profiles a workspace created without `profiles` advertises "
             "(a list or a tuple)"),
    ] = ("core/1.0", "review/1.0")
    max_envelope_bytes: Annotated[
        int,
        Meta(description="the largest envelope dispatch takes: the length of its canonical "
             "JSON in bytes (beyond it: -32600)"),
    ] = 1_048_576
    require_read_membership: Annotated[
        bool,
        Meta(description="the reads (workspace.describe, audit.read, ...) need `from` to be a "
             "member (-32011)"),
    ] = False
    routing_policy: Annotated[
        RoutingPolicy | None,
        Meta(description="routing/1.0's task.route policy, `(task, candidates) -> "
             '{"selected", "rationale"}` (None: the default policy)'),
    ] = None
    review_depth_policy: Annotated[
        ReviewDepthPolicy | None,
        Meta(description="routing/1.0's review.depth policy, `(task, hints) -> "
             '{"depth", ...}` (None: the default policy)'),
    ] = None
    escalation_policy: Annotated[
        EscalationPolicy | None,
        Meta(description="routing/1.0's escalate.auto policy, `(task, hints) -> "
             '{"escalate", ...}` (None: the default policy)'),
    ] = None
    require_signatures: Annotated[
        bool,
        Meta(description="every call but workspace.create and participant.join must carry a "
             "valid Ed25519 `sig` (security-signed/1.0)"),
    ] = False
    enforce_step_up: Annotated[
        bool,
        Meta(description="a privileged method from a human or OIDC-bound member needs a "
             "recent OIDC authentication (-32402; identity-oidc/1.0)"),
    ] = False
    verify_oidc_token: Annotated[
        Callable[[Any], Any] | None,
        Meta(description="checks a join's `oidc_token`: `(token) -> claims | None` (None "
             "refuses, -32403); new workspaces then advertise identity-oidc/1.0"),
    ] = None
    verify_vc: Annotated[
        Callable[[Any], Any] | None,
        Meta(description="checks a join's `vc_presentation`: `(presentation) -> {holder | id, "
             "cnf_jwk?} | None` (None refuses, -32410; identity-vc/1.0)"),
    ] = None
    scitt_submitter: Annotated[
        Callable[[dict[str, Any]], Any] | None,
        Meta(description="takes each statement audit.submit_to_scitt makes and returns its "
             "receipt (audit-scitt/1.0)"),
    ] = None
    verify_scitt_receipt: Annotated[
        Callable[[Any], Any] | None,
        Meta(description="answers audit.verify_receipt: `(receipt) -> bool` (audit-scitt/1.0)"),
    ] = None
    scitt_issuer_key: Annotated[
        Any,
        Meta(description="an Ed25519PrivateKey: statements become real COSE_Sign1 "
             "(audit-scitt/1.0)"),
    ] = None
    scitt_issuer_kid: Annotated[
        str, Meta(description="the key id statements name their issuer's key by")
    ] = "scitt-issuer"
    max_read_bytes: Annotated[
        int,
        Meta(description="the byte budget of one audit.read answer: it stops after the entry "
             "that passes it (always at least one) and its next_seq says where to go on "
             '(SPECIFICATION.md, "Bounds on memory and time")'),
    ] = 16 * 1024 * 1024


OPTION_NAMES: tuple[str, ...] = Options.__struct_fields__


def options_from(given: Mapping[str, Any]) -> Options:
    """The options `given` names (other names are not looked at); one that is
    None or left out takes its declared default."""
    chosen = {name: given[name] for name in OPTION_NAMES if given.get(name) is not None}
    if "default_profiles" in chosen:  # a list, as 0.3.3 takes it, held as a tuple
        chosen["default_profiles"] = tuple(chosen["default_profiles"])
    return Options(**chosen)


def describe_options() -> str:
    """Each option as `name=default: meaning`, wrapped, for docstrings."""
    described = []
    for field in msgspec.structs.fields(Options):
        meta = next(m for m in getattr(field.type, "__metadata__", ()) if isinstance(m, Meta))
        described.append(
            textwrap.fill(
                f"{field.name}={field.default!r}: {meta.description}",
                width=76,
                subsequent_indent="    ",
                break_on_hyphens=False,
            )
        )
    return "\n".join(described)


# Profiles a workspace may advertise only when the coordinator enforces them,
# and the option that does (as 0.3.3 couples them): appended to a new
# workspace's profiles when on, refused (-32602) when off.
ENFORCED_BY = {"security-signed": "require_signatures", "identity-oidc": "verify_oidc_token"}


def unenforced(options: Options, names: frozenset[str]) -> str | None:
    """What is wrong with advertising the profile `names` under `options`, or None."""
    for name, option in ENFORCED_BY.items():
        if name in names and not getattr(options, option):
            return f"{name} is advertised but this coordinator does not enforce it (set {option})"
    return None
