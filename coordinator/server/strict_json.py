"""Strict JSON for what clients send through MCP and A2A.

Python's `json` and the SDKs' parsers read NaN, Infinity and -Infinity (and
1e999, as infinity), for which JSON has no form (RFC 8259); msgspec writes
such a float back as null, so a value a client sent would reach the log
changed. Text is parsed here with msgspec, which refuses them, and values an
SDK has already parsed are checked with `non_finite`. The reasons are the
caller's to read: a parser's own exception text never is.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from coordinator.errors import NotJsonError

__all__ = ["loads", "non_finite"]

_decode = msgspec.json.decode
_AT_BYTE = re.compile(r"\(byte (\d+)\)")
# A \u escape of a high surrogate without its low half, or a low one alone:
# at the end of the text msgspec reports truncated input, which would send
# the caller astray.
_LONE_ESCAPE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def loads(text: str | bytes) -> Any:
    """The JSON value of `text`; raises NotJsonError."""
    try:
        return _decode(text)
    except msgspec.ValidationError:
        # Untyped decoding validates only ranges: a number too large to hold.
        raise NotJsonError(
            "a number is out of range (beyond a double, or over 4300 digits); "
            "send such numbers as strings"
        ) from None
    except msgspec.DecodeError as exc:
        raise NotJsonError(_malformed(text, str(exc))) from None
    except RecursionError:
        raise NotJsonError("it nests too deep to read") from None
    except UnicodeError:
        raise NotJsonError("it holds a lone UTF-16 surrogate, which is not Unicode text") from None


def _malformed(text: str | bytes, message: str) -> str:
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    lone = "surrogate" in message or (message.startswith("Input data was truncated") and _LONE_ESCAPE.search(data))
    if lone:
        return "a \\u escape names a lone UTF-16 surrogate, which is not Unicode text"
    if message.startswith("Input data was truncated"):
        return "the text ends before its JSON value does"
    found = _AT_BYTE.search(message)
    if found is not None:
        rest = data[int(found.group(1)) :]
        if rest.startswith((b"NaN", b"Infinity", b"-Infinity")):
            return (
                f"NaN and Infinity are not JSON numbers (byte {found.group(1)}); "
                "send a finite number, null, or the value as a string"
            )
    return message


def non_finite(value: Any, root: str = "$") -> str | None:
    """The path (from `root`) of the first NaN or infinite float in `value`,
    or None when it holds none."""
    stack: list[tuple[str, Any]] = [(root, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return path
        elif isinstance(item, dict):
            stack.extend(reversed([(f"{path}.{k}", v) for k, v in item.items()]))
        elif isinstance(item, list):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(item)]))
    return None
