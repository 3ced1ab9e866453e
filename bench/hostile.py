"""Hostile input against a coordinator on a real SQLite file, with its properties checked.

    python -m bench.hostile --count 100000 [--seed N] [--db PATH]

A seeded generator builds envelopes for every CHAP 0.3 method from one table
of parameters (`PARAMS`, derived from the method registry): mostly plausible calls on the workspaces, members
and tasks the run has created, each with hostile changes — type confusion in
a param, empty and falsy values, unicode edge cases (lone surrogates, NUL,
separators, astral characters), deep nesting, huge numbers and strings, JSON
Patch bombs (a subtree copied into its own descendant, again and again),
replayed and out-of-order ids and signed requests, and raw bodies that are
not JSON-RPC at all. Every answer is checked as it comes (`Checker`):

- `dispatch` returns a JSON-RPC response and raises nothing; no -32603;
- an error names no file path and carries no exception text;
- a refused call changes nothing, in memory or in the store, except the one
  refusal entry a recorded refusal appends;
- memory and the store agree after every call;
- at every checkpoint (and at the end) the coordinator is closed and a new
  one opened on the same file: every workspace comes back exactly as it was
  answered, and every chain verifies.

`tests/test_hostile.py` runs a slice of this; the long run is this module.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from coordinator import Coordinator, CounterIds, StepClock
from coordinator.engine.wire import WORKSPACE_PAUSED
from coordinator.model import COLLECTIONS, IDEMPOTENCY_KEYS
from coordinator.profiles import REGISTRY
from coordinator.tools.verification import verify_workspace
from storage import SqliteStore

__all__ = ["Failure", "Generator", "Checker", "Report", "run", "main"]

_encode = msgspec.json.Encoder(order="sorted").encode

# --- what the run knows about the world it built ---------------------------


@dataclass
class World:
    """Ids the run has seen answered, so most calls name real things."""

    workspaces: list[str] = field(default_factory=list)
    members: dict[str, list[str]] = field(default_factory=dict)
    tasks: dict[str, list[str]] = field(default_factory=dict)
    kids: dict[str, list[str]] = field(default_factory=dict)
    sent: list[dict[str, Any]] = field(default_factory=list)  # envelopes to replay


# --- hostile values ----------------------------------------------------------

_DEEP_LIST: Any = 0
for _ in range(70):
    _DEEP_LIST = [_DEEP_LIST]
_DEEP_OBJ: Any = "x"
for _ in range(70):
    _DEEP_OBJ = {"a": _DEEP_OBJ}

UNICODE = [
    "",
    " ",
    "\u0000",
    "a\u0000b",
    "\ud800",
    "x\udfffy",
    "\u2028\u2029",
    "\ufeff",
    "\u202e" + "gnp.exe",
    "e\u0301",
    "\U0001f600",
    "\U0010ffff",
    "\\",
    '"',
    "~1/~0",
    "/",
    "..",
    "__proto__",
    "\x7f",
    "\n\t\r",
    "%s%n",
    "'; DROP TABLE chap_entries; --",
]

NUMBERS = [0, -1, 1, 2**53 - 1, -(2**53 - 1), 2**53, -(2**53), 2**63, 10**30, 1.5, -0.0, 1e308, 3.0]


def hostile_value(rng: random.Random) -> Any:
    """One value from the hostile pool (type confusion, edge cases, size)."""
    pick = rng.randrange(14)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice(NUMBERS)
    if pick == 3:
        return rng.choice(UNICODE)
    if pick == 4:
        return rng.choice([[], {}, [None], {"": None}, [""], {"__proto__": {"x": 1}}])
    if pick == 5:
        return rng.choice([_DEEP_LIST, _DEEP_OBJ])
    if pick == 6:
        return "x" * rng.choice([1_000, 100_000, 600_000])
    if pick == 7:
        return list(range(rng.choice([1_000, 20_000])))
    if pick == 8:
        return {f"k{i}": i for i in range(rng.choice([100, 5_000]))}
    if pick == 9:
        return rng.choice(UNICODE) * rng.randrange(1, 50)
    if pick == 10:
        return [rng.choice(UNICODE) for _ in range(rng.randrange(1, 5))]
    if pick == 11:
        return {rng.choice(UNICODE): rng.choice(NUMBERS)}
    if pick == 12:
        return rng.choice(["0", "-1", "1e3", "true", "null", "[]", "{}"])
    return rng.choice(["human:" + "x" * 300, "workspace:" + rng.choice(UNICODE), "group:"])


def patch_bomb(rng: random.Random) -> list[Any]:
    """A JSON Patch that grows (or breaks) the document out of proportion."""
    n = rng.choice([10, 60, 200, 1000, 1001])
    kind = rng.randrange(6)
    if kind == 0:  # a subtree copied into its own descendant: depth grows per op
        return [{"op": "copy", "from": "/a", "path": "/a/x"} for _ in range(n)]
    if kind == 1:  # the root copied into a child: size doubles per op
        return [{"op": "copy", "from": "", "path": f"/r{i}"} for i in range(n)]
    if kind == 2:  # deep paths built one level at a time
        ops, path = [], ""
        for _ in range(n):
            path += "/d"
            ops.append({"op": "add", "path": path, "value": {}})
        return ops
    if kind == 3:  # big strings copied around
        return [{"op": "add", "path": "/s", "value": "y" * 50_000}] + [
            {"op": "copy", "from": "/s", "path": f"/s{i}"} for i in range(n)
        ]
    if kind == 4:
        return [{"op": "move", "from": "/a", "path": "/a/b/c"}, {"op": "test", "path": "", "value": None}]
    return [
        rng.choice(
            [
                {"op": "add"},
                {"op": "remove", "path": ""},
                {"op": "replace", "path": "/a", "value": hostile_value(rng)},
                {"op": "copy", "from": "/~2", "path": "/x"},
                {"op": "add", "path": "/__proto__/x", "value": 1},
                {"op": "add", "path": "/a/01", "value": 1},
                {"op": rng.choice(UNICODE), "path": "/a"},
                hostile_value(rng),
            ]
        )
        for _ in range(rng.randrange(1, 6))
    ]


# --- the parameters of every method, from the method registry ---------------------
# Each param gets a kind of plausible value (`Generator.plausible` makes one):
# by its name where the name says what it refers to, else by the JSON type its
# schema declares. A method added to the registry is covered with no edit here.

_BY_NAME = {
    "workspace": "ws", "from": "member", "task_id": "task", "original_task_id": "task",
    "target_uri": "member", "assignee": "member", "kid": "kid", "old_kid": "kid", "new_jwk": "jwk",
    "profiles": "profiles", "artefact": "artefact", "diff": "patch", "new_task": "new_task",
    "range": "range", "filter": "filter", "approved_artefact_digest": "digest", "idempotency_key": "key",
    "rule": "rule", "role": "role", "input": "obj", "output": "obj",
}
_BY_METHOD = {
    ("workspace.create", "workspace"): "new_ws",
    ("participant.join", "workspace"): "ws_or_new",
    ("participant.join", "from"): "new_member",
    ("review.request", "to"): "members",
}
_BY_TYPE = {"boolean": "bool", "integer": "int", "number": "num", "object": "obj", "array": "strs"}


def _kind(method: str, name: str, schema: dict[str, Any]) -> str:
    if (method, name) in _BY_METHOD:
        return _BY_METHOD[method, name]
    if name in _BY_NAME:
        return _BY_NAME[name]
    if "enum" in schema:
        return "enum:" + "|".join(schema["enum"])
    kind = schema.get("type")
    return _BY_TYPE.get(kind, "str") if isinstance(kind, str) else "str"


def _table(method: Any) -> dict[str, str]:
    properties = (method.params or {}).get("properties") or {}
    if not properties:  # an unimplemented method: the params every CHAP call has
        return {"workspace": "ws", "from": "member", "task_id": "task"}
    return {name: _kind(method.name, name, schema) for name, schema in properties.items()}


PARAMS: dict[str, dict[str, str]] = {m.name: _table(m) for m in REGISTRY.methods()}
UNKNOWN_METHODS = ["", "task", "task.creat", "Task.Create", "review.", "x.y.z", "audit.read ", "\u0000", "rpc.discover"]


class Generator:
    """Seeded, so a failing run can be repeated exactly: `Generator(seed)`."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.world = World()
        self.next_id = 0
        self.queue: list[Callable[[], tuple[str, dict[str, Any]]]] = []
        handled = {m.name for m in REGISTRY.implemented()}
        implemented = sorted(m for m in PARAMS if m in handled)
        # Implemented methods most of the time, so that calls get past the
        # gates; every other method of CHAP 0.3 now and then.
        self.methods = implemented * 8 + sorted(m for m in PARAMS if m not in handled)

    # -- plausible values --------------------------------------------------

    def _ws(self) -> str:
        w = self.world.workspaces
        if not w or self.rng.random() < 0.05:
            return self.rng.choice(["wsp_missing", "", "wsp_" + str(self.rng.randrange(10**6))])
        return w[-1] if self.rng.random() < 0.6 else self.rng.choice(w[-8:])

    def plausible(self, kind: str, params: dict[str, Any]) -> Any:
        rng = self.rng
        wid = params.get("workspace")
        members = self.world.members.get(wid, []) if isinstance(wid, str) else []
        tasks = self.world.tasks.get(wid, []) if isinstance(wid, str) else []
        if kind == "ws":
            return self._ws()
        if kind == "new_ws":
            return None if rng.random() < 0.5 else f"ws-{rng.randrange(10**9)}"
        if kind == "ws_or_new":
            return self._ws() if rng.random() < 0.85 else f"ws-{rng.randrange(10**9)}"
        if kind == "member":
            return rng.choice(members) if members and rng.random() < 0.9 else f"human:{rng.choice('abcxyz')}"
        if kind == "members":
            pool = members or ["human:a"]
            return [rng.choice(pool) for _ in range(rng.randrange(1, 3))]
        if kind == "new_member":
            return f"{rng.choice(['human', 'agent'])}:{rng.choice('abcdefg')}{rng.randrange(4)}"
        if kind == "task":
            return rng.choice(tasks[-6:]) if tasks and rng.random() < 0.9 else "tsk_missing"
        if kind == "kid":
            kids = self.world.kids.get(wid, []) if isinstance(wid, str) else []
            return rng.choice(kids) if kids else f"k{rng.randrange(3)}"
        if kind == "jwk":
            kid = f"k{rng.randrange(10**6)}"
            self.world.kids.setdefault(wid if isinstance(wid, str) else "", []).append(kid)
            return {"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo", "kid": kid}
        if kind == "profiles":
            return rng.choice([["core/1.0"], ["core/1.0", "review/1.0"], ["core/1.0", "review/1.0", "modes/1.0"],
                               list(REGISTRY.advertisable)])
        if kind == "role":
            return rng.choice(["admin", "reviewer", "agent", "observer"])
        if kind == "rule":
            return rng.choice(["any_one_approves", "all_approve", "quorum:2"])
        if kind.startswith("enum:"):
            return rng.choice(kind[5:].split("|"))
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "int":
            return rng.choice([60, 300])
        if kind == "num":
            return rng.choice([0, 1, 50])
        if kind == "str":
            return rng.choice(["ok", "looks right", "summary", "r"])
        if kind == "strs":
            return ["a", "b"][: rng.randrange(3)]
        if kind == "key":
            return f"idem-{rng.randrange(20)}"
        if kind == "obj":
            return {"text": "draft", "n": rng.randrange(100)}
        if kind == "artefact":
            return {"a": {"b": rng.randrange(10), "c": ["x", "y"]}, "title": "draft"}
        if kind == "digest":
            return "sha256:" + "0" * 64
        if kind == "range":
            return {"from_seq": rng.randrange(5), "to_seq": rng.randrange(5, 50)}
        if kind == "filter":
            return rng.choice([{"task_id": tasks[-1] if tasks else "t"}, {"method": "task.create"},
                               {"outcome": "refused"}, {"from": members[0] if members else "x"}])
        if kind == "patch":
            if rng.random() < 0.5:
                return patch_bomb(rng)
            return [{"op": "replace", "path": "/title", "value": "final"}, {"op": "add", "path": "/a/d", "value": 1}]
        if kind == "new_task":
            return {"assignee": rng.choice(members) if members else "agent:a", "kind": "k", "input": {}}
        raise ValueError(f"unknown param kind {kind!r}")

    # -- envelopes ---------------------------------------------------------

    def _workflow(self) -> None:
        """Queue a review workflow on a fresh workspace, ending in a decision:
        the way calls reach the deep states (a review open, an artefact to patch)."""
        rng = self.rng
        wid = f"flow-{rng.randrange(10**9)}"
        admin, agent, other = "human:a", "agent:b", "human:c"

        def task() -> str:
            tasks = self.world.tasks.get(wid)
            return tasks[-1] if tasks else "tsk_missing"

        steps: list[Callable[[], tuple[str, dict[str, Any]]]] = [
            # every profile chapline implements, so that their methods pass the gate
            lambda: ("workspace.create", {"workspace": wid, "profiles": list(REGISTRY.advertisable)}),
            lambda: ("participant.join", {"workspace": wid, "from": admin, "type": "human", "role": "admin"}),
            lambda: ("participant.join", {"workspace": wid, "from": agent, "type": "agent", "role": "agent"}),
            lambda: ("participant.join", {"workspace": wid, "from": other, "type": "human", "role": "reviewer"}),
        ]
        for _ in range(rng.randrange(1, 4)):
            steps += [
                lambda: ("task.create", {"workspace": wid, "from": admin, "kind": "report", "input": {"q": 1},
                                         "assignee": agent, "review_required": rng.random() < 0.5}),
                lambda: ("task.update", {"workspace": wid, "from": agent, "task_id": task(), "state": "in_progress"}),
                lambda: ("review.request", {"workspace": wid, "from": agent, "task_id": task(),
                                            "artefact": self.plausible("artefact", {}),
                                            "to": [admin, other][: rng.randrange(1, 3)],
                                            "rule": rng.choice(["any_one_approves", "all_approve", "quorum:2"])}),
            ]
            steps.append(lambda: self._decision(wid, task(), admin))
            if rng.random() < 0.5:
                steps.append(lambda: self._decision(wid, task(), other))
        self.queue.extend(steps)

    def _decision(self, wid: str, task_id: str, reviewer: str) -> tuple[str, dict[str, Any]]:
        rng = self.rng
        base = {"workspace": wid, "from": reviewer, "task_id": task_id}
        method = rng.choice(["decide.approve", "decide.reject", "decide.override", "decide.override",
                             "abstain.declare", "escalate.raise", "audit.read", "audit.verify_chain"])
        extra = {name: self.plausible(kind, base) for name, kind in PARAMS[method].items() if name not in base}
        if method == "escalate.raise":
            extra["original_task_id"] = task_id
            extra["new_task"] = {"assignee": "agent:b", "kind": "k", "input": {}}
        return method, {**base, **extra}

    def envelope(self) -> Any:
        """The next input: a dict envelope (usually) or a raw body."""
        rng = self.rng
        if not self.queue and rng.random() < 0.04:
            self._workflow()
        if self.queue and rng.random() < 0.7:
            method, params = self.queue.pop(0)()
            if rng.random() < 0.25:
                self._mutate(params, PARAMS[method])
            self.next_id += 1
            return {"jsonrpc": "2.0", "id": self._id(), "method": method, "params": params}
        roll = rng.random()
        if roll < 0.03:
            return self._raw_body()
        if roll < 0.06 and self.world.sent:
            return rng.choice(self.world.sent[-50:])  # replayed: same id, same body
        method = rng.choice(UNKNOWN_METHODS) if roll < 0.08 else rng.choice(self.methods)
        table = PARAMS.get(method, {})
        params: dict[str, Any] = {}
        for name, kind in table.items():
            if name in ("workspace", "from", "task_id") or rng.random() < 0.7:
                params[name] = self.plausible(kind, params)
        params = {k: v for k, v in params.items() if v is not None}
        for _ in range(rng.choice([0, 0, 0, 0, 1, 1, 2, 3])):
            self._mutate(params, table)
        self.next_id += 1
        env: dict[str, Any] = {"jsonrpc": "2.0", "id": self._id(), "method": method, "params": params}
        if rng.random() < 0.08:
            self._mutate_envelope(env)
        if len(self.world.sent) < 200 or rng.random() < 0.1:
            self.world.sent.append(env)
        return env

    def _id(self) -> Any:
        rng = self.rng
        roll = rng.random()
        if roll < 0.8:
            return self.next_id
        if roll < 0.85:
            return max(self.next_id - rng.randrange(1, 100), 0)  # out of order, repeated
        return rng.choice([None, "", "id-1", 0, -1, 2**53 - 1, 1.5, [1], {"a": 1}, True, "\ud800", "x" * 1000])

    def _mutate(self, params: dict[str, Any], table: dict[str, str]) -> None:
        rng = self.rng
        names = list(table) or ["workspace"]
        name = rng.choice(names + ["extra", "\u0000", ""])
        roll = rng.random()
        if roll < 0.15:
            params.pop(name, None)
        elif roll < 0.25 and name in table:
            params[name] = None
        elif roll < 0.35 and table.get(name) == "patch":
            params[name] = patch_bomb(rng)
        else:
            params[name] = hostile_value(rng)

    def _mutate_envelope(self, env: dict[str, Any]) -> None:
        rng = self.rng
        roll = rng.randrange(9)
        if roll == 0:
            del env["jsonrpc"]
        elif roll == 1:
            env["jsonrpc"] = rng.choice(["1.0", 2.0, None, "2.0 "])
        elif roll == 2:
            del env["method"]
        elif roll == 3:
            env["method"] = hostile_value(rng)
        elif roll == 4:
            env["params"] = rng.choice([[], "x", 1, None, True, [env["params"]]])
        elif roll == 5:
            del env["params"]
        elif roll == 6:
            env["sig"] = rng.choice(["sig-1", "sig-2", "", 1, {"alg": "none"}])
        elif roll == 7:
            env["extra"] = hostile_value(rng)
        else:
            del env["id"]

    def _raw_body(self) -> Any:
        rng = self.rng
        return rng.choice(
            [
                b"",
                b" ",
                b"[]",
                b"[1,2]",
                b"null",
                b"1",
                b'"x"',
                b"{",
                b'{"jsonrpc":"2.0"',
                b"\xff\xfe\x00",
                b'{"jsonrpc":"2.0","id":1,"method":"audit.read","params":{"workspace":"\\ud800"}}',
                b'{"jsonrpc":"2.0","id":1,"method":"task.create","params":{"n":' + b"9" * 5000 + b"}}",
                b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"n":1e400}}',
                b"[" * 5000 + b"]" * 5000,
                b'{"a":' * 100 + b"1" + b"}" * 100,
                b'{"jsonrpc":"2.0","id":1,"id":2,"method":"workspace.describe"}',
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"workspace.create\",\"params\":{\"workspace\":\"\ud800\"}}",
                bytearray(b'{"jsonrpc":"2.0","id":7,"method":"workspace.describe","params":{}}'),
                b"\x00" * 10,
            ]
        )

    # -- learning from answers ------------------------------------------------

    def learn(self, envelope: Any, response: dict[str, Any]) -> None:
        """Remember the ids an accepted call made, so later calls can use them."""
        result = response.get("result") if isinstance(response, dict) else None
        if not isinstance(result, dict) or not isinstance(envelope, dict):
            return
        params = envelope.get("params") if isinstance(envelope.get("params"), dict) else {}
        wid = params.get("workspace")
        method = envelope.get("method")
        if method == "workspace.create":
            self.world.workspaces.append(result["workspace"])
        elif method == "participant.join" and isinstance(wid, str):
            if wid not in self.world.workspaces:
                self.world.workspaces.append(wid)
            self.world.members.setdefault(wid, []).append(result["as"])
        elif method == "task.create" and isinstance(wid, str):
            self.world.tasks.setdefault(wid, []).append(result["task_id"])
        elif method == "escalate.raise" and isinstance(wid, str):
            self.world.tasks.setdefault(wid, []).append(result["new_task_id"])


