// Keyboard shortcuts. Letters act only when the focus is not in a field
// (typing "a" in a rationale must never approve); Ctrl+Enter (Cmd+Enter)
// submits from inside a field.

export const HELP = [
  ["j / k", "next / previous review in the inbox"],
  ["Enter", "open the selected review"],
  ["a", "approve and open the next review"],
  ["r", "reject: choose decline or send back, then give the reason"],
  ["e", "edit the draft"],
  ["Ctrl+Enter", "in the draft or rationale: override with the edit; in a reject reason: reject; in an escalated task's output: complete it"],
  ["?", "show or hide these shortcuts"],
];

function typing(target) {
  return target instanceof HTMLElement &&
    (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}

export function installKeys(actions) {
  document.addEventListener("keydown", (event) => {
    if (event.defaultPrevented || event.isComposing) return;
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      if (actions.submit(event.target)) event.preventDefault();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    const inDialog = event.target instanceof Element && event.target.closest("dialog");
    if (inDialog && event.key !== "?") return;
    const handler = {
      j: () => actions.move(1),
      k: () => actions.move(-1),
      a: actions.approve,
      r: actions.reject,
      e: actions.edit,
      "?": actions.help,
      // Enter on a link or button already does what it says.
      Enter: () => !(event.target instanceof Element && event.target.closest("a, button")) && actions.open(),
    }[event.key];
    if (handler && handler()) event.preventDefault();
  });
}
