"""What a signature costs: a signed call (verification included) beside an
unsigned one, for chapline and chap-coordinator 0.3.3, in memory.

    python -m bench.signed [--calls N] [--reps R]

Each implementation runs the same calls twice: once as an ordinary
coordinator with unsigned envelopes, once with `require_signatures` and every
envelope signed by its sender's Ed25519 key. Envelopes are built and signed
before the clock starts, so the figures are the coordinator's own cost per
call (decode, verify, handle, record); the client's cost of signing one
envelope is printed apart. The calls are a `task.create` by a human and a
`task.update` by the agent, repeated, in one workspace with the chain on.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from coordinator import public_jwk, sign_envelope

WORKSPACE = "wsp_bench_signed"
ALICE, BOT = "human:alice", "agent:bot"


def _kid(uri: str) -> str:
    return uri.split(":", 1)[1] + "-1"  # a kid holds no ':'


def _calls(n: int) -> list[tuple[str, dict[str, Any]]]:
    """`n` (sender, envelope) pairs; task ids are the deterministic ones both
    implementations give with counter ids, so they are read back, not guessed."""
    out = []
    for i in range(n // 2):
        out.append((ALICE, {"jsonrpc": "2.0", "id": f"c{i}", "method": "task.create", "params": {
            "workspace": WORKSPACE, "from": ALICE, "assignee": BOT, "kind": "draft",
            "input": {"n": i, "text": "please draft the reply"}}}))
        out.append((BOT, {"jsonrpc": "2.0", "id": f"u{i}", "method": "task.update", "params": {
            "workspace": WORKSPACE, "from": BOT, "task_id": None, "state": "in_progress"}}))
    return out


def _open(impl: str, signed: bool) -> Callable[[dict[str, Any]], dict[str, Any]]:
    if impl == "chapline":
        from coordinator import Coordinator, CounterIds, StepClock

        coord: Any = Coordinator(clock=StepClock(), ids=CounterIds(), enable_chain=True,
                                 require_signatures=signed)
    else:
        from chap_coordinator import Coordinator as Reference

        coord = Reference(deterministic_ids=True, deterministic_clock=True, enable_chain=True,
                          require_signatures=signed)
    return coord.dispatch


def _setup(dispatch: Callable[[dict[str, Any]], dict[str, Any]], keys: dict[str, Ed25519PrivateKey]) -> None:
    dispatch({"jsonrpc": "2.0", "id": "w", "method": "workspace.create", "params": {"workspace": WORKSPACE}})
    for uri, kind in ((ALICE, "human"), (BOT, "agent")):
        answer = dispatch({"jsonrpc": "2.0", "id": uri, "method": "participant.join", "params": {
            "workspace": WORKSPACE, "from": uri, "type": kind,
            "jwks": {"keys": [public_jwk(keys[uri], _kid(uri))]}}})
        assert "result" in answer, answer


def _run(impl: str, signed: bool, n: int, keys: dict[str, Ed25519PrivateKey]) -> float:
    """Seconds per call over `n` calls."""
    dispatch = _open(impl, signed)
    _setup(dispatch, keys)
    pending = _calls(n)
    elapsed = 0.0
    task_id = None
    for sender, envelope in pending:
        if envelope["method"] == "task.update":
            envelope["params"]["task_id"] = task_id
        if signed:
            envelope = sign_envelope(envelope, keys[sender], _kid(sender))
        t0 = time.perf_counter()
        answer = dispatch(envelope)
        elapsed += time.perf_counter() - t0
        if "error" in answer:
            raise RuntimeError(f"{impl} refused {envelope['method']}: {answer['error']}")
        task_id = answer["result"].get("task_id", task_id)
    return elapsed / len(pending)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.signed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=4000, help="calls per run (default 4000)")
    ap.add_argument("--reps", type=int, default=3, help="runs per figure; the median is shown (default 3)")
    args = ap.parse_args(argv)
    keys = {ALICE: Ed25519PrivateKey.generate(), BOT: Ed25519PrivateKey.generate()}
    rows = []
    for impl in ("chapline", "chap-coordinator 0.3.3"):
        unsigned = statistics.median(_run(impl, False, args.calls, keys) for _ in range(args.reps))
        signed = statistics.median(_run(impl, True, args.calls, keys) for _ in range(args.reps))
        rows.append((impl, unsigned * 1e6, signed * 1e6))
    probe = {"jsonrpc": "2.0", "id": "x", "method": "task.create", "params": {"workspace": WORKSPACE, "from": ALICE}}
    t0 = time.perf_counter()
    for _ in range(1000):
        sign_envelope(probe, keys[ALICE], "k")
    sign_us = (time.perf_counter() - t0) * 1e3
    print(f"{args.calls} calls per run, median of {args.reps}, in memory, chain on")
    print(f"{'implementation':26} {'unsigned µs/call':>17} {'signed µs/call':>15} {'signature adds':>15}")
    for impl, u, s in rows:
        print(f"{impl:26} {u:17.1f} {s:15.1f} {s - u:12.1f} µs")
    (_, cu, cs), (_, ru, rs) = rows
    print(f"reference/chapline: unsigned {ru / cu:.1f}x, signed {rs / cs:.1f}x")
    print(f"client side, sign_envelope: {sign_us:.1f} µs per envelope")
    return 0


if __name__ == "__main__":
    sys.exit(main())
