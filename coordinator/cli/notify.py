"""`chapline notify`: who is told when a review, an escalation or a whisper
is addressed to someone (`serve --projection notifications=DB` tells them).

    chapline notify add-webhook URL --workspace W [--format json|slack] [--kinds ...]
    chapline notify add-email ADDRESS --for human:alice --workspace W --smtp smtp://HOST:PORT
    chapline notify list | remove ID | test ID | deliveries [--limit N]

Every command takes `--db` (the database the projection writes; the serve
database by default). Exit status: 0 done, 1 the database cannot be opened,
the subscription does not exist or a test delivery failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from typing import Any

from coordinator.engine.clock import iso_ms
from coordinator.errors import NotifyError, ProjectionError
from coordinator.notify.delivery import send
from coordinator.notify.formats import render
from coordinator.notify.notices import KINDS, Notice
from coordinator.notify.subscriptions import Subscriptions
from storage.target import is_postgres

__all__ = ["add_command", "run"]


def add_command(commands: Any) -> None:
    notify = commands.add_parser(
        "notify",
        help="add, list, test or remove notification subscriptions (webhooks, e-mail)",
        description=(
            "Subscriptions to the notices `serve --projection notifications=DB` sends: "
            "a review, an escalation or a whisper addressed to someone, by webhook "
            "(JSON or Slack format, HMAC-signed) or by e-mail."
        ),
    )
    actions = notify.add_subparsers(dest="action", required=True, metavar="ACTION")
    webhook = actions.add_parser("add-webhook", help="POST each notice to a URL, signed")
    webhook.add_argument("url", help="http:// or https:// URL receiving the POSTs")
    webhook.add_argument("--format", choices=("json", "slack"), default="json",
                         help="json: the notice as an object; slack: a Slack incoming-webhook "
                         "body (default: %(default)s)")
    webhook.add_argument("--secret", help="the HMAC key to sign with (default: a new random one, printed once)")
    email = actions.add_parser("add-email", help="e-mail the notices addressed to one participant")
    email.add_argument("address", help="the e-mail address")
    email.add_argument("--for", dest="participant", required=True, metavar="URI",
                       help="the participant it is for, e.g. human:alice (named, by role, or the whole workspace)")
    email.add_argument("--smtp", required=True, metavar="smtp://HOST[:PORT]", help="the SMTP server to send through")
    email.add_argument("--from", dest="mail_from", default="chapline@localhost", metavar="ADDRESS",
                       help="the From address (default: %(default)s)")
    for adding in (webhook, email):
        adding.add_argument("--workspace", required=True, metavar="ID", help="the workspace, or * for every one")
        adding.add_argument("--kinds", default=",".join(KINDS), metavar="LIST",
                            help="comma-separated among review, escalation, whisper (default: all)")
    actions.add_parser("list", help="list the subscriptions")
    remove = actions.add_parser("remove", help="remove a subscription and what it has not delivered yet")
    test = actions.add_parser("test", help="send a test notice to a subscription now and say what happened")
    for action in (remove, test):
        action.add_argument("id", help="the subscription id (`list` shows them)")
    deliveries = actions.add_parser("deliveries", help="the delivery log, newest first")
    deliveries.add_argument("--limit", type=int, default=50, help="how many attempts (default: %(default)s)")
    for action in actions.choices.values():
        action.add_argument("--db", default="chap.db",
                            help="the database the notifications projection writes: a SQLite file "
                            "or a postgresql:// URI (default: ./chap.db)")


def run(args: argparse.Namespace) -> int:
    if args.action not in ("add-webhook", "add-email") and not is_postgres(args.db) \
            and not os.path.exists(args.db):
        print(f"chapline notify: no such database file: {args.db}", file=sys.stderr)
        return 1
    try:
        subs = Subscriptions(args.db)
    except (ProjectionError, sqlite3.Error) as exc:
        print(f"chapline notify: cannot open {args.db}: {exc}", file=sys.stderr)
        return 1
    try:
        return _run(args, subs)
    except NotifyError as exc:
        print(f"chapline notify: {exc}", file=sys.stderr)
        return 1 if args.action in ("remove", "test") else 2
    finally:
        subs.close()


def _run(args: argparse.Namespace, subs: Subscriptions) -> int:
    if args.action == "add-webhook":
        sub = subs.add_webhook(args.workspace, args.url, format=args.format,
                               kinds=args.kinds.split(","), secret=args.secret)
        print(sub.id)
        if args.secret is None:
            print(f"chapline notify: signing secret (shown once): {sub.secret}", file=sys.stderr)
    elif args.action == "add-email":
        sub = subs.add_email(args.workspace, args.address, args.participant, smtp=args.smtp,
                             mail_from=args.mail_from, kinds=args.kinds.split(","))
        print(sub.id)
    elif args.action == "list":
        for sub in subs.all():
            print(sub.describe())
    elif args.action == "remove":
        gone = subs.remove(args.id)
        print(f"chapline notify: removed {gone.describe()}", file=sys.stderr)
    elif args.action == "test":
        return _test(subs, args.id)
    else:
        rows = subs.db.execute(
            "SELECT a.at, a.notice, a.subscription, a.attempt, a.ok, a.outcome, o.state "
            "FROM notify_attempts a LEFT JOIN notify_outbox o "
            "ON o.notice = a.notice AND o.subscription = a.subscription "
            "ORDER BY a.at DESC LIMIT ?", (max(args.limit, 0),))
        for at, notice, sub_id, attempt, ok, outcome, state in rows:
            print(f"{_when(at)}  {notice}  {sub_id}  attempt {attempt}  "
                  f"{'ok' if ok else 'failed'}: {outcome}  ({state or 'removed'})")
    return 0


def _test(subs: Subscriptions, subscription_id: str) -> int:
    sub = subs.get(subscription_id)
    now = time.time()
    notice = Notice(
        id=f"ntc_test_{int(now)}", kind=sub.kinds[0], workspace=sub.workspace, seq=0,
        at=_when(now), sender="chapline:notify-test", task_id="test", to=[sub.participant or "workspace:*"],
        title="A test notification from chapline", detail={"test": True},
    )
    outcome = send(sub, notice.id, render(notice, sub.format, None), now=now)
    print(f"chapline notify: test to {sub.target}: {'delivered' if outcome.ok else 'failed'} ({outcome.detail})",
          file=sys.stderr)
    return 0 if outcome.ok else 1


def _when(at: float) -> str:
    return iso_ms(int(at * 1000))
