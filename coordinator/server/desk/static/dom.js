// Small DOM helpers. Nothing is ever set through innerHTML: everything the
// desk shows came from agents and people, so it is inserted as text.

export const $ = (id) => document.getElementById(id);

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

// A table that turns into cards on a phone: each cell carries its column's
// heading (data-label), which the narrow layout shows before the value.
export function table(caption, headings, rows, empty) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  for (const row of rows) {
    [...row.children].forEach((cell, i) => { cell.dataset.label = headings[i] ?? ""; });
  }
  return h("table", { class: "cards" },
    h("caption", { class: "skip" }, caption),
    h("thead", {}, h("tr", {}, headings.map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows));
}
