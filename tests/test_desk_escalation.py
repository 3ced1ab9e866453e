"""Escalations at the review desk in real Chromium (SPECIFICATION.md,
"Review desk"): an escalation carries its reason into the audit log, waits
in its assignee's inbox with where it came from, and its assignee completes
it from the desk. Each test reads the log after the clicks.

The fixtures and helpers are test_desk_review.py's (its desk has Alice and
Bob, reviewers, and the agent Bot).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import test_desk_review
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from test_desk_browser import ALICE, BOB, WS, Desk, click, quiet, sign_in, wait
from test_desk_review import (
    HOLD,
    HOLD_REDRAWS,
    another_tab,
    ask,
    at_inbox,
    audit,
    ctrl,
    enabled,
    open_review,
    recorded,
    size_of,
    snap,
)

# test_desk_review's fixtures: this module gets its own desk, browser and tabs.
browser, desk, shots, size, tab = (test_desk_review.browser, test_desk_review.desk, test_desk_review.shots,
                                   test_desk_review.size, test_desk_review.tab)

REASON = "The cap is above what I may approve.\nLegal must sign off on anything over 1x fees."


def escalation(desk: Desk, original: str) -> dict[str, Any]:
    """The params of the one escalate.raise recorded about `original`."""
    [p] = [e["envelope"]["params"] for e in desk.log()
           if e.get("envelope", {}).get("method") == "escalate.raise" and not e.get("outcome")
           and e["envelope"]["params"]["original_task_id"] == original]
    return p  # type: ignore[no-any-return]


def successor_of(desk: Desk, original: str) -> str:
    [task] = [t["id"] for t in desk.coord.snapshot(WS)["tasks"].values() if t.get("supersedes") == original]
    return str(task)


def escalated_to_bob(desk: Desk, draft: Any) -> tuple[str, str]:
    """A review Alice escalates to Bob over HTTP, with REASON: (original, successor)."""
    original = ask(desk, "contract", draft, summary="Legal wording")
    desk.ok(ALICE, "escalate.raise", original_task_id=original, context=REASON,
            new_task={"assignee": BOB, "kind": "contract", "input": {"ask": "contract"}})
    return original, successor_of(desk, original)


def as_bob(tab: WebDriver, desk: Desk) -> None:
    another_tab(tab, size_of(tab))
    sign_in(tab, desk, who=BOB)


def back_to_alice(tab: WebDriver) -> None:
    tab.close()
    tab.switch_to.window(tab.window_handles[-1])


def test_an_escalation_needs_a_reason_and_records_it(desk: Desk, tab: WebDriver, shots: Path) -> None:
    task = ask(desk, "contract", {"clause": "Liability capped at 3x fees."}, summary="Legal wording")
    open_review(tab, desk, task)
    tab.find_element(By.CSS_SELECTOR, f"#escalate-to option[value='{BOB}']").click()
    assert not enabled(tab, "escalate")
    reason = tab.find_element(By.ID, "escalate-reason")
    reason.send_keys("  \n ")  # blank is no reason
    assert not enabled(tab, "escalate")
    tab.find_element(By.ID, "escalate").click()  # a disabled button: nothing happens
    first, second = REASON.split("\n")
    reason.clear()
    reason.send_keys(first, "\n", second)
    wait(tab, lambda d: enabled(d, "escalate"), "Escalate enabled by the reason")
    snap(tab, shots, "escalate-with-reason")
    tab.find_element(By.ID, "escalate").click()
    at_inbox(tab)
    assert recorded(desk, task) == [("escalate.raise", ALICE, None)]
    p = escalation(desk, task)
    assert p["context"] == REASON
    assert p["new_task"] == {"assignee": BOB, "kind": "contract", "input": {"ask": "contract"}}


def test_an_escalation_waits_in_its_assignees_inbox_with_its_origin(desk: Desk, tab: WebDriver, shots: Path) -> None:
    original, successor = escalated_to_bob(desk, {"clause": "Indemnity unlimited.\nSecond line."})
    as_bob(tab, desk)
    try:
        row = f"tr[data-escalation='{successor}']"
        text = wait(tab, lambda d: d.find_element(By.CSS_SELECTOR, row).text, "the escalation in Bob's inbox")
        assert "escalated: Indemnity unlimited." in text and successor in text and original in text
        assert ALICE in text and "The cap is above what I may approve." in text and "Legal must" not in text
        assert tab.find_element(By.CSS_SELECTOR, f"{row} a[href$='/review/{successor}']")
        assert tab.find_element(By.CSS_SELECTOR, f"{row} a[href$='/review/{original}']")
        snap(tab, shots, "inbox-escalated")
    finally:
        back_to_alice(tab)


def test_the_assignee_completes_an_escalated_task_from_the_desk(desk: Desk, tab: WebDriver, shots: Path) -> None:
    draft = {"clause": "Liability capped at 5x fees."}
    original, successor = escalated_to_bob(desk, draft)
    as_bob(tab, desk)
    try:
        click(tab, By.CSS_SELECTOR, f"tr[data-escalation='{successor}'] a[href$='/review/{successor}']")
        wait(tab, lambda d: d.find_element(By.ID, "task-id").text == successor, "the escalated task's page")
        quiet(tab)
        origin = tab.find_element(By.ID, "escalated-from").text
        assert origin.startswith(f"Escalated to {BOB} by {ALICE} from {original} at ")
        assert tab.find_element(By.ID, "escalation-reason").text == REASON
        editor = tab.find_element(By.ID, "output")
        assert json.loads(editor.get_attribute("value") or "") == draft
        assert enabled(tab, "complete")
        assert audit(tab, shots, f"escalated-{size_of(tab).split('x')[0]}") == []  # serious or critical accessibility violations

        mine = {"clause": "Liability capped at 1x fees.", "signed_off_by": "legal"}
        editor.send_keys(Keys.CONTROL, "a")
        editor.send_keys('{"clause": ')  # broken JSON: nothing can be completed
        wait(tab, lambda d: "not valid JSON" in d.find_element(By.ID, "output-error").text, "the parse error")
        assert not enabled(tab, "complete")
        editor.clear()
        editor.send_keys(json.dumps(mine, indent=1))
        wait(tab, lambda d: enabled(d, "complete"), "Complete enabled by valid JSON")
        snap(tab, shots, "escalated-complete")
        tab.find_element(By.ID, "complete").click()
        at_inbox(tab)
    finally:
        back_to_alice(tab)
    assert recorded(desk, successor) == [("task.complete", BOB, None)]
    assert completed_with(desk, successor) == mine
    assert desk.coord.snapshot(WS)["tasks"][successor]["state"] == "completed"


def with_output(tab: WebDriver, desk: Desk, task: str, output: Any) -> None:
    """The escalated task's page, its editor holding `output` (Complete on)."""
    tab.get(f"{desk.url}/#/w/{WS}/review/{task}")
    editor = wait(tab, lambda d: d.find_element(By.ID, "output"), "the escalated task's editor")
    quiet(tab)
    editor.send_keys(Keys.CONTROL, "a")
    editor.send_keys(json.dumps(output))
    wait(tab, lambda d: enabled(d, "complete"), "Complete enabled by valid JSON")


