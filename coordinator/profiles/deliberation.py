"""deliberation/1.0: deliberate.open, deliberate.comment, deliberate.vote,
deliberate.close.

A deliberation is a vote among named participants under a decision rule.
Behaviour follows chap-coordinator 0.3.3: any member may comment on or
close an open deliberation, only participants vote, once each; closing
tallies the votes under the rule, and closing again answers the same outcome
(and is recorded again). Deadlines are stored, never enforced. Where the
reference accepts malformed input or crashes on it, chapline answers -32602
before looking at any state. SPECIFICATION.md, "Interaction profiles",
states both.
"""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace

from coordinator.engine.call import Call
from coordinator.engine.registry import ANY, OBJECT, STRING, Profile, schema
from coordinator.engine.wire import (
    ALREADY_VOTED,
    BAD_RULE,
    DELIBERATION_NOT_OPEN,
    NOT_A_PARTICIPANT,
    invalid_params,
    missing,
)
from coordinator.errors import RpcError
from coordinator.model import Deliberation

__all__ = ["PROFILE", "tally"]

PROFILE = Profile("deliberation/1.0")

VOTES = ("yea", "nay", "abstain")
RULES_HELP = (
    "any_one_approves, all_approve, quorum:<n>, weighted_vote:<threshold> or "
    "weighted_vote_with_veto:<threshold>"
)


def _check_rule(rule: str) -> None:
    """-32033 unless `rule` is one the tally understands. Thresholds are read
    as Python's int()/float() read them, as the reference does."""
    if rule in ("any_one_approves", "all_approve"):
        return
    for prefix, number in (
        ("quorum:", int),
        ("weighted_vote_with_veto:", float),
        ("weighted_vote:", float),
    ):
        if rule.startswith(prefix):
            try:
                number(rule[len(prefix) :])
            except ValueError:
                raise RpcError(
                    BAD_RULE, f"Rule {rule!r} has no valid {number.__name__} after {prefix!r}"
                ) from None
            return
    raise RpcError(BAD_RULE, f"Unknown rule: {rule}; deliberation/1.0 supports {RULES_HELP}")


def _participants(p: dict[str, Any]) -> list[str]:
    value = p.get("to") or p.get("participants")
    if isinstance(value, str):
        value = [value]
    if not value:
        raise invalid_params("deliberate.open needs 'to' (participants list)")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid_params("'to' must be a participant URI or an array of them")
    return list(value)


def _uri_map(p: dict[str, Any], name: str, numbers: bool) -> Any:
    value = p.get(name)
    if value is None:
        return None
    ok = isinstance(value, dict) and (
        not numbers
        or all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values())
    )
    if not ok:
        kind = "numbers" if numbers else "booleans"
        raise invalid_params(f"{name} must be an object mapping participant URIs to {kind}")
    return value


def _optional_id(p: dict[str, Any], name: str) -> str | None:
    value = p.get(name)
    if value is not None and not isinstance(value, str):
        raise invalid_params(f"{name} must be a string")
    return value


# The schema lists URIs; the handler takes a single URI string too.
_ADDRESS = {"type": "array", "items": STRING}
_DELIBERATION = schema(["workspace", "from", "deliberation_id"], deliberation_id=STRING)


@PROFILE.method(
    "deliberate.open",
    floor=True,
    params=schema(
        ["workspace", "from", "rule", "to"],
        rule={**STRING, "description": RULES_HELP},
        to=_ADDRESS,
        participants=_ADDRESS,
        deliberation_id=STRING,
        task_id=STRING,
        question=STRING,
        weights={**OBJECT, "additionalProperties": {"type": "integer"}},
        veto={**OBJECT, "additionalProperties": {"type": "boolean"}},
        deadline=STRING,
        context=ANY,
    ),
    title="Open a deliberation",
    description="Put a question to a vote among named participants under a decision rule.",
)
def deliberate_open(call: Call) -> dict[str, Any]:
    p = call.params
    rule = call.require("rule")
    if not isinstance(rule, str):
        raise invalid_params(f"rule must be a string: {RULES_HELP}")
    participants = _participants(p)
    weights = _uri_map(p, "weights", numbers=True)
    veto = _uri_map(p, "veto", numbers=False)
    chosen = _optional_id(p, "deliberation_id")
    call.workspace()
    _check_rule(rule)
    if chosen is None:
        chosen = call.new_id("dlb", "deliberations")
    elif call.get("deliberations", chosen) is not None:
        raise invalid_params(
            f"deliberation_id {chosen!r} is already in use in this workspace; "
            "choose another id or omit it to have one generated"
        )
    call.put(
        "deliberations",
        chosen,
        Deliberation(
            id=chosen,
            task_id=p.get("task_id"),
            opener=p.get("from"),
            participants=participants,
            rule=rule,
            question=p.get("question"),
            weights=weights,
            veto=veto,
            deadline=p.get("deadline"),
            opened_at=call.arrived,
        ),
    )
    return {"deliberation_id": chosen, "state": "open"}


