"""The two implementations behind one small interface.

`Impl.open(kind, path)` returns an `Opened` with `dispatch`, `batch()` (a
context manager grouping calls into one store write, or a no-op where the
implementation has none) and `close()`. Both are configured the same way:
chain on (`enable_chain=True`), default profiles core/1.0 + review/1.0.
The reference (chap-coordinator 0.3.3) is used as a black box: constructed and
called, nothing else.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.workload import PROFILES


@dataclass
class Opened:
    name: str
    coord: Any
    store: Any
    dispatch: Callable[[dict], dict]
    batch: Callable[[], contextlib.AbstractContextManager[None]]
    close: Callable[[], None]


class Impl:
    name = "?"
    label = "?"
    has_batch = False

    def available(self) -> str | None:
        """None when usable, else why not."""
        return None

    def open(self, kind: str, path: str | None = None) -> Opened:
        raise NotImplementedError

    # code run in a fresh interpreter to construct a coordinator on `path`
    import_stmt = ""
    construct_expr = ""


class Reference(Impl):
    name = "reference"
    label = "chap-coordinator 0.3.3"
    import_stmt = (
        "from chap_coordinator import Coordinator\n"
        "from chap_coordinator.storage.sqlite import SqliteStore\n"
    )
    construct_expr = (
        "Coordinator(deterministic_ids=True, deterministic_clock=True, store=SqliteStore(PATH), "
        f"enable_chain=True, default_profiles={PROFILES!r})"
    )

    def available(self) -> str | None:
        try:
            import chap_coordinator  # noqa: F401
        except ImportError as e:  # pragma: no cover
            return f"chap-coordinator not importable: {e}"
        return None

    def open(self, kind: str, path: str | None = None) -> Opened:
        from chap_coordinator import Coordinator

        if kind == "memory":
            from chap_coordinator.storage.store import MemoryStore

            store = MemoryStore()
        elif kind == "sqlite":
            from chap_coordinator.storage.sqlite import SqliteStore

            store = SqliteStore(path)
        else:
            raise ValueError(kind)
        coord = Coordinator(
            deterministic_ids=True,
            deterministic_clock=True,
            store=store,
            enable_chain=True,
            default_profiles=list(PROFILES),
        )

        def close() -> None:
            if kind == "sqlite":  # MemoryStore.close() only empties it
                store.close()

        return Opened(self.name, coord, store, coord.dispatch, contextlib.nullcontext, close)


class Chapline(Impl):
    name = "chapline"
    label = "chapline"
    has_batch = True
    import_stmt = "from coordinator import Coordinator\nfrom storage import SqliteStore\n"
    construct_expr = f"Coordinator(SqliteStore(PATH), enable_chain=True, default_profiles={tuple(PROFILES)!r})"

    def available(self) -> str | None:
        try:
            from coordinator import Coordinator  # noqa: F401
            from storage import MemoryStore, SqliteStore  # noqa: F401
        except Exception as e:
            return f"chapline not importable yet: {type(e).__name__}: {e}"
        return None

    def open(self, kind: str, path: str | None = None) -> Opened:
        from coordinator import Coordinator
        from storage import MemoryStore, SqliteStore

        if kind == "memory":
            store = MemoryStore()
        elif kind == "sqlite":
            store = SqliteStore(path)
        else:
            raise ValueError(kind)
        coord = Coordinator(store, enable_chain=True, default_profiles=tuple(PROFILES))

        def close() -> None:
            coord.close()
            with contextlib.suppress(Exception):
                store.close()

        return Opened(self.name, coord, store, coord.dispatch, coord.batch, close)


class ReferenceAsChapline(Reference):
    """The reference in chapline's seat: for testing the harness (--self-test)."""

    name = "reference*"
    label = "chap-coordinator 0.3.3 (self-test)"


def implementations(self_test: bool = False) -> tuple[Impl, Impl]:
    """(chapline, reference); with `self_test` the reference on both sides."""
    if self_test or os.environ.get("BENCH_SELF_TEST") == "1":
        return ReferenceAsChapline(), Reference()
    return Chapline(), Reference()