def test_ctrl_enter_completes_an_escalated_task_once(desk: Desk, tab: WebDriver) -> None:
    _, successor = escalated_to_bob(desk, {"clause": "Liability capped at 4x fees."})
    as_bob(tab, desk)
    try:
        with_output(tab, desk, successor, {"clause": "Liability capped at 2x fees."})
        # The page's own fetch holds task.complete until released, so the
        # second press comes while the first call is in flight.
        tab.execute_script(HOLD.replace('"decide.', '"task.complete'))
        ctrl(tab, Keys.ENTER)
        wait(tab, lambda d: d.execute_script("return window.__held") == 1, "the first call held")
        ctrl(tab, Keys.ENTER)  # pressed again while it is in flight: no second call
        assert tab.execute_script("return window.__held") == 1
        tab.execute_script("window.__release()")
        at_inbox(tab)
    finally:
        back_to_alice(tab)
    desk.ok(ALICE, "workspace.describe")  # a read after the keys, so any call they made has landed
    assert recorded(desk, successor) == [("task.complete", BOB, None)]
    assert completed_with(desk, successor) == {"clause": "Liability capped at 2x fees."}


def test_an_escalated_task_done_elsewhere_holds_then_turns_read_only(desk: Desk, tab: WebDriver) -> None:
    _, successor = escalated_to_bob(desk, {"clause": "Liability capped at 6x fees."})
    as_bob(tab, desk)
    try:
        with_output(tab, desk, successor, {"clause": "Mine, never sent."})
        # The page will not draw the task's new state until the test lets it.
        tab.execute_script(HOLD_REDRAWS)
        desk.ok(BOB, "task.complete", task_id=successor, output={"clause": "Done over HTTP."})  # Bob, elsewhere
        notice = wait(tab, lambda d: d.find_element(By.ID, "review-notice").is_displayed()
                      and d.find_element(By.ID, "review-notice").text, "the page held on the change")
        assert BOB in notice and "updating" in notice
        assert not enabled(tab, "complete") and tab.find_element(By.ID, "output").get_attribute("readonly")
        tab.find_element(By.ID, "complete").click()  # disabled: nothing happens
        tab.find_element(By.ID, "output").click()
        ctrl(tab, Keys.ENTER)  # from the editor, where Ctrl+Enter completes: nothing either
        tab.execute_script("window.__release()")
        ended = wait(tab, lambda d: d.find_element(By.ID, "decided-elsewhere").text, "the read-only page")
        assert f"completed by {BOB}" in ended and "Nothing you entered was sent" in ended
        assert not tab.find_elements(By.ID, "complete") and not tab.find_elements(By.ID, "output")
        assert "Mine, never sent." in (tab.find_element(By.ID, "unsent").get_attribute("textContent") or "")
    finally:
        back_to_alice(tab)
    desk.ok(ALICE, "workspace.describe")
    assert recorded(desk, successor) == [("task.complete", BOB, None)]
    assert completed_with(desk, successor) == {"clause": "Done over HTTP."}


def completed_with(desk: Desk, task: str) -> Any:
    [p] = [e["envelope"]["params"] for e in desk.log()
           if e.get("envelope", {}).get("method") == "task.complete" and e["envelope"]["params"]["task_id"] == task]
    return p["output"]
