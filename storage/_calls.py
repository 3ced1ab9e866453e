"""The parts of a recorded call the filter keys read (storage/match.py), as
msgspec Structs: the rest of an entry's text is skipped, not decoded. Here,
not in match.py, because mypyc cannot compile a Struct (tests/test_build.py)."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["read_call", "read_keyed"]


class _Params(msgspec.Struct):
    sender: Any = msgspec.field(default=None, name="from")
    task_id: Any = None


class _Call(msgspec.Struct):
    method: Any = None
    params: _Params | None = None


class _Keyed(msgspec.Struct):
    """The parts of an entry `entry_key` reads; the rest of the text is skipped."""

    envelope: _Call | None = None
    request: _Call | None = None


read_keyed = msgspec.json.Decoder(_Keyed).decode
read_call = msgspec.json.Decoder(_Call).decode
