"""Injectable ids: an id source is a callable `(prefix) -> "prefix_<ULID>"`."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from time import time_ns  # compiled, time.time_ns adds an attribute lookup per call
from typing import Final

__all__ = ["IdSource", "CounterIds", "random_ids", "ulid"]

IdSource = Callable[[str], str]

_CROCKFORD: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Two Crockford digits per 10 bits: 13 look-ups make the 26 characters.
_PAIRS: Final = [a + b for a in _CROCKFORD for b in _CROCKFORD]


# The first ten characters are the time alone: kept for the millisecond.
_last_time: tuple[int, str] = (-1, "")


def ulid(epoch_ms: int, randomness: int) -> str:
    """A ULID: 48 bits of milliseconds then 80 bits of `randomness`, Crockford base32."""
    r = randomness & (2**80 - 1)
    return _ulid(epoch_ms, r >> 40, r & (2**40 - 1))


def _ulid(epoch_ms: int, high: int, low: int) -> str:
    """`ulid` of the randomness `high << 40 | low`, each half under 2**40:
    halves fit a machine word, so compiled code shifts them natively (an
    80-bit integer is a Python long at every step)."""
    global _last_time
    epoch_ms &= 2**48 - 1
    cached_ms, head = _last_time
    if cached_ms != epoch_ms:
        head = "".join([_PAIRS[(epoch_ms >> s) & 1023] for s in (40, 30, 20, 10, 0)])
        _last_time = (epoch_ms, head)
    pairs = _PAIRS
    return "".join(
        [
            head,
            pairs[high >> 30],
            pairs[(high >> 20) & 1023],
            pairs[(high >> 10) & 1023],
            pairs[high & 1023],
            pairs[low >> 30],
            pairs[(low >> 20) & 1023],
            pairs[(low >> 10) & 1023],
            pairs[low & 1023],
        ]
    )


# Ids need to be unique, not secret (they are visible in the log and grant
# nothing): a PRNG seeded from the OS, reseeded in forked children, saves a
# system call per id.
_random = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _random.seed(os.urandom(32)))


def random_ids(prefix: str) -> str:
    high, low = _random.getrandbits(40), _random.getrandbits(40)
    return f"{prefix}_{_ulid(time_ns() // 1_000_000, high, low)}"


class CounterIds:
    """Deterministic ids: a fixed time part and a counter, for reproducible runs."""

    def __init__(self, epoch_ms: int = 1_700_000_000_000) -> None:
        self._epoch_ms = epoch_ms
        self._n = 0

    def __call__(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{ulid(self._epoch_ms, self._n)}"