# --- properties ----------------------------------------------------------------


class Failure(AssertionError):
    """A property did not hold; the message names the input and what broke."""


@dataclass
class Report:
    inputs: int = 0
    accepted: int = 0
    refused: int = 0
    recorded_refusals: int = 0
    restarts: int = 0
    workspaces: int = 0
    entries: int = 0
    codes: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0

    def line(self) -> str:
        codes = ", ".join(f"{c}: {n}" for c, n in sorted(self.codes.items()))
        return (
            f"{self.inputs} inputs in {self.seconds:.0f} s: {self.accepted} accepted, {self.refused} refused "
            f"({self.recorded_refusals} recorded); {self.workspaces} workspaces, {self.entries} entries, "
            f"{self.restarts} restarts, every chain verified; codes {{{codes}}}"
        )


_FORBIDDEN_IN_ERRORS = ("Traceback", "sqlite", "/tmp", ".db", "Error:", "errno", "File \"")


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) < 400 else text[:400] + "..."


class Checker:
    """A coordinator on one SQLite file, and the properties checked per call."""

    def __init__(self, path: str, *, seed: int = 0) -> None:
        self.path = path
        self.forbidden = (*_FORBIDDEN_IN_ERRORS, os.path.dirname(path))
        self.clock = StepClock()
        self.ids = CounterIds()
        self.coord = self._open()
        self.peek = sqlite3.connect(path, isolation_level=None)
        self.states: dict[str, dict[str, Any]] = {}
        self.report = Report()

    def _open(self) -> Coordinator:
        return Coordinator(store=SqliteStore(self.path), clock=self.clock, ids=self.ids)

    def close(self) -> None:
        self.coord.close()
        self.peek.close()

    # -- state of one workspace, from memory and from the file -------------

    def state(self, wid: str) -> dict[str, Any] | None:
        """The workspace as memory answers it, checked against the file's rows."""
        if wid not in self.coord.workspace_ids():
            row = self.peek.execute("SELECT 1 FROM chap_meta WHERE workspace = ?", (wid,)).fetchone()
            if row is not None:
                raise Failure(f"workspace {wid!r} is in the file but not in memory")
            return None
        snap = self.coord.snapshot(wid)
        meta = self.peek.execute("SELECT data, version FROM chap_meta WHERE workspace = ?", (wid,)).fetchone()
        if meta is None:
            raise Failure(f"workspace {wid!r} is in memory but not in the file")
        if meta[1] != len(snap["audit"]):
            raise Failure(f"workspace {wid!r}: the file's version {meta[1]} != {len(snap['audit'])} entries")
        stored: dict[str, dict[str, Any]] = {}
        for collection, key, data in self.peek.execute(
            "SELECT collection, id, data FROM chap_objects WHERE workspace = ?", (wid,)
        ):
            stored.setdefault(collection, {})[key] = json.loads(data)
        for collection in {*COLLECTIONS, IDEMPOTENCY_KEYS, *stored}:
            if snap.get(collection, {}) != stored.get(collection, {}):
                raise Failure(f"workspace {wid!r}: memory and file differ in {collection}")
        if json.loads(meta[0]).get("chain_head") != snap.get("chain_head"):
            raise Failure(f"workspace {wid!r}: memory and file differ in chain_head")
        return snap

    # -- one call -------------------------------------------------------------

    def call(self, envelope: Any) -> dict[str, Any]:
        self.report.inputs += 1
        params = envelope.get("params") if isinstance(envelope, dict) else None
        wid = params.get("workspace") if isinstance(params, dict) else None
        wid = wid if isinstance(wid, str) else None
        before_ids = set(self.coord.workspace_ids())
        before = self.states.get(wid) if wid is not None else None
        if wid is not None and before is None and wid in before_ids:
            before = self.states[wid] = self.state(wid)  # type: ignore[assignment]
        try:
            response = self.coord.dispatch(envelope)
        except BaseException as exc:  # the property: nothing escapes dispatch
            raise Failure(f"dispatch raised {type(exc).__name__}: {exc} on {_short(envelope)}") from exc
        self._check_shape(envelope, response)
        error = response.get("error")
        after_ids = set(self.coord.workspace_ids())
        if error is None:
            self.report.accepted += 1
            for new in after_ids - before_ids:
                self.states[new] = self.state(new)  # type: ignore[assignment]
            if wid is not None and wid in after_ids:
                self.states[wid] = self.state(wid)  # type: ignore[assignment]
            return response
        self.report.refused += 1
        code = error["code"]
        self.report.codes[code] = self.report.codes.get(code, 0) + 1
        if after_ids != before_ids:
            raise Failure(f"a refused call ({code}) changed the workspaces held: {_short(envelope)}")
        if wid is not None and before is not None:
            after = self.state(wid)
            assert after is not None
            self._unchanged_but_refusal(wid, before, after, code, envelope)
            self.states[wid] = after
        return response

    def _check_shape(self, envelope: Any, response: Any) -> None:
        if not isinstance(response, dict) or response.get("jsonrpc") != "2.0" or "id" not in response:
            raise Failure(f"not a JSON-RPC response: {_short(response)} to {_short(envelope)}")
        if ("result" in response) == ("error" in response):
            raise Failure(f"a response needs exactly one of result and error: {_short(response)}")
        try:
            msgspec.json.encode(response)
        except Exception as exc:
            raise Failure(f"response cannot be sent as JSON ({exc}): {_short(envelope)}") from None
        if isinstance(envelope, dict) and "id" in envelope and "error" not in response:
            if response["id"] != envelope["id"]:
                raise Failure(f"response id {response['id']!r} != request id {envelope['id']!r}")
        error = response.get("error")
        if error is None:
            return
        code, message = error.get("code"), error.get("message")
        if type(code) is not int or not isinstance(message, str) or not message:
            raise Failure(f"malformed error object {_short(error)}")
        if code in (-32603, -32900, -32901):  # no input may cause these on a healthy store
            raise Failure(f"-32603 {message!r} ({_short(error.get('data'))}) on {_short(envelope)}")
        text = message + " " + _short(error.get("data"))
        for word in self.forbidden:
            if word and word in text:
                raise Failure(f"error text reveals {word!r}: {text[:300]} on {_short(envelope)}")

    def _unchanged_but_refusal(
        self, wid: str, before: dict[str, Any], after: dict[str, Any], code: int, envelope: Any
    ) -> None:
        old_log, new_log = before["audit"], after["audit"]
        same = {k: v for k, v in before.items() if k not in ("audit", "chain_head")}
        now = {k: v for k, v in after.items() if k not in ("audit", "chain_head")}
        if same != now:
            changed = sorted(k for k in set(same) | set(now) if same.get(k) != now.get(k))
            raise Failure(f"refused call ({code}) changed {changed} of {wid!r}: {_short(envelope)}")
        if new_log[: len(old_log)] != old_log:
            raise Failure(f"refused call ({code}) rewrote the log of {wid!r}: {_short(envelope)}")
        added = new_log[len(old_log) :]
        if not added:
            if after.get("chain_head") != before.get("chain_head"):
                raise Failure(f"refused call ({code}) moved the chain head of {wid!r}")
            return
        if len(added) != 1 or added[0].get("outcome") != {"status": "refused", "code": code}:
            raise Failure(f"refused call ({code}) appended {_short(added)} to {wid!r}: {_short(envelope)}")
        self.report.recorded_refusals += 1

    # -- restarts ---------------------------------------------------------------

    def restart(self) -> None:
        """Close, reopen on the same file; everything answered must be back, every chain verify."""
        held = {wid: self.state(wid) for wid in self.coord.workspace_ids()}
        for wid, snap in held.items():
            if self.states.get(wid) is not None and self.states[wid] != snap:
                raise Failure(f"workspace {wid!r} changed without a call naming it")
        self.coord.close()
        self.coord = self._open()
        self.report.restarts += 1
        if set(self.coord.workspace_ids()) != set(held):
            lost = set(held) - set(self.coord.workspace_ids())
            raise Failure(f"after a restart the workspaces differ (lost {sorted(lost)[:5]})")
        for wid, snap in held.items():
            again = self.state(wid)
            if again != snap:
                raise Failure(f"workspace {wid!r} did not survive a restart unchanged")
            self.verify(wid)
        self.states = dict(held)  # type: ignore[arg-type]

    def verify(self, wid: str) -> None:
        answer = self.coord.dispatch(
            {"jsonrpc": "2.0", "id": 0, "method": "audit.verify_chain", "params": {"workspace": wid}}
        )
        if answer.get("error", {}).get("code") == WORKSPACE_PAUSED:
            # audit.verify_chain is gated while a workspace is paused (as in
            # 0.3.3): check the stored chain directly instead.
            report = verify_workspace(self.coord.store, wid)
            if not report.ok:
                raise Failure(f"chain of paused {wid!r} does not verify: {report.findings[0].describe()}")
            return
        result = answer.get("result")
        if not isinstance(result, dict) or result.get("status") != "verified":
            raise Failure(f"chain of {wid!r} does not verify: {_short(answer)}")

    def finish(self) -> Report:
        self.restart()
        self.report.workspaces = len(self.coord.workspace_ids())
        self.report.entries = sum(len(s["audit"]) for s in self.states.values() if s)
        return self.report


