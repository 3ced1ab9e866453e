"""Hostile input: a slice of the generator run (bench/hostile.py) and one test
per class of bad input it found, each on a coordinator over a real SQLite file.

The long run (100,000 inputs) is `python -m bench.hostile`; its last result
is in bench/README.md.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chap_coordinator
import msgspec
import pytest
from client import Client, refused
from hypothesis import given
from hypothesis import strategies as st

from bench import hostile
from coordinator import Coordinator, CounterIds, StepClock
from coordinator.engine.hints import empty_body, invalid_request, unknown_method
from coordinator.engine.limits import MAX_ID_CHARS
from coordinator.engine.patch import MAX_CHARS, MAX_DEPTH
from coordinator.engine.registry import CHAP_0_3
from storage import SqliteStore, StoreUnavailableError

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
    chap.ok("participant.join", workspace="w", frm="human:a", type="human", role="admin")
    chap.ok("participant.join", workspace="w", frm="agent:b", type="agent")
    task = chap.ok("task.create", workspace="w", frm="human:a", kind="k", input={}, assignee="agent:b")
    task = task["task_id"]
    chap.ok("task.update", workspace="w", frm="agent:b", task_id=task, state="in_progress")
    chap.ok("review.request", workspace="w", frm="agent:b", task_id=task, artefact=artefact,
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
    error = chap.fail(-32602, "participant.join", workspace="w", frm=bad, type="human")
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
    error = chap.fail(-32602, "decide.override", workspace="w", frm="human:a", task_id=task,
                     diff=diff, rationale="r")
    assert error["data"]["limit"] == (MAX_DEPTH if reached == "depth" else MAX_CHARS)
    assert error["data"][reached] > error["data"]["limit"] and isinstance(error["data"]["op_index"], int)
    assert chap.target.rows() == before  # not recorded, nothing staged
    chap.ok("decide.approve", workspace="w", frm="human:a", task_id=task)  # the review is still open


def test_a_patch_up_to_the_depth_bound_applies(chap: Client) -> None:
    task = _review_open(chap, {})
    diff = [{"op": "add", "path": "/d" * n, "value": {}} for n in range(1, MAX_DEPTH)]
    applied = chap.ok("decide.override", workspace="w", frm="human:a", task_id=task, diff=diff,
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


def test_quoted_values_with_lone_surrogates_are_sent_escaped(chap: Client) -> None:
    r = chap.send({"jsonrpc": "2.0", "id": 3, "method": "x\udfffy"})
    refused(r, -32601)
    assert r["id"] == 3 and "\\udfff" in r["error"]["message"]


DESCRIBE = '"method": "workspace.describe", "params": {"workspace": "w"}'


def _forms(text: str) -> dict[str, Any]:
    """One envelope as every transport may hand it over: its JSON text as
    str and as UTF-8 bytes, and the dict the standard library reads from it."""
    return {"dict": json.loads(text), "str": text, "bytes": text.encode("utf-8", "surrogatepass")}


def _wire_id(response: dict[str, Any]) -> Any:
    """The id a client reads from the answer as sent (msgspec, as the transports encode)."""
    return json.loads(msgspec.json.encode(response))["id"]


@pytest.mark.parametrize("form", ["dict", "str", "bytes"])
@pytest.mark.parametrize("kind", ["array", "object"])
def test_an_id_nested_1000_deep_is_answered_never_raised(chap: Client, form: str, kind: str) -> None:
    deep = ('{"a":' * 1000 + "1" + "}" * 1000) if kind == "object" else "[" * 1000 + "1" + "]" * 1000
    text = '{"jsonrpc": "2.0", "id": ' + deep + ", " + DESCRIBE + "}"
    value: Any = 1
    for _ in range(1000):  # built by hand: the standard library cannot read it either
        value = {"a": value} if kind == "object" else [value]
    dict_form = {**json.loads("{" + DESCRIBE + "}"), "jsonrpc": "2.0", "id": value}
    r = chap.send(dict_form if form == "dict" else text if form == "str" else text.encode())
    # too deep to read back: the id is null, the error says why
    refused(r, -32600)
    assert r["id"] is None and "64" in r["error"]["message"]


@pytest.mark.parametrize("form", ["dict", "str", "bytes"])
@pytest.mark.parametrize("spelling", ["escaped", "raw"])
def test_an_id_with_a_lone_surrogate_is_echoed_as_the_client_sent_it(chap: Client, form: str, spelling: str) -> None:
    surrogate = "\\ud800" if spelling == "escaped" else "\ud800"
    r = chap.send(_forms('{"jsonrpc": "2.0", "id": "' + surrogate + '", ' + DESCRIBE + "}")[form])
    refused(r, -32602)
    assert "surrogate" in r["error"]["message"]
    assert _wire_id(r) == "\ud800"  # the very id: JSON escapes the surrogate


@pytest.mark.parametrize("form", ["str", "bytes"])
@pytest.mark.parametrize("spelling", ["escaped", "raw", "high then low escaped apart"])
def test_a_lone_surrogate_in_a_body_is_invalid_params_not_a_parse_error(
    chap: Client, form: str, spelling: str
) -> None:
    """Dispatch step 8, whatever form the body comes in; 0.3.3, given the same
    envelope as the dict the standard library reads, gives the same code."""
    value = {"escaped": "\\ud800", "raw": "\ud800", "high then low escaped apart": "\\udc00x\\ud800"}[spelling]
    text = '{"jsonrpc": "2.0", "id": 7, "method": "task.create", "params": {"workspace": "w", "kind": "' + value + '"}}'
    forms = _forms(text)
    r = chap.send(forms[form])
    refused(r, -32602)
    assert r["id"] == 7 and "surrogate" in r["error"]["message"], r
    assert chap.target.dispatch(forms["dict"])["error"] == r["error"]
    refused(chap_coordinator.Coordinator().dispatch(forms["dict"]), -32602)


def test_bytes_that_are_not_utf8_are_a_parse_error_naming_the_byte(chap: Client) -> None:
    body = b'{"jsonrpc": "2.0", "id": 7, "method": "task.create", "params": {"kind": "\xff"}}'
    r = chap.send(body)
    refused(r, -32700)
    assert r["id"] is None
    assert "not UTF-8" in r["error"]["message"] and f"byte {body.index(0xff)} (0xff)" in r["error"]["message"]


@pytest.mark.parametrize("body", ['{"jsonrpc": "2.0", "id": 7, "method": "workspace.de', '{"jsonrpc": "2.0", "id": [1, 2'])
@pytest.mark.parametrize("form", ["str", "bytes"])
def test_truncated_json_is_a_parse_error_that_says_where_it_ends(chap: Client, body: str, form: str) -> None:
    r = chap.send(body if form == "str" else body.encode())
    refused(r, -32700)
    assert r["id"] is None
    message = r["error"]["message"]
    assert f"{'character' if form == 'str' else 'byte'} {len(body)}" in message and "cut off" in message


class _DownStore(SqliteStore):
    """A real SQLite store whose reads fail, while `down`, as a database
    server's do when it is unreachable."""

    down = False

    def load_held(self, workspace: str | None = None) -> Any:
        if self.down:
            raise StoreUnavailableError(self.path, "server closed the connection unexpectedly")
        return super().load_held(workspace)


