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
      // soon; it replays what was missed, and on `ready` the desk reads
      // whatever else it is short of.
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
  run();
  return () => {
    stopped = true;
    controller.abort();
  };
}

// One event stream for all of a browser's tabs signed in alike (`key`): a
// browser opens at most six HTTP/1.1 connections to a server and each open
// stream holds one, so a sixth tab's stream would leave it, and then every
// tab's calls, waiting for ever. The tab holding the Web Lock `key` reads the
// stream and relays what it hears to the others over a BroadcastChannel;
// when it closes, another tab takes the lock and opens the stream (whose
// `ready` makes every tab check what it shows and read what it lacks). Where the browser has
// no Web Locks (a page served over plain HTTP to another host than
// localhost), each tab reads its own stream.
export function listenShared(key, onEvent, onState, onRevoked) {
  if (!navigator.locks || typeof BroadcastChannel === "undefined") return listen(onEvent, onState, onRevoked);
  const channel = new BroadcastChannel(key);
  let stopped = false;
  let stopStream = null;
  let release = null;
  let live = false;
  const relay = (message) => {
    if (!stopped) channel.postMessage(message);
  };
  channel.onmessage = ({ data: m }) => {
    if (stopped) return;
    if (m.kind === "event") onEvent(m.name, m.data);
    else if (m.kind === "state") onState(m.live);
    else if (m.kind === "revoked") onRevoked(m.why);
    else if (m.kind === "hello" && stopStream) relay({ kind: "state", live });
  };
  relay({ kind: "hello" }); // the tab reading the stream answers whether it is live
  navigator.locks.request(key, () => {
    if (stopped) return undefined;
    stopStream = listen(
      (name, data) => {
        if (name === "ready") live = true; // the stream is open (its end calls onState(false))
        relay({ kind: "event", name, data });
        onEvent(name, data);
      },
      (on) => {
        live = on;
        relay({ kind: "state", live: on });
        onState(on);
      },
      (why) => {
        relay({ kind: "revoked", why });
        onRevoked(why);
      },
    );
    return new Promise((resolve) => { release = resolve; }); // held until this tab stops
  });
  return () => {
    stopped = true;
    channel.close();
    if (stopStream) stopStream();
    if (release) release();
  };
}

// A short name for a sign-in (the principal, and the token when there is one),
// for `listenShared`'s key: not a secret's hash, only a name seen by this origin.
export function signInKey(principal) {
  let hash = 2166136261;
  for (const ch of `${principal}\n${token || ""}`) hash = Math.imul(hash ^ ch.codePointAt(0), 16777619) >>> 0;
  return `chapline-events:${principal}:${hash.toString(16)}`;
}
