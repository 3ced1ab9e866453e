"""Hostile input: a slice of the generator run (bench/hostile.py) and one test
per class of bad input it found, each on a coordinator over a real SQLite file.

The long run (100,000 inputs) is `python -m bench.hostile`; its last result
is in bench/README.md.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from client import Client

from bench import hostile
from coordinator import Coordinator, CounterIds, StepClock
from coordinator.hints import empty_body, invalid_request, unknown_method
from coordinator.limits import MAX_ID_CHARS
from coordinator.patch import MAX_CHARS, MAX_DEPTH
from coordinator.registry import CHAP_0_3
from storage import SqliteStore

# Inputs per seed in `./run test`; the long run sends 100,000.
SLICE = int(os.environ.get("CHAPLINE_HOSTILE_COUNT", "1500"))


@pytest.mark.parametrize("seed", [11, 12])
def test_a_slice_of_the_hostile_run_keeps_every_property(tmp_path: Path, seed: int) -> None:
    report = hostile.run(SLICE, seed, str(tmp_path / "hostile.db"), checkpoint=500)
    assert report.inputs == SLICE and report.restarts >= SLICE // 500
    # The generator reaches deep states, not only the gates.
    assert report.accepted > SLICE // 10 and report.recorded_refusals > 0


def test_the_checker_catches_a_refusal_that_changes_state(tmp_path: Path) -> None:
    """The properties are not vacuous: a coordinator that writes on refusal fails them."""
    checker = hostile.Checker(str(tmp_path / "h.db"))
    try:
        checker.call(_env("workspace.create", workspace="w"))
        checker.call(_env("participant.join", workspace="w", **{"from": "human:a"}, type="human"))
        original = checker.coord.dispatch

        def leaky(envelope: Any) -> dict[str, Any]:
            original(_env("participant.join", workspace="w", **{"from": "human:z"}, type="human"))
            return original(envelope)

        checker.coord.dispatch = leaky  # type: ignore[method-assign]
        with pytest.raises(hostile.Failure, match="changed"):
            checker.call(_env("task.update", workspace="w", **{"from": "human:a"}, task_id="nope"))
    finally:
        checker.close()


# --- one coordinator on a real file ------------------------------------------------


class SqliteFile:
    """A coordinator over one real SQLite file, as a client's target: it can
    restart, count its rows, and every answer it gives must be sendable."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.coord = self.open()

    def open(self) -> Coordinator:
        return Coordinator(SqliteStore(str(self.path)), clock=StepClock(), ids=CounterIds())

    def restart(self) -> None:
        self.coord.close()
        self.coord = self.open()

    def dispatch(self, envelope: Any) -> dict[str, Any]:
        response = self.coord.dispatch(envelope)
        msgspec.json.encode(response)  # always sendable
        return response

    def rows(self) -> dict[str, int]:
        with sqlite3.connect(self.path) as db:
            return {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                    for t in ("chap_meta", "chap_entries", "chap_objects")}


@pytest.fixture
def chap(tmp_path: Path) -> Iterator[Client]:
    """Calls that name their workspace (none by default: some create one)."""
    target = SqliteFile(tmp_path / "chap.db")
    yield Client(target, workspace=None)
    target.coord.close()


