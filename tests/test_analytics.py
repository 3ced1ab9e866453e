"""chap-analytics 0.2.4 reads what `chapline serve` writes.

A review desk is driven over real HTTP against `chapline serve` on a temporary
SQLite file: four people and two agents, tasks taken from creation through
review to approval (with and without a bound digest), correction by JSON
Patch, rejection with and without a request for revision, abstention, an
all-approve and a quorum review, a review opened by `task.complete`, a review
left open, an idempotent replay, and the refusals that chap-coordinator 0.3.3
records (a bystander's -32011, a -32074 digest mismatch, a -32014
substitution) beside one it does not (a non-member's -32011). An agent
escalates a task and the coordinator mints its successor. The server is
stopped with SIGTERM and the file is loaded with `chap_analytics.from_sqlite`
with every warning turned into an error and logging watched at WARNING.
(chap-analytics 0.2.4 itself calls neither `warnings` nor `logging`: a file it
misreads shows as a pandas/numpy warning while projecting or computing, as a
ValueError from `from_sqlite`, or as wrong counts, so all three are checked.)

The tables must agree with what the workload did (decisions by kind, the
overrides with their rationale and tags, refusals by code, entries and
hash-linked entries, each task's outcome), the chain must verify, and the same
workload through the reference, loaded the same way, must give the same
figures once ids and timestamps are set aside.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chap_analytics
import chap_coordinator
import httpx
import pandas as pd
import pytest
import rfc8785
from chap_analytics import briefs, stats
from chap_coordinator.storage.sqlite import SqliteStore as ReferenceStore
from client import Client, Http, now
from servers import Serve

WORKSPACE = "wsp_support_desk"

ALICE = "human:alice@example.org"  # admin, reviews
CAROL = "human:carol@example.org"  # reviewer, delegates refunds
DAVE = "human:dave@example.org"  # reviewer
ERIN = "human:erin@example.org"  # observer: a member who is never addressed
GHOST = "human:ghost@example.org"  # never joins
DRAFTER = "agent:drafter@example.org"
REFUNDER = "agent:refunds@example.org"

def digest(value: Any) -> str:
    """`sha256:` + hex of SHA-256 over the JCS form (rfc8785 is the oracle)."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


# -- the workload ---------------------------------------------------------------


@dataclass
class Tally:
    """What the workload did, counted as it did it."""

    entries: int = 0  # accepted writes plus recorded refusals
    decisions: Counter[str] = field(default_factory=Counter)
    refusals: Counter[tuple[str, int]] = field(default_factory=Counter)
    unrecorded: int = 0  # refused calls that leave no entry
    replays: int = 0
    overrides: list[dict[str, Any]] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)  # in creation order
    outcomes: dict[str, str] = field(default_factory=dict)