class _BreakableClock:
    """The system clock, until `broken`: then reading it raises (a defect)."""

    broken = False

    def __call__(self) -> int:
        if self.broken:
            raise RuntimeError("clock source unreadable")
        return time.time_ns() // 1_000_000


@pytest.mark.parametrize("form", ["dict", "str", "bytes"])
def test_a_store_down_or_a_defect_keeps_the_id_of_a_body_given_as_text(tmp_path: Path, form: str) -> None:
    store = _DownStore(str(tmp_path / "c.db"))
    clock = _BreakableClock()
    coord = Coordinator(store, clock=clock)
    store.down = True
    envelope = _forms('{"jsonrpc": "2.0", "id": "down-1", "method": "workspace.describe", '
                      '"params": {"workspace": "not-held"}}')[form]
    r = coord.dispatch(envelope)
    refused(r, -32900)
    assert r["id"] == "down-1"
    store.down = False
    clock.broken = True
    r = coord.dispatch(envelope)
    refused(r, -32603)
    assert r["id"] == "down-1"
    coord.close()


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_over_http_a_defect_keeps_the_id_and_a_surrogate_id_comes_back_as_sent(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from coordinator.server import create_app

    clock = _BreakableClock()
    coord = Coordinator(SqliteStore(str(tmp_path / "c.db")), clock=clock)
    with TestClient(create_app(coord), base_url="http://localhost") as http:
        body = '{"jsonrpc": "2.0", "id": "\\ud800", ' + DESCRIBE + "}"
        answer = http.post("/chap", content=body.encode(), headers={"content-type": "application/json"})
        assert json.loads(answer.content)["id"] == "\ud800" and b'"id":"\\ud800"' in answer.content

        clock.broken = True
        answer = http.post("/chap", content=b'{"jsonrpc": "2.0", "id": "h1", ' + DESCRIBE.encode() + b"}",
                           headers={"content-type": "application/json"})
        refused(answer.json(), -32603)
        assert answer.json()["id"] == "h1"
    coord.close()


# --- dispatch never raises, whatever it is given ----------------------------------

# Strings with lone surrogates (Cs) as well as any other character.
_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(2**53 - 2, 2**80), st.just(10**400),
    st.floats(), _TEXT,
)
_VALUES = st.recursive(
    _SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)),
    max_leaves=16,
)


