"""Hypothesis profiles: "ci" (selected when the environment has CI=true, as
.ci/run sets it) explores more and stays bounded; "dev", the default for local
runs, is quicker. HYPOTHESIS_PROFILE=<name> picks one explicitly."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# `chapline serve` as a process, for the transport tests.
from servers import served, served_with_auth  # noqa: F401

settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "dev")
)