class Desk:
    """One workspace's calls, through any transport (see tests/client.py),
    and a tally of what they should leave in the log."""

    def __init__(self, target: Any) -> None:
        self.chap = Client(target, WORKSPACE, ts=now, prefix="w-")
        self.tally = Tally()

    def ok(self, method: str, sender: str | None = None, **params: Any) -> Any:
        result = self.chap.ok(method, frm=sender, **params)
        self.tally.entries += 1
        kind = {"abstain.declare": "abstain"}.get(
            method, method.removeprefix("decide.")
        )
        if method.startswith("decide.") or method == "abstain.declare":
            self.tally.decisions[kind] += 1
        return result

    def refused(
        self,
        code: int,
        method: str,
        sender: str,
        *,
        recorded: bool = True,
        **params: Any,
    ) -> None:
        self.chap.fail(code, method, frm=sender, **params)
        if recorded:
            self.tally.entries += 1
            self.tally.refusals[(method, code)] += 1
        else:
            self.tally.unrecorded += 1

    def replayed(self, envelope: dict[str, Any], first: dict[str, Any]) -> None:
        """Send a call again under a new request id: same answer, no new entry."""
        again = self.chap.send({**envelope, "id": self.chap.next_id()})
        assert again.get("result") == first, (again, first)
        self.tally.replays += 1

    # Steps a desk repeats.

    def join(self, who: str, kind: str, role: str) -> None:
        self.ok("participant.join", who, type=kind, role=role)

    def task(
        self,
        delegator: str,
        assignee: str,
        kind: str,
        ticket: int,
        confidence: str | None = None,
        **params: Any,
    ) -> str:
        """Create and start a task; the agent's confidence travels as a routing hint."""
        if confidence is not None:
            params["routing_hints"] = {
                "confidence": confidence,
                "criticality": "normal",
            }
        task_id = self.ok(
            "task.create",
            delegator,
            assignee=assignee,
            kind=kind,
            input={"ticket": ticket},
            **params,
        )["task_id"]
        self.tally.tasks.append(task_id)
        self.ok("task.update", assignee, task_id=task_id, state="in_progress")
        return task_id

    def review(
        self, drafter: str, task_id: str, artefact: Any, to: list[str], **params: Any
    ) -> None:
        result = self.ok(
            "review.request",
            drafter,
            task_id=task_id,
            artefact=artefact,
            to=to,
            **params,
        )
        assert result["state"] == "review_requested", result

    def override(
        self,
        reviewer: str,
        task_id: str,
        based_on: Any,
        diff: list[dict[str, Any]],
        **params: Any,
    ) -> None:
        result = self.ok(
            "decide.override",
            reviewer,
            task_id=task_id,
            based_on_artefact=based_on,
            diff=diff,
            **params,
        )
        assert result["state"] == "completed", result
        self.tally.overrides.append(
            {
                "task": task_id,
                "reviewer": reviewer,
                "rationale": params["rationale"],
                "tags": params.get("tags", []),
                "policy_refs": params.get("policy_refs", []),
                "intent_preserved": params.get("intent_preserved"),
                "paths": [op["path"] for op in diff],
                "result": result["applied"],
            }
        )


