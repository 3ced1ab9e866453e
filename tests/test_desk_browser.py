"""The review desk in a real browser: Debian's Chromium, driven by Selenium
through Debian's chromedriver, against `create_app` with authentication on.

A reviewer signs in with a token in two tabs, sees an agent's review request
appear live, edits the draft and overrides it (the patch the browser computed
is then read back from the log), approves another, and opens the workspace
page, where the chain is verified. Screenshots of each page are saved to
$CHAPLINE_DESK_SCREENSHOTS (default: tests/artifacts/desk/, git-ignored, printed).

Every test here runs twice, in a browser at 1400x900 and in one emulating a
390x844 phone (each with its own desk). Chromium missing is a failure, not
a skip: `.ci/run` installs it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from client import Client, Http, refused
from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait
from servers import LiveServer

from coordinator import Coordinator
from coordinator.cli import DEFAULT_PROFILES
from coordinator.server import create_app
from coordinator.server.auth import Authenticator, TokenStore
from coordinator.server.scopes import Grant
from storage import SqliteStore

WS = "wsp_desk"
ALICE = "human:alice"
BOB = "human:bob"
BOT = "agent:drafter"
WAIT = 60  # seconds; generous for a loaded 2-core machine, never a timing assertion

DRAFT = {"title": "Quarterly summary", "body": "Revenue grew by 4 percent.", "tags": ["finance"]}
EDITED = {
    "title": "Quarterly summary",
    "body": "Revenue grew by 4.2 percent.",
    "tags": ["finance", "reviewed"],
    "approved_by": "alice",
}
# What the desk's patch.js makes of that edit: kept keys compared in order,
# the array grown at its end, the new key added last.
EXPECTED_PATCH = [
    {"op": "replace", "path": "/body", "value": "Revenue grew by 4.2 percent."},
    {"op": "add", "path": "/tags/1", "value": "reviewed"},
    {"op": "add", "path": "/approved_by", "value": "alice"},
]


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed; the desk's browser tests need Debian's chromium and "
            "chromium-driver (apt-get install -y chromium chromium-driver; .ci/run does this)"
        )
    return path


@pytest.fixture(scope="module")
def shots() -> Path:
    where = os.environ.get("CHAPLINE_DESK_SCREENSHOTS")
    path = Path(where) if where else Path(__file__).resolve().parent / "artifacts" / "desk"
    path.mkdir(parents=True, exist_ok=True)
    print(f"\ndesk screenshots: {path}")
    return path


class Desk:
    """The server side of the scenario: a coordinator, tokens, a client per
    participant (the agent's calls are made over HTTP, as an agent would)."""

    def __init__(self, db: Path) -> None:
        self.coord = Coordinator(store=SqliteStore(db), default_profiles=DEFAULT_PROFILES)
        self.tokens = TokenStore(str(db))
        self.live = LiveServer(create_app(self.coord, auth=Authenticator(self.tokens)))
        self.url = self.live.url
        self.http = httpx.Client(base_url=self.url, timeout=60)
        # What every token could do before scopes (test_authz.py holds the scopes).
        self.token = {who: self.tokens.create(who, Grant.everything())[0] for who in (ALICE, BOB, BOT)}
        self.chap: dict[str, Client] = {}
        for who, token in self.token.items():
            transport = Http(self.http)
            transport.headers = {"Authorization": f"Bearer {token}"}
            self.chap[who] = Client(transport, WS, who, prefix=f"t-{who}-")

    def call(self, who: str, method: str, **params: Any) -> dict[str, Any]:
        return self.chap[who].call(method, **params)

    def ok(self, who: str, method: str, **params: Any) -> Any:
        return self.chap[who].ok(method, **params)

    def review(self, input: Any, artefact: Any, summary: str) -> str:
        task = self.ok(ALICE, "task.create", assignee=BOT, kind="report", input=input)["task_id"]
        self.ok(BOT, "task.update", task_id=task, state="in_progress")
        self.ok(BOT, "review.request", task_id=task, to=[ALICE], artefact=artefact, summary=summary)
        return task

    def log(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.ok(ALICE, "audit.read")["entries"]
        return entries

    def close(self) -> None:
        self.http.close()
        self.live.stop()
        self.tokens.close()
        self.coord.close()


# The two sizes the desk is made for, a desktop window and a phone: every
# flow runs at both (here a browser and a desk for each; test_desk_review
# draws each of its tabs at either).
SIZES: dict[str, dict[str, Any] | None] = {
    "1400x900": None,
    "390x844": {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True},
}


def size_of(driver: WebDriver) -> str:
    return "390x844" if driver.execute_script("return window.innerWidth") < 600 else "1400x900"


def snap(driver: WebDriver, shots: Path, name: str) -> None:
    """A screenshot kept as an artefact, named with the size it was drawn at."""
    driver.save_screenshot(str(shots / f"{name}-{size_of(driver)}.png"))


@pytest.fixture(scope="module", params=list(SIZES))
def size(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory, size: str) -> Iterator[Desk]:
    d = Desk(tmp_path_factory.mktemp("desk") / "chap.db")
    try:
        d.ok(ALICE, "participant.join", type="human", role="reviewer", display_name="Alice")
        d.ok(BOT, "participant.join", type="agent", role="drafter")
        yield d
    finally:
        d.close()


def chromium(profile: Path, *extra: str, network_log: bool = False, size: str = "1400x900") -> WebDriver:
    """Headless Chromium with its own profile directory, `extra` arguments,
    and with `network_log` DevTools' network events in its "performance"
    log (what a page sent, which the page cannot always see); every tab at
    `size`, a phone's emulated by chromedriver."""
    options = webdriver.ChromeOptions()
    options.binary_location = _binary("chromium")
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1400,900", f"--user-data-dir={profile}", *extra):
        options.add_argument(arg)
    metrics = SIZES[size]
    if metrics is not None:
        options.add_experimental_option("mobileEmulation", {"deviceMetrics": {
            "width": metrics["width"], "height": metrics["height"], "pixelRatio": 1.0, "mobile": True}})
    if network_log:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=_binary("chromedriver")))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory, size: str) -> Iterator[WebDriver]:
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"), size=size)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: WebDriver, condition: Any, what: str) -> Any:
    """condition(driver) once truthy; an element replaced by a live update
    while it was being read (stale) is looked up again. A wait that times
    out says what the page showed then, so a failure in CI can be read."""
    try:
        return WebDriverWait(
            driver, WAIT, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
        ).until(lambda d: condition(d), message=what)
    except TimeoutException as exc:
        exc.msg = f"{what}; the page then: {_page_state(driver)}"
        raise


