// Where the desk is: `#/w/<workspace>/<page>[/<task>]`. The workspace is part
// of every link, so a reload or a link sent to a colleague lands on the same
// page of the same workspace. Links of the earlier form (`#/inbox`,
// `#/review/<task>`, `#/workspace`) name no workspace: the desk keeps its
// current one for them.

const PAGES = new Set(["inbox", "review", "workspace"]);

export function parse(hash) {
  const parts = (hash || "").replace(/^#\/?/, "").split("/").map((p) => {
    try { return decodeURIComponent(p); } catch (err) { return p; }
  });
  let workspace = null;
  if (parts[0] === "w" && parts.length >= 2) {
    workspace = parts[1] || null;
    parts.splice(0, 2);
  }
  const page = PAGES.has(parts[0]) ? parts[0] : "inbox";
  const task = page === "review" && parts[1] ? parts[1] : null;
  return { workspace, page: task || page !== "review" ? page : "inbox", task };
}

export function link(workspace, page, task = null) {
  const at = `#/w/${encodeURIComponent(workspace)}/${page}`;
  return task ? `${at}/${encodeURIComponent(task)}` : at;
}