def review_desk(target: Any) -> Tally:
    """A morning at a support desk. Returns what it did."""
    desk = Desk(target)
    outcome = desk.tally.outcomes

    desk.ok("workspace.create")
    desk.join(ALICE, "human", "admin")
    desk.join(CAROL, "human", "reviewer")
    desk.join(DAVE, "human", "reviewer")
    desk.join(ERIN, "human", "observer")
    desk.join(DRAFTER, "agent", "drafter")
    desk.join(REFUNDER, "agent", "drafter")

    # 1. Approved with the digest of what was reviewed, after a bystander's
    #    attempt (recorded) and a non-member's (not recorded).
    reply = {
        "subject": "Re: delivery",
        "body": "Your parcel ships today.",
        "tone": "neutral",
    }
    t1 = desk.task(ALICE, DRAFTER, "reply", 101, confidence="0.92")
    desk.review(DRAFTER, t1, reply, [ALICE], rule="any_one_approves")
    desk.refused(-32011, "decide.approve", ERIN, task_id=t1)
    desk.refused(-32011, "decide.approve", GHOST, recorded=False, task_id=t1)
    assert (
        desk.ok(
            "decide.approve", ALICE, task_id=t1, approved_artefact_digest=digest(reply)
        )["state"]
        == "completed"
    )
    outcome[t1] = "approved"

    # 2. A digest that does not match is refused and changes nothing; the
    #    reviewer then corrects the refund by patch, reversing the agent.
    refund = {
        "amount": 120,
        "currency": "EUR",
        "reason": "damaged",
        "decision": "refund",
    }
    t2 = desk.task(CAROL, REFUNDER, "refund", 102, confidence="0.81")
    desk.review(REFUNDER, t2, refund, [CAROL], rule="any_one_approves")
    desk.refused(
        -32074,
        "decide.approve",
        CAROL,
        task_id=t2,
        approved_artefact_digest=digest({**refund, "amount": 12}),
    )
    desk.override(
        CAROL,
        t2,
        refund,
        [
            {"op": "replace", "path": "/decision", "value": "replace_item"},
            {"op": "remove", "path": "/amount"},
        ],
        rationale="Damaged goods are replaced, not refunded, under the returns policy.",
        tags=["policy-misapplied", "refund-to-replacement"],
        policy_refs=["returns-policy-v3"],
        intent_preserved=False,
    )
    outcome[t2] = "overridden"

    # 3. Created with an idempotency key and replayed; two reviewers must both approve.
    create = desk.chap.envelope(
        "task.create",
        frm=ALICE,
        assignee=DRAFTER,
        kind="reply",
        input={"ticket": 103},
        idempotency_key="ticket-103",
        routing_hints={"confidence": "0.64"},
    )
    first = desk.chap.send(create)
    assert "error" not in first, first
    desk.tally.entries += 1
    t3 = first["result"]["task_id"]
    desk.tally.tasks.append(t3)
    desk.replayed(create, first["result"])
    desk.ok("task.update", DRAFTER, task_id=t3, state="in_progress")
    desk.review(
        DRAFTER,
        t3,
        {"subject": "Re: invoice", "body": "Attached."},
        [ALICE, DAVE],
        rule="all_approve",
    )
    assert desk.ok("decide.approve", ALICE, task_id=t3)["state"] == "review_requested"
    assert desk.ok("decide.approve", DAVE, task_id=t3)["state"] == "completed"
    outcome[t3] = "approved"

    # 4. Sent back for revision, then corrected on the second pass.
    draft = {"subject": "Re: password", "body": "Reset it."}
    t4 = desk.task(ALICE, DRAFTER, "reply", 104, confidence="0.55")
    desk.review(DRAFTER, t4, draft, [DAVE])
    assert (
        desk.ok(
            "decide.reject",
            DAVE,
            task_id=t4,
            comment="Explain how.",
            request_revision=True,
            tags=["incomplete"],
        )["state"]
        == "in_progress"
    )
    revised = {
        "subject": "Re: password",
        "body": "Use the 'Forgot password' link on the sign-in page.",
    }
    desk.review(DRAFTER, t4, revised, [DAVE])
    desk.override(
        DAVE,
        t4,
        revised,
        [{"op": "add", "path": "/greeting", "value": "Hello,"}],
        rationale="Every reply opens with a greeting.",
        tags=["tone"],
        intent_preserved=True,
    )
    outcome[t4] = "overridden"

    # 5. Rejected outright.
    t5 = desk.task(CAROL, REFUNDER, "refund", 105, confidence="0.3")
    desk.review(
        REFUNDER, t5, {"amount": 9000, "currency": "EUR", "decision": "refund"}, [CAROL]
    )
    assert (
        desk.ok("decide.reject", CAROL, task_id=t5, comment="Not our order.")["state"]
        == "declined"
    )
    outcome[t5] = "rejected"

    # 6. The only reviewer abstains.
    t6 = desk.task(ALICE, REFUNDER, "refund", 106)
    desk.review(
        REFUNDER, t6, {"amount": 40, "currency": "EUR", "decision": "refund"}, [ALICE]
    )
    assert (
        desk.ok(
            "abstain.declare",
            ALICE,
            task_id=t6,
            reason="The customer is my neighbour.",
            category="conflict_of_interest",
        )["state"]
        == "abstained"
    )
    outcome[t6] = "abstained"

    # 7. A quorum of two out of three.
    t7 = desk.task(ALICE, DRAFTER, "reply", 107, confidence="0.97")
    desk.review(
        DRAFTER,
        t7,
        {"subject": "Re: hours", "body": "We open at nine."},
        [ALICE, CAROL, DAVE],
        rule="quorum:2",
    )
    assert desk.ok("decide.approve", CAROL, task_id=t7)["state"] == "review_requested"
    assert desk.ok("decide.approve", DAVE, task_id=t7)["state"] == "completed"
    outcome[t7] = "approved"

    # 8. A substituted artefact is refused; the same one amends the open
    #    review, which is still waiting when the server stops.
    pending = {"subject": "Re: warranty", "body": "Two years."}
    t8 = desk.task(CAROL, DRAFTER, "reply", 108)
    desk.review(DRAFTER, t8, pending, [CAROL])
    desk.refused(
        -32014,
        "review.request",
        DRAFTER,
        task_id=t8,
        artefact={**pending, "body": "Five years."},
        to=[CAROL],
    )
    assert desk.ok(
        "review.request", DRAFTER, task_id=t8, artefact=pending, to=[CAROL, DAVE]
    )["amended"]
    outcome[t8] = "open"

    # 9. Completion on a review-required task opens the review, as 0.3.3 does.
    t9 = desk.task(ALICE, DRAFTER, "reply", 109, review_required=True)
    assert (
        desk.ok(
            "task.complete",
            DRAFTER,
            task_id=t9,
            output={"subject": "Re: thanks", "body": "Glad to help."},
            confidence="0.88",
        )["state"]
        == "review_requested"
    )
    assert desk.ok("decide.approve", DAVE, task_id=t9)["state"] == "completed"
    outcome[t9] = "approved"

    # 10. The agent escalates a refund it should not decide to a person; the
    #     coordinator mints the successor task, which is still open.
    t10 = desk.task(CAROL, REFUNDER, "refund", 110, confidence="0.2")
    desk.review(
        REFUNDER,
        t10,
        {"amount": 2500, "currency": "EUR", "decision": "refund"},
        [CAROL],
    )
    escalated = desk.ok(
        "escalate.raise",
        REFUNDER,
        original_task_id=t10,
        reason="Above my refund limit.",
        new_task={"assignee": ALICE, "kind": "refund", "input": {"ticket": 110}},
    )
    assert escalated["escalated_from"] == t10, escalated
    desk.tally.tasks.append(escalated["new_task_id"])
    outcome[t10] = "escalated"
    outcome[escalated["new_task_id"]] = "open"

    return desk.tally


