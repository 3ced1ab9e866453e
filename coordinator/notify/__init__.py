"""Notifications: reviews, escalations and whispers that find the people
they are addressed to, by webhook (JSON or Slack format, HMAC-signed) or
e-mail, without anyone opening the desk.

- `NotificationProjection` decides notices from the log into an outbox,
  exactly once (projection.py);
- `Deliverer` sends the outbox at least once, with retries and a delivery
  log (delivery.py);
- `Subscriptions` adds, lists and removes who is told (subscriptions.py);
- `verify_signature` is a webhook receiver's check (formats.py).

`chapline serve --projection notifications=DB` runs both; `chapline notify`
manages the subscriptions.
"""

from coordinator.errors import NotifyError
from coordinator.notify.delivery import MAX_ATTEMPTS, Deliverer, Outcome, send
from coordinator.notify.formats import EVENT_TYPES, SIGNATURE_HEADER, render, sign, verify_signature
from coordinator.notify.notices import KINDS, Notice
from coordinator.notify.projection import NotificationProjection
from coordinator.notify.subscriptions import Subscription, Subscriptions

__all__ = [
    "EVENT_TYPES",
    "KINDS",
    "MAX_ATTEMPTS",
    "SIGNATURE_HEADER",
    "Deliverer",
    "Notice",
    "NotificationProjection",
    "NotifyError",
    "Outcome",
    "Subscription",
    "Subscriptions",
    "render",
    "send",
    "sign",
    "verify_signature",
]
