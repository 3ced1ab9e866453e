"""The benchmark workload is legal: every call succeeds, on both implementations.

No timing here (speed lives in bench/); this only checks that the calls the
benchmark sends are answered as a review workflow expects (results, states,
filtered reads), so that a benchmark figure never measures error answers.
bench is reached through its public entry points only: the workload
(`bench.workload`), the two implementations (`bench.impls`), the workload
as exported for the TypeScript coordinator (`bench.typescript`), the
durable bound's writer (`bench.http_bound.GroupCommit`), the CPU time of a
server's process tree (`bench.server_cpu.cpu_time`) and the `main` of each
`python -m bench.<name>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
from typing import Any

import pytest
from client import Client

from bench import desk_load, http_bound, mcp_tools, work
from bench import signed as S
from bench import typescript as T
from bench import workload as W
from bench.impls import Chapline, Impl, Opened, Reference
from bench.server_cpu import cpu_time, machine_busy

CYCLES = 2 * len(W.PATTERN)  # every cycle kind, and two filtered reads


def _impls() -> list[Any]:
    return [pytest.param(Reference(), id="reference"), pytest.param(Chapline(), id="chapline")]


def _open(impl: Impl, kind: str, tmp_path: Any) -> Opened:
    why = impl.available()
    assert not why, why  # both are dependencies of the tests: missing is a failure
    return impl.open(kind, str(tmp_path / "smoke.db") if kind == "sqlite" else None)


def _set_up(opened: Opened, prefix: str) -> Client:
    """The workload's workspace and members (bench/workload.py's
    `setup_envelopes`); a client on that workspace."""
    for envelope in W.setup_envelopes(prefix):
        assert "result" in opened.dispatch(envelope), envelope
    return Client(opened, W.WORKSPACE)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("impl", _impls())
def test_workload_is_legal(impl: Impl, kind: str, tmp_path: Any) -> None:
    opened = _open(impl, kind, tmp_path)
    try:
        chap = _set_up(opened, "smoke")
        calls = W.plan(0, CYCLES, "smoke")
        W.drive_checked(opened.dispatch, calls)
        writes = sum(1 for env, _, _ in calls if env["method"] != "audit.read")
        assert chap.describe()["audit_count"] == 3 + writes
        assert chap.ok("audit.verify_chain", frm=W.HUMAN)["ok"] is True
    finally:
        opened.close()


def test_grouped_workload_is_legal(tmp_path: Any) -> None:
    """The grouped figure's path: chapline's batch() around groups of calls."""
    opened = _open(Chapline(), "sqlite", tmp_path)
    try:
        chap = _set_up(opened, "smoke")
        calls = W.plan(0, CYCLES, "smoke")
        W.drive_checked(opened.dispatch, W.plan(CYCLES, 1, "probe"))
        assert W.drive(opened.dispatch, calls, batch=opened.batch, group=7) == 0
        probe = sum(1 for env, _, _ in W.plan(CYCLES, 1, "probe") if env["method"] != "audit.read")
        writes = sum(1 for env, _, _ in calls if env["method"] != "audit.read")
        assert chap.describe()["audit_count"] == 3 + probe + writes
    finally:
        opened.close()


@pytest.mark.parametrize("impl", _impls())
def test_typescript_export_is_the_python_workload(impl: Impl) -> None:
    """The JSON the TypeScript driver is handed holds, after a round trip,
    the setup and the planned calls the Python seats send, and every call of
    it succeeds with the expected state here (no Node needed)."""
    pattern = T.common_pattern()
    exported = json.loads(json.dumps(T.export_workload(CYCLES, "ts", pattern)))
    assert exported["ops"] == {"CREATE": W.CREATE, "TASK": W.TASK, "READ": W.READ}
    assert exported["profiles"] == W.PROFILES
    assert exported["setup"] == W.setup_envelopes("ts")
    calls = [(env, op, state) for env, op, state in exported["calls"]]
    assert calls == W.plan(0, CYCLES, "ts", pattern=pattern)
    assert any(op == W.READ for _, op, _ in calls)
    opened = impl.open("memory")
    try:
        for envelope in exported["setup"]:
            assert "result" in opened.dispatch(envelope), envelope
        W.drive_checked(opened.dispatch, calls)
    finally:
        opened.close()


def test_same_envelopes_and_states_on_both() -> None:
    """Both implementations answer the workload with the same states."""
    ref, chap = Reference(), Chapline()
    assert not chap.available(), chap.available()
    states = []
    for impl in (ref, chap):
        opened = impl.open("memory")
        try:
            _set_up(opened, "same")
            answers = W.drive_checked(opened.dispatch, W.plan(0, len(W.PATTERN), "same"))
            states.append([(a["result"].get("state"), len(a["result"].get("entries", ()))) for a in answers])
        finally:
            opened.close()
    assert states[0] == states[1]


def test_signed_bench_calls_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m bench.signed` at a small size: every call, signed or not, is
    accepted by both implementations (it raises on any error answer)."""
    assert S.main(["--calls", "20", "--reps", "1"]) == 0
    table = capsys.readouterr().out.splitlines()
    for impl in ("chapline", "chap-coordinator 0.3.3"):
        (row,) = [line for line in table if line.startswith(impl + " ")]
        unsigned, signed = (float(figure) for figure in row.split()[-4:-2])
        assert unsigned > 0 and signed > 0, row