def _env(method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def _review_open(chap: Client, artefact: Any) -> str:
    chap.ok("workspace.create", workspace="w")
    chap.ok("participant.join", workspace="w", **{"from": "human:a"}, type="human", role="admin")
    chap.ok("participant.join", workspace="w", **{"from": "agent:b"}, type="agent")
    task = chap.ok("task.create", workspace="w", **{"from": "human:a"}, kind="k", input={}, assignee="agent:b")
    task = task["task_id"]
    chap.ok("task.update", workspace="w", **{"from": "agent:b"}, task_id=task, state="in_progress")
    chap.ok("review.request", workspace="w", **{"from": "agent:b"}, task_id=task, artefact=artefact,
            to=["human:a"])
    return task


# --- ids that are not usable ids: -32602 before the write --------------------------

BAD_IDS = ["", "a\u0000b", "tab\there", "x" * (MAX_ID_CHARS + 1), "\x7f"]


@pytest.mark.parametrize("bad", BAD_IDS, ids=["empty", "nul", "tab", "long", "del"])
def test_unusable_workspace_ids_are_refused_before_the_write(chap: Client, bad: str) -> None:
    for method, extra in (("workspace.create", {}), ("participant.join", {"from": "human:a", "type": "human"})):
        error = chap.fail(-32602, method, workspace=bad, **extra)
        assert "workspace" in error["message"] and ("send" in error["message"] or "at most" in error["message"])
    assert chap.target.rows() == {"chap_meta": 0, "chap_entries": 0, "chap_objects": 0}
    assert chap.target.coord.workspace_ids() == []


@pytest.mark.parametrize("bad", BAD_IDS, ids=["empty", "nul", "tab", "long", "del"])
def test_unusable_participant_uris_are_refused_before_the_write(chap: Client, bad: str) -> None:
    chap.ok("workspace.create", workspace="w")
    before = chap.target.rows()
    error = chap.fail(-32602, "participant.join", workspace="w", **{"from": bad}, type="human")
    assert error["message"].startswith("from ")
    assert chap.target.rows() == before


def test_the_longest_usable_id_is_taken_and_survives_a_restart(chap: Client) -> None:
    wid = "w" * MAX_ID_CHARS
    chap.ok("workspace.create", workspace=wid)
    chap.target.restart()
    assert chap.ok("workspace.describe", workspace=wid)["id"] == wid


# --- JSON Patch bounds: -32602, nothing recorded ----------------------------------


@pytest.mark.parametrize(
    "diff, reached",
    [
        ([{"op": "copy", "from": "/a", "path": "/a/x"}] * 100, "depth"),
        ([{"op": "add", "path": "/d" * n, "value": {}} for n in range(1, 80)], "depth"),
        ([{"op": "add", "path": "/v", "value": [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]}]
         + [{"op": "copy", "from": "/v", "path": "/v/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0"}] * 5, "depth"),
        ([{"op": "add", "path": "/s", "value": "y" * 60_000}]
         + [{"op": "copy", "from": "/s", "path": f"/s{i}"} for i in range(100)], "chars"),
    ],
    ids=["copy-into-descendant", "add-deeper", "copy-deep-value", "copy-big-string"],
)
def test_patch_bombs_are_refused_with_invalid_params(chap: Client, diff: list[Any], reached: str) -> None:
    task = _review_open(chap, {"a": {"b": 1}})
    before = chap.target.rows()
    error = chap.fail(-32602, "decide.override", workspace="w", **{"from": "human:a"}, task_id=task,
                     diff=diff, rationale="r")
    assert error["data"]["limit"] == (MAX_DEPTH if reached == "depth" else MAX_CHARS)
    assert error["data"][reached] > error["data"]["limit"] and isinstance(error["data"]["op_index"], int)
    assert chap.target.rows() == before  # not recorded, nothing staged
    chap.ok("decide.approve", workspace="w", **{"from": "human:a"}, task_id=task)  # the review is still open


def test_a_patch_up_to_the_depth_bound_applies(chap: Client) -> None:
    task = _review_open(chap, {})
    diff = [{"op": "add", "path": "/d" * n, "value": {}} for n in range(1, MAX_DEPTH)]
    applied = chap.ok("decide.override", workspace="w", **{"from": "human:a"}, task_id=task, diff=diff,
                      rationale="r")["applied"]
    depth = 0
    while isinstance(applied, dict):
        applied, depth = applied.get("d"), depth + 1
    assert depth == MAX_DEPTH
    chap.target.restart()
    assert chap.ok("audit.verify_chain", workspace="w")["status"] == "verified"


# --- every read behaves on the empty workspace as on any other ----------------------


def test_reads_of_a_workspace_with_no_entries(chap: Client) -> None:
    wid = chap.ok("workspace.create")["workspace"]  # generated id: written, no entry
    for _ in range(2):
        verified = chap.ok("audit.verify_chain", workspace=wid)
        assert verified["status"] == "verified" and verified["entries_total"] == 0
        assert chap.ok("audit.read", workspace=wid) == {"entries": [], "next_seq": 0}
        assert chap.ok("workspace.describe", workspace=wid)["audit_count"] == 0
        chap.target.restart()


# --- answers are always sendable -----------------------------------------------------


def test_ids_and_quoted_values_with_lone_surrogates_are_sent_escaped(chap: Client) -> None:
    r = chap.send({"jsonrpc": "2.0", "id": "\ud800", "method": "workspace.describe", "params": {"workspace": "w"}})
    assert r["id"] is None and r["error"]["code"] == -32602
    r = chap.send({"jsonrpc": "2.0", "id": 3, "method": "x\udfffy"})
    assert r["id"] == 3 and r["error"]["code"] == -32601 and "\\udfff" in r["error"]["message"]


# --- messages that say what to send ------------------------------------------------


def test_task_messages_name_what_is_missing(chap: Client) -> None:
    chap.ok("workspace.create", workspace="w")
    chap.ok("participant.join", workspace="w", **{"from": "human:a"}, type="human")
    message = chap.fail(-32602, "task.create", workspace="w", **{"from": "human:a"}, kind="k", input={})["message"]
    assert message.startswith("Missing field: assignee")
    message = chap.fail(-32602, "task.create", workspace="w", **{"from": "human:a"}, kind="k", input={},
                       assignee="agent:ghost")["message"]
    assert "'agent:ghost' is not a member" in message and "participant.join" in message
    chap.ok("participant.join", workspace="w", **{"from": "agent:b"}, type="agent")
    task = chap.ok("task.create", workspace="w", **{"from": "human:a"}, kind="k", input={}, assignee="agent:b")
    message = chap.fail(-32602, "task.update", workspace="w", **{"from": "agent:b"}, task_id=task["task_id"])["message"]
    assert message == 'Missing field: state (from created: send state "in_progress" or "declined")'
    message = chap.fail(-32602, "task.update", workspace="w", **{"from": "agent:b"}, task_id=task["task_id"],
                       state="completed")["message"]
    assert message.startswith("Illegal transition created -> completed; from created: send state")


@pytest.mark.parametrize(
    "envelope, words",
    [
        ([], "batches (arrays) are not supported"),
        ("x", "expected a request object, got a string"),
        ({"id": 1, "method": "m"}, 'missing "jsonrpc": "2.0"'),
        ({"jsonrpc": 2.0, "id": 1, "method": "m"}, '"jsonrpc" must be the string "2.0", got a number'),
        ({"jsonrpc": "2.0", "id": 1}, 'missing "method"'),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, '"method" must be a string, got a number'),
        ({"jsonrpc": "2.0", "id": 1, "method": ""}, '"method" is empty'),
    ],
)
def test_each_invalid_request_has_its_own_message(envelope: Any, words: str) -> None:
    error = invalid_request(envelope)
    assert error is not None and error.code == -32600 and words in error.message


