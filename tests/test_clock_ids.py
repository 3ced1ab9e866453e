"""Injectable time and ids: the timestamp text and the ULIDs they produce."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from coordinator.engine.clock import StepClock, iso_ms
from coordinator.engine.ids import CounterIds, random_ids, ulid

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
MS = st.integers(min_value=0, max_value=253_402_300_799_998)  # to 9999-12-31 (ms + 1 too)


def expected_iso(ms: int) -> str:
    dt = datetime.fromtimestamp(ms // 1000, tz=UTC)
    return f"{dt:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


@given(st.lists(MS, min_size=1, max_size=20))
def test_timestamps_match_datetime_whatever_came_before(times):
    # the caches must never leak one call's second or day into another's
    for ms in times:
        assert iso_ms(ms) == expected_iso(ms)
        assert iso_ms(ms + 1) == expected_iso(ms + 1)


def test_step_clock_is_the_references_deterministic_clock():
    clock = StepClock()
    assert [iso_ms(clock()) for _ in range(2)] == [
        "2023-11-14T22:13:21.000Z",
        "2023-11-14T22:13:22.000Z",
    ]


def slow_ulid(ms: int, randomness: int) -> str:
    value = (ms & (2**48 - 1)) << 80 | (randomness & (2**80 - 1))
    return "".join(CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(26)))


@given(st.integers(0, 2**48 - 1), st.integers(0, 2**80 - 1))
def test_ulid_is_crockford_base32_of_time_and_randomness(ms, randomness):
    assert ulid(ms, randomness) == slow_ulid(ms, randomness)


def test_random_ids_are_unique_ulids():
    ids = [random_ids("tsk") for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"tsk_[0-9A-HJKMNP-TV-Z]{26}", i) for i in ids)


def test_counter_ids_repeat_for_the_same_start():
    a, b = CounterIds(), CounterIds()
    assert [a("tsk") for _ in range(3)] == [b("tsk") for _ in range(3)]
    assert len({a("art") for _ in range(100)}) == 100
