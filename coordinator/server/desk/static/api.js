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
// Calls onEvent(name, data) for each event; reconnects after a drop.
export function listen(onEvent, onState) {
  let stopped = false;
  const controller = new AbortController();
  async function run() {
    while (!stopped) {
      try {
        const reply = await fetch("/chap/events", {
          headers: headers({ Accept: "text/event-stream" }),
          signal: controller.signal,
        });
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
            const data = [];
            for (const line of block.split("\n")) {
              if (line.startsWith("event:")) name = line.slice(6).trim();
              else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
            }
            if (data.length) onEvent(name, JSON.parse(data.join("\n")));
          }
        }
      } catch (err) {
        if (stopped) return;
      }
      onState(false);
      // The stream ended (server restart, a slow tab dropped): try again soon;
      // the desk reloads what it shows when the stream is back.
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
  run();
  return () => {
    stopped = true;
    controller.abort();
  };
}