# -- the two runs ---------------------------------------------------------------


# The desk runs in trial mode under modes/1.0 (reviews forced), on both sides.
PROFILES = ("core/1.0", "review/1.0", "modes/1.0")


def run_served(db: Path) -> tuple[Tally, dict[str, Any], chap_analytics.Frames]:
    """The workload over HTTP; the server's own chain check; a read of the
    file while the server still has it open (the package says it is safe
    against a database a coordinator is using); a SIGTERM stop."""
    # The console script, as an operator runs it.
    chapline = Path(sys.executable).with_name("chapline")
    server = Serve(db, "--host", "127.0.0.1", "--profiles", ",".join(PROFILES), program=(str(chapline),))
    try:
        with httpx.Client(base_url=server.base, timeout=60) as http:
            tally = review_desk(Http(http))
            verified = Client(Http(http), WORKSPACE).ok("audit.verify_chain")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            live = chap_analytics.frames(
                chap_analytics.from_sqlite(str(db), workspace=WORKSPACE)
            )
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert "Traceback" not in err, err
    return tally, verified, live


def run_reference(db: Path) -> Tally:
    """The same workload through chap-coordinator 0.3.3 on its own SqliteStore."""
    store = ReferenceStore(str(db))
    coord = chap_coordinator.Coordinator(
        store=store,
        deterministic_ids=True,
        deterministic_clock=True,
        enable_chain=True,
        default_profiles=list(PROFILES),
    )
    tally = review_desk(coord)
    store.close()
    return tally


def load(db: Path, caplog: pytest.LogCaptureFixture) -> chap_analytics.Frames:
    """from_sqlite, the tables and every brief, with warnings as errors."""
    caplog.clear()
    with caplog.at_level(logging.WARNING), warnings.catch_warnings():
        warnings.simplefilter("error")
        chain = chap_analytics.from_sqlite(str(db), workspace=WORKSPACE)
        frames = chap_analytics.frames(chain)
        # The briefs run every statistic the package has over the tables.
        assert briefs.everything(frames)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert chain.has_state
    return frames


def verify_with_reference(db: Path, copy: Path) -> dict[str, Any]:
    """audit.verify_chain by the reference, on a copy of the file."""
    shutil.copyfile(db, copy)
    store = ReferenceStore(str(copy))
    try:
        coord = chap_coordinator.Coordinator(store=store, enable_chain=True)
        return coord.dispatch(
            {
                "jsonrpc": "2.0",
                "id": "v",
                "method": "audit.verify_chain",
                "params": {"workspace": WORKSPACE},
            }
        )["result"]
    finally:
        store.close()