def _deliberation(call: Call) -> Deliberation:
    """The named deliberation (a missing id names none, as in 0.3.3)."""
    call.workspace()
    key = call.params.get("deliberation_id")
    if key is not None and not isinstance(key, str):
        raise invalid_params("deliberation_id must be a string")
    found: Deliberation | None = call.get("deliberations", key) if key is not None else None
    if found is None:
        raise invalid_params(f"Unknown deliberation: {key!r}")
    return found


def _open(d: Deliberation) -> None:
    if d.state != "open":
        raise RpcError(DELIBERATION_NOT_OPEN, f"Deliberation not open: it is {d.state}")


@PROFILE.method(
    "deliberate.comment",
    floor=True,
    params={
        **_DELIBERATION,
        "properties": {**_DELIBERATION["properties"], "comment": STRING, "text": ANY},
        "required": [*_DELIBERATION["required"], "comment"],
    },
    title="Comment on a deliberation",
    description="Add a comment to an open deliberation.",
)
def deliberate_comment(call: Call) -> dict[str, Any]:
    d = _deliberation(call)
    _open(d)
    p = call.params
    comment = {"ts": call.arrived, "from": p.get("from"), "text": p.get("comment") or p.get("text", "")}
    call.put("deliberations", d.id, replace(d, comments=[*d.comments, comment]))
    return {"accepted": True}


@PROFILE.method(
    "deliberate.vote",
    floor=True,
    params=schema(
        ["workspace", "from", "deliberation_id", "vote"],
        deliberation_id=STRING,
        vote={"type": "string", "enum": list(VOTES)},
        comment=STRING,
        veto_invoked={"type": "boolean"},
        weight={"type": "integer", "description": "Recorded only: weights come from the opener."},
    ),
    title="Vote",
    description="Vote yea, nay or abstain in an open deliberation you take part in.",
)
def deliberate_vote(call: Call) -> dict[str, Any]:
    d = _deliberation(call)
    _open(d)
    p = call.params
    if p.get("vote") is None:
        raise missing("vote")
    vote = p["vote"]
    if vote not in VOTES:
        raise invalid_params("vote must be yea/nay/abstain")
    voter = p.get("from")
    if voter not in d.participants:
        raise RpcError(
            NOT_A_PARTICIPANT,
            f"Voter {voter} not in participant list ({', '.join(map(str, d.participants))})",
        )
    if any(v.get("voter") == voter for v in d.votes):
        raise RpcError(ALREADY_VOTED, f"Voter {voter} has already voted")
    ballot = {
        "ts": call.arrived,
        "voter": voter,
        "vote": vote,
        "weight": p.get("weight"),  # recorded, not used: weights come from the opener
        "comment": p.get("comment"),
        "veto_invoked": bool(p.get("veto_invoked")),
    }
    call.put("deliberations", d.id, replace(d, votes=[*d.votes, ballot]))
    return {"recorded": True}


def tally(d: Deliberation) -> dict[str, Any]:
    """The outcome of `d`'s votes under its rule, as 0.3.3 computes it:
    abstentions are not counted; weights default to 1.0; a veto from a voter
    the opener granted one rejects a weighted_vote_with_veto outright."""
    voters = {"yea": [], "nay": []}  # type: dict[str, list[Any]]
    for ballot in d.votes:
        if ballot.get("vote") in voters:
            voters[ballot["vote"]].append(ballot.get("voter"))
    rule = d.rule
    vetoes: list[Any] = []
    reason = None
    if rule.startswith(("weighted_vote:", "weighted_vote_with_veto:")):
        threshold = float(rule.split(":", 1)[1])
        if rule.startswith("weighted_vote_with_veto:"):
            granted = d.veto if isinstance(d.veto, dict) else {}
            vetoes = [
                b.get("voter") for b in d.votes if b.get("veto_invoked") and granted.get(b.get("voter"))
            ]
        if vetoes:
            approved, counts = False, {"yea": 0.0, "nay": 0.0}
        else:
            weights = d.weights if isinstance(d.weights, dict) else {}
            counts = {k: sum(weights.get(v, 1.0) for v in voters[k]) for k in ("yea", "nay")}
            approved = counts["yea"] >= threshold
    else:
        counts = {k: len(voters[k]) for k in ("yea", "nay")}
        if rule == "any_one_approves":
            approved = counts["yea"] >= 1
        elif rule == "all_approve":
            approved = counts["yea"] == len(d.participants) and counts["nay"] == 0
        else:  # quorum:N, checked at open
            if counts["yea"] + counts["nay"] < int(rule.split(":", 1)[1]):
                approved, reason = False, "quorum not met"
            else:
                approved = counts["yea"] > counts["nay"]
    outcome: dict[str, Any] = {"outcome": "approved" if approved else "rejected"}
    if reason is not None:
        outcome["reason"] = reason
    outcome.update(rule=rule, tally=counts, vetoes=vetoes)
    return outcome


@PROFILE.method(
    "deliberate.close",
    floor=True,
    params=_DELIBERATION,
    annotations={"idempotentHint": True},
    title="Close a deliberation",
    description="Close a deliberation and tally its votes under its rule.",
)
def deliberate_close(call: Call) -> dict[str, Any]:
    d = _deliberation(call)
    outcome = tally(d)
    call.put("deliberations", d.id, replace(d, state="closed", outcome=outcome))
    return tally(d)  # the answer shares nothing with the stored outcome

