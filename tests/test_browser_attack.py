"""Another site's page against `chapline serve` (its defaults: no --auth,
loopback), in the reviewer's own browser: Debian's Chromium through
Selenium, as test_desk_browser.py drives it.

The reviewer has the desk open in one tab. In another, a page served by a
second HTTP server on another port (another origin) tries to write, to join
the reviewer's workspace as `human:mallory` with role admin (fetch with
JSON, fetch with `text/plain`, a `no-cors` fetch, a `text/plain` form, two
`navigator.sendBeacon`s) and to read (the event stream with fetch and with
EventSource, the desk's snapshot and workspace list, `audit.read`), and
frames the desk. Then the same page's script runs after a DNS rebinding
(Chromium resolves evil.example to 127.0.0.1, so the page's own origin is
evil.example:<the server's port>) and tries again. The audit log must hold
nothing new, the page must have read nothing, and the desk tab must have
reported no Content-Security-Policy violation while it worked.

Chromium missing is a failure, not a skip: `.ci/run` installs it.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from servers import Serve
from test_desk_browser import WAIT, act_as, chromium, wait

WS = "wsp_victim"
ALICE = "human:alice"
SECRET = "ledger-figure-4.2-percent"
EVIL = "evil.example"

ATTACK_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>cute cats</title><script src="attack.js"></script></head>
<body>
<form id="form" method="POST" enctype="text/plain" action="__VICTIM__/chap" target="sink">
<input name='{"jsonrpc":"2.0","id":"form","method":"participant.join","params":{"workspace":"__WS__","from":"human:mallory","type":"human","role":"admin","x":"' value='"}}'>
</form>
<iframe name="sink" id="sink"></iframe>
<iframe id="framed" src="__VICTIM__/"></iframe>
</body></html>
"""

# Each attempt resolves to {ok, value} or {ok: false, error}; a response the
# page may not read is "(opaque)".
ATTACK_JS = """
const victim = "__VICTIM__";
const join = JSON.stringify({jsonrpc: "2.0", id: "evil", method: "participant.join",
  params: {workspace: "__WS__", from: "human:mallory", type: "human", role: "admin"}});
const readLog = JSON.stringify({jsonrpc: "2.0", id: "r", method: "audit.read", params: {workspace: "__WS__"}});
const within = (promise) => Promise.race([promise,
  new Promise((resolve) => setTimeout(() => resolve("(no answer within 20 s)"), 20000))]);
async function text(reply) {
  return reply.type === "opaque" ? "(opaque)" : `${reply.status} ${await reply.text()}`;
}
async function attempt(results, name, run) {
  try { results[name] = {ok: true, value: String(await within(run()))}; }
  catch (err) { results[name] = {ok: false, error: String(err)}; }
}
function submitted() {
  return new Promise((resolve) => {
    document.getElementById("sink").onload = () => resolve("submitted");
    document.getElementById("form").submit();
  });
}
function streamed() {
  return new Promise((resolve, reject) => {
    const source = new EventSource(victim + "/chap/events");
    source.addEventListener("ready", (e) => { source.close(); resolve("ready " + e.data); });
    source.onerror = () => { source.close(); reject(new Error("EventSource failed")); };
  });
}
window.attack = async function (base) {
  const results = {};
  const post = (body, type, mode) => fetch(base + "/chap", {method: "POST", mode, headers: {"Content-Type": type}, body});
  await attempt(results, "write fetch json", async () => text(await post(join, "application/json", "cors")));
  await attempt(results, "write fetch text/plain", async () => text(await post(join, "text/plain", "cors")));
  await attempt(results, "write fetch no-cors", async () => text(await post(join, "text/plain", "no-cors")));
  await attempt(results, "write beacon", async () => navigator.sendBeacon(base + "/chap", join));
  await attempt(results, "write beacon json blob",
    async () => navigator.sendBeacon(base + "/chap", new Blob([join], {type: "application/json"})));
  if (base === victim) await attempt(results, "write form text/plain", submitted);
  for (const path of ["/chap/events", "/desk/api/snapshot?workspace=__WS__", "/desk/api/workspaces", "/desk/api/session"]) {
    await attempt(results, "read " + path, async () => text(await fetch(base + path)));
  }
  await attempt(results, "read audit.read", async () => text(await post(readLog, "application/json", "cors")));
  if (base === victim) await attempt(results, "read EventSource", streamed);
  return results;
};
"""


def call(base: str, method: str, **params: Any) -> Any:
    """A call as the reviewer's own tools make it (not from a browser)."""
    reply = httpx.post(base + "/chap", json={"jsonrpc": "2.0", "id": method, "method": method,
                                             "params": {"workspace": WS, **params}}, timeout=60)
    return reply.json()["result"]


