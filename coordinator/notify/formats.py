"""What a notice looks like on the wire, and how a receiver checks it came
from this server.

- `json`: the notice as one JSON object (`type`, `id`, `workspace`, `seq`,
  `task_id`, `to`, `from`, `title`, `detail`, `link`);
- `slack`: a Slack incoming-webhook body (`text`, mrkdwn, with the link);
- `email`: a subject and a plain-text body with the link.

Webhook bodies are signed as Stripe and GitHub sign theirs: the header
`Chapline-Signature: t=<unix seconds>,v1=<hex>` where `<hex>` is
HMAC-SHA256, keyed by the subscription's secret, of `<t>.` followed by the
body's bytes. `verify_signature` is the receiver's side.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import quote

from coordinator.notify.notices import Notice

__all__ = ["EVENT_TYPES", "SIGNATURE_HEADER", "render", "sign", "verify_signature"]

SIGNATURE_HEADER = "Chapline-Signature"
EVENT_TYPES = {"review": "review.requested", "escalation": "escalation.raised", "whisper": "whisper.asked"}
# How far a signature's time may be from the receiver's clock, by default.
TOLERANCE_S = 300


def render(notice: Notice, fmt: str, desk_url: str | None) -> str:
    """The body a subscription of format `fmt` receives, as text (the same
    text for every attempt: it is rendered once and kept)."""
    link = _link(notice, desk_url)
    if fmt == "slack":
        return json.dumps({"text": _slack_text(notice, link)}, ensure_ascii=False)
    if fmt == "email":
        return json.dumps({"subject": f"[{notice.workspace}] {notice.title}",
                           "text": _email_text(notice, link)}, ensure_ascii=False)
    body: dict[str, Any] = {
        "type": EVENT_TYPES[notice.kind],
        "id": notice.id,
        "workspace": notice.workspace,
        "seq": notice.seq,
        "at": notice.at,
        "task_id": notice.task_id,
        "to": notice.to,
        "from": notice.sender,
        "title": notice.title,
        "detail": notice.detail,
    }
    if link is not None:
        body["link"] = link
    return json.dumps(body, ensure_ascii=False, sort_keys=True)


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The `Chapline-Signature` header value for `body` sent at `timestamp`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify_signature(
    secret: str, header: str, body: bytes, *, now: float | None = None, tolerance: float = TOLERANCE_S
) -> bool:
    """Whether `header` signs `body` with `secret`, at a time within
    `tolerance` seconds of `now` (a replayed old delivery fails)."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        fields.setdefault(name, []).append(value)
    try:
        timestamp = int(fields["t"][0])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = sign(secret, body, timestamp).partition(",v1=")[2].encode()
    # Bytes: a header may hold any text, which compare_digest takes only as bytes.
    return any(hmac.compare_digest(expected, given.encode("utf-8", "replace"))
               for given in fields.get("v1", []))


def _link(notice: Notice, desk_url: str | None) -> str | None:
    if not desk_url:
        return None
    base = desk_url if desk_url.endswith("/") else desk_url + "/"
    return f"{base}#/w/{quote(notice.workspace, safe='')}/review/{quote(notice.task_id, safe='')}"


def _whom(notice: Notice) -> str:
    return ", ".join(notice.to) or "the workspace"


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_text(notice: Notice, link: str | None) -> str:
    lines = [f"*{_slack_escape(notice.title)}*",
             _slack_escape(f"{EVENT_TYPES[notice.kind]} in {notice.workspace} from "
                           f"{notice.sender or 'someone'} for {_whom(notice)} (task {notice.task_id})")]
    if link is not None:
        lines.append(f"<{link}|Open it in the desk>")
    return "\n".join(lines)


def _email_text(notice: Notice, link: str | None) -> str:
    lines = [
        notice.title,
        "",
        f"{EVENT_TYPES[notice.kind]} in workspace {notice.workspace}, task {notice.task_id}",
        f"from {notice.sender or 'someone'}, for {_whom(notice)}, at {notice.at}",
    ]
    for name, value in notice.detail.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(f"{name}: {shown}")
    if link is not None:
        lines += ["", f"Open it in the desk: {link}"]
    return "\n".join(lines) + "\n"