def _page_state(driver: WebDriver) -> str:
    """Where the page is, what has the focus (and its value) and the start of its text."""
    try:
        return str(driver.execute_script(
            "const a = document.activeElement;"
            "return JSON.stringify({url: location.href, busy: document.getElementById('main')?.getAttribute('aria-busy'),"
            " live: document.getElementById('live')?.textContent, focus: a && (a.id || a.tagName),"
            " value: a && 'value' in a ? a.value : null,"
            " text: (document.getElementById('view')?.innerText || '').slice(0, 600)});"))
    except Exception as exc:  # the page itself may be what failed
        return f"(unreadable: {exc})"


def act_as(driver: WebDriver, base: str, who: str) -> None:
    """The desk of a server without --auth, signed in as `who` (the person
    says whom they act as), once its live event stream is on."""
    driver.get(base + "/")
    field = wait(driver, lambda d: d.find_element(By.ID, "act-as").is_displayed()
                 and d.find_element(By.ID, "act-as"), "the participant field")
    field.send_keys(who, Keys.ENTER)
    wait(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "on",
         "the live event stream")


def quiet(driver: WebDriver) -> None:
    """Until the page has drawn everything it was told about (aria-busy)."""
    wait(driver, lambda d: d.find_element(By.ID, "main").get_attribute("aria-busy") == "false",
         "the page to settle")


def click(driver: WebDriver, by: str, value: str) -> None:
    quiet(driver)
    wait(driver, lambda d: d.find_element(by, value).click() or True, f"clicking {value}")