def test_a_valid_request_is_not_invalid() -> None:
    assert invalid_request({"jsonrpc": "2.0", "method": "task.create"}) is None


def test_empty_body_message() -> None:
    error = empty_body()
    assert error.code == -32700 and "the body is empty" in error.message


@pytest.mark.parametrize(
    "method, words",
    [
        ("task.creat", "did you mean task.create?"),
        ("review.foo", "the review methods are review.depth, review.request"),
        ("nope", "CHAP methods are namespaced: abstain.*"),
        ("t" * 10_000, "CHAP methods are namespaced"),
    ],
)
def test_unknown_method_hints(method: str, words: str) -> None:
    error = unknown_method(method, {name: spec.profile for name, spec in CHAP_0_3.items()})
    assert error.code == -32601 and error.message.startswith("Unknown method: ") and words in error.message
    assert len(error.message) < 600



def test_envelope_faults_are_answered_with_their_own_message_through_dispatch(chap: Client) -> None:
    for body in (b"", b"  \n", ""):
        r = chap.send(body)
        assert r["id"] is None and r["error"]["code"] == -32700 and "the body is empty" in r["error"]["message"]
    r = chap.send(b"[]")
    assert r["error"]["code"] == -32600 and "batches (arrays) are not supported" in r["error"]["message"]
    r = chap.send({"id": 4, "method": "workspace.describe"})
    assert r["id"] == 4 and r["error"]["code"] == -32600 and 'missing "jsonrpc"' in r["error"]["message"]
    r = chap.send({"jsonrpc": "2.0", "id": 5, "method": "task.creat", "params": {}})
    assert r["error"]["code"] == -32601 and "did you mean task.create?" in r["error"]["message"]


# --- what a client is told about faults it cannot fix ------------------------------


