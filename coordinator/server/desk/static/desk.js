// The review desk: inbox, review page and workspace page over CHAP calls.
import { chap, ChapError, listenShared, read, setToken, signInKey } from "./api.js";
import { $, h, table } from "./dom.js";
import { HELP, installKeys } from "./keys.js";
import { diff } from "./patch.js";
import { fieldChanges, firstLine, readable, title } from "./reading.js";
import { refusalMeaning } from "./refusals.js";
import { link, parse } from "./route.js";

// Where a sign-in is kept: sessionStorage (this tab, across reloads) or,
// when the person asks for it, localStorage (every tab of this browser).
const SESSION = "chapline-desk";

const state = {
  auth: false,
  me: null,
  workspaces: [],
  known: new Set(), // every workspace id the server listed
  workspace: null,
  snapshot: null,
  describe: null,
  stopEvents: null,
  route: parse(""),
  review: null, // the open review page's controls (see renderOpenReview)
  cursor: 0, // the selected inbox row
  filters: { q: "", kind: "", agent: "", sort: "oldest", page: 0, ws: "" },
  others: {}, // the person's other workspaces, loaded for an inbox across them all
  lastQueue: [], // the inbox's reviews as last listed: {ws, id}
  shown: "", // the hash last drawn, to move focus only on navigation
  loading: null, // the workspace read in flight, or the last one
};

