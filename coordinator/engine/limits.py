"""The bounds chapline puts on what a caller may name or make it build.

Every bound is checked before anything is written and refused with -32602
and a message that says what to send instead (SPECIFICATION.md, "Bounds").
"""

from __future__ import annotations

import re
from typing import Any

from coordinator.engine.wire import invalid_params

__all__ = ["MAX_ID_CHARS", "check_new_id"]

# An id a caller chooses becomes a primary-key column in every store and is
# quoted in messages and URLs: it must be printable text of sensible length.
MAX_ID_CHARS = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_new_id(value: Any, name: str, example: str) -> str:
    """`value` if it can name a new workspace or participant, else -32602.

    A usable id is a non-empty string of at most MAX_ID_CHARS characters with
    no control characters (lone surrogates never reach here: an envelope
    holding one has no canonical form and is refused before any handler).
    """
    if not isinstance(value, str):
        raise invalid_params(f"{name} must be a string id such as {example!r}")
    if not value:
        raise invalid_params(f"{name} must not be empty; send an id such as {example!r}")
    if len(value) > MAX_ID_CHARS:
        raise invalid_params(
            f"{name} is {len(value)} characters long; an id has at most {MAX_ID_CHARS}"
        )
    if _CONTROL.search(value):
        raise invalid_params(
            f"{name} holds a control character (U+0000-U+001F or U+007F); send printable text such as {example!r}"
        )
    return value