def _nest(value: Any, depth: int, as_object: bool) -> Any:
    for _ in range(depth):
        value = {"k": value} if as_object else [value]
    return value


_DEEP = st.builds(_nest, _VALUES, st.integers(60, 3000), st.booleans())
_IDS = st.one_of(st.integers(), _TEXT, _VALUES, _DEEP)
_PARAMS = st.one_of(
    _VALUES, _DEEP,
    st.fixed_dictionaries(
        {"workspace": st.one_of(st.just("w"), _VALUES)},
        optional={"from": st.one_of(st.just("human:a"), _VALUES), "task_id": _VALUES, "kind": _VALUES,
                  "input": st.one_of(_VALUES, _DEEP), "assignee": _VALUES, "state": _VALUES},
    ),
)
_ENVELOPES = st.one_of(
    _VALUES,
    st.fixed_dictionaries(
        {"jsonrpc": st.one_of(st.just("2.0"), _VALUES), "method": st.one_of(st.sampled_from(sorted(CHAP_0_3)), _VALUES)},
        optional={"id": _IDS, "params": _PARAMS, "sig": _VALUES},
    ),
)


def _as_text(envelope: Any, ascii_only: bool) -> str | None:
    try:
        return json.dumps(envelope, ensure_ascii=ascii_only)
    except (RecursionError, ValueError):
        return None  # too deep for the standard library to write


@st.composite
def _bodies(draw: st.DrawFn) -> Any:
    """An envelope as a dict, or as JSON text (str or bytes, surrogates
    escaped or raw), whole or cut off; or any text or bytes at all."""
    kind = draw(st.sampled_from(["dict", "str", "bytes", "cut", "any text", "any bytes"]))
    if kind == "any text":
        return draw(_TEXT)
    if kind == "any bytes":
        return draw(st.binary(max_size=64))
    envelope = draw(_ENVELOPES)
    text = _as_text(envelope, draw(st.booleans())) if kind != "dict" else None
    if text is None:
        return envelope
    if kind == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    return text.encode("utf-8", "surrogatepass") if kind == "bytes" else text


def test_dispatch_never_raises_and_always_answers_a_sendable_json_rpc_response(tmp_path: Path) -> None:
    target = SqliteFile(tmp_path / "any.db")
    chap = Client(target, workspace="w")
    chap.ok("workspace.create")
    chap.ok("participant.join", frm="human:a", type="human", role="admin")

    @given(_bodies())
    def answers(body: Any) -> None:
        response = target.coord.dispatch(body)
        assert isinstance(response, dict) and response["jsonrpc"] == "2.0" and "id" in response
        assert ("result" in response) != ("error" in response), response
        if "error" in response:
            error = response["error"]
            assert isinstance(error["code"], int) and isinstance(error["message"], str) and error["message"]
        json.loads(msgspec.json.encode(response))  # sendable, and JSON a client reads
        if isinstance(body, dict) and isinstance(body.get("id"), (int, str)) and "result" in response:
            assert response["id"] == body["id"]

    answers()
    target.coord.close()


# --- messages that say what to send ------------------------------------------------