class _BrokenDiskStore(SqliteStore):
    """A real SQLite store whose disk fails the way SQLite reports it: the
    error names the database file."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path
        self.broken = False

    def apply(self, change: Any) -> None:
        if self.broken:
            raise sqlite3.OperationalError(f"disk I/O error writing {self.path} as user chap (password=hunter2)")
        super().apply(change)


# starlette's TestClient runs the app (lifespan, worker thread) without a socket.
@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_a_store_failure_over_http_names_no_path_only_a_log_id(tmp_path: Path, caplog: Any) -> None:
    from starlette.testclient import TestClient

    from coordinator.transports import create_app

    path = str(tmp_path / "secret-dir" / "chap.db")
    os.makedirs(os.path.dirname(path))
    store = _BrokenDiskStore(path)
    coord = Coordinator(store)
    with TestClient(create_app(coord)) as http:
        assert http.post("/chap", json=_env("workspace.create", workspace="w")).status_code == 200
        store.broken = True
        body = http.post("/chap", json=_env("participant.join", workspace="w", **{"from": "human:a"},
                                            type="human")).json()
    error = body["error"]
    assert error["code"] == -32900
    text = json.dumps(body)
    for secret in ("secret-dir", "chap.db", "hunter2", "disk I/O", "OperationalError", str(tmp_path)):
        assert secret not in text
    log_id = error["data"]["log_id"]
    assert log_id in error["message"]
    assert any(log_id in r.getMessage() and "hunter2" in str(r.exc_info[1]) for r in caplog.records)
    coord.close()


def test_a_defect_is_answered_with_a_log_id_and_no_exception_text(tmp_path: Path, caplog: Any) -> None:
    def clock() -> int:
        raise RuntimeError("clock source /etc/chap/secret.conf unreadable")

    coord = Coordinator(SqliteStore(str(tmp_path / "c.db")), clock=clock)
    r = coord.dispatch(_env("workspace.describe", workspace="w"))
    error = r["error"]
    assert r["id"] == 1 and error["code"] == -32603 and set(error["data"]) == {"log_id"}
    assert "secret" not in json.dumps(r) and error["data"]["log_id"] in error["message"]
    assert any(error["data"]["log_id"] in rec.getMessage() for rec in caplog.records)
    coord.close()


# --- a create can never overwrite a workspace another writer created --------------


def test_two_coordinators_with_the_same_id_source_never_share_a_created_workspace(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    first = Coordinator(SqliteStore(path), clock=StepClock(), ids=CounterIds())
    second = Coordinator(SqliteStore(path), clock=StepClock(start_ms=1_800_000_000_000), ids=CounterIds())
    with second.batch():  # second checks the ids are free, then first takes them before second writes
        late_generated = second.dispatch(_env("workspace.create"))
        late_named = second.dispatch(_env("workspace.create", workspace="w"))
        early_generated = first.dispatch(_env("workspace.create"))["result"]["workspace"]
        first.dispatch(_env("workspace.create", workspace="w", mode="shadow"))
    # second's calls were run again on the fresh state: a new id, and a refusal
    assert late_generated["result"]["workspace"] != early_generated
    assert late_named["error"]["code"] == -32602 and "already exists" in late_named["error"]["message"]
    again = Coordinator(SqliteStore(path))
    assert again.snapshot(early_generated)["created"] == "2023-11-14T22:13:21.000Z"  # first's, kept
    assert again.snapshot("w")["mode"] == "shadow"
    assert len(again.workspace_ids()) == 3
    for c in (first, second, again):
        c.close()


def _imports(module: str) -> set[str]:
    """The `coordinator.*` / `storage.*` modules `module` imports (TYPE_CHECKING ones too)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    origin = Path(spec.origin)
    # A module built as an extension (setup.py) has its source beside it.
    source = origin if origin.suffix == ".py" else origin.with_name(origin.name.split(".")[0] + ".py")
    tree = ast.parse(source.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {m for m in out if m.split(".")[0] in ("coordinator", "storage") and "." in m}


def test_what_a_handler_imports_never_reaches_back_into_the_dispatcher() -> None:
    """No import cycle between call.py and coordinator.py: nothing `Call` needs
    (transitively) imports the dispatcher."""
    seen, todo = set(), ["coordinator.call"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(_imports(module))
    assert "coordinator.coordinator" not in seen, sorted(seen)
    assert "coordinator.workspace" in seen  # the walk follows imports
