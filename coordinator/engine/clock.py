"""Injectable time: a clock is a callable returning epoch milliseconds."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from time import time_ns  # compiled, time.time_ns adds an attribute lookup per call
from typing import Final

__all__ = ["Clock", "StepClock", "epoch_ms", "epoch_seconds", "iso_ms", "system_clock"]

# A float is taken too (time.time() * 1000): compiled code checks what a
# callable typed to return int returns, and every reading goes through int().
Clock = Callable[[], int | float]


def system_clock() -> int:
    return time_ns() // 1_000_000


class StepClock:
    """A deterministic clock that advances `step_ms` before each read.

    The defaults match the reference's deterministic clock (its first call is
    stamped 2023-11-14T22:13:21.000Z), so runs of both with the same calls
    carry the same timestamps.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000, step_ms: int = 1000) -> None:
        self._now = start_ms
        self._step = step_ms

    def __call__(self) -> int:
        self._now += self._step
        return self._now


# (ms, whole text), (second, "YYYY-MM-DDTHH:MM:SS") and (day, "YYYY-MM-DD"):
# calls within one millisecond share the text (a busy coordinator answers
# several), within one second its first part, and formatting a date (~5 µs)
# happens once a day. Tuples replaced whole, so threads never see a torn pair.
# "000" to "999": a call's clock fields written by lookup, not by format().
_DIGITS: Final = [f"{n:03d}" for n in range(1000)]
_last_ms: tuple[int, str] = (-1, "")
_last_second: tuple[int, str] = (-1, "")
_last_day: tuple[int, str] = (-1, "")


def iso_ms(epoch_ms: int) -> str:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ`, the one timestamp form CHAP coordinators write."""
    global _last_ms, _last_second, _last_day
    cached_ms, stamp = _last_ms
    if cached_ms == epoch_ms:
        return stamp
    second, ms = divmod(epoch_ms, 1000)
    cached_second, text = _last_second
    if cached_second != second:
        day, second_of_day = divmod(second, 86_400)
        cached_day, date = _last_day
        if cached_day != day:
            date = f"{datetime.fromtimestamp(day * 86_400, tz=UTC):%Y-%m-%d}"
            _last_day = (day, date)
        minutes, s = divmod(second_of_day, 60)
        h, m = divmod(minutes, 60)
        text = date + "T" + _DIGITS[h][1:] + ":" + _DIGITS[m][1:] + ":" + _DIGITS[s][1:]
        _last_second = (second, text)
    stamp = text + "." + _DIGITS[ms] + "Z"
    _last_ms = (epoch_ms, stamp)
    return stamp


def epoch_seconds(iso: str) -> int:
    """Whole seconds since the epoch of a timestamp `iso_ms` wrote (or any RFC 3339 one)."""
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())


def epoch_ms(iso: str) -> int:
    """Milliseconds since the epoch of a timestamp `iso_ms` wrote (or any RFC 3339 one)."""
    stamp = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return int(stamp.timestamp()) * 1000 + stamp.microsecond // 1000