@dataclass
class Run:
    """One run of the workload: what it did, and the file it left."""

    tally: Tally
    db: Path
    verified: dict[str, Any] | None = None  # the server's own audit.verify_chain
    live: chap_analytics.Frames | None = None  # read while the server was running


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("analytics")


@pytest.fixture(scope="module")
def served_run(runs_dir: Path) -> Run:
    tally, verified, live = run_served(runs_dir / "served.db")
    return Run(tally, runs_dir / "served.db", verified, live)


@pytest.fixture(scope="module")
def reference_run(runs_dir: Path) -> Run:
    return Run(run_reference(runs_dir / "reference.db"), runs_dir / "reference.db")


@pytest.fixture(params=["served", "reference"])
def loaded(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> tuple[Tally, chap_analytics.Frames]:
    """Each file loaded by chap-analytics: the expectations below hold for the
    file `chapline serve` wrote and, as a check on the test, for the reference's."""
    run: Run = request.getfixturevalue(f"{request.param}_run")
    return run.tally, load(run.db, caplog)


# -- what chap-analytics reads equals what the workload did ---------------------


def test_the_workload_does_the_same_on_both(
    served_run: Run, reference_run: Run
) -> None:
    def shape(t: Tally) -> tuple[Any, ...]:
        overrides = [{k: v for k, v in o.items() if k != "task"} for o in t.overrides]
        return (
            t.entries,
            t.decisions,
            t.refusals,
            t.unrecorded,
            t.replays,
            len(t.tasks),
            overrides,
            [t.outcomes[task] for task in t.tasks],
        )

    assert shape(served_run.tally) == shape(reference_run.tally)
    tally = served_run.tally
    assert tally.decisions == {"approve": 6, "override": 2, "reject": 2, "abstain": 1}
    assert tally.refusals == {
        ("decide.approve", -32011): 1,
        ("decide.approve", -32074): 1,
        ("review.request", -32014): 1,
    }
    assert (tally.unrecorded, tally.replays, len(tally.tasks)) == (1, 1, 11)


def test_loads_without_a_warning(loaded: tuple[Tally, chap_analytics.Frames]) -> None:
    _, frames = loaded
    assert frames.chain.workspace == WORKSPACE


def test_entries_and_hash_links(loaded: tuple[Tally, chap_analytics.Frames]) -> None:
    tally, f = loaded
    assert len(f.chain) == tally.entries
    assert len(f.events) + len(f.refusals) == tally.entries
    # Gapless from zero across accepted calls and refusals together.
    assert sorted([*f.events["seq"], *f.refusals["seq"]]) == list(range(tally.entries))
    assert f.events["chained"].all() and f.refusals["chained"].all()
    assurance = stats.assurance(f)
    assert int(assurance["n"].sum()) == tally.entries
    assert int(assurance["chained"].sum()) == tally.entries
    assert int(assurance["signed"].sum()) == 0


def test_the_chain_verifies(served_run: Run, runs_dir: Path) -> None:
    tally = served_run.tally
    assert served_run.verified is not None
    assert served_run.verified["ok"] is True
    assert served_run.verified["entries_checked"] == tally.entries
    by_reference = verify_with_reference(served_run.db, runs_dir / "copy.db")
    assert by_reference["ok"] is True and by_reference["status"] == "verified", (
        by_reference
    )
    assert by_reference["entries_checked"] == tally.entries
    assert by_reference["chain_head"] == served_run.verified["chain_head"]


def test_decisions_by_kind(loaded: tuple[Tally, chap_analytics.Frames]) -> None:
    tally, f = loaded
    assert Counter(f.decisions["kind"]) == tally.decisions
    assert f.participants.set_index("participant")["n_decisions"].to_dict() == {
        ALICE: 3,
        CAROL: 3,
        DAVE: 5,
        ERIN: 0,
        DRAFTER: 0,
        REFUNDER: 0,
    }
    abstained = f.decisions[f.decisions["kind"] == "abstain"]
    assert list(abstained["abstain_category"]) == ["conflict_of_interest"]
    rejections = f.decisions[f.decisions["kind"] == "reject"].sort_values("seq")
    assert list(rejections["request_revision"]) == [True, False]
    assert int(f.decisions["digest_bound"].sum()) == 1


def test_overrides_with_their_rationale_and_tags(
    loaded: tuple[Tally, chap_analytics.Frames],
) -> None:
    tally, f = loaded
    rows = f.overrides.sort_values("seq")
    got = [
        {
            "task": r.task_id,
            "reviewer": r.reviewer,
            "rationale": r.rationale,
            "tags": list(r.tags),
            "policy_refs": list(r.policy_refs),
            "intent_preserved": None
            if pd.isna(r.intent_preserved)
            else bool(r.intent_preserved),
            "paths": list(r.paths),
            "result": r.result,
        }
        for r in rows.itertuples()
    ]
    assert got == tally.overrides
    assert list(f.patch_ops.sort_values(["seq", "op_index"])["op"]) == [
        "replace",
        "remove",
        "add",
    ]


def test_refusals_by_code(loaded: tuple[Tally, chap_analytics.Frames]) -> None:
    tally, f = loaded
    assert Counter(zip(f.refusals["method"], f.refusals["code"], strict=True)) == tally.refusals
    assert set(f.refusals["actor"]) == {ERIN, CAROL, DRAFTER}
    assert GHOST not in set(f.events["actor"].dropna())


def test_tasks_and_their_outcomes(loaded: tuple[Tally, chap_analytics.Frames]) -> None:
    tally, f = loaded
    tasks = f.tasks.set_index("task_id")
    assert sorted(tasks.index) == sorted(tally.tasks)
    assert tasks["outcome"].to_dict() == tally.outcomes
    assert tasks["id_certain"].all()
    assert tasks["n_reviews"].to_dict()[tally.tasks[3]] == 2
    assert list(stats.open_queue(f)["task_id"]) == [tally.tasks[7]]
    successor = tasks.loc[tally.tasks[10]]
    assert (successor["supersedes"], successor["assignee"], successor["state"]) == (
        tally.tasks[9],
        ALICE,
        "created",
    )
    # The agents' reported confidence, from routing hints and task.complete.
    assert tasks["confidence"].reindex(tally.tasks).fillna(-1).tolist() == [
        0.92,
        0.81,
        0.64,
        0.55,
        0.3,
        -1,
        0.97,
        -1,
        0.88,
        0.2,
        -1,
    ]


# -- the same workload through the reference ------------------------------------


def figures(f: chap_analytics.Frames, tasks: list[str]) -> dict[str, Any]:
    """Every table as records, without timestamps, latencies or generated ids
    (tasks are named by their creation order)."""
    names = {task_id: f"task-{i}" for i, task_id in enumerate(tasks)}
    timed = {
        "ts",
        "arrived",
        "requested_at",
        "latency_s",
        "created_at",
        "settled_at",
        "lifetime_s",
        "joined_at",
        "left_at",
        "prev_hash",
    }

    def plain(value: Any) -> Any:
        if isinstance(value, str):
            return names.get(value, value)
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            return None
        if hasattr(value, "item"):
            return value.item()
        return value

    out: dict[str, Any] = {}
    for name, table in f:
        table = table.drop(columns=[c for c in table.columns if c in timed])
        records = [
            {k: plain(v) for k, v in row.items()}
            for row in table.astype(object).to_dict("records")
        ]
        out[name] = sorted(
            records, key=lambda r: json.dumps(r, sort_keys=True, default=str)
        )
    out["rates"] = [
        {k: plain(v) for k, v in r.items()}
        for r in stats.rates(f).astype(object).to_dict("records")
    ]
    return out


def test_the_reference_gives_the_same_figures(
    served_run: Run, reference_run: Run, caplog: pytest.LogCaptureFixture
) -> None:
    ours = figures(load(served_run.db, caplog), served_run.tally.tasks)
    theirs = figures(load(reference_run.db, caplog), reference_run.tally.tasks)
    for name in theirs:
        assert ours[name] == theirs[name], name


def test_a_live_read_sees_what_the_stopped_file_holds(
    served_run: Run, caplog: pytest.LogCaptureFixture
) -> None:
    assert served_run.live is not None
    tasks = served_run.tally.tasks
    assert figures(served_run.live, tasks) == figures(
        load(served_run.db, caplog), tasks
    )