def sign_in(driver: WebDriver, desk: Desk, shots: Path | None = None, who: str = ALICE) -> None:
    driver.get(desk.url + "/")
    field = wait(driver, lambda d: d.find_element(By.ID, "token").is_displayed()
                 and d.find_element(By.ID, "token"), "the sign-in form")
    if shots is not None:
        snap(driver, shots, "1-sign-in")
    field.send_keys(desk.token[who], Keys.ENTER)
    wait(driver, lambda d: d.find_element(By.ID, "principal").text == who, f"signed in as {who}")
    wait(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "on",
         "the live event stream")


def inbox_rows(driver: WebDriver) -> list[str]:
    return [r.get_attribute("data-task") for r in driver.find_elements(By.CSS_SELECTOR, "tr[data-task]")]


def test_a_reviewers_day_in_the_desk(desk: Desk, browser: WebDriver, shots: Path) -> None:
    sign_in(browser, desk, shots)
    first_tab = browser.current_window_handle
    browser.switch_to.new_window("tab")
    second_tab = browser.current_window_handle
    sign_in(browser, desk)
    wait(browser, lambda d: "Nothing waits for your review" in d.find_element(By.ID, "view").text,
         "an empty inbox in the second tab")
    browser.switch_to.window(first_tab)
    wait(browser, lambda d: "Nothing waits for your review" in d.find_element(By.ID, "view").text,
         "an empty inbox")

    # The agent asks for a review over HTTP; it appears without a reload.
    task = desk.review({"quarter": "Q3"}, DRAFT, "Figures from the ledger export")
    wait(browser, lambda d: inbox_rows(d) == [task], "the new review in the inbox")
    row = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, f"tr[data-task='{task}']").text,
               "the row's text")
    assert "report" in row and BOT in row and "Figures from the ledger export" in row
    snap(browser, shots, "2-inbox")
    browser.switch_to.window(second_tab)
    wait(browser, lambda d: inbox_rows(d) == [task], "the new review in the second tab")
    browser.switch_to.window(first_tab)

    # Edit the draft in place and override with the edit.
    click(browser, By.CSS_SELECTOR, f"a[data-task='{task}']")
    wait(browser, lambda d: d.find_element(By.ID, "draft"), "the review page")
    quiet(browser)
    draft = browser.find_element(By.ID, "draft")
    assert json.loads(draft.get_attribute("value")) == DRAFT
    assert json.loads(browser.find_element(By.ID, "input").text) == {"quarter": "Q3"}
    assert browser.find_element(By.ID, "override").get_attribute("disabled") is not None
    draft.send_keys(Keys.CONTROL, "a")
    draft.send_keys(Keys.DELETE)
    draft.send_keys(json.dumps(EDITED, indent=1))
    # The patch is folded away until asked for; unfolded, it is the edit's.
    assert not browser.find_element(By.ID, "patch").is_displayed()
    browser.find_element(By.XPATH, "//summary[.='As JSON Patch']").click()
    wait(browser, lambda d: json.loads(d.find_element(By.ID, "patch").text) == EXPECTED_PATCH,
         "the patch preview of the edit")
    browser.find_element(By.ID, "rationale").send_keys("The ledger says 4.2 percent")
    browser.find_element(By.ID, "tags").send_keys("accuracy, figures")
    browser.execute_script("window.scrollTo(0, 0)")
    snap(browser, shots, "3-review")
    browser.find_element(By.ID, "override").click()
    wait(browser, lambda d: d.current_url.endswith("/inbox") and inbox_rows(d) == [],
         "back to an empty inbox")

    [override] = [e for e in desk.log() if e.get("envelope", {}).get("method") == "decide.override"]
    params = override["envelope"]["params"]
    assert params["diff"] == EXPECTED_PATCH
    assert params["from"] == ALICE and params["task_id"] == task
    assert params["rationale"] == "The ledger says 4.2 percent"
    assert params["tags"] == ["accuracy", "figures"]
    assert desk.coord.snapshot(WS)["tasks"][task]["output"] == EDITED
    browser.switch_to.window(second_tab)
    wait(browser, lambda d: inbox_rows(d) == [], "the override seen live in the second tab")
    browser.switch_to.window(first_tab)

    # Approve another; the agent's out-of-turn approval is refused and recorded.
    second = desk.review({"quarter": "Q4"}, {"title": "Outlook"}, "Same template as Q3")
    wait(browser, lambda d: inbox_rows(d) == [second], "the second review")
    refused(desk.call(BOT, "decide.approve", task_id=second), -32011)
    click(browser, By.CSS_SELECTOR, f"a[data-task='{second}']")
    wait(browser, lambda d: d.find_element(By.ID, "approve").is_enabled(), "the approve button")
    click(browser, By.ID, "approve")
    wait(browser, lambda d: d.current_url.endswith("/inbox") and inbox_rows(d) == [],
         "the approval")
    approvals = [e for e in desk.log() if e.get("envelope", {}).get("method") == "decide.approve"]
    assert [a["envelope"]["params"]["from"] for a in approvals] == [ALICE]
    assert desk.coord.snapshot(WS)["tasks"][second]["state"] == "completed"

    # The workspace page: members, tasks by state, the timeline, the chain verified.
    click(browser, By.ID, "nav-workspace")
    wait(browser, lambda d: d.find_element(By.ID, "verdict"), "the chain verdict")
    quiet(browser)

    def page(d: WebDriver) -> dict[str, Any]:
        return {
            "verdict": (d.find_element(By.ID, "verdict").get_attribute("class"),
                        d.find_element(By.ID, "verdict").text),
            "seqs": [r.get_attribute("data-seq") for r in d.find_elements(By.CSS_SELECTOR, "tr[data-seq]")],
            "refused": [r.text for r in d.find_elements(By.CSS_SELECTOR, "tr.refused")],
            "completed": d.find_element(By.CSS_SELECTOR, "[data-state='completed']").text,
            "view": d.find_element(By.ID, "view").text,
        }

    shown = wait(browser, page, "the workspace page")
    head = desk.ok(ALICE, "workspace.describe")["evidence_head"]
    entries = desk.log()
    assert shown["verdict"] == (
        "verdict ok",
        f"Chain verified by the server: {len(entries)} of {len(entries)} entries, head {head}",
    )
    assert shown["seqs"] == [str(e["seq"]) for e in reversed(entries)]
    [refusal] = shown["refused"]
    assert "refused -32011" in refusal and BOT in refusal
    assert task in shown["completed"] and second in shown["completed"]
    assert ALICE in shown["view"] and BOT in shown["view"]
    snap(browser, shots, "4-workspace")

    # A new entry shows up on the timeline live, and the verdict follows it.
    third = desk.review({"quarter": "Q1"}, {"title": "Next"}, "")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-seq]")) == len(entries) + 3,
         "the timeline growing live")
    assert third