def test_work_bench_calls_are_legal(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m bench.work` at a small size, in memory and on SQLite: every
    call it times succeeds (it raises otherwise), and it reports each figure."""
    assert work.main(["--tasks", "60", "--held", "10", "--ops", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for kind in ("memory", "sqlite"):
        figures = [line.split(None, 1)[1] for line in lines if line.split()[0] == kind]
        assert [figure.split(":")[0] for figure in figures] == [
            "submit 60-task plan", "resubmit it (no-op)", "ready-work read, 45 ready, 10 held",
            "claims", "heartbeats", "reports (completed)",
        ]  # 60 tasks - 5 waiting - 10 held are ready


def test_http_bound_runs_every_server(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m bench.http_bound` at a small size: chapline serve, the
    bare HTTP stack and the durable bound all answer every call with a
    result (it fails the run otherwise), and each gets its row and each
    ratio its line."""
    assert http_bound.main(["--clients", "2", "--calls", "5", "--reps", "1", "--db", "memory"]) == 0
    out = capsys.readouterr().out
    assert "| chapline serve --workers 1 (SQLite :memory:) |" in out
    assert "| HTTP bound (uvicorn + Starlette, fixed answer) |" in out
    assert "| durable bound (the same, each body committed first, SQLite :memory:) |" in out
    assert "chapline serve / HTTP bound: " in out
    assert "chapline serve / durable bound: " in out
    # Each server's CPU per call: all its threads, its main and its other ones; the machine's.
    for name in ("chapline serve --workers 1 (SQLite :memory:)", "HTTP bound (uvicorn + Starlette, fixed answer)"):
        (row,) = [line for line in out.splitlines() if line.startswith(f"| {name} | ") and line.count("|") == 6]
        server, main, other, machine = (int(cell) for cell in row.split("|")[2:6])
        # (The machine's column is a number here; a run this short is within
        # the kernel's 10 ms ticks. test_cpu_time_splits_... checks its value.)
        assert abs(server - (main + other)) <= 1, row


# Burns `seconds` of CPU time on the thread that runs it, by that thread's own clock.
_BURN = """
import time
def burn(seconds):
    while time.thread_time() < seconds:
        pass
"""
# A server-like tree: its main thread and one other thread burn 0.3 s each,
# its child process's main thread 0.3 s; then each says so and waits for
# its stdin to close, so their threads are still there to be read.
_TREE = _BURN + """
import subprocess, sys, threading
child = subprocess.Popen([sys.executable, "-c", sys.argv[1] + "burn(0.3)\\nprint('burnt', flush=True)\\nsys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
other = threading.Thread(target=lambda: (burn(0.3), print("burnt", flush=True), sys.stdin.read()))
other.start()
burn(0.3)
assert child.stdout.readline() == "burnt\\n"
print("burnt", flush=True)
sys.stdin.read()
child.stdin.close()
child.wait()
"""


def test_cpu_time_splits_a_process_trees_main_threads_from_its_others() -> None:
    """`cpu_time` of a process whose main thread and one other thread each
    burn 0.3 s, and whose child's main thread burns 0.3 s: 0.6 s on main
    threads, 0.3 s on the other, as each thread's own clock counted them
    (plus start-up and imports, and within the kernel's 10 ms ticks). The
    machine was busy for at least those 0.9 s meanwhile (and for whatever
    else ran)."""
    machine = machine_busy()
    tree = subprocess.Popen([sys.executable, "-c", _TREE, _BURN], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert tree.stdout is not None
        assert [tree.stdout.readline() for _ in range(2)] == ["burnt\n", "burnt\n"]
        used = cpu_time(tree.pid)
        machine = machine_busy() - machine
    finally:
        assert tree.stdin is not None
        tree.stdin.close()
        tree.wait(timeout=60)
    assert 0.58 <= used.main <= 1.5, used
    assert 0.28 <= used.other <= 0.45, used
    assert machine >= 0.88, machine


def test_the_durable_bound_answers_only_what_it_has_committed(tmp_path: Any) -> None:
    """The durable bound's writer: each caller is released once its body is
    in the file, read back by another connection, whether it came alone or
    in a group with others."""
    path = str(tmp_path / "bound.db")
    writer = http_bound.GroupCommit(path)

    def held() -> list[bytes]:
        with contextlib.closing(sqlite3.connect(path)) as db:
            return [body for (body,) in db.execute("SELECT body FROM calls ORDER BY seq")]

    async def one(body: bytes) -> list[bytes]:
        await writer.commit(body)
        return held()

    async def calls() -> None:
        assert await one(b"alone") == [b"alone"]
        bodies = [f"call {i}".encode() for i in range(40)]
        seen = await asyncio.gather(*(one(body) for body in bodies))
        for body, rows in zip(bodies, seen, strict=True):
            assert body in rows
        assert sorted(held()) == sorted([b"alone", *bodies])

    try:
        asyncio.run(calls())
    finally:
        writer.close()


def test_mcp_tools_lists_each_session(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m bench.mcp_tools` through the official MCP client: a row per
    session, and a bound session is offered less than an unbound one."""
    mcp_tools.main([])
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    tools = {row[0].lstrip("| "): int(row[1]) for row in rows}
    assert list(tools) == list(mcp_tools.SESSIONS)
    unbound, everything, agent, human = tools.values()
    assert agent < human < unbound < everything


def test_desk_load_runs_both_phases(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m bench.desk_load` at a small size (Chromium headless against
    chapline serve): the inbox is drawn and every interaction and every tab
    gets its row in the table; no figure is judged."""
    assert desk_load.main(["--reviews", "150", "--reps", "1", "--tabs", "3", "--tab-reviews", "3",
                           "--calls", "1", "--wait", "2"]) == 0
    out = capsys.readouterr().out
    assert "inbox drawn: Showing 1–100 of 150" in out
    assert "3 of 3 tabs signed in and live" in out
    for row in ("| inbox load, navigation → drawn (150 reviews) | ", "| search, per keystroke (5 × 1) | ",
                "| kind filter | ", "| sort | ", "| next page | ",
                "| event seen by a tab, call → status line (3 live of 3 tabs × 1 calls) | ",
                "| tab-calls with no row within 2 s | 0 of 3 | 0 |"):
        assert row in out


# Waits for a line on stdin, then runs a thread that burns 0.3 s and ends,
# and a child process that burns 0.3 s and is waited for; then says so.
_ENDED = _BURN + """
import subprocess, sys, threading
sys.stdin.readline()
other = threading.Thread(target=burn, args=(0.3,))
other.start()
other.join()
subprocess.run([sys.executable, "-c", sys.argv[1] + "burn(0.3)"], check=True)
print("done", flush=True)
sys.stdin.read()
"""


def test_cpu_time_keeps_threads_and_processes_that_ended_between_readings() -> None:
    """A thread and a child process that each burn 0.3 s and end between two
    readings of `cpu_time` still count in their difference, as `other`: a
    server whose worker threads come and go is not undercounted."""
    tree = subprocess.Popen([sys.executable, "-c", _ENDED, _BURN], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert tree.stdin is not None and tree.stdout is not None
        before = cpu_time(tree.pid)
        tree.stdin.write("go\n")
        tree.stdin.flush()
        assert tree.stdout.readline() == "done\n"
        used = cpu_time(tree.pid) - before
    finally:
        assert tree.stdin is not None
        tree.stdin.close()
        tree.wait(timeout=60)
    assert 0.58 <= used.other <= 1.2, used
    assert used.main <= 0.1, used
