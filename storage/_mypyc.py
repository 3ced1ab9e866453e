"""`mypyc_attr` without needing mypy-extensions installed.

The compiled modules mark the classes interpreted code subclasses
(`@mypyc_attr(native_class=False)`, `allow_interpreted_subclasses=True`).
mypyc reads the marks when it compiles, through mypy's view of this module,
which is the real decorator (mypy-extensions is a build requirement); at run
time the decorator does nothing, there as here, so no install, compiled or
not, needs the package (SPECIFICATION.md, "Installing").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["mypyc_attr"]

_T = TypeVar("_T")

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr
else:

    def mypyc_attr(*attrs: str, **kwattrs: Any) -> Callable[[_T], _T]:
        return lambda cls: cls
