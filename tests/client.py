"""The one test client: numbered JSON-RPC calls on one workspace, over any
transport.

A transport is anything with `dispatch(envelope) -> response`: chapline's
Coordinator, chap-coordinator 0.3.3's, or `Http` (CHAP over HTTP, which also
checks that the status mirrors the body).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import Any

import httpx

__all__ = ["WS", "Client", "Http", "env", "now", "refused"]

WS = "wsp_t"

# Error codes answered with a 5xx status: a defect or a damaged stored row,
# and the store down or out-raced.
SERVER_SIDE = {-32603: 500, -32903: 500, -32900: 503, -32901: 503}


def env(method: str, params: Any = None, id: Any = "r1") -> dict[str, Any]:
    """A JSON-RPC 2.0 request envelope (no params key when params is None)."""
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        out["params"] = params
    return out


def refused(response: dict[str, Any], code: int | Collection[int]) -> dict[str, Any]:
    """The error of `response`, asserting that it is a JSON-RPC refusal
    (an error and no result) with `code` (or one of the codes given). The
    suite's one refusal assertion (tests/test_suite_shape.py holds it to that)."""
    assert "error" in response and "result" not in response, response
    error: dict[str, Any] = response["error"]
    assert error["code"] in ((code,) if isinstance(code, int) else code), (code, response)
    return error


def now() -> str:
    """The wall clock as CHAP writes `ts` (milliseconds, `Z`)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Http:
    """CHAP over HTTP as a transport: POSTs each envelope to `/chap`, with
    `headers` (a bearer token, say)."""

    def __init__(self, http: httpx.Client, path: str = "/chap") -> None:
        self.http = http
        self.path = path
        self.headers: dict[str, str] = {}

    def dispatch(self, envelope: Any) -> dict[str, Any]:
        reply = self.http.post(self.path, json=envelope, headers=self.headers)
        body: dict[str, Any] = reply.json()
        # The status mirrors the body (SPECIFICATION.md, "HTTP binding"): 200
        # for a result, 400 for a refusal, 500/503 for what the caller cannot fix.
        error = body.get("error")
        expected = 200 if error is None else SERVER_SIDE.get(error["code"], 400)
        assert reply.status_code == expected, (reply.status_code, body)
        return body


class Client:
    """Calls on one workspace through `target` (see the module docstring);
    with `workspace=None` each call names its own.

    - `frm` (or the client's `sender`) becomes the `from` param; with `to`
      and `ts` set, a call that has a sender also gets those (as the
      conformance harness sends them) unless it names its own.
    - `call` returns the whole response, `ok` the result (asserting no
      error), `fail(code, ...)` the error (asserting the refusal, see
      `refused`); with `sign` set, each of these passes its envelope
      through it first (`send` does not).
    - `names` is the differential scripts' table: `run(step)` replaces any
      `"$name"` in the step's params by the id this side saved under that
      name (`(method, params, ("result key", "$name"))` saves one).
    """

    def __init__(
        self,
        target: Any,
        workspace: str | None = WS,
        sender: str | None = None,
        *,
        to: str | None = None,
        ts: Callable[[], str] | None = None,
        prefix: str = "r",
        sign: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.target = target
        self.workspace = workspace
        self.sender = sender
        self.to = to
        self.ts = ts
        self.prefix = prefix
        self.sign = sign
        self.n = 0
        self.names: dict[str, str] = {}
        self.responses: list[dict[str, Any]] = []

    # -- envelopes ----------------------------------------------------------

    def next_id(self) -> str:
        """The next request id: `prefix` and a count from 1."""
        self.n += 1
        return f"{self.prefix}{self.n}"

    def envelope(self, method: str, /, frm: str | None = None, **params: Any) -> dict[str, Any]:
        """The next numbered request."""
        body: dict[str, Any] = {} if self.workspace is None else {"workspace": self.workspace}
        sender = frm if frm is not None else self.sender
        if sender is not None:
            body["from"] = sender
        body.update(params)
        if "from" in body:
            if self.to is not None:
                body.setdefault("to", self.to)
            if self.ts is not None:
                body.setdefault("ts", self.ts())
        return env(method, body, id=self.next_id())

    def send(self, envelope: Any) -> dict[str, Any]:
        response: dict[str, Any] = self.target.dispatch(envelope)
        return response

    # -- calls --------------------------------------------------------------

    def call(self, method: str, /, frm: str | None = None, **params: Any) -> dict[str, Any]:
        envelope = self.envelope(method, frm, **params)
        return self.send(envelope if self.sign is None else self.sign(envelope))

    def ok(self, method: str, /, frm: str | None = None, **params: Any) -> Any:
        response = self.call(method, frm, **params)
        assert "error" not in response, (method, params, response)
        return response["result"]

    def fail(self, code: int, method: str, /, frm: str | None = None, **params: Any) -> dict[str, Any]:
        return refused(self.call(method, frm, **params), code)

    # -- reads --------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = self.ok("workspace.describe")
        return described

    def log(self, **params: Any) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.ok("audit.read", **params)["entries"]
        return entries

    def count(self) -> int:
        count: int = self.describe()["audit_count"]
        return count

    def last(self) -> dict[str, Any]:
        return self.log()[-1]

    def task(self, task_id: str) -> dict[str, Any]:
        """The stored task, as chapline's snapshot holds it."""
        task: dict[str, Any] = self.target.snapshot(self.workspace)["tasks"][task_id]
        return task

    def overrides(self) -> dict[str, Any]:
        overrides: dict[str, Any] = self.target.snapshot(self.workspace)["overrides"]
        return overrides

    # -- the usual cast -----------------------------------------------------

    def setup(
        self,
        members: tuple[str, ...] = ("human:alice", "agent:bot", "human:bob", "human:carol"),
        **create: Any,
    ) -> None:
        """Create the workspace and join `members` (the first one as admin)."""
        self.ok("workspace.create", **create)
        for i, uri in enumerate(members):
            extra = {"role": "admin"} if i == 0 else {}
            self.ok("participant.join", uri, type=uri.split(":")[0], **extra)

    def new_task(self, frm: str = "human:alice", assignee: str = "agent:bot", **params: Any) -> str:
        params.setdefault("kind", "draft")
        params.setdefault("input", {})
        task_id: str = self.ok("task.create", frm, assignee=assignee, **params)["task_id"]
        return task_id

    # -- differential scripts -----------------------------------------------

    def build(self, value: Any) -> Any:
        """`value` with every saved `"$name"` replaced by its id. A name never
        saved is a mistake in the script (KeyError); only a step number
        (`"$3"`, support.run_script's) may be unsaved, as a random script
        can name a step that generated no id."""
        if isinstance(value, str) and value.startswith("$") and not value[1:].isdigit():
            return self.names[value]
        if isinstance(value, str) and value in self.names:
            return self.names[value]
        if isinstance(value, dict):
            return {k: self.build(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.build(v) for v in value]
        return value

    def run(self, step: tuple[Any, ...]) -> dict[str, Any]:
        """One scripted step, sent as written (its params name the workspace)."""
        method, params = step[0], step[1]
        response = self.send(env(method, self.build(copy.deepcopy(params)), id=self.next_id()))
        self.responses.append(response)
        if len(step) > 2:
            key, name = step[2]
            assert "result" in response, (step, response)
            self.names[name] = response["result"][key]
        return response