def test_task_messages_name_what_is_missing(chap: Client) -> None:
    chap.ok("workspace.create", workspace="w")
    chap.ok("participant.join", workspace="w", frm="human:a", type="human")
    message = chap.fail(-32602, "task.create", workspace="w", frm="human:a", kind="k", input={})["message"]
    assert message.startswith("Missing field: assignee")
    message = chap.fail(-32602, "task.create", workspace="w", frm="human:a", kind="k", input={},
                       assignee="agent:ghost")["message"]
    assert "'agent:ghost' is not a member" in message and "participant.join" in message
    chap.ok("participant.join", workspace="w", frm="agent:b", type="agent")
    task = chap.ok("task.create", workspace="w", frm="human:a", kind="k", input={}, assignee="agent:b")
    message = chap.fail(-32602, "task.update", workspace="w", frm="agent:b", task_id=task["task_id"])["message"]
    assert message == 'Missing field: state (from created: send state "in_progress" or "declined")'
    message = chap.fail(-32602, "task.update", workspace="w", frm="agent:b", task_id=task["task_id"],
                       state="completed")["message"]
    assert message.startswith("Illegal transition created -> completed; from created: send state")


# (params or a whole envelope, what must be said): the code must be 0.3.3's
MESSAGES = [
    ({"method": "workspace.describe", "params": {"workspace": 5}},
     "params.workspace must be a workspace id (a string), got 5"),
    ({"method": "workspace.describe", "params": {"workspace": "nope"}},
     "no workspace has this id; check it, or create it with workspace.create"),
    ({"method": "workspace.describe", "params": {"workspace": "w"}, "jsonrpc": "1.0"},
     '"jsonrpc" must be the string "2.0", got "1.0"'),
    ({"method": "task.create", "params": {"workspace": "w", "from": "human:x", "kind": "k", "input": {}, "assignee": "human:a"}},
     "join first with participant.join"),
    ({"method": "participant.leave", "params": {"workspace": "w", "from": "human:x"}},
     "join first with participant.join"),
]


@pytest.mark.parametrize("call, words", MESSAGES, ids=["workspace-not-a-string", "workspace-unknown", "jsonrpc-1.0",
                                                       "non-member", "non-member-floor"])
def test_refusals_say_what_to_fix_and_keep_0_3_3s_codes(chap: Client, call: dict[str, Any], words: str) -> None:
    reference = chap_coordinator.Coordinator(deterministic_ids=True, deterministic_clock=True)
    for target in (chap.target, reference):
        target.dispatch(_env("workspace.create", workspace="w"))
        target.dispatch(_env("participant.join", workspace="w", **{"from": "human:a"}, type="human"))
    envelope = {"jsonrpc": "2.0", "id": 9, **call}
    ours, theirs = chap.send(envelope)["error"], reference.dispatch(envelope)["error"]
    assert ours["code"] == theirs["code"] and words in ours["message"], (ours, theirs)


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
        refused(r, -32700)
        assert r["id"] is None and "the body is empty" in r["error"]["message"]
    r = chap.send(b"[]")
    refused(r, -32600)
    assert "batches (arrays) are not supported" in r["error"]["message"]
    r = chap.send({"id": 4, "method": "workspace.describe"})
    refused(r, -32600)
    assert r["id"] == 4 and 'missing "jsonrpc"' in r["error"]["message"]
    r = chap.send({"jsonrpc": "2.0", "id": 5, "method": "task.creat", "params": {}})
    refused(r, -32601)
    assert "did you mean task.create?" in r["error"]["message"]


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

    from coordinator.server import create_app

    path = str(tmp_path / "secret-dir" / "chap.db")
    os.makedirs(os.path.dirname(path))
    store = _BrokenDiskStore(path)
    coord = Coordinator(store)
    with TestClient(create_app(coord), base_url="http://localhost") as http:
        assert http.post("/chap", json=_env("workspace.create", workspace="w")).status_code == 200
        store.broken = True
        body = http.post("/chap", json=_env("participant.join", workspace="w", **{"from": "human:a"},
                                            type="human")).json()
    error = refused(body, -32900)
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
    error = refused(r, -32603)
    assert r["id"] == 1 and set(error["data"]) == {"log_id"}
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
    refused(late_named, -32602)
    assert "already exists" in late_named["error"]["message"]
    again = Coordinator(SqliteStore(path))
    assert again.snapshot(early_generated)["created"] == "2023-11-14T22:13:21.000Z"  # first's, kept
    assert again.snapshot("w")["mode"] == "shadow"
    assert len(again.workspace_ids()) == 3
    for c in (first, second, again):
        c.close()
