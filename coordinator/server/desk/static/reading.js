// Reading what agents wrote: values shown as a person reads them. Object
// keys keep the order the agent wrote them in (the snapshot holds the
// artefact as sent), strings are text with their newlines as lines, not
// JSON strings full of "\n".
import { h } from "./dom.js";

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

// One value as a readable block: text, a list, or a definition list.
export function readable(value) {
  if (typeof value === "string") {
    return value === "" ? h("span", { class: "muted" }, "(empty text)") : h("div", { class: "text" }, value);
  }
  if (Array.isArray(value)) {
    if (!value.length) return h("span", { class: "muted" }, "(empty list)");
    return h("ol", { class: "tree", start: "0" }, value.map((item) => h("li", {}, readable(item))));
  }
  if (isObject(value)) {
    const keys = Object.keys(value);
    if (!keys.length) return h("span", { class: "muted" }, "(nothing)");
    return h("dl", { class: "tree" }, keys.flatMap((key) => [h("dt", {}, key), h("dd", {}, readable(value[key]))]));
  }
  return h("code", {}, JSON.stringify(value));
}

// The first line a person would read: of a text its first non-blank line,
// of an object or list the first text in it (in the agent's order).
export function firstLine(value) {
  if (typeof value === "string") return (value.split("\n").find((l) => l.trim()) || "").trim();
  if (Array.isArray(value) || isObject(value)) {
    for (const item of Object.values(value)) {
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

// A patch against `before` as one row per changed field: what it was, what
// it becomes. Shown beside (not instead of) the JSON Patch itself.
export function fieldChanges(before, ops) {
  return h("table", { class: "changes" },
    h("caption", { class: "skip" }, "Changed fields"),
    h("thead", {}, h("tr", {}, ["Field", "Before", "After"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, ops.map((op) => h("tr", { class: `op-${op.op}` },
      h("td", {}, h("code", {}, op.path || "(the whole draft)")),
      h("td", { class: "before" }, op.op === "add" ? h("span", { class: "muted" }, "(absent)") : readable(at(before, op.path))),
      h("td", { class: "after" }, op.op === "remove" ? h("span", { class: "muted" }, "(removed)") : readable(op.value))))));
}