def test_export_downloads_the_snapshot(desk: Desk, browser: WebDriver, tmp_path: Path) -> None:
    browser.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)}
    )
    browser.switch_to.new_window("tab")  # a sign-in of its own: a tab's session is the tab's
    sign_in(browser, desk)
    browser.get(desk.url + "/#/workspace")
    wait(browser, lambda d: d.find_element(By.ID, "export"), "the export button")
    click(browser, By.ID, "export")
    target = tmp_path / f"{WS}.snapshot.json"
    wait(browser, lambda d: target.exists() and target.stat().st_size > 0, "the downloaded snapshot")
    exported = json.loads(target.read_text())
    assert exported == json.loads(json.dumps(desk.coord.snapshot(WS)))


def entry(desk: Desk, method: str) -> dict[str, Any]:
    """The params of the last accepted call of `method` in the log."""
    [*_, last] = [e for e in desk.log() if e.get("envelope", {}).get("method") == method]
    params: dict[str, Any] = last["envelope"]["params"]
    return params


def open_review(browser: WebDriver, desk: Desk, task: str) -> None:
    browser.get(f"{desk.url}/#/inbox")
    wait(browser, lambda d: task in inbox_rows(d), f"{task} in the inbox")
    click(browser, By.CSS_SELECTOR, f"a[data-task='{task}']")
    wait(browser, lambda d: d.find_element(By.ID, "task-state").text == "review_requested",
         "the review page")
    quiet(browser)


def back_in_inbox(browser: WebDriver, task: str) -> None:
    wait(browser, lambda d: d.current_url.endswith("/inbox") and task not in inbox_rows(d),
         f"{task} decided and gone from the inbox")