def inputs(seed: int, count: int) -> Iterator[tuple[Generator, Any]]:
    gen = Generator(seed)
    for _ in range(count):
        yield gen, gen.envelope()


def run(
    count: int,
    seed: int = 0,
    path: str | None = None,
    *,
    checkpoint: int = 500,
    progress: Callable[[Report], None] | None = None,
) -> Report:
    """Send `count` hostile inputs and check every property; raises Failure."""
    owned = None
    if path is None:
        owned = tempfile.TemporaryDirectory(prefix="chapline-hostile-")
        path = os.path.join(owned.name, "hostile.db")
    started = time.perf_counter()
    checker = Checker(path, seed=seed)
    try:
        for n, (gen, envelope) in enumerate(inputs(seed, count), 1):
            try:
                response = checker.call(envelope)
            except Failure as exc:
                raise Failure(f"seed {seed}, input {n}: {exc}") from None
            gen.learn(envelope, response)
            if n % checkpoint == 0:
                checker.restart()
                if progress is not None:
                    checker.report.seconds = time.perf_counter() - started
                    progress(checker.report)
        report = checker.finish()
        report.seconds = time.perf_counter() - started
        return report
    finally:
        checker.close()
        if owned is not None:
            owned.cleanup()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100_000, help="hostile inputs to send (100,000)")
    ap.add_argument("--seed", type=int, default=None, help="generator seed (random when omitted; printed)")
    ap.add_argument("--db", help="SQLite file to use (kept); a temp file otherwise")
    ap.add_argument("--checkpoint", type=int, default=2_000, help="restart and verify every N inputs")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"hostile: {args.count} inputs, seed {seed}", flush=True)
    try:
        report = run(
            args.count, seed, args.db, checkpoint=args.checkpoint,
            progress=lambda r: print(f"  {r.inputs} inputs, {r.seconds:.0f} s", flush=True),
        )
    except Failure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    print("passed:", report.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
