"""`warden checkpoint serve`'s webhook settings: flags (and so `WARDEN_NOTIFY_*` and the TOML file,
warden/config.py) turned into the notifier's settings, the secret read from a file warden trusts."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from urllib.parse import urlsplit

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
    group.add_argument("--audit-public-url", metavar="URL",
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
    from warden.private import read_trusted

    urls = tuple(args.notify_url or ())
    if not urls:
        if args.notify_secret_file:
            raise ValueError("--notify-secret-file is set but no --notify-url")
        return None
    if not args.notify_secret_file:
        raise ValueError("--notify-url needs --notify-secret-file: every notification is signed")
    secret = read_trusted(args.notify_secret_file, "webhook secret", secret=True).strip()
    return NotifySettings(urls=urls, secret=secret, kind=args.notify_kind, public_url=args.audit_public_url or "",
                          attempts=args.notify_attempts, queue=args.notify_queue, timeout=args.notify_timeout)


@dataclass(frozen=True, slots=True)
class NotifySettings:
    urls: tuple[str, ...]
    secret: bytes
    kind: str = "generic"
    public_url: str = ""  # the audit page's base URL as people reach it
    attempts: int = DEFAULT_ATTEMPTS
    queue: int = DEFAULT_QUEUE
    timeout: float = DEFAULT_TIMEOUT
    backoff: float = DEFAULT_BACKOFF
    senders: int = 4

    def __post_init__(self) -> None:
        if not self.urls:
            raise ValueError("notifications need at least one webhook URL")
        for url in self.urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"a webhook URL is http(s)://HOST/...: {shown(url)!r}")
        if not self.secret:
            raise ValueError("notifications are signed: give a secret file")
        if self.kind not in KINDS:
            raise ValueError(f"notify kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.attempts < 1 or self.queue < 1 or self.timeout <= 0 or self.backoff < 0 or self.senders < 1:
            raise ValueError("notify attempts, queue, senders and timeout are positive, backoff not negative")


def shown(url: str) -> str:
    """A webhook URL as records and logs may show it: scheme, host and port only (a Slack URL's
    path is its credential)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"
