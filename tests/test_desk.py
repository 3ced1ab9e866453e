"""The desk's server side over real HTTP: its pages, its reads and the event
stream that feeds every open desk (the pages themselves are driven in a real
browser by test_desk_browser.py)."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from client import Client, Http, refused
from servers import LiveServer

from coordinator import Coordinator
from coordinator.cli import DEFAULT_PROFILES
from coordinator.server import create_app
from coordinator.server.desk.routes import STATIC
from storage import SqliteStore

WS = "wsp_desk"
ALICE = "human:alice"
BOT = "agent:drafter"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[httpx.Client, Coordinator, LiveServer]]:
    coord = Coordinator(store=SqliteStore(tmp_path / "chap.db"), default_profiles=DEFAULT_PROFILES)
    live = LiveServer(create_app(coord))
    try:
        with httpx.Client(base_url=live.url, timeout=60) as http:
            yield http, coord, live
    finally:
        live.stop()
        coord.close()


def call(http: httpx.Client, method: str, **params: Any) -> Any:
    return Client(Http(http), WS).ok(method, **params)


def test_the_desk_page_and_its_modules_are_served(served: tuple[httpx.Client, Coordinator, LiveServer]) -> None:
    http, _, _ = served
    page = http.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/desk/static/desk.js">' in page.text
    for name in ("desk.js", "api.js", "dom.js", "keys.js", "markdown.js", "patch.js", "reading.js", "refusals.js", "route.js",
                 "desk.css",
                 "favicon.svg"):
        reply = http.get(f"/desk/static/{name}")
        assert reply.status_code == 200, name
        assert reply.content == (STATIC / name).read_bytes()
    assert "javascript" in http.get("/desk/static/desk.js").headers["content-type"]
    assert http.get("/desk/static/favicon.svg").headers["content-type"].startswith("image/svg+xml")
    assert '<link rel="icon" href="/desk/static/favicon.svg"' in page.text
    assert http.get("/desk/static/../routes.py").status_code == 404
    # POST / is still CHAP.
    assert call(http, "participant.join", frm=ALICE, type="human")["joined"] is True


def test_the_desk_reads(served: tuple[httpx.Client, Coordinator, LiveServer]) -> None:
    http, coord, _ = served
    assert http.get("/desk/api/session").json() == {"auth": False, "principal": None}
    call(http, "participant.join", frm=ALICE, type="human", role="reviewer")
    assert http.get("/desk/api/workspaces").json() == {"workspaces": [WS]}
    snapshot = http.get(f"/desk/api/snapshot?workspace={WS}").json()
    assert snapshot == json.loads(json.dumps(coord.snapshot(WS)))
    missing = http.get("/desk/api/snapshot?workspace=wsp_nope")
    refused(missing.json(), -32602)
    assert missing.status_code == 404
    unnamed = http.get("/desk/api/snapshot")
    assert unnamed.status_code == 400 and "workspace=" in unnamed.json()["error"]["message"]


def _events(http: httpx.Client, path: str, out: queue.Queue[tuple[str, Any]]) -> None:
    with http.stream("GET", path) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in reply.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                out.put((name or "message", json.loads(line[6:])))
    out.put(("end", None))


def test_each_recorded_entry_reaches_every_open_stream(
    served: tuple[httpx.Client, Coordinator, LiveServer],
) -> None:
    http, _, live = served
    streams = []
    for path in ("/chap/events", f"/chap/events?workspace={WS}", "/chap/events?workspace=wsp_other"):
        out: queue.Queue[tuple[str, Any]] = queue.Queue()
        threading.Thread(target=_events, args=(http, path, out), daemon=True).start()
        assert out.get(timeout=60) == ("ready", {})
        streams.append(out)
    call(http, "participant.join", frm=ALICE, type="human", role="reviewer")
    call(http, "participant.join", frm=BOT, type="agent")
    task = call(http, "task.create", frm=ALICE, assignee=BOT, kind="k", input={})["task_id"]
    # A recorded refusal is an entry too; a read and an unrecorded refusal are not.
    call(http, "workspace.describe")
    http.post("/chap", json={"jsonrpc": "2.0", "id": 9, "method": "task.complete",
                             "params": {"workspace": WS, "from": BOT}})
    refusal = http.post("/chap", json={"jsonrpc": "2.0", "id": 10, "method": "decide.approve",
                                       "params": {"workspace": WS, "from": ALICE, "task_id": task}})
    refused(refusal.json(), -32010)
    log = call(http, "audit.read")["entries"]
    assert len(log) == 4 and log[-1]["outcome"]["code"] == -32010
    # Each event carries what its call wrote, as the workspace then held it
    # (none of these objects changed again since: the snapshot is the oracle).
    snapshot = http.get(f"/desk/api/snapshot?workspace={WS}").json()
    written = [{"members": [ALICE]}, {"members": [BOT]}, {"tasks": [task]}, {}]
    for out in streams[:2]:
        got = [out.get(timeout=60) for _ in log]
        assert [(name, data["workspace"], data["entry"]) for name, data in got] == [
            ("audit", WS, entry) for entry in log]
        for (_, data), wrote in zip(got, written, strict=True):
            assert {c: sorted(keys) for c, keys in data["objects"].items()} == wrote, data["objects"]
            for collection, items in data["objects"].items():
                assert items == {key: snapshot[collection][key] for key in items}
        assert out.empty()
    assert streams[2].empty()
    # Closing the hub (what stopping the server does first) ends every
    # stream, each told why first (SPECIFICATION.md, "Review desk").
    live.app.state.events.close()
    for out in streams:
        name, data = out.get(timeout=60)
        assert name == "end" and data["reason"] == "server_stopping"
        assert out.get(timeout=60) == ("end", None)
