"""The desk lives on its event stream: each event carries what its call
wrote, and the desk applies it to the workspace it holds instead of reading
the whole snapshot again (SPECIFICATION.md, "Review desk").

Driven in Debian's Chromium against `chapline serve` (defaults, no --auth);
what the page fetched is read from Chromium's DevTools network log, and the
inbox the live updates drew is compared with the one a fresh load of the
page draws from the server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from client import Client
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from servers import Serve
from test_desk_browser import WAIT, act_as, chromium, wait
from test_remote import free_port

from coordinator import Coordinator
from storage import SqliteStore

WS = "wsp_live"
ALICE, BOB, BOT = "human:alice", "human:bob", "agent:bot"


def call(base: str, method: str, **params: Any) -> Any:
    reply = httpx.post(base + "/chap", json={"jsonrpc": "2.0", "id": method, "method": method,
                                             "params": {"workspace": WS, **params}}, timeout=60)
    body = reply.json()
    assert "result" in body, body
    return body["result"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with Serve(tmp_path_factory.mktemp("live") / "chap.db") as served:
        call(served.base, "participant.join", **{"from": ALICE}, type="human", role="reviewer")
        call(served.base, "participant.join", **{"from": BOT}, type="agent")
        yield served.base


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"), network_log=True)
    try:
        yield driver
    finally:
        driver.quit()


def settled(driver: WebDriver) -> bool:
    return driver.find_element(By.ID, "main").get_attribute("aria-busy") == "false"


def inbox(driver: WebDriver) -> list[str]:
    return [a.get_attribute("data-task") for a in driver.find_elements(By.CSS_SELECTOR, "a[data-task]")]


def fetched(driver: WebDriver, base: str) -> list[str]:
    """The requests the page sent to the server since the last look."""
    sent = []
    for record in driver.get_log("performance"):
        message = json.loads(record["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            request = message["params"]["request"]
            if request["url"].startswith(base) and "/chap/events" not in request["url"]:
                sent.append(f'{request["method"]} {request["url"][len(base):]}')
    return sent


def review(base: str, summary: str) -> str:
    task: str = call(base, "task.create", **{"from": ALICE}, assignee=BOT, kind="report", input={})["task_id"]
    call(base, "task.update", **{"from": BOT}, task_id=task, state="in_progress")
    call(base, "review.request", **{"from": BOT}, task_id=task, to=[ALICE], artefact={"text": summary},
         summary=summary)
    return task


def test_live_updates_are_applied_without_reading_the_workspace_again(server: str, browser: WebDriver) -> None:
    first = review(server, "Before the desk opened")
    act_as(browser, server, ALICE)
    wait(browser, lambda d: settled(d) and inbox(d) == [first], "the inbox with the first review")
    fetched(browser, server)  # what signing in read is not the point

    # Reviews come and one is decided elsewhere: the inbox follows from the
    # events alone.
    second = review(server, "A second draft")
    third = review(server, "A third draft")
    wait(browser, lambda d: settled(d) and set(inbox(d)) == {first, second, third}, "three reviews")
    call(server, "decide.approve", **{"from": ALICE}, task_id=second)
    wait(browser, lambda d: settled(d) and set(inbox(d)) == {first, third}, "the approved review gone")
    live = inbox(browser)
    assert fetched(browser, server) == []  # no snapshot, no describe: the events were enough

    # What the events drew is what the server holds: a fresh load draws the same.
    browser.refresh()
    wait(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "on"
         and settled(d) and inbox(d) != [], "the reloaded inbox")
    assert inbox(browser) == live
    fetched(browser, server)

    # A new member changes what the objects do not hold (roles): read again.
    call(server, "participant.join", **{"from": BOB}, type="human", role="reviewer")
    sent = wait(browser, lambda d: fetched(d, server), "the desk reading the workspace again")
    assert f"GET /desk/api/snapshot?workspace={WS}" in sent


def test_many_tabs_share_one_event_stream_and_none_waits(server: str, browser: WebDriver) -> None:
    """A browser opens six HTTP/1.1 connections to a server at most: with a
    stream per tab, a sixth tab would wait for ever, and every tab's calls
    with it. Nine tabs signed in alike: all live, all drawing each new
    review, each still answered at once; closing the tab that reads the
    stream hands it to another."""
    tabs = []
    for _ in range(9):
        browser.switch_to.new_window("tab")
        act_as(browser, server, ALICE)
        tabs.append(browser.current_window_handle)
    browser.set_script_timeout(WAIT)
    session = "const done = arguments[0]; fetch('/desk/api/session').then((r) => r.json()).then(done);"
    assert browser.execute_async_script(session) == {"auth": False, "principal": None}

    def everywhere(task: str, handles: list[str]) -> None:
        for handle in handles:
            browser.switch_to.window(handle)
            wait(browser, lambda d: task in inbox(d), f"the review {task} in tab {handle}")

    everywhere(review(server, "Seen in nine tabs"), tabs)
    # The first tab took the lock, so it reads the stream: closing it hands it on.
    browser.switch_to.window(tabs[0])
    browser.close()
    everywhere(review(server, "Seen after the reader left"), tabs[1:])
    browser.switch_to.window(tabs[-1])
    assert browser.execute_async_script(session) == {"auth": False, "principal": None}


def test_a_desk_reads_its_workspace_once_and_again_for_what_its_stream_missed(
    tmp_path: Path, browser: WebDriver
) -> None:
    """On its stream's `ready` the desk must cover what was written before
    the stream opened. A page that has just loaded covers it already, so it
    reads the workspace once, not a second time (for a large workspace, its
    whole log again); a desk whose server was down while another process
    wrote the file reads what it missed when its stream is back."""
    db, port = tmp_path / "missed.db", str(free_port())
    with Serve(db, "--port", port) as served:
        call(served.base, "participant.join", **{"from": ALICE}, type="human", role="reviewer")
        call(served.base, "participant.join", **{"from": BOT}, type="agent")
        first = review(served.base, "Read once")
        act_as(browser, served.base, ALICE)
        wait(browser, lambda d: settled(d) and inbox(d) == [first], "the inbox with the first review")
        caught_up = wait(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-caught-up"),
                         "the catch-up `ready` started (a count, and a read only if short)")
        assert caught_up == "held"
        assert fetched(browser, served.base).count(f"GET /desk/api/snapshot?workspace={WS}") == 1
        base = served.base
    wait(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "off",
         "the desk offline")
    with Coordinator(SqliteStore(db)) as coord:
        written = Client(coord, WS)
        task = written.ok("task.create", ALICE, assignee=BOT, kind="report", input={})["task_id"]
        written.ok("task.update", BOT, task_id=task, state="in_progress")
        written.ok("review.request", BOT, task_id=task, to=[ALICE], artefact={"text": "Missed"}, summary="Missed")
    with Serve(db, "--port", port) as served:
        assert served.base == base
        wait(browser, lambda d: settled(d) and inbox(d) == [first, task], "the review written while it was down")
