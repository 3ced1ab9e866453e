// The desk's only ways to the server: CHAP calls (POST /chap), the desk's
// three reads, and the event stream (GET /chap/events). All carry the token.

let token = null;
let calls = 0;

export function setToken(value) {
  token = value || null;
}

function headers(extra = {}) {
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

export class ChapError extends Error {
  constructor(error) {
    super(error.message);
    this.code = error.code;
    this.data = error.data;
  }
}

// One CHAP call; resolves to the result, rejects with ChapError.
export async function chap(method, params) {
  calls += 1;
  const envelope = { jsonrpc: "2.0", id: `desk-${Date.now()}-${calls}`, method, params };
  const reply = await fetch("/chap", {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(envelope),
  });
  const body = await reply.json();
  if (body.error) throw new ChapError(body.error);
  return body.result;
}

// A desk read: GET path, JSON back, ChapError on a refusal.
export async function read(path) {
  const reply = await fetch(path, { headers: headers(), cache: "no-store" });
  const body = await reply.json();
  if (!reply.ok) throw new ChapError(body.error || { code: reply.status, message: reply.statusText });
  return body;
}

// Server-sent events read with fetch (EventSource cannot send a header).
// Calls onEvent(name, data) for each event. A stream the server ended
// (event: end, SPECIFICATION.md "Review desk") because it fell behind or the
// server stopped, or that dropped, is reopened with Last-Event-ID naming the
// last entry seen of each workspace, so nothing is missed. One ended because
// the token was revoked or expired (or refused on reopening) is not:
// onRevoked(message) is called instead.
export function listen(onEvent, onState, onRevoked) {
  let stopped = false;
  const controller = new AbortController();
  const seen = new Map(); // workspace -> last seq received
  // A stream that ended "rotated" (it carried its share of the log) is
  // reopened at once and quietly: its replay fills the gap, so the page is
  // neither shown offline nor reloaded on the new stream's `ready`.
  let rotated = false;
  async function run() {
    while (!stopped) {
      let revoked = null;
      const quiet = rotated;
      rotated = false;
      try {
        const extra = { Accept: "text/event-stream" };
        if (seen.size) extra["Last-Event-ID"] = [...seen].map(([w, seq]) => `${w}:${seq}`).join(",");
        const reply = await fetch("/chap/events", { headers: headers(extra), signal: controller.signal });
        if (reply.status === 401) {
          const body = await reply.json();
          revoked = (body.error && body.error.message) || "The token is no longer accepted";
          throw new Error(revoked);
        }
        if (!reply.ok || !reply.body) throw new Error(`events: HTTP ${reply.status}`);
        const reader = reply.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            let name = "message";
            let id = null;
            const data = [];
            for (const line of block.split("\n")) {
              if (line.startsWith("event:")) name = line.slice(6).trim();
              else if (line.startsWith("id:")) id = line.slice(3).trim();
              else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
            }
            if (!data.length) continue;
            const payload = JSON.parse(data.join("\n"));
            if (id !== null) {
              const at = id.lastIndexOf(":");
              seen.set(id.slice(0, at), Number(id.slice(at + 1)));
            }
            if (name === "end" && (payload.reason === "token_revoked" || payload.reason === "token_expired")) {
              revoked = payload.message;
            }
            if (name === "end" && payload.reason === "rotated") {
              rotated = true;
              continue;
            }
            if (name === "ready" && quiet) continue;
            onEvent(name, payload);
          }
        }
      } catch (err) {
        if (stopped) return;
        rotated = false;
      }
      if (rotated) continue;
      onState(false);
      if (revoked !== null) {
        stopped = true;
        onRevoked(revoked);
        return;
      }
      // The stream ended (it fell behind, the server restarted): reopen it
      // soon; it replays what was missed, and the desk reloads on `ready`.
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
  run();
  return () => {
    stopped = true;
    controller.abort();
  };
}
