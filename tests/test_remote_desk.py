"""An agent in another process waits for a person deciding in the desk
(issue 30): against a real `chapline serve` on SQLite, an agent thread drafts
through a RemoteCoordinator, requests review and calls wait_for_decision,
while a reviewer approves or overrides in Chromium. The decision reaches the
agent within 1 s of the click, equal to what the audit log recorded, also
when the server restarted while the agent waited. SPECIFICATION.md, "Waiting
for people"."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from client import Client
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from support import eventually
from test_desk_browser import act_as, browser, click, inbox_rows, quiet, size, wait  # noqa: F401 (fixtures: at both sizes)
from test_remote import SeenPaths, Server

from coordinator import Decision, RemoteCoordinator
from coordinator.engine.patch import apply_patch

WS = "wsp_wait"
ALICE, BOT = "human:alice", "agent:bot"
DRAFT = {"title": "Outlook", "body": "Sales will grow."}
EDITED = {"title": "Outlook", "body": "Sales may grow."}
DEADLINE = 60.0  # the agent's own patience; the bound is BOUND
BOUND = 1.0  # seconds from the reviewer's click to the agent holding the decision


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(str(tmp_path / "chap.db"), 1)
    try:
        yield running
    finally:
        running.stop()


class Agent:
    """The agent's side, in a thread: draft, request review, wait. `returned`
    is the decision and the monotonic time the wait returned."""

    def __init__(self, base: str) -> None:
        self.seen = SeenPaths()
        self.remote = RemoteCoordinator(base, transport=self.seen)
        self.returned: list[tuple[Decision, float]] = []
        self.task: list[str] = []
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self) -> None:
        c = Client(self.remote, WS)
        c.setup(members=(ALICE, BOT))
        task = c.new_task(review_required=True)
        c.ok("review.request", BOT, task_id=task, to=[ALICE], artefact=DRAFT, summary="next quarter")
        self.task.append(task)
        decision = self.remote.wait_for_decision(WS, task, DEADLINE)
        self.returned.append((decision, time.monotonic()))

    def following(self) -> str:
        """The task, once the waiter has opened the event stream and read the
        snapshot after it: from then on only an event can wake it in time."""
        eventually(lambda: self.task and self.seen.paths[-2:] == ["/chap/events", "/desk/api/snapshot"],
                   "the agent following the event stream")
        return self.task[0]

    def decided_after(self, act: Callable[[], None]) -> Decision:
        """What the wait returned after `act`; asserts it returned within BOUND of it."""
        clicked = time.monotonic()
        act()
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "wait_for_decision did not return"
        decision, at = self.returned[0]
        assert at - clicked < BOUND, f"the decision reached the agent {at - clicked:.3f} s after the click"
        return decision

    def close(self) -> None:
        self.thread.join(DEADLINE)
        self.remote.close()


@pytest.fixture
def agent(server: Server) -> Iterator[Agent]:
    a = Agent(server.base)
    try:
        yield a
    finally:
        a.close()


def open_review(driver: WebDriver, base: str, task: str) -> None:
    """Alice in the desk (no --auth: she says whom she acts as), on `task`'s review."""
    act_as(driver, base, ALICE)
    wait(driver, lambda d: task in inbox_rows(d), f"{task} in the inbox")
    click(driver, By.CSS_SELECTOR, f"a[data-task='{task}']")
    wait(driver, lambda d: d.find_element(By.ID, "task-state").text == "review_requested", "the review page")
    quiet(driver)


def logged(agent: Agent, method: str) -> dict[str, Any]:
    """The params of the one accepted call of `method`, read with audit.read."""
    [entry] = [e for e in Client(agent.remote, WS).log() if e["envelope"]["method"] == method]
    params: dict[str, Any] = entry["envelope"]["params"]
    return params


def test_an_approval_in_the_desk_reaches_the_waiting_agent_within_a_second(
    server: Server, agent: Agent, browser: WebDriver  # noqa: F811
) -> None:
    task = agent.following()
    open_review(browser, server.base, task)
    approve = wait(browser, lambda d: d.find_element(By.ID, "approve").is_enabled()
                   and d.find_element(By.ID, "approve"), "the approve button")
    decision = agent.decided_after(approve.click)
    assert decision == Decision(task, "approve", "completed", ALICE, DRAFT)
    approved = logged(agent, "decide.approve")
    assert (approved["task_id"], approved["from"]) == (task, decision.reviewer)
    assert logged(agent, "review.request")["artefact"] == decision.output


def test_an_override_in_the_desk_returns_the_patched_output_and_rationale(
    server: Server, agent: Agent, browser: WebDriver  # noqa: F811
) -> None:
    task = agent.following()
    open_review(browser, server.base, task)
    draft = browser.find_element(By.ID, "draft")
    draft.send_keys(Keys.CONTROL, "a")
    draft.send_keys(Keys.DELETE)
    draft.send_keys(json.dumps(EDITED))
    browser.find_element(By.ID, "rationale").send_keys("Too sure of itself")
    override = wait(browser, lambda d: d.find_element(By.ID, "override").is_enabled()
                    and d.find_element(By.ID, "override"), "the override button")
    decision = agent.decided_after(override.click)
    assert decision == Decision(task, "override", "completed", ALICE, EDITED, "Too sure of itself")
    overridden = logged(agent, "decide.override")
    assert (overridden["task_id"], overridden["from"], overridden["rationale"]) == (
        task, ALICE, decision.reason)
    assert apply_patch(logged(agent, "review.request")["artefact"], overridden["diff"]) == decision.output


def test_the_agent_gets_the_decision_after_the_server_restarts_while_it_waits(
    server: Server, agent: Agent, browser: WebDriver  # noqa: F811
) -> None:
    task = agent.following()
    server.restart()  # SIGTERM, then the same port and file
    agent.seen.paths.clear()
    agent.following()  # back on the stream of the new process
    open_review(browser, server.base, task)
    approve = wait(browser, lambda d: d.find_element(By.ID, "approve").is_enabled()
                   and d.find_element(By.ID, "approve"), "the approve button")
    decision = agent.decided_after(approve.click)
    assert decision == Decision(task, "approve", "completed", ALICE, DRAFT)
    assert logged(agent, "decide.approve")["task_id"] == task
