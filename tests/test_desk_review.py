"""Deciding at the review desk in real Chromium, where every test reads the
audit log after the click and asserts that the decision recorded is the one
the person made (SPECIFICATION.md, "Review desk"):

- Approve is off while the draft differs from the agent's or does not parse
  (or holds a number CHAP cannot carry): a broken edit never approves the
  agent's original;
- a double click, or a click while a call is in flight, records one call;
- a task decided elsewhere while the page is open turns read-only;
- links carry the workspace, closed tasks show their decision history,
  reject is an explicit choice with a reason, drafts read as the agent wrote
  them (nested parts folding), the keyboard clears a queue, and no page
  scrolls sideways.

Every test runs in a tab at 1400x900 and in one at 390x844 (a phone: the
inbox's rows become cards), but for the fifty-review queue, cleared by
keyboard alone at 1400x900, and the accessibility audit, which audits the
sign-in page once and each other page at both sizes in one run.

The harness (the server, Chromium, waiting) is test_desk_browser.py's.
Screenshots go to tests/artifacts/desk/ (or $CHAPLINE_DESK_SCREENSHOTS).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import selenium_axe_python
from client import Client, Http, refused
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from test_desk_browser import (
    ALICE,
    BOB,
    BOT,
    SIZES,
    WS,
    Desk,
    chromium,
    click,
    quiet,
    sign_in,
    size_of,
    snap,
    wait,
)

from coordinator.server.scopes import Grant

AXE = Path(selenium_axe_python.__file__).parent / "axe-core" / "axe.min.js"
OTHER = "wsp_zeta"  # sorts after WS, so it is never the desk's default workspace


@pytest.fixture(scope="module")
def shots() -> Path:
    where = os.environ.get("CHAPLINE_DESK_SCREENSHOTS")
    path = Path(where) if where else Path(__file__).resolve().parent / "artifacts" / "desk"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    d = Desk(tmp_path_factory.mktemp("desk-review") / "chap.db")
    try:
        d.ok(ALICE, "participant.join", type="human", role="reviewer", display_name="Alice")
        d.ok(BOB, "participant.join", type="human", role="reviewer")
        d.ok(BOT, "participant.join", type="agent", role="drafter")
        yield d
    finally:
        d.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    driver = chromium(tmp_path_factory.mktemp("chromium-review"))
    try:
        yield driver
    finally:
        driver.quit()


# Every flow runs at both sizes the desk is made for, here as a
# device-metrics override, which holds for one tab only.
@pytest.fixture(params=list(SIZES))
def size(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def another_tab(driver: WebDriver, size: str) -> None:
    """Switch to a new tab drawn at `size`."""
    driver.switch_to.new_window("tab")
    metrics = SIZES[size]
    if metrics is not None:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


def signed_in_tab(browser: WebDriver, desk: Desk, size: str) -> Iterator[WebDriver]:
    another_tab(browser, size)
    try:
        sign_in(browser, desk)
        yield browser
    finally:
        browser.close()
        browser.switch_to.window(browser.window_handles[0])


@pytest.fixture
def tab(browser: WebDriver, desk: Desk, size: str) -> Iterator[WebDriver]:
    """A new tab at `size` signed in as Alice (the sign-in lives in the
    tab's sessionStorage), closed after the test."""
    yield from signed_in_tab(browser, desk, size)


@pytest.fixture
def desktop_tab(browser: WebDriver, desk: Desk) -> Iterator[WebDriver]:
    """`tab` at 1400x900 only, for the flows that are the keyboard's alone."""
    yield from signed_in_tab(browser, desk, "1400x900")


def each_size(ws: str, size: str) -> str:
    """A workspace of its own for each size a test runs at, so the second
    run meets nothing the first left."""
    return f"{ws}_{size.split('x')[0]}"


def ask(desk: Desk, kind: str, artefact: Any, *, to: list[str] | None = None, summary: str = "",
        ws: str = WS) -> str:
    """The agent asks for a review over HTTP, as an agent would."""
    alice, bot = client(desk, ALICE, ws), client(desk, BOT, ws)
    task = alice.ok("task.create", assignee=BOT, kind=kind, input={"ask": kind})["task_id"]
    bot.ok("task.update", task_id=task, state="in_progress")
    bot.ok("review.request", task_id=task, to=to or [ALICE], artefact=artefact, summary=summary)
    return str(task)


def client(desk: Desk, who: str, ws: str) -> Client:
    if ws == WS:
        return desk.chap[who]
    transport = Http(desk.http)
    transport.headers = {"Authorization": f"Bearer {desk.token[who]}"}
    return Client(transport, ws, who, prefix=f"t-{ws}-{who}-")


def recorded(desk: Desk, task: str, ws: str = WS) -> list[tuple[str, str, int | None]]:
    """Every recorded entry about `task` after the review was asked for:
    (method, who, refusal code or None)."""
    out = []
    for e in client(desk, ALICE, ws).ok("audit.read")["entries"]:
        call = e.get("envelope") or e.get("request") or {}
        p = call.get("params") or {}
        if task in (p.get("task_id"), p.get("original_task_id")) and call.get("method") not in (
                "task.create", "task.update", "review.request"):
            out.append((call["method"], p.get("from"), (e.get("outcome") or {}).get("code")))
    return out


def params_of(desk: Desk, task: str, method: str, ws: str = WS) -> dict[str, Any]:
    [p] = [e["envelope"]["params"] for e in client(desk, ALICE, ws).ok("audit.read")["entries"]
           if e.get("envelope", {}).get("method") == method and e["envelope"]["params"].get("task_id") == task]
    return p  # type: ignore[no-any-return]


def open_review(tab: WebDriver, desk: Desk, task: str, ws: str = WS) -> None:
    tab.get(f"{desk.url}/#/w/{ws}/review/{task}")
    showing(tab, task)
    assert tab.find_element(By.ID, "task-state").text == "review_requested"


def showing(tab: WebDriver, task: str) -> None:
    """Until the review page of `task` is drawn (the address changes before
    the page does, so the address alone is not enough)."""
    wait(tab, lambda d: d.current_url.endswith(f"/review/{task}") and d.find_element(By.ID, "task-id").text == task,
         f"the review page of {task}")
    quiet(tab)
    assert wider(tab) == []


def enabled(tab: WebDriver, element_id: str) -> bool:
    return bool(tab.execute_script(f"return !document.getElementById('{element_id}').matches(':disabled')"))


def type_draft(tab: WebDriver, text: str) -> None:
    draft = tab.find_element(By.ID, "draft")
    draft.send_keys(Keys.CONTROL, "a")
    draft.send_keys(Keys.DELETE)
    draft.send_keys(text)


def press(tab: WebDriver, *keys: str) -> None:
    ActionChains(tab).send_keys(*keys).perform()


def ctrl(tab: WebDriver, key: str) -> None:
    """Ctrl held down while `key` is pressed (Ctrl+Enter, Ctrl+A)."""
    ActionChains(tab).key_down(Keys.CONTROL).send_keys(key).key_up(Keys.CONTROL).perform()


def at_inbox(tab: WebDriver, ws: str = WS) -> None:
    wait(tab, lambda d: d.current_url.endswith(f"#/w/{ws}/inbox") and d.find_element(By.ID, "page-title").text == "Inbox",
         "back in the inbox")
    quiet(tab)
    assert wider(tab) == []


WIDER = """
const width = document.documentElement.clientWidth;
if (document.documentElement.scrollWidth <= width) return [];
return [...document.querySelectorAll('body *')]
  .filter((el) => el.getBoundingClientRect().right > width + 0.5)
  .map((el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className ? '.' + el.className : ''));
"""


def wider(tab: WebDriver) -> list[str]:
    """What sticks out sideways (nothing, when the page needs no sideways scrolling)."""
    found: list[str] = tab.execute_script(WIDER)
    return found


CONFIG = {"service": "billing-api", "rpm": 600, "burst": 40, "regions": ["eu-west-1"]}


def test_a_broken_or_edited_draft_is_never_approved(desk: Desk, tab: WebDriver, shots: Path) -> None:
    task = ask(desk, "config", CONFIG, summary="Raise the limits for the launch")
    open_review(tab, desk, task)
    assert enabled(tab, "approve") and not enabled(tab, "override")
    original = tab.find_element(By.ID, "draft").get_attribute("value")
    assert original is not None

    # "rpm": 600 -> 300, : the draft no longer parses.
    type_draft(tab, original.replace('"rpm": 600,', '"rpm": 300,,'))
    wait(tab, lambda d: "not valid JSON" in d.find_element(By.ID, "draft-error").text, "the parse error")
    assert not enabled(tab, "approve") and not enabled(tab, "approve-next") and not enabled(tab, "override")
    assert "draft has an error" in tab.find_element(By.ID, "approve-why").text
    tab.find_element(By.ID, "approve").click()  # a disabled button: nothing happens
    tab.find_element(By.ID, "page-title").click()
    press(tab, "a")  # nor by keyboard
    snap(tab, shots, "review-broken-draft")

    # A decimal parses but CHAP cannot carry it: caught with the reason.
    type_draft(tab, original.replace('"rpm": 600', '"rpm": 300.5'))
    wait(tab, lambda d: "CHAP carries only integers" in d.find_element(By.ID, "draft-error").text,
         "the decimal caught")
    assert not enabled(tab, "approve") and not enabled(tab, "override")

    # A valid edit: Override only; undone: Approve again.
    type_draft(tab, original.replace('"rpm": 600', '"rpm": 300'))
    wait(tab, lambda d: enabled(d, "override"), "override enabled for a valid edit")
    assert not enabled(tab, "approve") and tab.find_element(By.ID, "draft-error").text == ""
    assert "differs from the agent's" in tab.find_element(By.ID, "approve-why").text
    changes = tab.find_element(By.ID, "changes").text
    assert "/rpm" in changes and "600" in changes and "300" in changes
    type_draft(tab, original)
    wait(tab, lambda d: enabled(d, "approve"), "approve back for the agent's draft")
    type_draft(tab, original.replace('"rpm": 600', '"rpm": 300'))
    wait(tab, lambda d: enabled(d, "override"), "override enabled again")
    tab.find_element(By.ID, "rationale").send_keys("600 rpm trips the upstream quota")
    tab.execute_script("document.getElementById('changes-title').scrollIntoView({block: 'center'})")
    snap(tab, shots, "review-edit")
    tab.find_element(By.ID, "override").click()
    at_inbox(tab)

    assert recorded(desk, task) == [("decide.override", ALICE, None)]
    assert params_of(desk, task, "decide.override")["diff"] == [{"op": "replace", "path": "/rpm", "value": 300}]
    assert desk.coord.snapshot(WS)["tasks"][task]["output"] == {**CONFIG, "rpm": 300}

    # The closed task reads as its decision history, not as a draft.
    tab.get(f"{desk.url}/#/w/{WS}/review/{task}")
    history = wait(tab, lambda d: d.find_element(By.ID, "decision-history").text, "the decision history")
    assert f"Overridden by {ALICE}" in history and "600 rpm trips the upstream quota" in history
    assert "/rpm" in history
    assert json.dumps(300) in tab.find_element(By.ID, "final-output").text
    assert not tab.find_elements(By.ID, "draft") and not tab.find_elements(By.ID, "approve")
    snap(tab, shots, "review-closed-history")


def test_a_double_click_records_one_decision(desk: Desk, tab: WebDriver, shots: Path) -> None:
    task = ask(desk, "report", {"title": "Weekly numbers", "body": "Up 3 percent."})
    open_review(tab, desk, task)
    ActionChains(tab).double_click(tab.find_element(By.ID, "approve")).perform()
    at_inbox(tab)
    wait(tab, lambda d: "Approved" in d.find_element(By.ID, "status").text, "the page saying approved")
    assert "refused" not in tab.find_element(By.ID, "status").text
    assert recorded(desk, task) == [("decide.approve", ALICE, None)]


HOLD = """
const real = window.fetch;
window.__held = 0;
window.__gate = new Promise((release) => { window.__release = release; });
window.fetch = async (url, init) => {
  if (url === "/chap" && init && String(init.body).includes('"decide.')) {
    window.__held += 1;
    await window.__gate;
  }
  return real(url, init);
};
"""

CONTROLS = """
return [...document.querySelectorAll(
  '#decide-controls button, #decide-controls input, #decide-controls textarea, #decide-controls select')]
  .filter((el) => !el.matches(':disabled')).map((el) => el.id);
"""


def test_every_decision_control_is_off_while_a_call_is_in_flight(desk: Desk, tab: WebDriver) -> None:
    task = ask(desk, "report", {"title": "Monthly numbers", "body": "Flat."})
    open_review(tab, desk, task)
    # The page's own fetch holds decisions until released: the call is real,
    # only its departure is held, so "in flight" lasts as long as the test needs.
    tab.execute_script(HOLD)
    tab.find_element(By.ID, "approve").click()
    wait(tab, lambda d: d.execute_script("return window.__held") == 1, "the approval in flight")
    assert tab.execute_script(CONTROLS) == []
    assert tab.find_element(By.ID, "draft").get_attribute("readonly") is not None
    tab.find_element(By.ID, "approve").click()
    tab.find_element(By.ID, "reject").click()
    tab.find_element(By.ID, "page-title").click()
    press(tab, "a")
    assert tab.execute_script("return window.__held") == 1
    tab.execute_script("window.__release()")
    at_inbox(tab)
    assert recorded(desk, task) == [("decide.approve", ALICE, None)]


def test_a_task_decided_elsewhere_turns_read_only(desk: Desk, tab: WebDriver, shots: Path) -> None:
    task = ask(desk, "report", {"title": "Incident note", "body": "Resolved at 14:05."}, to=[ALICE, BOB])
    open_review(tab, desk, task)
    original = tab.find_element(By.ID, "draft").get_attribute("value")
    assert original is not None
    type_draft(tab, original.replace("14:05", "14:07"))
    tab.find_element(By.ID, "rationale").send_keys("The pager says 14:07")
    wait(tab, lambda d: enabled(d, "override"), "an edit ready to override")
    # A one-word edit reads as that word changed, not as the body replaced.
    assert [e.text for e in tab.find_elements(By.CSS_SELECTOR, "#changes del")] == ["14:05."]
    assert [e.text for e in tab.find_elements(By.CSS_SELECTOR, "#changes ins")] == ["14:07."]

    desk.ok(BOB, "decide.approve", task_id=task)  # Bob, over HTTP, elsewhere

    notice = wait(tab, lambda d: d.find_element(By.ID, "decided-elsewhere").text, "the page turning read-only")
    assert f"approved by {BOB}" in notice and "Nothing you entered was sent" in notice
    assert tab.find_element(By.ID, "task-state").text == "completed"
    assert "14:07" in (tab.find_element(By.ID, "unsent").get_attribute("textContent") or "")
    assert not tab.find_elements(By.ID, "override") and not tab.find_elements(By.ID, "approve")
    assert f"Approved by {BOB}" in tab.find_element(By.ID, "decision-history").text
    snap(tab, shots, "review-decided-elsewhere")
    press(tab, "a")
    ctrl(tab, Keys.ENTER)
    # Nothing but Bob's approval is recorded: no override, no refusal.
    desk.ok(ALICE, "workspace.describe")  # a read after the keys, so any call they made has landed
    assert recorded(desk, task) == [("decide.approve", BOB, None)]


def test_a_link_carries_the_workspace_and_a_reload_lands_on_it(desk: Desk, tab: WebDriver, size: str) -> None:
    other = each_size(OTHER, size)
    for who, kind in ((ALICE, "human"), (BOT, "agent")):
        client(desk, who, other).ok("participant.join", type=kind, role="reviewer")
    task = ask(desk, "summary", "Launch went fine.\nTwo follow-ups.", ws=other)
    wait(tab, lambda d: d.current_url.endswith(f"#/w/{WS}/inbox"), "the default workspace's inbox")
    deep = f"{desk.url}/#/w/{other}/review/{task}"
    tab.get(deep)
    tab.refresh()
    wait(tab, lambda d: d.find_element(By.ID, "task-state").text == "review_requested", "the review after a reload")
    quiet(tab)
    assert tab.current_url == deep
    assert tab.find_element(By.ID, "workspace-select").get_attribute("value") == other
    assert tab.find_element(By.ID, "page-title").text == "summary: Launch went fine."
    assert tab.title == f"Review summary: Launch went fine. · {other} · chapline review desk"
    assert tab.switch_to.active_element.get_attribute("id") == "page-title"
    icon = tab.find_element(By.CSS_SELECTOR, "link[rel=icon]").get_attribute("href")
    assert icon is not None and httpx.get(icon).status_code == 200
    # Text drafts are text: their newlines are lines.
    assert tab.find_element(By.ID, "draft-read").text == "Launch went fine.\nTwo follow-ups."
    click(tab, By.ID, "approve")
    at_inbox(tab, other)
    assert tab.title == f"Inbox · {other} · chapline review desk"
    assert tab.switch_to.active_element.get_attribute("id") == "page-title"
    assert recorded(desk, task, other) == [("decide.approve", ALICE, None)]


def test_reject_is_an_explicit_choice_with_a_reason(desk: Desk, tab: WebDriver, shots: Path) -> None:
    task = ask(desk, "email", {"subject": "Renewal", "body": "Dear customer,\nyour plan renews."})
    open_review(tab, desk, task)
    assert not tab.find_element(By.ID, "reject-decline").is_selected()
    assert not tab.find_element(By.ID, "reject-revise").is_selected()
    assert not enabled(tab, "reject")
    tab.find_element(By.ID, "reject-reason").send_keys("Wrong customer segment.", Keys.ENTER, "Do not send.")
    assert not enabled(tab, "reject")  # a reason but no choice
    tab.find_element(By.ID, "reject-decline").click()
    wait(tab, lambda d: enabled(d, "reject"), "reject enabled")
    snap(tab, shots, "review-reject")
    tab.find_element(By.ID, "reject").click()
    at_inbox(tab)
    assert recorded(desk, task) == [("decide.reject", ALICE, None)]
    p = params_of(desk, task, "decide.reject")
    assert (p["request_revision"], p["comment"]) == (False, "Wrong customer segment.\nDo not send.")
    assert desk.coord.snapshot(WS)["tasks"][task]["state"] == "declined"
    tab.get(f"{desk.url}/#/w/{WS}/review/{task}")
    history = wait(tab, lambda d: d.find_element(By.ID, "decision-history").text, "the history")
    assert f"Declined by {ALICE}" in history and "Wrong customer segment.\nDo not send." in history


POSTMORTEM = {
    "title": "Checkout outage on 3 May",
    "severity": 2,
    "body": "# What happened\n\nThe cache fell over.\n\n- 14:05 paged\n- 14:20 restored",
    "actions": ["add a cache alert", "load-test the failover"],
    "links": "## Links\n\n- [runbook](https://example.org/runbook)\n- [trap](javascript:alert(1))\n"
             "- <img src=x onerror=alert(1)>",
}


def test_a_draft_reads_as_the_agent_wrote_it(desk: Desk, tab: WebDriver, shots: Path) -> None:
    task = ask(desk, "postmortem", POSTMORTEM, summary="From the incident channel")
    tab.get(f"{desk.url}/#/w/{WS}/inbox")
    link = wait(tab, lambda d: d.find_element(By.CSS_SELECTOR, f"a[data-task='{task}']"), "the inbox row")
    assert link.text == "postmortem: Checkout outage on 3 May"
    open_review(tab, desk, task)
    keys = [dt.text for dt in tab.find_elements(By.CSS_SELECTOR, "#draft-read > dl > dt")]
    # As the store holds it (canonical, sorted): the page never re-sorts.
    assert keys == sorted(POSTMORTEM)
    # Markdown reads formatted, its source (newlines as lines) a click away.
    body = tab.find_element(By.CSS_SELECTOR, "#draft-read > dl > dd:nth-of-type(2)")
    assert body.find_element(By.CSS_SELECTOR, ".markdown h3").text == "What happened"
    assert [li.text for li in body.find_elements(By.CSS_SELECTOR, ".markdown li")] == ["14:05 paged", "14:20 restored"]
    assert not body.find_element(By.CSS_SELECTOR, ".source").is_displayed()
    body.find_element(By.CSS_SELECTOR, "button.toggle").click()
    source = body.find_element(By.CSS_SELECTOR, ".source")
    assert source.is_displayed() and not body.find_element(By.CSS_SELECTOR, ".markdown").is_displayed()
    assert source.text == POSTMORTEM["body"]
    # Sanitised: a link only to http(s) or mailto, markup stays text.
    links = tab.find_element(By.CSS_SELECTOR, "#draft-read > dl > dd:nth-of-type(3) .markdown")
    assert [a.get_attribute("href") for a in links.find_elements(By.TAG_NAME, "a")] == ["https://example.org/runbook"]
    assert not tab.find_elements(By.CSS_SELECTOR, "#draft-read img")
    assert "[trap](javascript:alert(1))" in links.text and "<img src=x onerror=alert(1)>" in links.text
    editor = tab.find_element(By.ID, "draft").get_attribute("value")
    assert editor is not None
    assert [k for k, _ in json.loads(editor, object_pairs_hook=list)] == sorted(POSTMORTEM)
    snap(tab, shots, "review-postmortem")
    click(tab, By.ID, "approve")
    at_inbox(tab)
    assert recorded(desk, task) == [("decide.approve", ALICE, None)]
    assert desk.coord.snapshot(WS)["tasks"][task]["output"] == POSTMORTEM


NESTED = {
    "plan": {"phase": {"step": {"owner": "ops", "note": "Drain the queue.\nThen switch."}}},
    "rows": [f"row {n}" for n in range(60)],
    "title": "Migration plan",
}
PLAN = "#draft-read > dl > dd:nth-of-type(1) > details"
PHASE = f"{PLAN} > dl > dd > details"
STEP = f"{PHASE} > dl > dd > details"
ROWS = "#draft-read > dl > dd:nth-of-type(2) > details"
# Every fold of the draft in page order: what its summary says, and whether it is open.
FOLDS = """
return [...document.querySelectorAll('#draft-read details')]
  .map((d) => [d.querySelector(':scope > summary').textContent, d.open]);
"""


def test_a_nested_draft_folds_deep_and_long_parts(desk: Desk, tab: WebDriver, shots: Path) -> None:
    task = ask(desk, "plan", NESTED)
    open_review(tab, desk, task)
    # The draft itself is never folded; two levels below it are open, the
    # third, and a list of 60, start folded to what they hold.
    assert [dt.text for dt in tab.find_elements(By.CSS_SELECTOR, "#draft-read > dl > dt")] == sorted(NESTED)
    assert tab.execute_script(FOLDS) == [["{1 key}", True], ["{1 key}", True], ["{2 keys}", False],
                                         ["[60 items]", False]]
    assert tab.find_element(By.CSS_SELECTOR, f"{STEP} > summary").text == "{2 keys}"
    assert tab.find_element(By.CSS_SELECTOR, f"{ROWS} > summary").text == "[60 items]"
    note = tab.find_element(By.CSS_SELECTOR, f"{STEP} > dl > dd")
    rows = tab.find_elements(By.CSS_SELECTOR, f"{ROWS} > ul > li")
    assert len(rows) == 60 and not note.is_displayed() and not any(r.is_displayed() for r in rows)
    snap(tab, shots, "review-folded")

    # A click unfolds the third level: its fields read, newlines as lines.
    tab.find_element(By.CSS_SELECTOR, f"{STEP} > summary").click()
    wait(tab, lambda d: note.is_displayed(), "the third level unfolded")
    assert [dd.text for dd in tab.find_elements(By.CSS_SELECTOR, f"{STEP} > dl > dd")] == [
        "Drain the queue.\nThen switch.", "ops"]
    # The keyboard unfolds the long list, every item in order.
    tab.find_element(By.CSS_SELECTOR, f"{ROWS} > summary").send_keys(Keys.ENTER)
    wait(tab, lambda d: all(r.is_displayed() for r in rows), "the 60 items unfolded")
    assert [r.text for r in rows] == NESTED["rows"]
    # An open level folds away with everything in it.
    tab.find_element(By.CSS_SELECTOR, f"{PLAN} > summary").click()
    wait(tab, lambda d: not d.find_element(By.CSS_SELECTOR, PHASE).is_displayed(), "the plan folded")
    assert not note.is_displayed()
    assert tab.execute_script(FOLDS) == [["{1 key}", False], ["{1 key}", True], ["{2 keys}", True],
                                         ["[60 items]", True]]
    snap(tab, shots, "review-unfolded")

    # Folding is reading only: the draft approved is the agent's.
    assert enabled(tab, "approve")
    click(tab, By.ID, "approve")
    at_inbox(tab)
    assert recorded(desk, task) == [("decide.approve", ALICE, None)]
    assert desk.coord.snapshot(WS)["tasks"][task]["output"] == NESTED


def test_the_keyboard_clears_a_queue(desk: Desk, tab: WebDriver, shots: Path) -> None:
    # A queue of three: text, markdown, JSON.
    first = ask(desk, "note", "Ship on Friday.")
    second = ask(desk, "readme", {"body": "# Setup\n\nRun ./run."})
    third = ask(desk, "config", {"retries": 3})
    tab.get(f"{desk.url}/#/w/{WS}/inbox")
    wait(tab, lambda d: [r.get_attribute("data-task") for r in d.find_elements(By.CSS_SELECTOR, "tr[data-task]")]
         == [first, second, third], "the queue")
    quiet(tab)
    press(tab, "?")
    wait(tab, lambda d: d.find_element(By.ID, "keys-help").get_attribute("open") is not None, "the shortcuts")
    snap(tab, shots, "inbox-shortcuts")
    press(tab, Keys.ESCAPE)
    wait(tab, lambda d: d.find_element(By.ID, "keys-help").get_attribute("open") is None, "shortcuts closed")
    press(tab, "j")
    assert tab.switch_to.active_element.get_attribute("data-task") == second
    press(tab, "k")
    assert tab.switch_to.active_element.get_attribute("data-task") == first
    press(tab, Keys.ENTER)
    showing(tab, first)
    press(tab, "a")  # approve and open the next
    showing(tab, second)
    assert tab.find_element(By.ID, "page-title").text == "readme: Setup"
    press(tab, "r")
    assert tab.switch_to.active_element.get_attribute("id") == "reject-decline"
    press(tab, Keys.ARROW_DOWN)  # within the radio group: send back
    press(tab, Keys.TAB, "Say how to install first.", Keys.ENTER, "Then how to run.")
    ctrl(tab, Keys.ENTER)
    at_inbox(tab)
    wait(tab, lambda d: [r.get_attribute("data-task") for r in d.find_elements(By.CSS_SELECTOR, "tr[data-task]")]
         == [third], "one left")
    press(tab, Keys.ENTER)
    showing(tab, third)
    press(tab, "e")
    assert tab.switch_to.active_element.get_attribute("id") == "draft"
    ctrl(tab, "a")
    press(tab, '{"retries": 5}')
    ctrl(tab, Keys.ENTER)  # no rationale yet: asked for, focus moves there
    wait(tab, lambda d: d.switch_to.active_element.get_attribute("id") == "rationale", "the rationale asked for")
    press(tab, "Three retries time out under load.")
    ctrl(tab, Keys.ENTER)
    at_inbox(tab)

    assert recorded(desk, first) == [("decide.approve", ALICE, None)]
    assert recorded(desk, second) == [("decide.reject", ALICE, None)]
    p = params_of(desk, second, "decide.reject")
    assert (p["request_revision"], p["comment"]) == (True, "Say how to install first.\nThen how to run.")
    assert recorded(desk, third) == [("decide.override", ALICE, None)]
    p = params_of(desk, third, "decide.override")
    assert (p["diff"], p["rationale"]) == ([{"op": "replace", "path": "/retries", "value": 5}],
                                           "Three retries time out under load.")


def test_no_page_scrolls_sideways(desk: Desk, tab: WebDriver, shots: Path) -> None:
    """At either size no page is wider than the window, whatever a draft
    holds (at 390 px the inbox's rows are drawn as cards)."""
    task = ask(desk, "postmortem", POSTMORTEM, summary="A long rationale that has to wrap on a phone screen")
    tab.get(f"{desk.url}/#/w/{WS}/inbox")
    wait(tab, lambda d: d.find_elements(By.CSS_SELECTOR, f"a[data-task='{task}']"), "the review as a card")
    quiet(tab)
    assert wider(tab) == []
    snap(tab, shots, "cards-inbox")
    open_review(tab, desk, task)
    assert wider(tab) == []
    snap(tab, shots, "cards-review")
    click(tab, By.ID, "approve")
    at_inbox(tab)
    assert recorded(desk, task) == [("decide.approve", ALICE, None)]
    tab.get(f"{desk.url}/#/w/{WS}/review/{task}")
    wait(tab, lambda d: d.find_element(By.ID, "decision-history"), "the history")
    assert wider(tab) == []
    snap(tab, shots, "cards-history")
    click(tab, By.ID, "nav-workspace")
    wait(tab, lambda d: d.find_element(By.ID, "verdict"), "the workspace page")
    quiet(tab)
    assert wider(tab) == []
    snap(tab, shots, "cards-workspace")


RUN_AXE = """
const done = arguments[arguments.length - 1];
axe.run(document, { resultTypes: ["violations"] })
  .then((r) => done(r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map((n) => n.target.join(" ")) }))), (e) => done([{ id: "axe failed", impact: "critical", help: String(e), nodes: [] }]));
"""


def audit(tab: WebDriver, shots: Path, page: str) -> list[dict[str, Any]]:
    """axe-core's violations on the page as drawn, all kept as an artefact
    (axe-<page>.json); the serious and critical ones returned."""
    tab.set_script_timeout(120)
    tab.execute_script(AXE.read_text())
    violations: list[dict[str, Any]] = tab.execute_async_script(RUN_AXE)
    (shots / f"axe-{page}.json").write_text(json.dumps(violations, indent=1) + "\n")
    return [v for v in violations if v["impact"] in ("serious", "critical")]


def test_the_desk_passes_an_accessibility_audit(desk: Desk, browser: WebDriver, shots: Path) -> None:
    open_task = ask(desk, "postmortem", POSTMORTEM, summary="For the audit")
    closed = ask(desk, "report", {"title": "Audited", "body": "Closed before the audit."})
    desk.ok(ALICE, "decide.override", task_id=closed, rationale="tone",
            diff=[{"op": "replace", "path": "/body", "value": "Closed, then audited."}])
    browser.switch_to.new_window("tab")
    try:
        browser.get(desk.url + "/")
        wait(browser, lambda d: d.find_element(By.ID, "token").is_displayed(), "the sign-in form")
        found = {"sign-in": audit(browser, shots, "sign-in")}
        sign_in(browser, desk)
        for width, height in ((1400, 900), (390, 844)):
            browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                    {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
            for page, path, ready in (
                ("inbox", "inbox", (By.CSS_SELECTOR, f"a[data-task='{open_task}']")),
                ("review", f"review/{open_task}", (By.ID, "draft")),
                ("history", f"review/{closed}", (By.ID, "decision-history")),
                ("workspace", "workspace", (By.ID, "verdict")),
            ):
                browser.get(f"{desk.url}/#/w/{WS}/{path}")
                wait(browser, lambda d, by=ready: d.find_element(*by), f"the {page} page")
                quiet(browser)
                found[f"{page}-{width}"] = audit(browser, shots, f"{page}-{width}")
        assert {page: v for page, v in found.items() if v} == {}
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        browser.close()
        browser.switch_to.window(browser.window_handles[0])


def test_a_sign_in_is_kept_across_tabs_only_when_asked(desk: Desk, browser: WebDriver, size: str) -> None:
    task = ask(desk, "report", {"title": "Signed in twice", "body": "Approve from the second tab."})
    first = browser.current_window_handle
    another_tab(browser, size)
    one = browser.current_window_handle
    try:
        browser.get(desk.url + "/")
        field = wait(browser, lambda d: d.find_element(By.ID, "token").is_displayed() and d.find_element(By.ID, "token"),
                     "the sign-in form")
        assert not browser.find_element(By.ID, "remember").is_selected()
        browser.find_element(By.ID, "remember").click()
        field.send_keys(desk.token[ALICE], Keys.ENTER)
        wait(browser, lambda d: d.find_element(By.ID, "principal").text == ALICE, "signed in")

        another_tab(browser, size)
        two = browser.current_window_handle
        browser.get(f"{desk.url}/#/w/{WS}/review/{task}")  # no sign-in asked
        wait(browser, lambda d: d.find_element(By.ID, "task-state").text == "review_requested", "the review")
        assert browser.find_element(By.ID, "principal").text == ALICE
        click(browser, By.ID, "approve")
        at_inbox(browser)
        assert recorded(desk, task) == [("decide.approve", ALICE, None)]

        click(browser, By.ID, "sign-out")
        wait(browser, lambda d: d.find_element(By.ID, "token").is_displayed(), "signed out")
        browser.switch_to.window(one)
        wait(browser, lambda d: d.find_element(By.ID, "sign-in-error").text == "Signed out in another tab.",
             "the other tab signed out too")
        assert not browser.find_element(By.ID, "who").is_displayed()
        browser.switch_to.window(two)
        browser.close()
        browser.switch_to.window(one)
        another_tab(browser, size)
        browser.get(desk.url + "/")
        wait(browser, lambda d: d.find_element(By.ID, "token").is_displayed(), "a new tab asking to sign in")

        # A kept token revoked since: dropped, and the person told why.
        token, info = desk.tokens.create(ALICE, Grant.everything())
        browser.find_element(By.ID, "remember").click()
        browser.find_element(By.ID, "token").send_keys(token, Keys.ENTER)
        wait(browser, lambda d: d.find_element(By.ID, "principal").text == ALICE, "signed in again")
        # The tab that signed in is closed first: its open event stream would
        # end on the revocation and sign every tab out (dropping the kept
        # token, `signedOutBy`) before a new tab could read it.
        signed_in = browser.current_window_handle
        another_tab(browser, size)
        fresh = browser.current_window_handle
        browser.switch_to.window(signed_in)
        browser.close()
        browser.switch_to.window(fresh)
        desk.tokens.revoke(info.id)
        browser.get(desk.url + "/")
        message = wait(browser, lambda d: d.find_element(By.ID, "sign-in-error").text, "the refusal said")
        assert message.startswith("Sign in again: the kept sign-in was refused")
        assert browser.execute_script("return localStorage.getItem('chapline-desk')") is None
    finally:
        for handle in browser.window_handles:
            if handle != first:
                browser.switch_to.window(handle)
                browser.close()
        browser.switch_to.window(first)


def test_the_inbox_searches_filters_sorts_and_pages(desk: Desk, tab: WebDriver, shots: Path, size: str) -> None:
    ws = each_size("wsp_queue", size)
    summariser = "agent:summariser"
    if summariser not in desk.token:  # the test's other size made one
        desk.token[summariser] = desk.tokens.create(summariser, Grant.everything())[0]
    for who, kind in ((ALICE, "human"), (BOT, "agent"), (summariser, "agent")):
        client(desk, who, ws).ok("participant.join", type=kind, role="reviewer" if kind == "human" else "drafter")

    def asked_by(agent: str, kind: str, draft: Any, confidence: str) -> str:
        task = client(desk, ALICE, ws).ok("task.create", assignee=agent, kind=kind, input={},
                                          routing_hints={"confidence": confidence})["task_id"]
        client(desk, agent, ws).ok("task.update", task_id=task, state="in_progress")
        client(desk, agent, ws).ok("review.request", task_id=task, to=[ALICE], artefact=draft,
                                   summary=f"{kind} by {agent}")
        return str(task)

    acme = asked_by(BOT, "invoice", {"customer": "Acme Ltd", "total": 1200}, "0.9")
    globex = asked_by(BOT, "invoice", {"customer": "Globex", "total": 80}, "0.4")
    memos = [asked_by(summariser, "memo", f"Memo {n}\nbody", f"0.{500 + n}") for n in range(101)]
    tab.get(f"{desk.url}/#/w/{ws}/inbox")
    wait(tab, lambda d: "Showing 1–100 of 103" in d.find_element(By.ID, "inbox-count").text, "the first page")
    quiet(tab)

    def listed(d: WebDriver) -> list[str | None]:
        return [r.get_attribute("data-task") for r in d.find_elements(By.CSS_SELECTOR, "tr[data-task]")]

    assert listed(tab) == [acme, globex, *memos[:98]]
    click(tab, By.ID, "page-next")
    wait(tab, lambda d: listed(d) == memos[98:], "the second page")
    assert "Page 2 of 2" in tab.find_element(By.ID, "review-results").text

    # "Acme Ltd": no task id (a ULID, which has no L) can hold it.
    tab.find_element(By.ID, "inbox-search").send_keys("Acme Ltd")
    wait(tab, lambda d: listed(d) == [acme], "the search")
    assert "Showing 1–1 of 1 matching (103 in all)" in tab.find_element(By.ID, "inbox-count").text
    tab.find_element(By.ID, "inbox-search").clear()
    tab.find_element(By.ID, "inbox-search").send_keys(" ")  # clear() fires no input event
    tab.find_element(By.ID, "inbox-search").send_keys(Keys.BACKSPACE)
    tab.find_element(By.CSS_SELECTOR, f"#filter-agent option[value='{BOT}']").click()
    wait(tab, lambda d: listed(d) == [acme, globex], "the agent filter")
    tab.find_element(By.CSS_SELECTOR, "#inbox-sort option[value='confidence']").click()
    wait(tab, lambda d: listed(d) == [globex, acme], "lowest confidence first")
    tab.find_element(By.CSS_SELECTOR, "#filter-agent option[value='']").click()
    tab.find_element(By.CSS_SELECTOR, "#filter-kind option[value='memo']").click()
    tab.find_element(By.CSS_SELECTOR, "#inbox-sort option[value='newest']").click()
    wait(tab, lambda d: listed(d) == memos[::-1][:100], "the memos, newest first")
    snap(tab, shots, "inbox-filtered")

    # "Approve & next" follows the filtered, sorted queue.
    tab.find_element(By.ID, "page-title").click()
    press(tab, Keys.ENTER)
    showing(tab, memos[-1])
    press(tab, "a")
    showing(tab, memos[-2])
    assert recorded(desk, memos[-1], ws) == [("decide.approve", ALICE, None)]
    assert recorded(desk, acme, ws) == [] and recorded(desk, globex, ws) == []


def test_an_escalation_leads_to_its_history(desk: Desk, tab: WebDriver, shots: Path) -> None:
    task = ask(desk, "contract", {"clause": "Liability capped at 2x fees."}, summary="Legal wording")
    open_review(tab, desk, task)
    tab.find_element(By.CSS_SELECTOR, f"#escalate-to option[value='{BOB}']").click()
    tab.find_element(By.ID, "escalate-reason").send_keys("Above my authority")
    tab.find_element(By.ID, "escalate").click()
    at_inbox(tab)
    assert recorded(desk, task) == [("escalate.raise", ALICE, None)]
    [successor] = [t["id"] for t in desk.coord.snapshot(WS)["tasks"].values() if t.get("supersedes") == task]

    another_tab(tab, size_of(tab))
    try:
        sign_in(tab, desk, who=BOB)
        click(tab, By.CSS_SELECTOR, f"a[href$='/review/{task}']")  # the escalation's "from" in Bob's inbox
        history = wait(tab, lambda d: d.find_element(By.ID, "decision-history").text, "the original's history")
        assert f"Escalated by {ALICE}" in history and f"Handed to {BOB} as {successor}" in history
        assert "Above my authority" in history
        assert "Liability capped at 2x fees." in tab.find_element(By.ID, "view").text
        click(tab, By.CSS_SELECTOR, "a.successor")
        note = wait(tab, lambda d: d.find_element(By.ID, "escalated-from").text, "the successor's page")
        assert note.startswith(f"Escalated to {BOB} by {ALICE} from {task} at ")
        assert tab.find_element(By.ID, "task-state").text == "created"
        snap(tab, shots, "escalation-successor")
    finally:
        tab.close()
        tab.switch_to.window(tab.window_handles[-1])


def edited(n: int, draft: Any) -> tuple[Any, list[dict[str, Any]]]:
    """The reviewer's edit of draft `n`, and the patch the desk makes of it."""
    if isinstance(draft, str):
        return f"{draft}\nreviewed", [{"op": "replace", "path": "", "value": f"{draft}\nreviewed"}]
    if "body" in draft:
        return {"body": f"# Memo {n}"}, [{"op": "replace", "path": "/body", "value": f"# Memo {n}"}]
    return {**draft, "retries": 0}, [{"op": "replace", "path": "/retries", "value": 0}]


def test_fifty_mixed_reviews_are_cleared_by_keyboard_alone(desk: Desk, desktop_tab: WebDriver, shots: Path) -> None:
    tab = desktop_tab
    ws = "wsp_fifty"
    for who, kind in ((ALICE, "human"), (BOT, "agent")):
        client(desk, who, ws).ok("participant.join", type=kind, role="reviewer" if kind == "human" else "drafter")
    drafts: list[Any] = []
    for n in range(50):
        drafts.append([f"Note {n}\nplain text", {"body": f"# Memo {n}\n\n- point one\n- point two"},
                       {"name": f"job-{n}", "retries": n}][n % 3])
    tasks = [ask(desk, ["note", "memo", "config"][n % 3], draft, ws=ws) for n, draft in enumerate(drafts)]
    plan = {task: ("decide.reject" if n % 10 == 3 else "decide.override" if n % 10 == 7 else "decide.approve")
            for n, task in enumerate(tasks)}
    tab.get(f"{desk.url}/#/w/{ws}/inbox")
    wait(tab, lambda d: "Showing 1–50 of 50" in d.find_element(By.ID, "inbox-count").text, "the queue of fifty")
    quiet(tab)
    press(tab, Keys.ENTER)
    for n, task in enumerate(tasks):
        showing(tab, task)
        if plan[task] == "decide.approve":
            press(tab, "a")  # approve, and the next review opens
            continue
        if plan[task] == "decide.reject":
            press(tab, "r")
            press(tab, Keys.ARROW_DOWN, Keys.TAB, f"Redo {n}:", Keys.ENTER, "cite the source.")
        else:
            press(tab, "e")
            ctrl(tab, "a")
            press(tab, json.dumps(edited(n, drafts[n])[0]))
            ctrl(tab, Keys.ENTER)
            wait(tab, lambda d: d.switch_to.active_element.get_attribute("id") == "rationale", "the rationale")
            press(tab, f"No retries for job {n}.")
        ctrl(tab, Keys.ENTER)
        at_inbox(tab, ws)
        press(tab, Keys.ENTER)  # the oldest review left
    wait(tab, lambda d: "Nothing waits for your review." in d.find_element(By.ID, "view").text, "an empty inbox")
    snap(tab, shots, "queue-cleared")

    for n, task in enumerate(tasks):
        assert recorded(desk, task, ws) == [(plan[task], ALICE, None)], n
    for n, task in enumerate(tasks):
        if plan[task] == "decide.reject":
            p = params_of(desk, task, "decide.reject", ws)
            assert (p["request_revision"], p["comment"]) == (True, f"Redo {n}:\ncite the source.")
        elif plan[task] == "decide.override":
            p = params_of(desk, task, "decide.override", ws)
            assert (p["diff"], p["rationale"]) == (edited(n, drafts[n])[1], f"No retries for job {n}.")
            assert desk.coord.snapshot(ws)["tasks"][task]["output"] == edited(n, drafts[n])[0]


# Holds the desk's redraws (scheduled 120 ms after the events they draw) until
# the test releases them: what the page does between an event and its redraw.
HOLD_REDRAWS = """
const realTimeout = window.setTimeout;
window.__gate = new Promise((release) => { window.__release = release; });
window.setTimeout = (fn, ms, ...args) => ms === 120
  ? realTimeout(() => window.__gate.then(() => fn(...args)), 0)
  : realTimeout(fn, ms, ...args);
"""


def test_the_page_locks_as_soon_as_the_task_changes_elsewhere(desk: Desk, tab: WebDriver) -> None:
    task = ask(desk, "report", {"title": "Race", "body": "Who decides first?"}, to=[ALICE, BOB])
    open_review(tab, desk, task)
    original = tab.find_element(By.ID, "draft").get_attribute("value")
    assert original is not None
    type_draft(tab, original.replace("first", "last"))
    tab.find_element(By.ID, "rationale").send_keys("mine")
    wait(tab, lambda d: enabled(d, "override"), "an edit ready to override")
    # The page will not draw the task's new state until the test lets it.
    tab.execute_script(HOLD_REDRAWS)
    desk.ok(BOB, "decide.approve", task_id=task)
    notice = wait(tab, lambda d: d.find_element(By.ID, "review-notice").is_displayed()
                  and d.find_element(By.ID, "review-notice").text, "the page held on Bob's change")
    assert BOB in notice and "updating" in notice
    assert tab.execute_script(CONTROLS) == []
    tab.find_element(By.ID, "override").click()
    tab.find_element(By.TAG_NAME, "body").click()
    press(tab, "a")
    tab.execute_script("window.__release()")
    wait(tab, lambda d: d.find_element(By.ID, "decided-elsewhere"), "the read-only page")
    desk.ok(ALICE, "workspace.describe")
    assert recorded(desk, task) == [("decide.approve", BOB, None)]


def test_the_timeline_says_why_a_call_was_refused_and_opens_its_task(desk: Desk, tab: WebDriver, shots: Path) -> None:
    task = ask(desk, "report", {"title": "On the timeline", "body": "An agent tried to approve it."})
    refused(desk.call(BOT, "decide.approve", task_id=task), -32011)  # not among the reviewers it asked (to=[ALICE])
    # The log keeps a refusal's code only (CHAP's `outcome: {status, code}`),
    # so the timeline says what the code means: -32011 is NOT_AUTHORISED.
    [entry] = [e for e in desk.log() if e.get("outcome") and e["request"]["params"].get("task_id") == task]
    assert entry["outcome"] == {"status": "refused", "code": -32011}
    tab.get(f"{desk.url}/#/w/{WS}/workspace")
    row = f"tr[data-seq='{entry['seq']}']"
    text = wait(tab, lambda d: d.find_element(By.CSS_SELECTOR, row).text, "the refusal on the timeline")
    quiet(tab)
    assert "refused -32011: not authorised" in " ".join(text.split()) and BOT in text
    tab.execute_script("arguments[0].scrollIntoView({block: 'center'})", tab.find_element(By.CSS_SELECTOR, row))
    snap(tab, shots, "timeline-refusal")
    click(tab, By.CSS_SELECTOR, f"{row} a[href$='/review/{task}']")
    showing(tab, task)
    assert tab.find_element(By.ID, "task-state").text == "review_requested"
    click(tab, By.ID, "approve")
    at_inbox(tab)
    assert recorded(desk, task) == [("decide.approve", BOT, -32011), ("decide.approve", ALICE, None)]


def test_a_whisper_is_answered_once_with_what_it_needs(desk: Desk, tab: WebDriver, shots: Path, size: str) -> None:
    ws = each_size("wsp_whisper", size)
    alice, bot = client(desk, ALICE, ws), client(desk, BOT, ws)
    alice.ok("workspace.create", profiles=["core/1.0", "review/1.0", "whisper/1.0"])
    alice.ok("participant.join", type="human", role="reviewer")
    bot.ok("participant.join", type="agent", role="drafter")
    task = alice.ok("task.create", assignee=BOT, kind="refund", input={"order": 7})["task_id"]
    whisper = bot.ok("whisper.ask", task_id=task, to=[ALICE], question="Refund the shipping too?",
                     options=[{"id": "y", "label": "Yes"}, {"id": "n", "label": "No"}], urgency="high",
                     deadline_ms=3_600_000, default_if_lapsed={"id": "n"},
                     context_summary="The parcel arrived late.\nThe customer asked twice.")["whisper_id"]
    tab.get(f"{desk.url}/#/w/{ws}/inbox")
    wait(tab, lambda d: d.find_element(By.CSS_SELECTOR, f"[data-whisper='{whisper}']"), "the whisper")
    quiet(tab)
    text = wait(tab, lambda d: d.find_element(By.CSS_SELECTOR, f"[data-whisper='{whisper}']").text, "its text")
    assert "high urgency" in text and "Refund the shipping too?" in text and f"Asked by {BOT} about refund" in text
    assert "lapses at" in text and "if it lapses: No" in text
    assert "The parcel arrived late.\nThe customer asked twice." in text
    snap(tab, shots, "inbox-whisper")
    yes = f"[data-whisper='{whisper}'] button[data-option='\"y\"']"
    wait(tab, lambda d: ActionChains(d).double_click(d.find_element(By.CSS_SELECTOR, yes)).perform() or True,
         "double-clicking Yes")
    wait(tab, lambda d: "Whispers waiting for your answer (0)" in d.find_element(By.ID, "view").text, "answered")
    answers = [e for e in alice.ok("audit.read")["entries"]
               if (e.get("envelope") or e.get("request") or {}).get("method") == "whisper.answer"]
    assert [(e["envelope"]["params"]["from"], e["envelope"]["params"]["answer_option"], e.get("outcome"))
            for e in answers] == [(ALICE, "y", None)]


def test_one_inbox_across_the_workspaces_a_person_belongs_to(
    desk: Desk, tab: WebDriver, shots: Path, size: str
) -> None:
    north, south = each_size("wsp_north", size), each_size("wsp_south", size)
    for ws in (north, south):
        for who, kind in ((ALICE, "human"), (BOT, "agent")):
            client(desk, who, ws).ok("participant.join", type=kind, role="reviewer" if kind == "human" else "drafter")
    first = ask(desk, "crossing", "North first", ws=north)
    second = ask(desk, "crossing", "South second", ws=south)
    third = ask(desk, "crossing", "North third", ws=north)
    tab.get(f"{desk.url}/#/w/{north}/inbox")
    wait(tab, lambda d: d.find_elements(By.ID, "filter-ws") and d.find_elements(By.CSS_SELECTOR, f"a[data-task='{third}']"),
         "the north inbox")
    quiet(tab)
    rows = "tr[data-task]"
    assert [r.get_attribute("data-task") for r in tab.find_elements(By.CSS_SELECTOR, rows)] == [first, third]
    # Other tests' reviews wait in other workspaces: narrow to these first.
    tab.find_element(By.ID, "inbox-search").send_keys("crossing")
    tab.find_element(By.CSS_SELECTOR, "#filter-ws option[value='*']").click()

    def crossing(d: WebDriver) -> list[tuple[str | None, str | None]]:
        return [(r.get_attribute("data-workspace"), r.get_attribute("data-task")) for r in d.find_elements(By.CSS_SELECTOR, rows)]

    wait(tab, lambda d: crossing(d) == [(north, first), (south, second), (north, third)], "every workspace's reviews")
    assert "Workspace" in tab.find_element(By.CSS_SELECTOR, "#review-results thead").get_attribute("textContent")
    snap(tab, shots, "inbox-all-workspaces")
    tab.find_element(By.ID, "page-title").click()
    press(tab, Keys.ENTER)
    showing(tab, first)
    press(tab, "a")  # the next review is in the other workspace
    showing(tab, second)
    assert tab.current_url.endswith(f"#/w/{south}/review/{second}")
    assert tab.find_element(By.ID, "workspace-select").get_attribute("value") == south
    press(tab, "a")
    showing(tab, third)
    press(tab, "a")  # the last: back to the inbox
    at_inbox(tab, north)
    assert recorded(desk, first, north) == [("decide.approve", ALICE, None)]
    assert recorded(desk, second, south) == [("decide.approve", ALICE, None)]
    assert recorded(desk, third, north) == [("decide.approve", ALICE, None)]