// Replace the page's content; absent parts (null, false) are left out.
function draw(...children) {
  $("view").replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function heading(text) {
  return h("h1", { id: "page-title", tabindex: "-1" }, text);
}

function say(message) {
  const status = $("status");
  status.textContent = message;
  clearTimeout(say.timer);
  say.timer = setTimeout(() => { status.textContent = ""; }, 6000);
}

function pretty(value) {
  return JSON.stringify(value, null, 2);
}

function age(iso) {
  const ms = Date.now() - Date.parse(iso);
  if (!Number.isFinite(ms)) return "";
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  if (s < 86400) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

function when(iso) {
  return h("time", { datetime: iso, title: iso }, String(iso || "").replace("T", " ").replace("Z", " UTC"));
}

function errorText(err) {
  return err instanceof ChapError ? `${err.message} (${err.code})` : String(err.message || err);
}

// -- session ----------------------------------------------------------------

async function boot() {
  $("sign-out").addEventListener("click", signOut);
  $("sign-in-form").addEventListener("submit", signIn);
  $("workspace-select").addEventListener("change", (e) => { location.hash = link(e.target.value, "inbox"); });
  $("keys-list").replaceChildren(...HELP.map(([keys, what]) => h("div", {}, h("dt", {}, h("kbd", {}, keys)), h("dd", {}, what))));
  $("keys-close").addEventListener("click", () => $("keys-help").close());
  window.addEventListener("hashchange", () => render());
  installKeys(shortcuts);
  // Signing out in one tab signs out the others that share the sign-in.
  window.addEventListener("storage", (e) => {
    if (e.key === SESSION && e.newValue === null && state.me && !sessionStorage.getItem(SESSION)) {
      endSession("Signed out in another tab.");
    }
  });
  // The tab's own sign-in (kept across reloads), else the one this browser
  // was asked to keep for every tab (opt-in at sign-in).
  const saved = JSON.parse(sessionStorage.getItem(SESSION) || localStorage.getItem(SESSION) || "{}");
  setToken(saved.token);
  try {
    const session = await read("/desk/api/session");
    state.auth = session.auth;
    state.me = session.auth ? session.principal : saved.as || null;
  } catch (err) {
    state.auth = true;
    state.me = null;
    if (saved.token) {
      // A kept token the server no longer takes (revoked, expired) is dropped.
      sessionStorage.removeItem(SESSION);
      localStorage.removeItem(SESSION);
      setToken(null);
      return showSignIn(`Sign in again: the kept sign-in was refused (${errorText(err)}).`);
    }
  }
  if (!state.me) return showSignIn();
  await start();
}

function showSignIn(message = "") {
  busy(false);
  document.title = "Sign in · chapline review desk";
  $("sign-in").hidden = false;
  $("view").replaceChildren();
  $("nav").hidden = true;
  $("who").hidden = true;
  $("token-field").hidden = !state.auth;
  $("as-field").hidden = state.auth;
  $("sign-in-error").textContent = message;
  (state.auth ? $("token") : $("act-as")).focus();
}

async function signIn(event) {
  event.preventDefault();
  const token = $("token").value.trim();
  const as = $("act-as").value.trim();
  setToken(state.auth ? token : null);
  try {
    const session = await read("/desk/api/session");
    state.auth = session.auth;
    state.me = session.auth ? session.principal : as;
  } catch (err) {
    return showSignIn(`Sign-in refused: ${errorText(err)}`);
  }
  if (!state.me) return showSignIn("Name the participant you act as, e.g. human:alice");
  const kept = JSON.stringify(state.auth ? { token } : { as });
  if ($("remember").checked) {
    localStorage.setItem(SESSION, kept);
    sessionStorage.removeItem(SESSION);
  } else sessionStorage.setItem(SESSION, kept);
  $("token").value = "";
  await start();
}

function signOut() {
  sessionStorage.removeItem(SESSION);
  localStorage.removeItem(SESSION);
  history.replaceState(null, "", location.pathname);
  endSession("Signed out.");
}

// Signed out by the server: the token was revoked or expired (`why` says
// so). The kept sign-in goes too; the address stays.
function signedOutBy(why) {
  sessionStorage.removeItem(SESSION);
  localStorage.removeItem(SESSION);
  endSession(`Signed out: ${why}`);
}

function endSession(message) {
  if (state.stopEvents) state.stopEvents();
  state.stopEvents = null;
  setToken(null);
  state.me = null;
  state.workspace = null;
  state.review = null;
  showSignIn(message); // the address stays: signing in again returns to it
}

async function start() {
  $("sign-in").hidden = true;
  $("nav").hidden = false;
  $("who").hidden = false;
  $("principal").textContent = state.me;
  await loadWorkspaces();
  state.stopEvents = listenShared(signInKey(state.me), onEvent, (live) => setLive(live), signedOutBy);
  await render();
}

function setLive(live) {
  const badge = $("live");
  badge.textContent = live ? "live" : "offline";
  badge.classList.toggle("on", live);
  document.body.dataset.live = live ? "on" : "off";
}

// -- data ---------------------------------------------------------------------

async function loadWorkspaces() {
  const { workspaces } = await read("/desk/api/workspaces");
  state.known = new Set(workspaces);
  const mine = [];
  for (const id of workspaces) {
    try {
      const d = await chap("workspace.describe", { workspace: id, from: state.me });
      if (d.members.some((m) => m.uri === state.me)) mine.push(id);
    } catch (err) {
      // A workspace the server cannot describe is not shown.
    }
  }
  state.workspaces = mine;
  $("workspace-select").replaceChildren(...mine.map((id) => h("option", { value: id }, id)));
  if (!mine.includes(state.workspace)) state.workspace = mine[0] || null;
  if (state.workspace) $("workspace-select").value = state.workspace;
}

async function load(current) {
  const workspace = state.workspace;
  if (!workspace) return;
  const reading = Promise.all([
    read(`/desk/api/snapshot?workspace=${encodeURIComponent(workspace)}`),
    chap("workspace.describe", { workspace, from: state.me }),
  ]);
  state.loading = reading;
  const [snapshot, describe] = await reading;
  // A newer render (another page, another workspace) owns the state now.
  if (!current() || state.workspace !== workspace) return;
  // Events applied while it was read may be past it: keep the longer log.
  const held = state.snapshot;
  if (!held || held.id !== snapshot.id || held.audit.length <= snapshot.audit.length) state.snapshot = snapshot;
  state.describe = describe;
}

function myRole(describe = state.describe) {
  const member = describe?.members.find((m) => m.uri === state.me);
  return member ? member.role : null;
}

function params(entry) {
  return (entry.envelope && entry.envelope.params) || {};
}

function taskOf(p) {
  return p.task_id ?? p.original_task_id;
}

function requests(snapshot = state.snapshot) {
  // What each task's latest review.request said: who asked, and why.
  const out = {};
  for (const entry of snapshot.audit) {
    const env = entry.envelope;
    if (env && env.method === "review.request" && env.params) {
      out[env.params.task_id] = {
        from: env.params.from,
        summary: env.params.summary ?? env.params.rationale ?? "",
        artefact: env.params.artefact,
      };
    }
  }
  return out;
}

// The agent's draft of a task: the pending artefact while the review is
// open (held in the order the agent wrote it), else the last one requested.
function draftOf(task, asked) {
  return task.pending_artefact ?? asked[task.id]?.artefact ?? null;
}

// The accepted escalate.raise entry that created a successor task: the one
// about its original, recorded when the task was created (an original
// escalated twice has two).
function escalationOf(task) {
  return state.snapshot.audit.find((e) => e.envelope?.method === "escalate.raise" && !e.outcome &&
    e.envelope.params.original_task_id === task.supersedes && e.arrived === task.created_at) ?? null;
}

// Why it was escalated: the `context` the escalation carried, as CHAP's
// examples of escalate.raise name it (and the desk sends), or where other
// clients put it (as the notifications read it too).
function reasonOf(entry) {
  const p = entry?.envelope.params || {};
  const input = p.new_task?.input || {};
  const reason = [p.reason, p.context, input.abstention_reason, input.context]
    .find((v) => typeof v === "string" && v.trim());
  return reason ?? null;
}

// An escalated task is named after the draft it was escalated over.
function escalatedTitle(task, asked) {
  const original = state.snapshot.tasks[task.supersedes];
  return title("escalated", original ? draftOf(original, asked) : null);
}

// A task escalated to this person that is still theirs to do: CHAP lets its
// assignee complete it from created or in_progress (once in review it is
// the reviewers').
function escalatedToMe(task) {
  return !!task?.supersedes && task.assignee === state.me && ["created", "in_progress"].includes(task.state);
}

function addressedToMe(task, role) {
  const review = task.review;
  if (!review || task.state !== "review_requested") return false;
  const to = review.requested_to || [];
  return to.length === 0 || to.some((uri) =>
    uri === state.me || uri.startsWith("workspace:") || (role && uri === `group:${role}`));
}

// The reviews addressed to this person in one workspace, as inbox items.
function reviewItems(ws, snapshot, describe) {
  const asked = requests(snapshot);
  const role = myRole(describe);
  return Object.values(snapshot.tasks).filter((t) => addressedToMe(t, role))
    .map((task) => ({ ws, task, asked: asked[task.id] || {} }));
}

// The inbox's reviews, waiting longest first: this workspace's or, with "All
// my workspaces" chosen, those of every workspace the person belongs to.
function inboxItems() {
  const items = reviewItems(state.workspace, state.snapshot, state.describe);
  if (state.filters.ws === "*") {
    for (const [ws, d] of Object.entries(state.others)) items.push(...reviewItems(ws, d.snapshot, d.describe));
  }
  return items.sort((a, b) => a.task.review.requested_at.localeCompare(b.task.review.requested_at));
}

async function loadOthers() {
  const others = state.workspaces.filter((ws) => ws !== state.workspace);
  const loaded = await Promise.all(others.map(async (ws) => [ws, {
    snapshot: await read(`/desk/api/snapshot?workspace=${encodeURIComponent(ws)}`),
    describe: await chap("workspace.describe", { workspace: ws, from: state.me }),
  }]));
  state.others = Object.fromEntries(loaded);
}

// -- live updates -------------------------------------------------------------

let pending = null;

function onEvent(name, data) {
  if (name === "ready") {
    setLive(true);
    catchUp();
    return;
  }
  if (name !== "audit") return;
  const env = data.entry.envelope || data.entry.request;
  // The workspace list changes when a workspace appears or this person joins
  // or leaves one; other workspaces' traffic is none of this desk's business.
  const membership = data.entry.envelope && env.params && env.params.from === state.me &&
    (env.method === "participant.join" || env.method === "participant.leave");
  if (!state.known.has(data.workspace) || membership) {
    loadWorkspaces().then(() => scheduleRefresh());
    return;
  }
  if (data.workspace !== state.workspace) {
    // An inbox across workspaces follows all of them.
    if (state.filters.ws === "*" && state.route.page === "inbox" && state.workspaces.includes(data.workspace)) {
      scheduleRefresh(!applyChange(state.others[data.workspace]?.snapshot, data));
    }
    return;
  }
  const p = params(data.entry);
  // Someone else changed the task on screen: nothing more may be submitted
  // until the page shows what they did (a decision made elsewhere must not
  // be followed by this reviewer's now-stale one).
  const review = state.review;
  if (review && data.entry.envelope && !data.entry.outcome && taskOf(p) === review.id &&
      !(review.inFlight && p.from === state.me)) {
    review.hold(`${p.from} just changed this task (${env.method}); updating it…`);
  }
  if (data.entry.envelope && env.method === "review.request") {
    const list = Array.isArray(p.to) ? p.to : [p.to];
    if (list.includes(state.me)) say(`New review for you: ${p.summary || p.task_id}`);
  }
  scheduleRefresh(!applyChange(state.snapshot, data));
}

// What was written before the stream opened (while the page loaded, or while
// it was disconnected) must be read; what is written after comes as events.
// The workspace's entry count, read after `ready`, says whether what the desk
// holds (or is reading) covers it, so a page that has just loaded is not read
// a second time: for a large workspace, a second read of its whole log.
// What it decided is left on <body data-caught-up> ("held" or "read again").
async function catchUp() {
  const workspace = state.workspace;
  let short = true;
  if (workspace && state.filters.ws !== "*" && state.route.page !== "workspace") {
    try {
      const described = await chap("workspace.describe", { workspace, from: state.me });
      await state.loading;
      const held = state.snapshot;
      short = state.workspace !== workspace || !held || held.id !== workspace ||
        held.audit.length < described.audit_count;
    } catch (err) {
      // Unknown: read again.
    }
  }
  document.body.dataset.caughtUp = short ? "read again" : "held";
  if (short) scheduleRefresh();
}

// Calls that change what the desk reads beside the snapshot's objects (the
// workspace's profiles and settings, members and roles, as workspace.describe
// gives them): the desk reads the workspace again after them.
const RELOADING = /^(workspace|participant|control)\./;

// Apply a live event to a snapshot the desk holds: the entry joins the log
// and the objects the call wrote replace (or, null, remove) those it holds.
// False when it cannot: an entry replayed without its objects, a gap in the
// log (an event missed), or a call that changes more than objects.
function applyChange(snapshot, data) {
  if (!snapshot || snapshot.id !== data.workspace || !data.objects) return false;
  const seq = data.entry.seq;
  if (seq < snapshot.audit.length) return true; // the snapshot holds it already
  if (seq > snapshot.audit.length) return false;
  const env = data.entry.envelope;
  if (env && RELOADING.test(env.method || "")) return false;
  snapshot.audit.push(data.entry);
  for (const [collection, items] of Object.entries(data.objects)) {
    const held = snapshot[collection] || (snapshot[collection] = {});
    for (const [key, value] of Object.entries(items)) {
      if (value === null) delete held[key];
      else held[key] = value;
    }
  }
  return true;
}

// aria-busy on <main> while the page is about to change or changing, so
// assistive technology (and tests) wait for the new content.
function busy(flag) {
  $("main").setAttribute("aria-busy", flag ? "true" : "false");
}

// Redraw soon, once for the events of the next 120 ms; reading the
// workspace again only if one of them asked to (`reload`).
let reloadDue = false;

function scheduleRefresh(reload = true) {
  busy(true);
  reloadDue = reloadDue || reload;
  clearTimeout(pending);
  pending = setTimeout(() => {
    pending = null;
    const again = reloadDue;
    reloadDue = false;
    render({ live: true, reload: again });
  }, 120);
}

// -- views ----------------------------------------------------------------------

let generation = 0;

async function render(options = {}) {
  if (!state.me) return;
  // Renders overlap when events arrive quickly; only the newest may draw.
  const mine = ++generation;
  const current = () => mine === generation;
  busy(true);
  try {
    await drawPage(options, current);
  } finally {
    if (current() && pending === null) busy(false);
  }
}

function name(page) {
  return { inbox: "Inbox", review: "Review", workspace: "Workspace" }[page];
}

async function drawPage(options, current) {
  const route = parse(location.hash);
  if (state.workspace && !route.workspace) {
    // An old-style link or none: name the workspace in the address.
    history.replaceState(null, "", link(state.workspace, route.page, route.task));
    route.workspace = state.workspace;
  }
  state.route = route;
  for (const a of document.querySelectorAll("#nav a")) {
    a.href = link(route.workspace || "", a.id.slice(4));
    if (a.id === `nav-${route.page === "review" ? "inbox" : route.page}`) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (!state.workspace) {
    state.review = null;
    settle("No workspace", h("h1", { id: "page-title", tabindex: "-1" }, "No workspace"),
      h("p", { class: "empty" }, `${state.me} is not a member of any workspace on this server yet.`));
    return;
  }
  if (!state.workspaces.includes(route.workspace)) {
    state.review = null;
    settle("Not a member", heading("Not a member"),
      h("p", {}, `${state.me} is not a member of ${route.workspace}. `,
        h("a", { href: link(state.workspace, "inbox") }, `Go to the inbox of ${state.workspace}`)));
    return;
  }
  if (route.workspace !== state.workspace) {
    state.workspace = route.workspace;
    $("workspace-select").value = route.workspace;
  }
  const review = state.review;
  if (review && !(route.page === "review" && route.task === review.id)) state.review = null;
  try {
    // A live redraw whose events were applied to the snapshot held needs no
    // read; the workspace page reads the log and its description itself.
    const held = state.snapshot && state.snapshot.id === state.workspace && route.page !== "workspace" &&
      (route.page !== "inbox" || state.filters.ws !== "*" ||
        state.workspaces.every((ws) => ws === state.workspace || state.others[ws]));
    if (options.reload !== false || !held) {
      await load(current);
      if (route.page === "inbox" && state.filters.ws === "*") await loadOthers();
    }
  } catch (err) {
    if (current()) draw(h("p", { class: "error" }, `Cannot load ${state.workspace}: ${errorText(err)}`));
    return;
  }
  if (!current()) return;
  if (route.page === "review") {
    const task = state.snapshot.tasks[route.task];
    // A review being edited is not redrawn under the reviewer's hands while
    // it stays open; once it is decided (here or elsewhere) it is redrawn
    // read-only.
    if (options.live && state.review && state.review.id === route.task && state.review.keeps(task)) {
      state.review.refresh(task);
      return;
    }
    renderReview(route.task, options.live ? state.review : null);
  } else if (route.page === "workspace") await renderWorkspace(current);
  else renderInbox(options.live);
}

// Draw a page and name it; on navigation (not a live redraw) the focus goes
// to its heading, so a screen reader announces where the person now is.
function settle(pageTitle, ...children) {
  // A live redraw replaces the element that had the focus: give it back to
  // its successor, so j/k and typing carry on where they were.
  const had = document.activeElement;
  const again = had && had !== document.body && (had.id ? `#${CSS.escape(had.id)}`
    : had.dataset.task ? `a[data-task="${CSS.escape(had.dataset.task)}"]` : null);
  draw(...children);
  if (again && !document.contains(had)) {
    const successor = document.querySelector(again);
    successor?.focus();
    if (successor && "selectionStart" in had && had.selectionStart !== null && "setSelectionRange" in successor) {
      try { successor.setSelectionRange(had.selectionStart, had.selectionEnd); } catch (err) { /* not a text field */ }
    }
  }
  document.title = `${pageTitle} · ${state.workspace ? `${state.workspace} · ` : ""}chapline review desk`;
  if (location.hash !== state.shown) {
    state.shown = location.hash;
    const h1 = $("page-title");
    if (h1) h1.focus({ preventScroll: false });
  }
}

// -- inbox ----------------------------------------------------------------------

// The inbox's choices, kept while the tab lives: a search over titles,
// task ids, rationales and agents; kind and agent filters; the order; the page.
const PAGE = 100;
const SORTS = { oldest: "Waiting longest first", newest: "Newest first", confidence: "Lowest confidence first" };

// How sure the agent said it was: the task's confidence, else the one in
// its routing hints (CHAP carries decimals as strings: "0.82").
function confidenceOf(task) {
  const raw = task.confidence ?? task.routing_hints?.confidence;
  const value = raw === null || raw === undefined || raw === "" ? NaN : Number(raw);
  return Number.isFinite(value) ? value : null;
}

// The reviews the inbox lists, filtered and in the chosen order: the queue
// that j/k walk and "Approve & next" follows.
function inboxQueue(items) {
  const f = state.filters;
  const q = f.q.trim().toLowerCase();
  const agent = (i) => i.asked.from || i.task.assignee || "";
  const list = items.filter((i) => (!f.kind || i.task.kind === f.kind) && (!f.agent || agent(i) === f.agent) &&
    (!q || [titleOf(i), i.task.id, i.asked.summary || "", agent(i), i.ws].join("\n").toLowerCase().includes(q)));
  if (f.sort === "newest") list.reverse();
  else if (f.sort === "confidence") {
    list.sort((a, b) => (confidenceOf(a.task) ?? Infinity) - (confidenceOf(b.task) ?? Infinity));
  }
  return list;
}

function titleOf(item) {
  return title(item.task.kind, item.task.pending_artefact ?? item.asked.artefact ?? null);
}

function renderInbox(live) {
  const tasks = Object.values(state.snapshot.tasks);
  const reviews = inboxItems();
  const asked = requests();
  const escalations = tasks.filter((t) => t.supersedes && t.assignee === state.me &&
    ["created", "in_progress", "review_requested"].includes(t.state));
  const whispers = Object.values(state.snapshot.whispers || {}).filter((w) =>
    w.state === "pending" && (w.askee || []).some((uri) => uri === state.me || uri.startsWith("workspace:")));
  const known = new Set(JSON.parse(sessionStorage.getItem("chapline-seen") || "[]"));
  sessionStorage.setItem("chapline-seen", JSON.stringify(reviews.map((i) => i.task.id)));
  const results = h("div", { id: "review-results" });
  const redraw = (changes) => {
    Object.assign(state.filters, changes);
    state.cursor = 0;
    results.replaceChildren(...reviewResults(reviews, redraw, live ? known : null));
  };
  const choose = (id, label, key, options) => h("div", { class: "field" },
    h("label", { for: id }, label),
    h("select", { id, onchange: (e) => redraw({ [key]: e.target.value, page: 0 }) },
      options.map(([value, text]) => h("option", { value, selected: state.filters[key] === value }, text))));
  const distinct = (values) => [...new Set(values)].sort();
  results.replaceChildren(...reviewResults(reviews, redraw, live ? known : null));
  const escalationRows = escalations.map((t) => {
    const reason = reasonOf(escalationOf(t));
    return h("tr", { "data-escalation": t.id },
      h("td", {}, h("a", { href: link(state.workspace, "review", t.id) }, escalatedTitle(t, asked)),
        h("div", { class: "muted small" }, t.id)),
      h("td", {}, h("a", { href: link(state.workspace, "review", t.supersedes) }, t.supersedes)),
      h("td", {}, t.delegator),
      h("td", {}, reason ? firstLine(reason) : h("span", { class: "muted" }, "(no reason given)")),
      h("td", {}, t.state));
  });
  settle("Inbox",
    heading("Inbox"),
    h("p", { class: "help" }, "Press ", h("kbd", {}, "?"), " for keyboard shortcuts."),
    h("section", { "aria-labelledby": "reviews-title" },
      h("h2", { id: "reviews-title" }, `Reviews waiting for you (${reviews.length})`),
      reviews.length || state.filters.ws === "*" ? h("div", { class: "filters", role: "search" },
        h("div", { class: "field grow" }, h("label", { for: "inbox-search" }, "Search"),
          h("input", { type: "search", id: "inbox-search", value: state.filters.q, placeholder: "title, task, rationale, agent",
            oninput: (e) => redraw({ q: e.target.value, page: 0 }) })),
        state.workspaces.length > 1 ? h("div", { class: "field" },
          h("label", { for: "filter-ws" }, "Workspaces"),
          h("select", { id: "filter-ws", onchange: (e) => { Object.assign(state.filters, { ws: e.target.value, page: 0 }); render(); } },
            h("option", { value: "", selected: state.filters.ws !== "*" }, `${state.workspace} only`),
            h("option", { value: "*", selected: state.filters.ws === "*" }, "All my workspaces"))) : null,
        choose("filter-kind", "Kind", "kind", [["", "All kinds"], ...distinct(reviews.map((i) => String(i.task.kind))).map((k) => [k, k])]),
        choose("filter-agent", "Agent", "agent", [["", "All agents"],
          ...distinct(reviews.map((i) => i.asked.from || i.task.assignee || "")).map((a) => [a, a])]),
        choose("inbox-sort", "Order", "sort", Object.entries(SORTS))) : null,
      results),
    h("section", { "aria-labelledby": "escalations-title" },
      h("h2", { id: "escalations-title" }, `Escalated to you (${escalations.length})`),
      table("Escalated to you", ["Task", "Escalated from", "By", "Reason", "State"], escalationRows,
        "No escalations.")),
    // Whispers exist once a workspace has used the whisper profile.
    ...(Object.keys(state.snapshot.whispers || {}).length
      ? [h("section", { "aria-labelledby": "whispers-title" },
        h("h2", { id: "whispers-title" }, `Whispers waiting for your answer (${whispers.length})`),
        whispers.length ? whispers.map(renderWhisper) : h("p", { class: "empty" }, "No whispers."))]
      : []));
}

// One page of the filtered reviews, with where it is in the list.
function reviewResults(reviews, redraw, known) {
  const list = inboxQueue(reviews);
  state.lastQueue = list.map((i) => ({ ws: i.ws, id: i.task.id }));
  const across = state.filters.ws === "*";
  const pages = Math.max(1, Math.ceil(list.length / PAGE));
  const page = Math.min(state.filters.page, pages - 1);
  const shown = list.slice(page * PAGE, (page + 1) * PAGE);
  state.cursor = Math.min(state.cursor, Math.max(0, shown.length - 1));
  const rows = shown.map(({ ws, task: t, asked }, i) => h("tr", {
    class: [known && !known.has(t.id) ? "flash" : "", i === state.cursor ? "current" : ""].join(" ").trim() || null,
    "data-task": t.id,
    "data-workspace": ws,
  },
  h("td", {}, h("a", { href: link(ws, "review", t.id), "data-task": t.id }, titleOf({ task: t, asked })),
    h("div", { class: "muted small" }, t.id)),
  across ? h("td", {}, ws) : null,
  h("td", {}, asked.from || t.assignee || ""),
  h("td", {}, confidenceOf(t) === null ? "" : String(confidenceOf(t))),
  h("td", {}, h("time", { datetime: t.review.requested_at, title: t.review.requested_at }, age(t.review.requested_at))),
  h("td", {}, asked.summary || h("span", { class: "muted" }, "(no rationale given)"))));
  const filtered = list.length !== reviews.length;
  return [
    list.length ? h("p", { id: "inbox-count", class: "help", "aria-live": "polite" },
      `Showing ${page * PAGE + 1}–${page * PAGE + shown.length} of ${list.length}${filtered ? ` matching (${reviews.length} in all)` : ""}`) : null,
    table("Reviews waiting for you",
      ["Review", ...(across ? ["Workspace"] : []), "Requested by", "Confidence", "Waiting", "Rationale"], rows,
      reviews.length ? "No review matches the search and filters." : "Nothing waits for your review."),
    pages > 1 ? h("div", { class: "actions pager" },
      h("button", { type: "button", id: "page-prev", disabled: page === 0, onclick: () => redraw({ page: page - 1 }) }, "Previous page"),
      h("span", {}, `Page ${page + 1} of ${pages}`),
      h("button", { type: "button", id: "page-next", disabled: page === pages - 1, onclick: () => redraw({ page: page + 1 }) }, "Next page")) : null,
  ].filter(Boolean);
}

function moveCursor(step) {
  const rows = [...document.querySelectorAll("tr[data-task]")];
  if (!rows.length) return false;
  state.cursor = Math.max(0, Math.min(rows.length - 1, state.cursor + step));
  rows.forEach((row, i) => row.classList.toggle("current", i === state.cursor));
  rows[state.cursor].querySelector("a").focus();
  return true;
}

// A whisper waiting for this person's answer, with what they need to give
// it: the task it is about, how urgent it is, when it lapses and what
// happens then. One answer at a time: the controls are off while it is sent.
const answering = new Set(); // whispers whose answer is in flight, across redraws

function renderWhisper(w) {
  const controls = h("fieldset", { class: "bare", id: `whisper-${w.id}`, disabled: answering.has(w.id) });
  const answer = async (params) => {
    if (answering.has(w.id)) return;
    answering.add(w.id);
    controls.disabled = true;
    try {
      await chap("whisper.answer", { workspace: state.workspace, from: state.me, whisper_id: w.id, ...params });
      say(`Answered: ${w.question ?? w.id}`);
    } catch (err) {
      controls.disabled = false;
      say(`Not answered: ${errorText(err)}`);
      return;
    } finally {
      answering.delete(w.id);
    }
    await render();
  };
  const task = state.snapshot.tasks[w.task_id];
  const lapses = Number.isFinite(Date.parse(w.asked_at)) && Number.isFinite(Number(w.deadline_ms))
    ? new Date(Date.parse(w.asked_at) + Number(w.deadline_ms)).toISOString() : null;
  const text = h("input", { type: "text", id: `answer-${w.id}` });
  const optionLabel = (o) => (o !== null && typeof o === "object" ? o.label ?? o.id : o);
  const idOf = (o) => JSON.stringify(o !== null && typeof o === "object" ? o.id : o);
  const lapsedTo = w.default_if_lapsed === null || w.default_if_lapsed === undefined ? null
    : (w.options || []).find((o) => idOf(o) === idOf(w.default_if_lapsed)) ?? w.default_if_lapsed;
  // The context the asker gave is on its whisper.ask entry, not the whisper.
  const asked = state.snapshot.audit.find((e) => e.envelope?.method === "whisper.ask" && !e.outcome &&
    (e.envelope.params.whisper_id === w.id || (e.envelope.params.whisper_id === undefined &&
      e.envelope.params.task_id === w.task_id && e.envelope.params.question === w.question && e.arrived === w.asked_at)));
  const context = asked?.envelope.params.context_summary;
  controls.append(
    h("legend", { class: "skip" }, `Answer: ${w.question ?? ""}`),
    w.options && w.options.length
      ? h("div", { class: "actions" }, w.options.map((o) =>
        h("button", { type: "button", "data-option": JSON.stringify(o !== null && typeof o === "object" ? o.id : o),
          onclick: () => answer({ answer_option: o !== null && typeof o === "object" ? o.id : o }) }, String(optionLabel(o)))))
      : h("div", { class: "actions" },
        h("label", { for: `answer-${w.id}` }, "Answer"), text,
        h("button", { type: "button", onclick: () => answer({ answer_text: text.value }) }, "Send")));
  return h("div", { class: "panel whisper", "data-whisper": w.id },
    h("p", {}, h("span", { class: `badge urgency-${w.urgency}` }, `${w.urgency ?? "low"} urgency`), " ",
      h("strong", {}, w.question ?? "")),
    h("p", { class: "muted" }, `Asked by ${w.asker} about `,
      task ? h("a", { href: link(state.workspace, "review", task.id) }, title(task.kind, draftOf(task, requests()))) : String(w.task_id),
      lapses ? [", lapses at ", when(lapses)] : null,
      lapsedTo !== null ? `; if it lapses: ${String(optionLabel(lapsedTo))}` : null),
    typeof context === "string" && context ? h("div", { class: "text quote" }, context) : null,
    controls);
}

// -- review page ---------------------------------------------------------------

// CHAP carries integers only (SPECIFICATION.md, "JCS"): a decimal typed into
// the editor is caught here with the reason, not refused by the server.
function uncarried(value, path = "") {
  if (typeof value === "number" && (!Number.isInteger(value) || !Number.isSafeInteger(value))) {
    return `${value} at ${path || "/"}: CHAP carries only integers up to 2^53-1; write it as text or as a whole number`;
  }
  if (value !== null && typeof value === "object") {
    for (const [key, item] of Object.entries(value)) {
      const found = uncarried(item, `${path}/${key}`);
      if (found) return found;
    }
  }
  return null;
}

// What a JSON editor holds: {value}, or {why} it cannot be sent.
function parseJson(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { why: `is not valid JSON: ${err.message}` };
  }
  const why = uncarried(value);
  return why ? { why: `cannot be sent: ${why}` } : { value };
}

function renderReview(id, wasOpen) {
  const task = state.snapshot.tasks[id];
  if (!task) {
    state.review = null;
    settle("Unknown task", heading("Unknown task"), h("p", {}, `${id} is not in ${state.workspace}.`));
    return;
  }
  if (task.state === "review_requested") renderOpenReview(task);
  else if (escalatedToMe(task)) renderEscalated(task);
  else renderClosedReview(task, wasOpen);
}

function taskMeta(task, asked) {
  return h("div", { class: "meta" },
    h("div", {}, h("span", {}, "Task"), h("code", { id: "task-id" }, task.id)),
    h("div", {}, h("span", {}, "Kind"), String(task.kind)),
    h("div", {}, h("span", {}, "Mode"), String(task.mode)),
    h("div", {}, h("span", {}, "State"), h("strong", { id: "task-state" }, task.state)),
    h("div", {}, h("span", {}, "Requested by"), asked.from || task.assignee || ""),
    confidenceOf(task) !== null ? h("div", {}, h("span", {}, "Confidence"), String(confidenceOf(task))) : null,
    h("div", {}, h("span", {}, "Asked"), task.review ? `${age(task.review.requested_at)} ago` : ""),
    h("div", {}, h("span", {}, "Rule"), task.review?.rule || ""));
}

function renderOpenReview(task) {
  const id = task.id;
  const asked = requests()[id] || {};
  const base = task.pending_artefact;
  const name = title(task.kind, base);
  const draft = h("textarea", { id: "draft", rows: 14, spellcheck: "false", "aria-describedby": "draft-help draft-error" });
  draft.value = pretty(base);
  const patchView = h("pre", { id: "patch" }, "[]");
  const changes = h("div", { id: "changes", "aria-live": "polite" }, h("p", { class: "muted" }, "No changes yet."));
  const problem = h("p", { id: "draft-error", class: "error", role: "alert" });
  const rationale = h("textarea", { id: "rationale", rows: 3 });
  const tags = h("input", { type: "text", id: "tags", placeholder: "style, accuracy" });
  const comment = h("input", { type: "text", id: "comment" });
  const declineChoice = h("input", { type: "radio", name: "reject-kind", id: "reject-decline", value: "decline" });
  const reviseChoice = h("input", { type: "radio", name: "reject-kind", id: "reject-revise", value: "revise" });
  const rejectReason = h("textarea", { id: "reject-reason", rows: 3, "aria-describedby": "reject-help" });
  const reason = h("input", { type: "text", id: "abstain-reason" });
  const category = h("select", { id: "abstain-category" },
    ["insufficient_context", "out_of_scope", "out_of_authority", "conflict_of_interest", "other"]
      .map((c) => h("option", { value: c }, c.replaceAll("_", " "))));
  const members = (state.describe.members || []).filter((m) => m.uri !== state.me);
  const assignee = h("select", { id: "escalate-to" }, members.map((m) => h("option", { value: m.uri }, `${m.uri} (${m.role})`)));
  const escalateReason = h("textarea", { id: "escalate-reason", rows: 3, "aria-describedby": "escalate-help" });
  const controls = h("fieldset", { id: "decide-controls", class: "bare" });
  const notice = h("p", { id: "review-notice", class: "verdict pending", role: "status", hidden: true });
  const approveWhy = h("p", { id: "approve-why", class: "help" });

  // The draft as edited: the value, or null with the reason shown.
  function edited() {
    const { value, why } = parseJson(draft.value);
    problem.textContent = why ? `The draft ${why}` : "";
    return why ? null : value;
  }
  function currentPatch() {
    const value = edited();
    return value === null ? null : diff(base, value);
  }
  // Approve only while the draft on screen is the agent's, unedited and
  // parsing; Override only with a valid edit (SPECIFICATION.md, "Review desk").
  function update() {
    const ops = currentPatch();
    if (ops) {
      patchView.textContent = ops.length ? `[\n${ops.map((op) => `  ${JSON.stringify(op)}`).join(",\n")}\n]` : "[]";
      changes.replaceChildren(ops.length ? fieldChanges(base, ops) : h("p", { class: "muted" }, "No changes yet."));
    }
    const pristine = ops !== null && ops.length === 0;
    $("approve").disabled = !pristine;
    $("approve-next").disabled = !pristine || !next;
    $("override").disabled = !ops || ops.length === 0;
    approveWhy.textContent = pristine ? ""
      : ops === null ? "Approve is off: the draft has an error. Fix it, or undo your edit to approve the agent's draft."
        : "Approve is off while the draft differs from the agent's: override with your edit, or undo it.";
    $("reject").disabled = !(declineChoice.checked || reviseChoice.checked) || !rejectReason.value.trim();
    $("escalate").disabled = !members.length || !escalateReason.value.trim();
  }
  draft.addEventListener("input", update);
  for (const el of [declineChoice, reviseChoice, rejectReason, escalateReason]) el.addEventListener("input", update);
  const tagList = () => tags.value.split(",").map((t) => t.trim()).filter(Boolean);
  const common = () => ({ workspace: state.workspace, from: state.me, task_id: id });

  const review = {
    id,
    inFlight: false,
    held: false,
    // Every decision control off (one call at a time; none while the task
    // is being changed elsewhere), or back on.
    lock(flag) {
      controls.disabled = flag;
      draft.readOnly = flag;
    },
    hold(message) {
      review.held = true;
      review.lock(true);
      notice.textContent = message;
      notice.hidden = false;
    },
    keeps: (fresh) => fresh?.state === "review_requested",
    refresh(fresh) {
      $("task-state").textContent = fresh.state;
      if (review.held && !review.inFlight) {
        review.held = false;
        review.lock(false);
        notice.hidden = true;
      }
    },
    unsent: () => (draft.value !== pretty(base) ? draft.value : null),
  };
  state.review = review;

  // The review after this one in the queue, for "Approve & next": the
  // inbox's as last drawn across workspaces, else this workspace's.
  // Only this workspace's queue is fresh (the others' may have been decided
  // since), so only it wraps around to the reviews before this one.
  const here = (i) => i.ws === state.workspace && i.id === id;
  const across = state.filters.ws === "*" && state.lastQueue.some(here);
  const queue = across ? state.lastQueue
    : inboxQueue(reviewItems(state.workspace, state.snapshot, state.describe)).map((i) => ({ ws: i.ws, id: i.task.id }));
  const next = queue[queue.findIndex(here) + 1] ?? (across ? null : queue.find((i) => !here(i))) ?? null;

  async function act(label, method, callParams, andNext = false) {
    if (review.inFlight || review.held || state.review !== review) return;
    review.inFlight = true;
    review.lock(true);
    $("action-error").textContent = "";
    let result;
    try {
      result = await chap(method, callParams);
    } catch (err) {
      review.inFlight = false;
      $("action-error").textContent = `${label} refused: ${errorText(err)}`;
      say(`${label} refused: ${errorText(err)}`);
      if (!review.held) review.lock(false);
      scheduleRefresh(); // the refusal may mean the task changed: show how
      return;
    }
    state.review = null;
    say(`${label}: ${name} is now ${result.state ?? "escalated"}`);
    location.hash = andNext && next ? link(next.ws, "review", next.id) : link(state.workspace, "inbox");
  }
  const approve = (andNext) => () =>
    act("Approved", "decide.approve", { ...common(), comment: comment.value || undefined, tags: tagList() }, andNext);
  review.submit = (target) => {
    if (target === rejectReason) return $("reject").click() || true;
    if (target === draft || target === rationale) return $("override").click() || true;
    return false;
  };
  review.reject = () => { declineChoice.focus(); return true; };
  review.edit = () => { draft.focus(); return true; };

  const override = () => {
    const ops = currentPatch();
    if (!ops || !ops.length) return;
    if (!rationale.value.trim()) {
      $("action-error").textContent = "An override needs a rationale: say why you changed the draft.";
      rationale.focus();
      return;
    }
    act("Overridden", "decide.override", { ...common(), diff: ops, rationale: rationale.value.trim(), tags: tagList() });
  };
  const escalate = () => {
    if (!escalateReason.value.trim()) { escalateReason.focus(); return; }
    act("Escalated", "escalate.raise", { workspace: state.workspace, from: state.me, original_task_id: id,
      context: escalateReason.value.trim(), new_task: { assignee: assignee.value, kind: task.kind, input: task.input } });
  };
  const reject = () => {
    const revise = reviseChoice.checked;
    if (!revise && !declineChoice.checked) return;
    if (!rejectReason.value.trim()) { rejectReason.focus(); return; }
    act(revise ? "Sent back" : "Declined", "decide.reject", { ...common(), comment: rejectReason.value.trim(),
      tags: tagList(), request_revision: revise });
  };

  controls.append(
    h("legend", { class: "skip" }, "Decision"),
    h("div", { class: "cols" },
      h("div", { class: "field" }, h("label", { for: "rationale" }, "Rationale (required for an override)"), rationale),
      h("div", { class: "stack" },
        h("div", { class: "field" }, h("label", { for: "tags" }, "Tags (comma-separated)"), tags),
        h("div", { class: "field" }, h("label", { for: "comment" }, "Comment (sent with an approval)"), comment))),
    h("div", { class: "actions decide" },
      h("button", { type: "button", id: "approve", class: "good", onclick: approve(false) }, "Approve"),
      h("button", { type: "button", id: "approve-next", class: "good", onclick: approve(true) }, "Approve & next"),
      h("button", { type: "button", id: "override", class: "primary", disabled: true, onclick: override }, "Override with my edit")),
    approveWhy,
    h("fieldset", { id: "reject-box" },
      h("legend", {}, "Reject"),
      h("div", { class: "choices", role: "radiogroup", "aria-label": "How to reject" },
        h("label", { for: "reject-decline" }, declineChoice, " Decline: close the task, no further work"),
        h("label", { for: "reject-revise" }, reviseChoice, " Send back: the agent revises and asks again")),
      h("div", { class: "field" }, h("label", { for: "reject-reason" }, "Reason (required)"), rejectReason,
        h("p", { id: "reject-help", class: "help" }, "Sent as the rejection's comment; the agent reads it. Ctrl+Enter rejects.")),
      h("div", { class: "actions" },
        h("button", { type: "button", id: "reject", class: "danger", disabled: true, onclick: reject }, "Reject"))),
    h("fieldset", {},
      h("legend", {}, "Abstain"),
      h("div", { class: "actions" },
        h("label", { for: "abstain-reason" }, "Reason"), reason,
        h("label", { for: "abstain-category" }, "Category"), category,
        h("button", { type: "button", id: "abstain", onclick: () => {
          if (!reason.value.trim()) { $("action-error").textContent = "Say why you abstain."; reason.focus(); return; }
          act("Abstained", "abstain.declare", { ...common(), reason: reason.value.trim(), category: category.value });
        } }, "Abstain"))),
    h("fieldset", { id: "escalate-box" },
      h("legend", {}, "Escalate"),
      h("div", { class: "field" }, h("label", { for: "escalate-to" }, "Hand to"), assignee),
      h("div", { class: "field" }, h("label", { for: "escalate-reason" }, "Reason (required)"), escalateReason,
        h("p", { id: "escalate-help", class: "help" },
          "Recorded with the escalation as its context; the person you hand the task to reads it.")),
      h("div", { class: "actions" },
        h("button", { type: "button", id: "escalate", disabled: true, onclick: escalate }, "Escalate"))));

  settle(`Review ${name}`,
    h("p", {}, h("a", { href: link(state.workspace, "inbox") }, "← Inbox")),
    heading(name),
    taskMeta(task, asked),
    asked.summary ? h("p", {}, h("strong", {}, "Agent's rationale: "), asked.summary) : null,
    notice,
    h("div", { class: "cols" },
      h("div", { class: "stack" },
        h("section", { class: "panel", "aria-labelledby": "read-title" },
          h("h2", { id: "read-title" }, "The agent's draft"),
          h("div", { id: "draft-read", class: "reading" }, readable(base))),
        h("section", { class: "panel", "aria-labelledby": "input-title" },
          h("h2", { id: "input-title" }, "Input"), h("pre", { id: "input" }, pretty(task.input)))),
      h("div", { class: "stack" },
        h("section", { class: "panel", "aria-labelledby": "draft-title" },
          h("h2", { id: "draft-title" }, h("label", { for: "draft" }, "Edit the draft (JSON)")),
          draft,
          h("p", { id: "draft-help", class: "help" }, "Your change becomes an RFC 6902 patch sent with Override; Ctrl+Enter overrides."),
          problem),
        h("section", { class: "panel", "aria-labelledby": "changes-title" },
          h("h2", { id: "changes-title" }, "Your edit"),
          changes,
          h("details", {}, h("summary", {}, "As JSON Patch"), patchView)))),
    h("section", { "aria-labelledby": "decide-title" },
      h("h2", { id: "decide-title" }, "Decide"),
      controls,
      h("p", { id: "action-error", class: "error", role: "alert" })));
  update();
}

// A task escalated to the signed-in person, still theirs to do: where it
// came from, who escalated it and why (its escalate.raise entry), the
// original's draft, and an editor prefilled with it whose output they
// complete the task with (task.complete; if the task requires review, that
// opens its review instead).
function renderEscalated(task) {
  const id = task.id;
  const asked = requests();
  const original = state.snapshot.tasks[task.supersedes];
  const draft = original ? draftOf(original, asked) : null;
  const raised = escalationOf(task);
  const reason = reasonOf(raised);
  const name = escalatedTitle(task, asked);
  const prefilled = draft === null ? "" : pretty(draft);
  const output = h("textarea", { id: "output", rows: 14, spellcheck: "false", "aria-describedby": "output-help output-error" });
  output.value = prefilled;
  const problem = h("p", { id: "output-error", class: "error", role: "alert" });
  const complete = h("button", { type: "button", id: "complete", class: "good", onclick: () => send() },
    "Complete with this output");
  const controls = h("fieldset", { id: "complete-controls", class: "bare" },
    h("legend", { class: "skip" }, "Complete"), h("div", { class: "actions" }, complete));
  const notice = h("p", { id: "review-notice", class: "verdict pending", role: "status", hidden: true });
  const check = () => {
    const { why } = parseJson(output.value);
    problem.textContent = why ? `The output ${why}` : "";
    complete.disabled = !!why;
  };
  output.addEventListener("input", check);

  // The same contract as an open review's (see onEvent and drawPage): one
  // call at a time, held while the task changes elsewhere, kept on redraws.
  const page = {
    id,
    inFlight: false,
    held: false,
    keeps: escalatedToMe,
    lock(flag) {
      controls.disabled = flag;
      output.readOnly = flag;
    },
    hold(message) {
      page.held = true;
      page.lock(true);
      notice.textContent = message;
      notice.hidden = false;
    },
    refresh(fresh) {
      $("task-state").textContent = fresh.state;
      if (page.held && !page.inFlight) {
        page.held = false;
        page.lock(false);
        notice.hidden = true;
      }
    },
    unsent: () => (output.value !== prefilled ? output.value : null),
    submit: (target) => target === output && (complete.click() || true),
    reject: () => false,
    edit: () => { output.focus(); return true; },
  };
  state.review = page;

  async function send() {
    const { value, why } = parseJson(output.value);
    if (why !== undefined || page.inFlight || page.held || state.review !== page) return;
    page.inFlight = true;
    page.lock(true);
    $("action-error").textContent = "";
    let result;
    try {
      result = await chap("task.complete", { workspace: state.workspace, from: state.me, task_id: id, output: value });
    } catch (err) {
      page.inFlight = false;
      $("action-error").textContent = `Completing refused: ${errorText(err)}`;
      say(`Completing refused: ${errorText(err)}`);
      if (!page.held) page.lock(false);
      scheduleRefresh();
      return;
    }
    state.review = null;
    say(`Completed: ${name} is now ${result.state}`);
    location.hash = link(state.workspace, "inbox");
  }

  settle(name,
    h("p", {}, h("a", { href: link(state.workspace, "inbox") }, "← Inbox")),
    heading(name),
    taskMeta(task, { from: task.delegator }),
    h("section", { class: "panel", "aria-labelledby": "escalation-title" },
      h("h2", { id: "escalation-title" }, "Escalated to you"),
      h("p", { id: "escalated-from" }, `Escalated to ${task.assignee} by ${task.delegator} from `,
        h("a", { href: link(state.workspace, "review", task.supersedes) }, task.supersedes),
        raised ? [" at ", when(raised.arrived)] : null, "."),
      reason ? h("div", { id: "escalation-reason", class: "text quote" }, reason)
        : h("p", { class: "muted" }, "No reason was given."),
      h("p", { class: "help" }, task.review_required
        ? "It is yours to do: write its output and complete it. It requires review, so completing it asks a reviewer to approve your output."
        : "It is yours to do: write its output and complete it.")),
    notice,
    h("div", { class: "cols" },
      h("div", { class: "stack" },
        h("section", { class: "panel", "aria-labelledby": "read-title" },
          h("h2", { id: "read-title" }, "The original's draft"),
          draft === null ? h("p", { class: "empty" }, "The original has no draft.")
            : h("div", { id: "draft-read", class: "reading" }, readable(draft))),
        h("section", { class: "panel", "aria-labelledby": "input-title" },
          h("h2", { id: "input-title" }, "Input"), h("div", { id: "input", class: "reading" }, readable(task.input)))),
      h("section", { class: "panel", "aria-labelledby": "output-title" },
        h("h2", { id: "output-title" }, h("label", { for: "output" }, "Your output (JSON)")),
        output,
        h("p", { id: "output-help", class: "help" }, "Prefilled with the original's draft; Ctrl+Enter completes."),
        problem,
        controls)),
    h("p", { id: "action-error", class: "error", role: "alert" }));
  check();
}

const VERBS = {
  "review.request": () => "Review requested",
  "decide.approve": () => "Approved",
  "decide.override": () => "Overridden",
  "decide.reject": (p) => (p.request_revision ? "Sent back for revision" : "Declined"),
  "abstain.declare": () => "Abstained",
  "escalate.raise": () => "Escalated",
  "task.complete": () => "Completed",
  "control.cancel": () => "Cancelled",
};

// The calls that take a task out of the hands of the page that had it open:
// a review's decisions, a cancellation, and an escalated task's completion.
const ENDINGS = new Set(["decide.approve", "decide.override", "decide.reject", "abstain.declare", "escalate.raise",
  "task.complete", "control.cancel"]);

// A task no longer waiting for review: what was decided, by whom, when and
// why, read-only. Reached from a link, or live when the task was decided
// elsewhere while this page had it open (`wasOpen`).
function renderClosedReview(task, wasOpen) {
  const id = task.id;
  const asked = requests();
  const history = [];
  let draft = null;
  for (const entry of state.snapshot.audit) {
    const env = entry.envelope;
    const p = params(entry);
    if (!env || entry.outcome || taskOf(p) !== id || !VERBS[env.method]) continue;
    history.push({ entry, method: env.method, p, draft });
    if (env.method === "review.request") draft = p.artefact;
  }
  draft = draftOf(task, asked) ?? draft;
  const name = title(task.kind, draft);
  // What ended it is the task's last recorded call, if that is an ending (a
  // task.complete only when it completed the task: one that opened a review
  // ended nothing); an older round's decision is not shown as this one's.
  const final = history.at(-1);
  const last = final && ENDINGS.has(final.method) && (final.method !== "task.complete" || task.state === "completed")
    ? final : undefined;
  const unsent = wasOpen ? wasOpen.unsent() : null;
  const successors = Object.values(state.snapshot.tasks).filter((t) => t.supersedes === id);
  state.review = null;
  const items = history.map(({ entry, method, p, draft: before }) => h("li", { class: "decision", "data-method": method },
    h("p", {}, h("strong", {}, VERBS[method](p)), " by ", h("span", { class: "actor" }, p.from), " at ", when(entry.arrived)),
    p.rationale || p.comment || p.summary || p.reason || p.context
      ? h("div", { class: "text quote" }, p.rationale || p.comment || p.summary || p.reason || p.context) : null,
    p.tags && p.tags.length ? h("p", {}, "Tags: ", p.tags.map((t) => h("span", { class: "badge" }, t))) : null,
    method === "escalate.raise" ? successors.map((t) => h("p", {}, "Handed to ", t.assignee, " as ",
      h("a", { href: link(state.workspace, "review", t.id), class: "successor" }, t.id), ` (${t.state})`)) : null,
    method === "decide.override" && Array.isArray(p.diff)
      ? [fieldChanges(before, p.diff), h("details", {}, h("summary", {}, "As JSON Patch"), h("pre", {}, pretty(p.diff)))]
      : null));
  settle(name,
    h("p", {}, h("a", { href: link(state.workspace, "inbox") }, "← Inbox")),
    heading(name),
    taskMeta(task, asked[id] || {}),
    wasOpen && last
      ? h("div", { id: "decided-elsewhere", class: "verdict bad", role: "alert" },
        h("p", {}, `Decided while you had it open: ${VERBS[last.method](last.p).toLowerCase()} by ${last.p.from} at `,
          when(last.entry.arrived), ". Nothing you entered was sent."),
        unsent ? h("details", {}, h("summary", {}, "Your unsent edit"), h("pre", { id: "unsent" }, unsent)) : null)
      : h("p", { class: "verdict pending" }, `This task is ${task.state}; there is nothing to decide.`),
    task.supersedes ? h("p", { id: "escalated-from" }, `Escalated to ${task.assignee} by ${task.delegator} from `,
      h("a", { href: link(state.workspace, "review", task.supersedes) }, task.supersedes), ": its history says why.") : null,
    h("section", { "aria-labelledby": "history-title" },
      h("h2", { id: "history-title" }, "Decision history"),
      items.length ? h("ol", { id: "decision-history", class: "history" }, items)
        : h("p", { class: "empty" }, "No decisions recorded for this task.")),
    task.output !== null && task.output !== undefined
      ? h("section", { class: "panel", "aria-labelledby": "output-title" },
        h("h2", { id: "output-title" }, "Final output"), h("div", { id: "final-output", class: "reading" }, readable(task.output)))
      : null,
    draft !== null
      ? h("section", { class: "panel", "aria-labelledby": "draft-title" },
        h("h2", { id: "draft-title" }, "The agent's draft"), h("div", { class: "reading" }, readable(draft)))
      : null,
    h("section", { class: "panel", "aria-labelledby": "input-title" },
      h("h2", { id: "input-title" }, "Input"), h("div", { id: "input", class: "reading" }, readable(task.input))));
}

// -- keyboard -------------------------------------------------------------------

const shortcuts = {
  move: (step) => state.route.page === "inbox" && moveCursor(step),
  open: () => {
    const row = state.route.page === "inbox" && document.querySelectorAll("tr[data-task]")[state.cursor];
    if (!row) return false;
    location.hash = link(row.dataset.workspace, "review", row.dataset.task);
    return true;
  },
  approve: () => {
    const button = document.getElementById("approve-next")?.disabled === false ? $("approve-next") : $("approve");
    if (!state.review || !button || button.matches(":disabled")) return false;
    button.click();
    return true;
  },
  reject: () => !!state.review && state.review.reject(),
  edit: () => !!state.review && state.review.edit(),
  submit: (target) => !!state.review && !state.review.inFlight && state.review.submit(target),
  help: () => {
    const dialog = $("keys-help");
    if (dialog.open) dialog.close();
    else dialog.showModal();
    return true;
  },
};

// -- workspace page ------------------------------------------------------------

async function renderWorkspace(current) {
  const d = state.describe;
  const tasks = Object.values(state.snapshot.tasks);
  const byState = {};
  for (const t of tasks) (byState[t.state] ||= []).push(t);
  const log = await readLog();
  let verdict;
  try {
    const v = await chap("audit.verify_chain", { workspace: state.workspace, from: state.me });
    verdict = v.ok
      ? h("p", { id: "verdict", class: "verdict ok" },
        `Chain verified by the server: ${v.entries_checked} of ${v.entries_total} entries, head `,
        h("span", { class: "hash" }, v.chain_head))
      : h("p", { id: "verdict", class: "verdict pending" }, `Chain not evaluated: ${v.reason} (${v.entries_unchecked} entries unchained)`);
  } catch (err) {
    verdict = h("p", { id: "verdict", class: "verdict bad" }, `Chain broken: ${errorText(err)}`);
  }
  if (!current()) return;
  const taskLink = (tid) => (tid && state.snapshot.tasks[tid] ? h("a", { href: link(state.workspace, "review", tid) }, tid) : tid ?? "");
  const rows = log.entries.slice().reverse().map((e) => {
    const call = e.envelope || e.request || {};
    const refused = !!e.outcome;
    return h("tr", { class: refused ? "refused" : null, "data-seq": e.seq },
      h("td", {}, String(e.seq)),
      h("td", {}, h("time", { datetime: e.arrived }, e.arrived.replace("T", " ").replace("Z", ""))),
      h("td", {}, call.method),
      h("td", {}, call.params?.from ?? ""),
      h("td", {}, taskLink(call.params?.task_id ?? call.params?.original_task_id)),
      h("td", {}, refused
        ? [h("span", { class: "badge refused" }, "refused"), ` ${e.outcome.code}: `,
          h("span", { class: "refusal" }, refusalMeaning(e.outcome.code))]
        : h("span", { class: "badge accepted" }, "accepted")),
      h("td", { class: "hash", title: e.prev_hash || "" }, (e.prev_hash || "").slice(7, 19)));
  });
  settle("Workspace",
    h("div", { class: "actions" },
      h("h1", { id: "page-title", tabindex: "-1", class: "grow" }, state.workspace),
      h("button", { type: "button", id: "export", onclick: exportSnapshot }, "Export snapshot (JSON)")),
    h("div", { class: "meta" },
      h("div", {}, h("span", {}, "State"), d.state),
      h("div", {}, h("span", {}, "Mode"), `${d.mode} (ceiling ${d.mode_ceiling})`),
      h("div", {}, h("span", {}, "Profiles"), d.profiles.join(", ")),
      h("div", {}, h("span", {}, "Entries"), String(d.audit_count))),
    h("h2", {}, `Members (${d.members.length})`),
    table("Members", ["Participant", "Type", "Role", "Joined"], d.members.map((m) =>
      h("tr", {}, h("td", {}, m.uri), h("td", {}, m.type), h("td", {}, m.role), h("td", {}, m.joined ?? ""))), "No members."),
    h("h2", {}, `Tasks by state (${tasks.length})`),
    tasks.length ? h("div", { class: "states" }, Object.keys(byState).sort().map((s) =>
      h("div", { class: "panel", "data-state": s }, h("strong", {}, `${s} (${byState[s].length})`),
        h("ul", {}, byState[s].map((t) => h("li", {},
          h("a", { href: link(state.workspace, "review", t.id) }, t.id),
          h("span", { class: "muted" }, ` ${t.kind}`))))))) : h("p", { class: "empty" }, "No tasks."),
    h("h2", {}, "Audit timeline"),
    verdict,
    table("Audit timeline, newest first", ["Seq", "Arrived (UTC)", "Method", "Actor", "Task", "Outcome", "Link"], rows, "The log is empty."));
}

// The whole log, page by page: each audit.read answer stops at the server's
// byte budget and its next_seq says where the next page starts.
async function readLog() {
  const entries = [];
  for (let seq = 0; ;) {
    const page = await chap("audit.read", { workspace: state.workspace, from: state.me, range: { from_seq: seq } });
    for (const entry of page.entries) entries.push(entry);
    if (!page.entries.length || page.next_seq <= seq || page.next_seq >= state.describe.audit_count) break;
    seq = page.next_seq;
  }
  return { entries };
}

async function exportSnapshot() {
  try {
    const data = await read(`/desk/api/snapshot?workspace=${encodeURIComponent(state.workspace)}`);
    const blob = new Blob([JSON.stringify(data, null, 2)], { type: "application/json" });
    const a = h("a", { href: URL.createObjectURL(blob), download: `${state.workspace}.snapshot.json` });
    document.body.append(a);
    a.click();
    a.remove();
    say(`Exported ${state.workspace}`);
  } catch (err) {
    say(`Export failed: ${errorText(err)}`);
  }
}

boot();
