"""`warden checkpoint serve`'s webhook settings: flags (and so `WARDEN_NOTIFY_*` and the TOML file,
warden/config.py) turned into the notifier's settings, the secret read from a file warden trusts."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the notifier is imported when the checkpoint starts, not for --help
    from checkpoint.server.notifier import NotifySettings

KINDS = ("generic", "slack")
DEFAULT_ATTEMPTS = 5
DEFAULT_QUEUE = 1000
DEFAULT_TIMEOUT = 5.0
DEFAULT_BACKOFF = 1.0


def add_notify_flags(serve: argparse.ArgumentParser) -> None:
    group = serve.add_argument_group("notifications (docs/approvals.md)")
    group.add_argument("--notify-url", action="append", default=[], metavar="URL",
                       help="a webhook told of every REQUIRE_APPROVAL, HALT and handoff (repeat for several)")
    group.add_argument("--notify-kind", choices=KINDS, default="generic",
                       help="the body: generic JSON, or a Slack-compatible message (default generic)")
    group.add_argument("--notify-secret-file", metavar="FILE",
                       help="the secret every notification is signed with (Warden-Signature header)")
    group.add_argument("--audit-public-url", default="", metavar="URL",
                       help="the audit page's address as people reach it: notifications link to the call there")
    group.add_argument("--notify-attempts", type=int, default=DEFAULT_ATTEMPTS, metavar="N",
                       help=f"attempts per webhook before a notification is given up (default {DEFAULT_ATTEMPTS})")
    group.add_argument("--notify-queue", type=int, default=DEFAULT_QUEUE, metavar="N",
                       help=f"deliveries waiting at most; beyond, a notification is dropped and that is "
                            f"recorded (default {DEFAULT_QUEUE})")
    group.add_argument("--notify-timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                       help=f"how long one attempt waits for the receiver (default {DEFAULT_TIMEOUT:g})")


def notify_settings(args: argparse.Namespace) -> NotifySettings | None:
    """The notifier's settings, or None when no webhook is set. ValueError (and OSError for the
    secret file) when they cannot be used: the checkpoint does not start half-configured."""
    from checkpoint.server.notifier import NotifySettings
    from warden.private import read_trusted

    urls = tuple(args.notify_url or ())
    if not urls:
        if args.notify_secret_file:
            raise ValueError("--notify-secret-file is set but no --notify-url")
        return None
    if not args.notify_secret_file:
        raise ValueError("--notify-url needs --notify-secret-file: every notification is signed")
    secret = read_trusted(args.notify_secret_file, "webhook secret", secret=True).strip()
    return NotifySettings(urls=urls, secret=secret, kind=args.notify_kind, public_url=args.audit_public_url,
                          attempts=args.notify_attempts, queue=args.notify_queue, timeout=args.notify_timeout)
