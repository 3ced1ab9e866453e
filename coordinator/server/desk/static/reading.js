// Reading what agents wrote: values shown as a person reads them. Object
// keys keep the order the agent wrote them in (the snapshot holds the
// artefact as sent), strings are text with their newlines as lines, not
// JSON strings full of "\n".
import { h } from "./dom.js";
import { isMarkdown, renderMarkdown } from "./markdown.js";

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

// How deep nested objects and lists start unfolded, and how many entries one
// may hold and still start unfolded: past either, a draft would open as a
// wall of detail, so it starts folded to a line saying what it holds.
const OPEN_DEPTH = 2;
const OPEN_ENTRIES = 50;

function count(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

// One value as a readable block: text, a list, or a definition list. Each
// nested list or object folds (<details>: no script, and keyboard and screen
// readers know it); the value itself (`depth` 0) is always shown.
export function readable(value, depth = 0) {
  if (typeof value === "string") {
    if (value === "") return h("span", { class: "muted" }, "(empty text)");
    if (!isMarkdown(value)) return h("div", { class: "text" }, value);
    // Markdown reads formatted; its source is one click away.
    const formatted = renderMarkdown(value);
    const source = h("div", { class: "text source", hidden: true }, value);
    const toggle = h("button", { type: "button", class: "toggle", "aria-pressed": "false" }, "Show source");
    toggle.addEventListener("click", () => {
      const showSource = source.hidden;
      source.hidden = !showSource;
      formatted.hidden = showSource;
      toggle.setAttribute("aria-pressed", String(showSource));
      toggle.textContent = showSource ? "Show formatted" : "Show source";
    });
    return h("div", { class: "md" }, toggle, formatted, source);
  }
  if (Array.isArray(value) || isObject(value)) {
    const list = Array.isArray(value);
    const keys = Object.keys(value);
    if (!keys.length) return h("span", { class: "muted" }, list ? "(empty list)" : "(nothing)");
    const tree = list
      ? h("ul", { class: "tree" }, value.map((item) => h("li", {}, readable(item, depth + 1))))
      : h("dl", { class: "tree" }, keys.flatMap((key) => [h("dt", {}, key), h("dd", {}, readable(value[key], depth + 1))]));
    if (depth === 0) return tree;
    const holds = list ? `[${count(keys.length, "item", "items")}]` : `{${count(keys.length, "key", "keys")}}`;
    return h("details", { class: "fold", open: depth <= OPEN_DEPTH && keys.length <= OPEN_ENTRIES },
      h("summary", {}, holds), tree);
  }
  return h("code", {}, JSON.stringify(value));
}

// Fields that name what an object is about, read first wherever they are
// (the store keeps an object's keys sorted, not in the agent's order).
const NAMING = ["title", "subject", "name", "summary", "headline"];

// The first line a person would read: of a text its first non-blank line,
// of an object its naming field's or else its first text, of a list its
// first text.
export function firstLine(value) {
  // A markdown heading's marks are not part of what it says.
  if (typeof value === "string") return (value.split("\n").find((l) => l.trim()) || "").trim().replace(/^#{1,6}\s+/, "");
  if (Array.isArray(value) || isObject(value)) {
    const named = Array.isArray(value) ? [] : NAMING.filter((k) => typeof value[k] === "string").map((k) => value[k]);
    for (const item of [...named, ...Object.values(value)]) {
      const line = firstLine(item);
      if (line) return line;
    }
    return "";
  }
  return value === null || value === undefined ? "" : String(value);
}

// A task as a person names it: its kind and the first line of its draft.
export function title(kind, draft) {
  const line = firstLine(draft);
  const short = line.length > 80 ? `${line.slice(0, 79)}…` : line;
  return short ? `${kind}: ${short}` : String(kind);
}

// The value a JSON Pointer (RFC 6901) names, or undefined.
export function at(value, pointer) {
  if (pointer === "") return value;
  let here = value;
  for (const raw of pointer.split("/").slice(1)) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (here === null || typeof here !== "object" || !(key in here)) return undefined;
    here = here[key];
  }
  return here;
}

// Word-level changes between two texts: [kind, text] runs, kind "same",
// "del" or "ins". The common start and end are cut off first; a middle too
// long to compare word by word (over a million word pairs) is shown as
// replaced whole rather than freezing the page.
export function wordDiff(a, b) {
  const x = a.split(/(\s+)/).filter(Boolean);
  const y = b.split(/(\s+)/).filter(Boolean);
  let start = 0;
  while (start < x.length && start < y.length && x[start] === y[start]) start++;
  let end = 0;
  while (end < x.length - start && end < y.length - start && x[x.length - 1 - end] === y[y.length - 1 - end]) end++;
  const xs = x.slice(start, x.length - end);
  const ys = y.slice(start, y.length - end);
  const runs = [];
  const push = (kind, text) => {
    if (!text) return;
    const last = runs[runs.length - 1];
    if (last && last[0] === kind) last[1] += text;
    else runs.push([kind, text]);
  };
  push("same", x.slice(0, start).join(""));
  if (xs.length * ys.length > 1e6) {
    push("del", xs.join(""));
    push("ins", ys.join(""));
  } else {
    // Longest common subsequence of the middle words, then walked forward.
    const n = xs.length;
    const m = ys.length;
    const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i][j] = xs[i] === ys[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && xs[i] === ys[j]) { push("same", xs[i]); i++; j++; }
      else if (j < m && (i === n || lcs[i][j + 1] >= lcs[i + 1][j])) { push("ins", ys[j]); j++; }
      else { push("del", xs[i]); i++; }
    }
  }
  push("same", x.slice(x.length - end).join(""));
  return runs;
}

// A text with the runs of one side marked: the old side shows what was
// removed, the new side what was added.
function marked(runs, side) {
  return h("div", { class: "text" }, runs.filter(([kind]) => kind === "same" || kind === side)
    .map(([kind, text]) => (kind === "same" ? text : h(kind, {}, text))));
}

// A patch against `before` as one row per changed field: what it was, what
// it becomes (texts compared word by word). Shown beside the JSON Patch.
export function fieldChanges(before, ops) {
  return h("table", { class: "changes" },
    h("caption", { class: "skip" }, "Changed fields"),
    h("thead", {}, h("tr", {}, ["Field", "Before", "After"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, ops.map((op) => {
      const was = at(before, op.path);
      if (op.op === "replace" && typeof was === "string" && typeof op.value === "string") {
        const runs = wordDiff(was, op.value);
        return h("tr", { class: "op-replace" },
          h("td", {}, h("code", {}, op.path || "(the whole draft)")),
          h("td", { class: "before" }, marked(runs, "del")),
          h("td", { class: "after" }, marked(runs, "ins")));
      }
      return h("tr", { class: `op-${op.op}` },
      h("td", {}, h("code", {}, op.path || "(the whole draft)")),
      h("td", { class: "before" }, op.op === "add" ? h("span", { class: "muted" }, "(absent)") : readable(at(before, op.path))),
      h("td", { class: "after" }, op.op === "remove" ? h("span", { class: "muted" }, "(removed)") : readable(op.value)));
    })));
}
