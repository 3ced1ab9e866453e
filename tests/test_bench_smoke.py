"""The benchmark workload is legal: every call succeeds, on both implementations.

No timing here (speed lives in bench/); this only checks that the calls the
benchmark sends are answered as a review workflow expects (results, states,
filtered reads), so that a benchmark figure never measures error answers.
"""

from __future__ import annotations

import pytest

from bench import workload as W
from bench.impls import Chapline, Reference
from bench.run import _setup

CYCLES = 2 * len(W.PATTERN)  # every cycle kind, and two filtered reads


def _impls():
    out = [pytest.param(Reference(), id="reference")]
    out.append(pytest.param(Chapline(), id="chapline"))
    return out


def _checked(o, calls):
    return W.drive_checked(o.dispatch, calls)


def _open(impl, kind, tmp_path):
    why = impl.available()
    assert not why, why  # both are dependencies of the tests: missing is a failure
    return impl.open(kind, str(tmp_path / "smoke.db") if kind == "sqlite" else None)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("impl", _impls())
def test_workload_is_legal(impl, kind, tmp_path):
    o = _open(impl, kind, tmp_path)
    try:
        _setup(o, "smoke")
        calls = W.plan(0, CYCLES, "smoke")
        _checked(o, calls)
        writes = sum(1 for env, _, _ in calls if env["method"] != "audit.read")
        r = o.dispatch(
            {"jsonrpc": "2.0", "id": "d", "method": "workspace.describe", "params": {"workspace": W.WORKSPACE}}
        )
        assert r["result"]["audit_count"] == 3 + writes
        r = o.dispatch(
            {
                "jsonrpc": "2.0",
                "id": "v",
                "method": "audit.verify_chain",
                "params": {"workspace": W.WORKSPACE, "from": W.HUMAN},
            }
        )
        assert r["result"]["ok"] is True, r
    finally:
        o.close()


def test_grouped_workload_is_legal(tmp_path):
    """The grouped figure's path: chapline's batch() around groups of calls."""
    impl = Chapline()
    o = _open(impl, "sqlite", tmp_path)
    try:
        _setup(o, "smoke")
        calls = W.plan(0, CYCLES, "smoke")
        _checked(o, W.plan(CYCLES, 1, "probe"))
        assert W.drive(o.dispatch, calls, batch=o.batch, group=7) == 0
        r = o.dispatch(
            {"jsonrpc": "2.0", "id": "d", "method": "workspace.describe", "params": {"workspace": W.WORKSPACE}}
        )
        probe = sum(1 for env, _, _ in W.plan(CYCLES, 1, "probe") if env["method"] != "audit.read")
        writes = sum(1 for env, _, _ in calls if env["method"] != "audit.read")
        assert r["result"]["audit_count"] == 3 + probe + writes
    finally:
        o.close()


def test_same_envelopes_and_states_on_both(tmp_path):
    """Both implementations answer the workload with the same states."""
    ref, chap = Reference(), Chapline()
    assert not chap.available(), chap.available()
    states = []
    for impl in (ref, chap):
        o = impl.open("memory")
        try:
            _setup(o, "same")
            answers = _checked(o, W.plan(0, len(W.PATTERN), "same"))
            states.append([(a["result"].get("state"), len(a["result"].get("entries", ()))) for a in answers])
        finally:
            o.close()
    assert states[0] == states[1]


@pytest.mark.parametrize("impl", ["chapline", "chap-coordinator 0.3.3"])
@pytest.mark.parametrize("signed", [False, True])
def test_signed_bench_calls_are_accepted(impl, signed):
    """bench/signed.py's calls are all accepted, signed or not, by both (it
    raises on any error answer)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from bench import signed as S

    keys = {S.ALICE: Ed25519PrivateKey.generate(), S.BOT: Ed25519PrivateKey.generate()}
    assert S._run(impl, signed, 20, keys) > 0


def test_work_bench_calls_are_legal(tmp_path):
    """bench/work.py at a small size: every call it times succeeds (measure raises otherwise)."""
    from bench.work import measure
    from storage import SqliteStore

    for kind, store in (("memory", None), ("sqlite", SqliteStore(str(tmp_path / "work.db")))):
        lines: list[str] = []
        figures = measure(kind, store, tasks=60, held=10, ops=10, out=lines.append)
        assert set(figures) == {"submit_s", "resubmit_s", "ready_ms", "claims_per_s",
                                "heartbeats_per_s", "reports_per_s"}
        assert "ready-work read, 45 ready, 10 held" in lines[2]  # 60 - 5 waiting - 10 held
