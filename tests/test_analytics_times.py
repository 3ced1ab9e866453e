"""The time the analytics projection takes for a call (projections/times.py)
against the one chap-analytics 0.2.4 takes, on generated `params.ts` values."""

from __future__ import annotations

from typing import Any

import chap_analytics
import pandas as pd
from client import Client
from hypothesis import example, given, settings
from hypothesis import strategies as st

from coordinator import Coordinator, CounterIds, StepClock
from coordinator.projections.times import call_moment, iso_ns, parse_time

ARRIVALS_FROM = 1_893_456_000_000  # 2030-01-01: no generated time is an arrival


def two(lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.integers(lo, hi).map(lambda v: f"{v:02d}")


@st.composite
def iso_like(draw: st.DrawFn) -> str:
    """Mostly times in the rule's form, often with a value out of range
    (month 13, day 31 in a short month, hour 24, second 60, zone +24)."""
    # chap-analytics holds years outside these only as far as pandas can in a column
    year = draw(st.integers(1678, 2261))
    text = f"{year:04d}-{draw(two(0, 13))}-{draw(two(0, 32))}"
    depth = draw(st.integers(0, 4))
    if depth == 0:
        return text
    text += draw(st.sampled_from(["T", " ", "T", "x"])) + draw(two(0, 24))
    if depth >= 2:
        text += ":" + draw(two(0, 60))
    if depth >= 3:
        text += ":" + draw(two(0, 60))
    if depth >= 4:
        text += "." + draw(st.text("0123456789", min_size=1, max_size=12))
    zone = draw(st.sampled_from(["", "Z", "hh", "hh:mm", "hhmm"]))
    if zone.startswith("h"):
        sign = draw(st.sampled_from("+-"))
        zone = sign + zone.replace("hh", draw(two(0, 24))).replace("mm", draw(two(0, 60)))
    return text + zone


# Numbers are not times for us; chap-analytics 0.2.4 on pandas 3 reads most
# integers as no time too, but a few (-1, 1000) as dates (a deprecated pandas
# path), so only epoch-like ones are compared (the examples below).
TS = st.one_of(
    iso_like(),
    st.text("abcTZ:-. +", max_size=12),  # no digits: nothing a date parser could take
    st.none(),
    st.booleans(),
    st.dictionaries(st.just("t"), st.integers(-9, 9), max_size=1),
)


def chap_analytics_times(values: list[Any]) -> tuple[list[Any], list[str]]:
    """Each value as params.ts of one task.create; the created_at
    chap-analytics gives each task, and each entry's arrival."""
    coord = Coordinator(clock=StepClock(ARRIVALS_FROM), ids=CounterIds())
    chap = Client(coord, "wsp_t")
    chap.ok("workspace.create")
    for who, kind in (("human:a", "human"), ("agent:x", "agent")):
        chap.ok("participant.join", frm=who, type=kind)
    ids = [chap.ok("task.create", frm="human:a", assignee="agent:x", kind="k", input={"n": n}, ts=value)["task_id"]
           for n, value in enumerate(values)]
    frames = chap_analytics.frames(chap_analytics.from_coordinator(coord, "wsp_t"))
    created = dict(zip(frames.tasks["task_id"], frames.tasks["created_at"], strict=True))
    tasks = coord.snapshot("wsp_t")["tasks"]
    return [created[i] for i in ids], [tasks[i]["created_at"] for i in ids]


def nanos(value: Any) -> int | None:
    return None if pd.isna(value) else int(pd.Timestamp(value).as_unit("ns").value)


@settings(max_examples=30)
@given(values=st.lists(TS, min_size=1, max_size=12))
@example(values=["2026-09-21T14:11:45.123Z", "2026-09-21T14:11:45+02:00", "2026-09-21T14:11:45",
                 "2026-09-21T14:11:45Z", "2026-09-21", "2026-09-21 14:11:45.123456",
                 "2026-09-21T14:11:45.123456789-05:30", "2026-09-21T14+02", "2024-02-29T23:59:59-2359",
                 "garbage", "", None, 1_790_000_000, 1_790_000_000_000, 0, True,
                 "2026-13-45T10:00:00Z", "2026-02-29",
                 "2026-09-21T24:00:00Z", "2026-09-21T23:59:60Z", "2026-09-21T14:11:45+24:00"])
def test_the_time_of_a_call_is_the_one_chap_analytics_takes(values: list[Any]) -> None:
    theirs, arrivals = chap_analytics_times(values)
    for value, their, arrived in zip(values, theirs, arrivals, strict=True):
        ours = parse_time(value)
        text, ms = call_moment({"ts": value}, arrived)
        if ours is None:
            assert (text, ms) == call_moment({}, arrived)
            assert nanos(their) == nanos(pd.Timestamp(arrived)), value
        else:
            assert nanos(their) == ours, value
            assert text == iso_ns(ours) and nanos(pd.Timestamp(text)) == ours
            assert ms == ours / 1_000_000


def test_the_texts_keep_what_the_call_gave_below_the_millisecond() -> None:
    assert call_moment({"ts": "2026-09-21T14:11:45+02:00"}, "x") == (
        "2026-09-21T12:11:45.000Z", 1_789_992_705_000.0)
    assert call_moment({"ts": "2026-09-21 14:11:45.123456"}, "x")[0] == "2026-09-21T14:11:45.123456Z"
    assert call_moment({"ts": "2026-09-21T14:11:45.1234567891Z"}, "x")[0] == (
        "2026-09-21T14:11:45.123456789Z")
    assert call_moment({"ts": "now"}, "2030-01-01T00:00:00.001Z") == (
        "2030-01-01T00:00:00.001Z", 1_893_456_000_001.0)
    assert call_moment(None, "not a time") == ("not a time", None)
