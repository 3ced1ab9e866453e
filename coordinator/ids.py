"""Injectable ids: an id source is a callable `(prefix) -> "prefix_<ULID>"`."""

from __future__ import annotations

import base64
import os
import time
from typing import Callable

__all__ = ["IdSource", "CounterIds", "random_ids", "ulid"]

IdSource = Callable[[str], str]

# RFC 4648 base32 digits mapped onto Crockford's, so b32encode does the work.
_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", b"0123456789ABCDEFGHJKMNPQRSTVWXYZ")


def ulid(epoch_ms: int, randomness: int) -> str:
    """A ULID: 48 bits of milliseconds then 80 bits of `randomness`, Crockford base32."""
    value = (epoch_ms & (2**48 - 1)) << 80 | (randomness & (2**80 - 1))
    # 26 characters carry 130 bits: the 128-bit value behind two zero bits,
    # which are the top of a 160-bit block shifted by 30.
    return base64.b32encode((value << 30).to_bytes(20, "big"))[:26].translate(_TO_CROCKFORD).decode()


def random_ids(prefix: str) -> str:
    return f"{prefix}_{ulid(time.time_ns() // 1_000_000, int.from_bytes(os.urandom(10), 'big'))}"


class CounterIds:
    """Deterministic ids: a fixed time part and a counter, for reproducible runs."""

    def __init__(self, epoch_ms: int = 1_700_000_000_000) -> None:
        self._epoch_ms = epoch_ms
        self._n = 0

    def __call__(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{ulid(self._epoch_ms, self._n)}"