@pytest.fixture(scope="module")
def victim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`chapline serve` with its defaults, holding a workspace with a secret in a task."""
    with Serve(tmp_path_factory.mktemp("victim") / "chap.db") as server:
        call(server.base, "participant.join", **{"from": ALICE}, type="human", role="admin")
        call(server.base, "task.create", **{"from": ALICE}, assignee=ALICE, kind="report",
             input={"figure": SECRET})
        yield server.base


@pytest.fixture(scope="module")
def attacker(tmp_path_factory: pytest.TempPathFactory, victim: str) -> Iterator[str]:
    """Another origin: a plain HTTP server on another port serving the attack page."""
    root = tmp_path_factory.mktemp("attacker")
    for name, text in (("attack.html", ATTACK_HTML), ("attack.js", ATTACK_JS)):
        (root / name).write_text(text.replace("__VICTIM__", victim).replace("__WS__", WS))

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"),
                      f"--host-resolver-rules=MAP {EVIL} 127.0.0.1",  # the rebinding, made to order
                      network_log=True)
    try:
        yield driver
    finally:
        driver.quit()


class Network:
    """The requests the browser sent to the server under attack, and their
    outcome, from Chromium's DevTools log (the page itself cannot see what
    became of a beacon or a form)."""

    def __init__(self, driver: WebDriver, victim: str, desk_frame: str) -> None:
        self.driver = driver
        self.victim = victim
        # The desk tab keeps reading its own server (it reloads on every
        # event and when its stream reopens); only what other frames sent is
        # the attack's.
        self.desk_frame = desk_frame
        self.sent: dict[str, str] = {}  # request id -> "METHOD url"
        self.outcome: dict[str, int | str] = {}  # request id -> status, or the failure

    def read(self) -> None:
        for record in self.driver.get_log("performance"):
            message = json.loads(record["message"])["message"]
            method, params = message["method"], message.get("params", {})
            if (method == "Network.requestWillBeSent" and params["request"]["url"].startswith(self.victim)
                    and params.get("frameId") != self.desk_frame):
                self.sent[params["requestId"]] = f'{params["request"]["method"]} {params["request"]["url"]}'
            elif method == "Network.responseReceived":
                self.outcome[params["requestId"]] = params["response"]["status"]
            elif method == "Network.loadingFailed":
                self.outcome.setdefault(params["requestId"], params.get("errorText", "failed"))

    def settled(self) -> list[tuple[str, int | str]]:
        """Once every request sent has an outcome: each request with its outcome."""
        self.read()
        if any(rid not in self.outcome for rid in self.sent):
            return []
        return [(self.sent[rid], self.outcome[rid]) for rid in self.sent]


def test_another_sites_page_can_neither_write_nor_read(
    victim: str, attacker: str, browser: WebDriver
) -> None:
    before = call(victim, "audit.read", **{"from": ALICE})["entries"]
    members = call(victim, "workspace.describe")["members"]

    # The reviewer's desk, with every CSP violation it reports kept.
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": (
        "window.__violations = [];"
        "document.addEventListener('securitypolicyviolation',"
        " (e) => window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));")})
    act_as(browser, victim, ALICE)
    browser.find_element(By.ID, "nav-workspace").click()
    wait(browser, lambda d: d.find_element(By.ID, "verdict"), "the desk's workspace page")
    desk_tab = browser.current_window_handle
    desk_frame = browser.execute_cdp_cmd("Page.getFrameTree", {})["frameTree"]["frame"]["id"]
    network = Network(browser, victim, desk_frame)

    # The attack, from another origin.
    browser.switch_to.new_window("tab")
    browser.set_script_timeout(WAIT * 2)
    browser.get(attacker + "/attack.html")
    results = browser.execute_async_script(
        "const done = arguments[arguments.length - 1]; window.attack(arguments[0]).then(done);", victim)
    assert set(results) >= {"write fetch json", "write form text/plain", "write beacon", "read /chap/events",
                            "read EventSource", "read audit.read"}, results
    for name, result in results.items():
        shown = json.dumps(result)
        assert SECRET not in shown and '"result"' not in shown and ALICE not in shown, (name, result)
        if name.startswith("read"):
            assert result["ok"] is False, (name, result)  # nothing readable came back
    outcomes = wait(browser, lambda d: network.settled(), "an outcome for every request the page sent")
    assert sum(request.startswith("POST") for request, _ in outcomes) >= 4, outcomes
    for request, outcome in outcomes:
        if request == f"GET {victim}/":  # the framed desk: served, and not shown (below)
            continue
        assert outcome in (403, 415) or isinstance(outcome, str), (request, outcome)

    # The desk, framed by the page: refused (frame-ancestors, X-Frame-Options).
    browser.switch_to.frame(browser.find_element(By.ID, "framed"))
    assert browser.find_elements(By.ID, "main") == []
    browser.switch_to.default_content()

    # After a DNS rebinding, the page's own origin is the server's address.
    rebound = victim.replace("127.0.0.1", EVIL)
    browser.get(rebound + "/")
    assert browser.find_elements(By.ID, "main") == []
    assert "--allowed-host" in browser.find_element(By.TAG_NAME, "body").text
    browser.execute_script(ATTACK_JS.replace("__VICTIM__", victim).replace("__WS__", WS))
    again = browser.execute_async_script(
        "const done = arguments[arguments.length - 1]; window.attack(arguments[0]).then(done);", rebound)
    for name, result in again.items():
        shown = json.dumps(result)
        assert SECRET not in shown and '"result"' not in shown, (name, result)
        if name.startswith("read") or name.startswith("write fetch json"):
            assert result["ok"] and result["value"].startswith("421 "), (name, result)

    # Nothing was written; the desk saw nothing to report.
    assert call(victim, "audit.read", **{"from": ALICE})["entries"] == before
    assert call(victim, "workspace.describe")["members"] == members
    browser.switch_to.window(desk_tab)
    assert browser.execute_script("return window.__violations") == []
    assert "mallory" not in browser.find_element(By.ID, "view").text
