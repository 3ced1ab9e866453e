// Markdown in agents' texts, rendered for reading. Only a safe subset is
// built, element by element (never innerHTML): headings, paragraphs, lists,
// quotes, fenced code, `code`, **strong**, *emphasis* and links whose
// address is http(s) or mailto. Anything else stays as the text it is, so a
// draft can hold no script, style, image or frame that the desk would load.
import { h } from "./dom.js";

const BLOCK = /^(#{1,6}\s|[-*+]\s|\d+[.)]\s|>\s?|```)/;

// Whether a text looks written in markdown (a heading, a list, a quote or a
// code fence at the start of a line).
export function isMarkdown(text) {
  return text.includes("\n") && text.split("\n").some((line) => BLOCK.test(line));
}

const INLINE = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*\s][^*]*\*|_[^_\s][^_]*_)|(\[[^\]]+\]\([^)\s]+\))/;

function inline(text) {
  const out = [];
  let rest = text;
  for (let m = INLINE.exec(rest); m; m = INLINE.exec(rest)) {
    if (m.index) out.push(rest.slice(0, m.index));
    const [token] = m;
    if (m[1]) out.push(h("code", {}, token.slice(1, -1)));
    else if (m[2]) out.push(h("strong", {}, inline(token.slice(2, -2))));
    else if (m[3]) out.push(h("em", {}, inline(token.slice(1, -1))));
    else {
      const cut = token.indexOf("](");
      const label = token.slice(1, cut);
      const href = token.slice(cut + 2, -1);
      out.push(/^(https?:|mailto:)/i.test(href) ? h("a", { href, rel: "noopener noreferrer nofollow" }, inline(label)) : token);
    }
    rest = rest.slice(m.index + token.length);
  }
  if (rest) out.push(rest);
  return out;
}

function lines(texts) {
  return texts.flatMap((t, i) => (i ? [h("br"), ...inline(t)] : inline(t)));
}

export function renderMarkdown(text) {
  const root = h("div", { class: "markdown" });
  const all = text.split("\n");
  for (let i = 0; i < all.length;) {
    const line = all[i];
    if (!line.trim()) { i++; continue; }
    if (line.startsWith("```")) {
      const code = [];
      for (i++; i < all.length && !all[i].startsWith("```"); i++) code.push(all[i]);
      i++;
      root.append(h("pre", {}, h("code", {}, code.join("\n"))));
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      // Below the page's own h1/h2, so the page's outline stays the page's.
      root.append(h(`h${Math.min(6, heading[1].length + 2)}`, {}, inline(heading[2])));
      i++;
      continue;
    }
    const list = /^([-*+]|\d+[.)])\s/.exec(line);
    if (list) {
      const ordered = /\d/.test(list[1]);
      const items = [];
      while (i < all.length && (ordered ? /^\d+[.)]\s/ : /^[-*+]\s/).test(all[i])) {
        items.push(h("li", {}, inline(all[i].replace(/^([-*+]|\d+[.)])\s+/, ""))));
        i++;
      }
      root.append(h(ordered ? "ol" : "ul", {}, items));
      continue;
    }
    const block = [];
    const quote = line.startsWith(">");
    while (i < all.length && all[i].trim() && (quote ? all[i].startsWith(">") : !BLOCK.test(all[i]))) {
      block.push(quote ? all[i].replace(/^>\s?/, "") : all[i]);
      i++;
    }
    root.append(quote ? h("blockquote", {}, h("p", {}, lines(block))) : h("p", {}, lines(block)));
  }
  return root;
}
