"""The time the analytics figures take for a call: its own `ts`, else its arrival.

A call may state when it happened in `params.ts` (a client that queued it,
a replayed import). chap-analytics 0.2.4 dates its figures by that time when
it reads as one, and by the entry's `arrived` otherwise; the analytics
projection does the same, with this rule for "reads as one" (checked against
chap-analytics on generated strings, tests/test_analytics_times.py):

    YYYY-MM-DD [ ("T" | " ") HH [ ":" MM [ ":" SS [ "." digits ] ] ] [ zone ] ]
    zone = "Z" | ("+" | "-") HH [ [":"] MM ]

with real calendar dates, hours 00-23, minutes and seconds 00-59 and zone
offsets under 24 hours, in years 0001-9999. No zone means UTC; a date
alone means its midnight; fraction digits past the ninth are dropped.
Anything else (a number, an empty or other text, another ISO form such as
"2026/09/21" or "20260921", "now") is not a time, and the entry's arrival
is taken. chap-analytics reads some of those others through pandas (and
"now" as the moment of its analysis, which no log holds), and years before
1678 or after 2261 only as far as pandas can hold them in a column.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime
from typing import Any

__all__ = ["Moment", "call_moment", "iso_ns", "parse_time"]

_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:[T ](\d{2})(?::(\d{2})(?::(\d{2})(?:\.(\d+))?)?)?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?)?",
    re.ASCII,
)
_FIRST_SECOND = calendar.timegm((1, 1, 1, 0, 0, 0, 0, 0, 0))
_LAST_SECOND = calendar.timegm((9999, 12, 31, 23, 59, 59, 0, 0, 0))
_NS_PER_S = 1_000_000_000
_NS_PER_MS = 1_000_000

Moment = tuple[str, float | None]
"""A chosen time: ISO text (UTC, `Z`) and epoch milliseconds (fractional
below the millisecond; None for an arrival that is not a coordinator's)."""


def parse_time(value: Any) -> int | None:
    """Epoch nanoseconds of `value` if it reads as a time (see the module's
    rule), else None."""
    if not isinstance(value, str):
        return None
    match = _TIME.fullmatch(value)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    y, mo, d = int(year), int(month), int(day)
    if not (y >= 1 and 1 <= mo <= 12):
        return None
    if not 1 <= d <= calendar.monthrange(y, mo)[1]:
        return None
    h, mi, s = (int(part) if part else 0 for part in (hour, minute, second))
    if h > 23 or mi > 59 or s > 59:
        return None
    offset = 0
    if zone and zone != "Z":
        digits = zone[1:].replace(":", "")
        off_h, off_m = int(digits[:2]), int(digits[2:] or 0)
        if off_h > 23 or off_m > 59:
            return None
        offset = (off_h * 60 + off_m) * 60 * (1 if zone[0] == "+" else -1)
    seconds = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - offset
    if not _FIRST_SECOND <= seconds <= _LAST_SECOND:
        return None
    nanos = int((fraction or "")[:9].ljust(9, "0"))
    return seconds * _NS_PER_S + nanos


def iso_ns(ns: int) -> str:
    """`YYYY-MM-DDTHH:MM:SS.fffZ`, with 6 or 9 fraction digits when the
    time has more than milliseconds."""
    seconds, nanos = divmod(ns, _NS_PER_S)
    moment = datetime.fromtimestamp(seconds, UTC)
    if nanos % 1_000_000 == 0:
        fraction = f"{nanos // 1_000_000:03d}"
    elif nanos % 1000 == 0:
        fraction = f"{nanos // 1000:06d}"
    else:
        fraction = f"{nanos:09d}"
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{fraction}Z"


def call_moment(params: Any, arrived: str) -> Moment:
    """The time the figures take for an accepted call: `params.ts` when it
    reads as a time, else `arrived` (an entry's own, always readable)."""
    ns = parse_time(params.get("ts")) if isinstance(params, dict) else None
    if ns is not None:
        return iso_ns(ns), ns / _NS_PER_MS
    ns = parse_time(arrived)
    return arrived, None if ns is None else ns / _NS_PER_MS
