"""Injectable ids: an id source is a callable `(prefix) -> "prefix_<ULID>"`."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable

__all__ = ["IdSource", "CounterIds", "random_ids", "ulid"]

IdSource = Callable[[str], str]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Two Crockford digits per 10 bits: 13 look-ups make the 26 characters.
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
_SHIFTS = tuple(range(120, -10, -10))


def ulid(epoch_ms: int, randomness: int) -> str:
    """A ULID: 48 bits of milliseconds then 80 bits of `randomness`, Crockford base32."""
    value = (epoch_ms & (2**48 - 1)) << 80 | (randomness & (2**80 - 1))
    pairs = _PAIRS
    return "".join([pairs[(value >> s) & 1023] for s in _SHIFTS])


# Ids need to be unique, not secret (they are visible in the log and grant
# nothing): a PRNG seeded from the OS, reseeded in forked children, saves a
# system call per id.
_random = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _random.seed(os.urandom(32)))


def random_ids(prefix: str) -> str:
    return f"{prefix}_{ulid(time.time_ns() // 1_000_000, _random.getrandbits(80))}"


class CounterIds:
    """Deterministic ids: a fixed time part and a counter, for reproducible runs."""

    def __init__(self, epoch_ms: int = 1_700_000_000_000) -> None:
        self._epoch_ms = epoch_ms
        self._n = 0

    def __call__(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{ulid(self._epoch_ms, self._n)}"
