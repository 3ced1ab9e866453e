"""The profile modules and the method registry built from them.

Every module in this package (except those named with a leading underscore)
is a profile module: it defines `PROFILE`, a `registry.Profile` whose methods
it declares beside their handlers. Adding a module is all it takes to
register its methods.
"""

from __future__ import annotations

import importlib
import pkgutil

from coordinator.engine.registry import Profile, Registry
from coordinator.errors import RegistryError

__all__ = ["REGISTRY"]


def _profiles() -> list[Profile]:
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        profile = getattr(module, "PROFILE", None)
        if not isinstance(profile, Profile):
            raise RegistryError(
                module.__name__,
                "defines no PROFILE = registry.Profile(...); name a shared helper "
                "module with a leading underscore",
            )
        found.append(profile)
    return found


REGISTRY = Registry(_profiles())