def test_reject_abstain_and_escalate(desk: Desk, browser: WebDriver, shots: Path) -> None:
    desk.ok(BOB, "participant.join", type="human", role="reviewer")
    browser.switch_to.new_window("tab")
    sign_in(browser, desk)

    rejected = desk.review({"n": 1}, {"text": "draft one"}, "first try")
    open_review(browser, desk, rejected)
    # Rejecting is an explicit choice with a reason: nothing is pre-chosen.
    assert not browser.find_element(By.ID, "reject-revise").is_selected()
    assert not browser.find_element(By.ID, "reject-decline").is_selected()
    browser.find_element(By.ID, "reject-revise").click()
    assert not browser.find_element(By.ID, "reject").is_enabled()  # no reason yet
    browser.find_element(By.ID, "reject-reason").send_keys("Cite the source")
    browser.find_element(By.ID, "reject").click()
    back_in_inbox(browser, rejected)
    params = entry(desk, "decide.reject")
    assert (params["task_id"], params["comment"], params["request_revision"]) == (
        rejected, "Cite the source", True)
    assert desk.coord.snapshot(WS)["tasks"][rejected]["state"] == "in_progress"

    abstained = desk.review({"n": 2}, {"text": "draft two"}, "")
    open_review(browser, desk, abstained)
    browser.find_element(By.ID, "abstain").click()  # without a reason: refused in the page
    assert "Say why" in browser.find_element(By.ID, "action-error").text
    browser.find_element(By.ID, "abstain-reason").send_keys("Not my area")
    browser.find_element(By.CSS_SELECTOR, "#abstain-category option[value='out_of_scope']").click()
    browser.find_element(By.ID, "abstain").click()
    back_in_inbox(browser, abstained)
    params = entry(desk, "abstain.declare")
    assert (params["task_id"], params["reason"], params["category"]) == (
        abstained, "Not my area", "out_of_scope")

    escalated = desk.review({"n": 3}, {"text": "draft three"}, "")
    open_review(browser, desk, escalated)
    browser.find_element(By.CSS_SELECTOR, f"#escalate-to option[value='{BOB}']").click()
    browser.find_element(By.ID, "escalate-reason").send_keys("Needs a second pair of eyes")
    browser.find_element(By.ID, "escalate").click()
    back_in_inbox(browser, escalated)
    params = entry(desk, "escalate.raise")
    assert (params["original_task_id"], params["context"]) == (escalated, "Needs a second pair of eyes")
    assert params["new_task"] == {"assignee": BOB, "kind": "report", "input": {"n": 3}}
    tasks = desk.coord.snapshot(WS)["tasks"]
    assert tasks[escalated]["state"] == "escalated"
    [successor] = [t for t in tasks.values() if t.get("supersedes") == escalated]

    # Bob, signed in elsewhere, finds the escalation in his inbox.
    browser.switch_to.new_window("tab")
    sign_in(browser, desk, who=BOB)
    wait(browser, lambda d: successor["id"] in d.find_element(By.ID, "view").text,
         "the escalation in Bob's inbox")
    wait(browser, lambda d: "Escalated to you (1)" in d.find_element(By.ID, "view").text,
         "the escalation count")
    snap(browser, shots, "5-escalated-inbox")


def test_without_auth_the_desk_asks_whom_to_act_as(
    tmp_path: Path, browser: WebDriver
) -> None:
    coord = Coordinator(store=SqliteStore(tmp_path / "open.db"), default_profiles=DEFAULT_PROFILES)
    live = LiveServer(create_app(coord))
    try:
        for who, kind in ((ALICE, "human"), (BOT, "agent")):
            Client(coord, "wsp_open").ok("participant.join", frm=who, type=kind)
        browser.switch_to.new_window("tab")
        browser.get(live.url + "/")
        field = wait(browser, lambda d: d.find_element(By.ID, "act-as").is_displayed()
                     and d.find_element(By.ID, "act-as"), "the participant field")
        assert not browser.find_element(By.ID, "token").is_displayed()
        field.send_keys(ALICE, Keys.ENTER)
        wait(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "on",
             "the live event stream")
        quiet(browser)
        assert browser.find_element(By.ID, "workspace-select").get_attribute("value") == "wsp_open"
        wait(browser, lambda d: "Nothing waits for your review" in d.find_element(By.ID, "view").text,
             "an empty inbox")
    finally:
        browser.close()
        browser.switch_to.window(browser.window_handles[0])
        live.stop()
        coord.close()
