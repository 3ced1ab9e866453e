// The review desk: inbox, review page and workspace page over CHAP calls.
import { chap, ChapError, listen, read, setToken } from "./api.js";
import { diff } from "./patch.js";

const $ = (id) => document.getElementById(id);

const state = {
  auth: false,
  me: null,
  workspaces: [],
  known: new Set(), // every workspace id the server listed
  workspace: null,
  snapshot: null,
  describe: null,
  stopEvents: null,
  editing: null, // the task under review while its draft is being edited
};

// -- small DOM helpers (no innerHTML: everything shown is text) ------------

function h(tag, attrs = {}, ...children) {
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

// Replace the page's content; absent parts (null, false) are left out.
function draw(...children) {
  $("view").replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function table(caption, headings, rows, empty) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h("table", {},
    h("caption", { class: "skip" }, caption),
    h("thead", {}, h("tr", {}, headings.map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows));
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

function errorText(err) {
  return err instanceof ChapError ? `${err.message} (${err.code})` : String(err.message || err);
}

// -- session ----------------------------------------------------------------

async function boot() {
  $("sign-out").addEventListener("click", signOut);
  $("sign-in-form").addEventListener("submit", signIn);
  $("workspace-select").addEventListener("change", (e) => chooseWorkspace(e.target.value));
  window.addEventListener("hashchange", render);
  const saved = JSON.parse(sessionStorage.getItem("chapline-desk") || "{}");
  setToken(saved.token);
  try {
    const session = await read("/desk/api/session");
    state.auth = session.auth;
    state.me = session.auth ? session.principal : saved.as || null;
  } catch (err) {
    state.auth = true;
    state.me = null;
  }
  if (!state.me) return showSignIn();
  await start();
}

function showSignIn(message = "") {
  busy(false);
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
  sessionStorage.setItem("chapline-desk", JSON.stringify(state.auth ? { token } : { as }));
  $("token").value = "";
  await start();
}

function signOut() {
  sessionStorage.removeItem("chapline-desk");
  if (state.stopEvents) state.stopEvents();
  setToken(null);
  state.me = null;
  state.workspace = null;
  location.hash = "";
  showSignIn("Signed out.");
}

async function start() {
  $("sign-in").hidden = true;
  $("nav").hidden = false;
  $("who").hidden = false;
  $("principal").textContent = state.me;
  await loadWorkspaces();
  state.stopEvents = listen(onEvent, (live) => setLive(live));
  if (!location.hash) location.hash = "#/inbox";
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
  const select = $("workspace-select");
  select.replaceChildren(...mine.map((id) => h("option", { value: id }, id)));
  if (!mine.includes(state.workspace)) state.workspace = mine[0] || null;
  if (state.workspace) select.value = state.workspace;
}

async function chooseWorkspace(id) {
  state.workspace = id;
  state.snapshot = null;
  await render();
}

async function load() {
  if (!state.workspace) return;
  const [snapshot, describe] = await Promise.all([
    read(`/desk/api/snapshot?workspace=${encodeURIComponent(state.workspace)}`),
    chap("workspace.describe", { workspace: state.workspace, from: state.me }),
  ]);
  state.snapshot = snapshot;
  state.describe = describe;
}

function myRole() {
  const member = state.describe?.members.find((m) => m.uri === state.me);
  return member ? member.role : null;
}

function requests() {
  // What each task's latest review.request said: who asked, and why.
  const out = {};
  for (const entry of state.snapshot.audit) {
    const env = entry.envelope;
    if (env && env.method === "review.request" && env.params) {
      out[env.params.task_id] = {
        from: env.params.from,
        summary: env.params.summary ?? env.params.rationale ?? "",
      };
    }
  }
  return out;
}

function addressedToMe(task) {
  const review = task.review;
  if (!review || task.state !== "review_requested") return false;
  const to = review.requested_to || [];
  const role = myRole();
  return to.length === 0 || to.some((uri) =>
    uri === state.me || uri.startsWith("workspace:") || (role && uri === `group:${role}`));
}

// -- live updates -------------------------------------------------------------

let pending = null;

function onEvent(name, data) {
  if (name === "ready") {
    setLive(true);
    scheduleRefresh(); // catch up on whatever happened while disconnected
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
  if (data.workspace !== state.workspace) return;
  if (data.entry.envelope && env.method === "review.request") {
    const to = env.params.to;
    const list = Array.isArray(to) ? to : [to];
    if (list.includes(state.me)) say(`New review for you: ${env.params.task_id}`);
  }
  scheduleRefresh();
}

// aria-busy on <main> while the page is about to change or changing, so
// assistive technology (and tests) wait for the new content.
function busy(flag) {
  $("main").setAttribute("aria-busy", flag ? "true" : "false");
}

function scheduleRefresh() {
  busy(true);
  clearTimeout(pending);
  pending = setTimeout(() => {
    pending = null;
    render({ live: true });
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

async function drawPage(options, current) {
  const [, page, raw] = (location.hash || "#/inbox").split("/");
  const arg = raw === undefined ? undefined : decodeURIComponent(raw);
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.id === `nav-${page === "review" ? "inbox" : page}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (!state.workspace) {
    draw(h("h1", {}, "No workspace"),
      h("p", { class: "empty" }, `${state.me} is not a member of any workspace on this server yet.`));
    return;
  }
  // A review being edited is not redrawn under the reviewer's hands.
  if (options.live && page === "review" && state.editing === arg) {
    await load();
    if (current()) updateReviewState(arg);
    return;
  }
  try {
    await load();
  } catch (err) {
    if (current()) draw(h("p", { class: "error" }, `Cannot load ${state.workspace}: ${errorText(err)}`));
    return;
  }
  if (!current()) return;
  if (page === "review" && arg) renderReview(arg);
  else if (page === "workspace") await renderWorkspace(current);
  else renderInbox(options.live);
}

function renderInbox(live) {
  const tasks = Object.values(state.snapshot.tasks);
  const asked = requests();
  const reviews = tasks.filter(addressedToMe)
    .sort((a, b) => a.review.requested_at.localeCompare(b.review.requested_at));
  const escalations = tasks.filter((t) => t.supersedes && t.assignee === state.me &&
    ["created", "in_progress", "review_requested"].includes(t.state));
  const whispers = Object.values(state.snapshot.whispers || {}).filter((w) =>
    w.state === "pending" && (w.askee || []).some((uri) => uri === state.me || uri.startsWith("workspace:")));
  const known = new Set(JSON.parse(sessionStorage.getItem("chapline-seen") || "[]"));
  const rows = reviews.map((t) => h("tr", { class: live && !known.has(t.id) ? "flash" : null, "data-task": t.id },
    h("td", {}, h("a", { href: `#/review/${encodeURIComponent(t.id)}` }, t.id)),
    h("td", {}, String(t.kind)),
    h("td", {}, String(t.mode)),
    h("td", {}, asked[t.id]?.from || t.assignee || ""),
    h("td", {}, h("time", { datetime: t.review.requested_at, title: t.review.requested_at }, age(t.review.requested_at))),
    h("td", {}, asked[t.id]?.summary || h("span", { class: "muted" }, "(no rationale given)"))));
  sessionStorage.setItem("chapline-seen", JSON.stringify(reviews.map((t) => t.id)));
  const escalationRows = escalations.map((t) => h("tr", {},
    h("td", {}, t.id), h("td", {}, String(t.kind)), h("td", {}, t.supersedes),
    h("td", {}, t.delegator), h("td", {}, t.state)));
  draw(
    h("h1", {}, "Inbox"),
    h("section", { "aria-labelledby": "reviews-title" },
      h("h2", { id: "reviews-title" }, `Reviews waiting for you (${reviews.length})`),
      table("Reviews waiting for you", ["Task", "Kind", "Mode", "Requested by", "Age", "Rationale"], rows,
        "Nothing waits for your review.")),
    h("section", { "aria-labelledby": "escalations-title" },
      h("h2", { id: "escalations-title" }, `Escalated to you (${escalations.length})`),
      table("Escalated to you", ["Task", "Kind", "Escalated from", "By", "State"], escalationRows,
        "No escalations.")),
    // Whispers exist once a workspace has used the whisper profile.
    ...(Object.keys(state.snapshot.whispers || {}).length
      ? [h("section", { "aria-labelledby": "whispers-title" },
        h("h2", { id: "whispers-title" }, `Whispers waiting for your answer (${whispers.length})`),
        whispers.length ? whispers.map(renderWhisper) : h("p", { class: "empty" }, "No whispers."))]
      : []));
}

function renderWhisper(w) {
  const answer = async (params) => {
    try {
      await chap("whisper.answer", { workspace: state.workspace, from: state.me, whisper_id: w.id, ...params });
      say(`Answered ${w.id}`);
      await render();
    } catch (err) {
      say(`Not answered: ${errorText(err)}`);
    }
  };
  const text = h("input", { type: "text", id: `answer-${w.id}` });
  return h("div", { class: "panel" },
    h("p", {}, h("strong", {}, w.question ?? ""), " ", h("span", { class: "muted" }, `from ${w.asker} on ${w.task_id}`)),
    w.options && w.options.length
      ? h("div", { class: "actions" }, w.options.map((o) =>
        h("button", { type: "button", onclick: () => answer({ answer_option: o.id }) }, o.label ?? o.id)))
      : h("div", { class: "actions" },
        h("label", { for: `answer-${w.id}` }, "Answer"), text,
        h("button", { type: "button", onclick: () => answer({ answer_text: text.value }) }, "Send")));
}

// -- review page ---------------------------------------------------------------

function reviewTask(id) {
  return state.snapshot.tasks[id];
}

function renderReview(id) {
  const task = reviewTask(id);
  const view = $("view");
  if (!task) {
    draw(h("h1", {}, "Unknown task"), h("p", {}, `${id} is not in ${state.workspace}.`));
    return;
  }
  state.editing = id;
  const asked = requests()[id] || {};
  const base = task.pending_artefact;
  const draft = h("textarea", { id: "draft", rows: 12, spellcheck: "false", "aria-describedby": "draft-help" });
  draft.value = pretty(base);
  const patchView = h("pre", { id: "patch", "aria-live": "polite" }, "[]");
  const problem = h("p", { id: "draft-error", class: "error", role: "alert" });
  const rationale = h("textarea", { id: "rationale", rows: 3 });
  const tags = h("input", { type: "text", id: "tags", placeholder: "style, accuracy" });
  const comment = h("input", { type: "text", id: "comment" });
  const revise = h("input", { type: "checkbox", id: "revise", checked: true });
  const reason = h("input", { type: "text", id: "abstain-reason" });
  const category = h("select", { id: "abstain-category" },
    ["insufficient_context", "out_of_scope", "out_of_authority", "conflict_of_interest", "other"]
      .map((c) => h("option", { value: c }, c.replaceAll("_", " "))));
  const members = (state.describe.members || []).filter((m) => m.uri !== state.me);
  const assignee = h("select", { id: "escalate-to" }, members.map((m) => h("option", { value: m.uri }, `${m.uri} (${m.role})`)));

  function edited() {
    try {
      const value = JSON.parse(draft.value);
      problem.textContent = "";
      return value;
    } catch (err) {
      problem.textContent = `The draft is not valid JSON: ${err.message}`;
      return undefined;
    }
  }
  function currentPatch() {
    const value = edited();
    return value === undefined ? null : diff(base, value);
  }
  draft.addEventListener("input", () => {
    const ops = currentPatch();
    if (ops) patchView.textContent = ops.length
      ? `[\n${ops.map((op) => `  ${JSON.stringify(op)}`).join(",\n")}\n]` : "[]";
    $("override").disabled = !ops || ops.length === 0;
    $("approve").disabled = !!ops && ops.length > 0;
  });
  const tagList = () => tags.value.split(",").map((t) => t.trim()).filter(Boolean);
  const common = () => ({ workspace: state.workspace, from: state.me, task_id: id });

  async function act(label, method, params) {
    try {
      const result = await chap(method, params);
      state.editing = null;
      say(`${label}: ${id} is now ${result.state ?? "escalated"}`);
      location.hash = "#/inbox";
    } catch (err) {
      say(`${label} refused: ${errorText(err)}`);
      $("action-error").textContent = `${label} refused: ${errorText(err)}`;
    }
  }

  const open = task.state === "review_requested";
  draw(
    h("p", {}, h("a", { href: "#/inbox" }, "← Inbox")),
    h("h1", {}, `Review ${id}`),
    h("div", { class: "meta" },
      h("div", {}, h("span", {}, "Kind"), String(task.kind)),
      h("div", {}, h("span", {}, "Mode"), String(task.mode)),
      h("div", {}, h("span", {}, "State"), h("strong", { id: "task-state" }, task.state)),
      h("div", {}, h("span", {}, "Requested by"), asked.from || ""),
      h("div", {}, h("span", {}, "Asked"), task.review ? `${age(task.review.requested_at)} ago` : ""),
      h("div", {}, h("span", {}, "Rule"), task.review?.rule || "")),
    asked.summary ? h("p", {}, h("strong", {}, "Agent's rationale: "), asked.summary) : null,
    h("div", { class: "cols" },
      h("div", { class: "stack" },
        h("section", { class: "panel", "aria-labelledby": "input-title" },
          h("h2", { id: "input-title" }, "Input"), h("pre", { id: "input" }, pretty(task.input))),
        h("section", { class: "panel", "aria-labelledby": "patch-title" },
          h("h2", { id: "patch-title" }, "Your edit as JSON Patch"), patchView)),
      h("section", { class: "panel", "aria-labelledby": "draft-title" },
        h("h2", { id: "draft-title" }, h("label", { for: "draft" }, "Draft artefact (edit in place)")),
        draft,
        h("p", { id: "draft-help", class: "help" }, "Edit the JSON; your change becomes an RFC 6902 patch sent with Override."),
        problem)),
    h("section", { "aria-labelledby": "decide-title" },
      h("h2", { id: "decide-title" }, "Decide"),
      !open ? h("p", { class: "verdict pending" }, `This task is ${task.state}; there is nothing to decide.`) : null,
      h("div", { class: "cols" },
        h("div", { class: "field" }, h("label", { for: "rationale" }, "Rationale (required for an override)"), rationale),
        h("div", { class: "stack" },
          h("div", { class: "field" }, h("label", { for: "tags" }, "Tags (comma-separated)"), tags),
          h("div", { class: "field" }, h("label", { for: "comment" }, "Comment"), comment))),
      h("div", { class: "actions", style: "margin-top:12px" },
        h("button", { type: "button", id: "approve", class: "good", disabled: !open, onclick: () =>
          act("Approved", "decide.approve", { ...common(), comment: comment.value || undefined, tags: tagList() }) }, "Approve"),
        h("button", { type: "button", id: "override", class: "primary", disabled: true, onclick: () => {
          const ops = currentPatch();
          if (!ops || !ops.length) return;
          if (!rationale.value.trim()) {
            $("action-error").textContent = "An override needs a rationale: say why you changed the draft.";
            rationale.focus();
            return;
          }
          act("Overridden", "decide.override", { ...common(), diff: ops, rationale: rationale.value.trim(), tags: tagList() });
        } }, "Override with my edit"),
        h("span", {}, revise, " ", h("label", { for: "revise" }, "ask for a revision")),
        h("button", { type: "button", id: "reject", class: "danger", disabled: !open, onclick: () =>
          act("Rejected", "decide.reject", { ...common(), comment: comment.value || rationale.value || undefined,
            tags: tagList(), request_revision: revise.checked }) }, "Reject")),
      h("p", { id: "action-error", class: "error", role: "alert" }),
      h("fieldset", {},
        h("legend", {}, "Abstain"),
        h("div", { class: "actions" },
          h("label", { for: "abstain-reason" }, "Reason"), reason,
          h("label", { for: "abstain-category" }, "Category"), category,
          h("button", { type: "button", id: "abstain", disabled: !open, onclick: () => {
            if (!reason.value.trim()) { $("action-error").textContent = "Say why you abstain."; reason.focus(); return; }
            act("Abstained", "abstain.declare", { ...common(), reason: reason.value.trim(), category: category.value });
          } }, "Abstain"))),
      h("fieldset", {},
        h("legend", {}, "Escalate"),
        h("div", { class: "actions" },
          h("label", { for: "escalate-to" }, "Hand to"), assignee,
          h("button", { type: "button", id: "escalate", disabled: !members.length || ["completed", "cancelled", "superseded"].includes(task.state), onclick: () =>
            act("Escalated", "escalate.raise", { workspace: state.workspace, from: state.me, original_task_id: id,
              new_task: { assignee: assignee.value, kind: task.kind, input: task.input } }) }, "Escalate")))));
  if (!open) for (const b of view.querySelectorAll("#override, #reject")) b.disabled = true;
}

function updateReviewState(id) {
  const task = reviewTask(id);
  const badge = $("task-state");
  if (task && badge && badge.textContent !== task.state) {
    badge.textContent = task.state;
    say(`${id} is now ${task.state}`);
  }
}

// -- workspace page ------------------------------------------------------------

async function renderWorkspace(current) {
  state.editing = null;
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
  const rows = log.entries.slice().reverse().map((e) => {
    const call = e.envelope || e.request || {};
    const refused = !!e.outcome;
    return h("tr", { class: refused ? "refused" : null, "data-seq": e.seq },
      h("td", {}, String(e.seq)),
      h("td", {}, h("time", { datetime: e.arrived }, e.arrived.replace("T", " ").replace("Z", ""))),
      h("td", {}, call.method),
      h("td", {}, call.params?.from ?? ""),
      h("td", {}, call.params?.task_id ?? call.params?.original_task_id ?? ""),
      h("td", {}, refused
        ? [h("span", { class: "badge refused" }, "refused"), ` ${e.outcome.code} ${e.outcome.message ?? ""}`]
        : h("span", { class: "badge accepted" }, "accepted")),
      h("td", { class: "hash", title: e.prev_hash || "" }, (e.prev_hash || "").slice(7, 19)));
  });
  draw(
    h("div", { class: "actions" },
      h("h1", { style: "flex:1" }, state.workspace),
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
          s === "review_requested" ? h("a", { href: `#/review/${encodeURIComponent(t.id)}` }, t.id) : t.id,
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
    const link = h("a", { href: URL.createObjectURL(blob), download: `${state.workspace}.snapshot.json` });
    document.body.append(link);
    link.click();
    link.remove();
    say(`Exported ${state.workspace}`);
  } catch (err) {
    say(`Export failed: ${errorText(err)}`);
  }
}

boot();
