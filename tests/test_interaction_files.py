"""Files with whispers, deliberations and handoffs move both ways between
chapline and chap-coordinator 0.3.3 and carry on alike; chap-analytics 0.2.4
reads chapline's file without a warning."""

from __future__ import annotations

import logging
import shutil
import warnings
from pathlib import Path

import chap_analytics
import chap_coordinator
import pytest
from chap_analytics import briefs
from chap_coordinator.storage.sqlite import SqliteStore as ReferenceStore
from client import Client
from interaction_diff import B2, BOT, INTERACTION, MEMBERS, A, B, C, W, pair, reference_ids
from support import make

from coordinator import StepClock
from storage import SqliteStore


def _reference(store: ReferenceStore) -> chap_coordinator.Coordinator:
    return chap_coordinator.Coordinator(
        deterministic_ids=True,
        deterministic_clock=True,
        enable_chain=True,
        default_profiles=list(INTERACTION),
        store=store,
    )


def _ours(path: Path, clock: StepClock | None = None):
    return make(SqliteStore(path), enable_chain=True, default_profiles=INTERACTION,
                ids=reference_ids(), **({"clock": clock} if clock else {}))


def _first_half(p: Client) -> str:
    p.setup(MEMBERS)
    t = p.new_task(kind="k")
    t2 = p.new_task(kind="k")
    p.ok("whisper.ask", frm=BOT, to=[A, B], task_id=t, question="q", deadline_ms=10**9,
         default_if_lapsed={"id": "n"}, options=[{"id": "y"}, {"id": "n"}], whisper_id="w")
    p.ok("whisper.ask", frm=BOT, to=A, task_id=t, question="q", deadline_ms=1,
         default_if_lapsed="d")  # generated art_ id
    p.ok("deliberate.open", frm=A, rule="weighted_vote_with_veto:2", to=[A, B, C],
         weights={A: 2}, veto={B: True}, deliberation_id="d", task_id=t)
    p.ok("deliberate.comment", frm=C, deliberation_id="d", text="hm")
    p.ok("deliberate.vote", frm=A, deliberation_id="d", vote="yea", comment="go")
    p.ok("handoff.propose", frm=BOT, to=B2, tasks=[{"task_id": t, "title": "T", "blockers": ["x"]},
                                              {"task_id": t2}], handoff_id="h", summary="S")
    p.ok("handoff.propose", frm=BOT, to="group:g", tasks=[{"task_id": t2}], handoff_id="g")
    p.ok("handoff.decline", frm=B, handoff_id="g", reason="busy")
    p.fail(-32030, "deliberate.vote", frm=B2, deliberation_id="d", vote="nay")
    return t


def _second_half(p: Client) -> None:
    p.fail(-32022, "whisper.answer", frm=A, whisper_id="w", answer_option="maybe")
    p.ok("whisper.answer", frm=B, whisper_id="w", answer_option="n", comment="no")
    p.ok("deliberate.vote", frm=B, deliberation_id="d", vote="nay", veto_invoked=True)
    p.ok("deliberate.close", frm=C, deliberation_id="d")
    first_task = p.target.ours.snapshot(W)["handoffs"]["h"]["tasks"][0]["task_id"]
    p.ok("handoff.accept", frm=B2, handoff_id="h", accepted_task_ids=[first_task])
    p.ok("handoff.accept", frm=C, handoff_id="g")
    # Last: with a store attached, 0.3.3 reads its clock once more after a
    # sweep (to stamp the write), which would shift every later timestamp.
    assert len(p.target.lapses("2030-01-01T00:00:00Z")) == 1
    p.target.assert_same_state("whispers", "deliberations", "handoffs")


def test_files_move_both_ways_and_carry_on_alike(tmp_path: Path) -> None:
    ours_path, theirs_path = tmp_path / "ours.db", tmp_path / "theirs.db"
    ours = _ours(ours_path)
    theirs = _reference(ReferenceStore(str(theirs_path)))
    p = pair(ours=ours, theirs=theirs)
    _first_half(p)
    p.target.assert_same_state("whispers", "deliberations", "handoffs")
    ours.close()
    theirs.options.store.close()
    # swap the files: each side opens what the other wrote
    swapped_ours, swapped_theirs = tmp_path / "from-theirs.db", tmp_path / "from-ours.db"
    shutil.copy(theirs_path, swapped_ours)
    shutil.copy(ours_path, swapped_theirs)
    # Both clocks go on from the later of the two files (the reference read
    # its clock more often): entry times never go backwards within a
    # workspace (SPECIFICATION.md, "Write-ahead persistence"), where a
    # restarted 0.3.3 would stamp times before the log's last.
    later = theirs._clock_ms
    reference = _reference(ReferenceStore(str(swapped_theirs)))
    reference._clock_ms = later
    q = pair(ours=_ours(swapped_ours, StepClock(start_ms=later)), theirs=reference)
    q.n = p.n
    q.target.assert_same_state("whispers", "deliberations", "handoffs")
    _second_half(q)


def test_chap_analytics_reads_the_file_without_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "ours.db"
    p = pair(ours=_ours(path))
    _first_half(p)
    _second_half(p)
    p.target.ours.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING), warnings.catch_warnings():
        warnings.simplefilter("error")
        chain = chap_analytics.from_sqlite(str(path), workspace=W)
        frames = chap_analytics.frames(chain)
        assert briefs.everything(frames)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert chain.has_state
    tables = frames.as_dict()
    whispers = tables["whispers"].set_index("whisper_id")
    assert len(whispers) == 2 and whispers.loc["w", "state"] == "answered"
    assert sorted(whispers["state"]) == ["answered", "lapsed"]
    deliberations = tables["deliberations"]
    assert list(deliberations["outcome"]) == ["rejected"]  # B's veto
    assert list(deliberations["n_votes"]) == [2]
    handoffs = tables["handoffs"].set_index("handoff_id")
    assert handoffs.loc["h", "resolution"] == "accepted" and handoffs.loc["h", "n_accepted"] == 1
    assert handoffs.loc["g", "resolution"] == "accepted"
    assert set(tables["tasks"]["assignee"]) == {B2, C}
