"""Moments as people write them for a query (`--since 15m`, `?since=today`), in the log's stored form.

argparse's ArgumentTypeError is what a bad moment raises, so the command line reports it as a
usage error; the web page turns it into a 400 with the same words.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta

from checkpoint.audit.record import format_time

_RELATIVE = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def since(text: str) -> str:
    """A moment, stored form: an age (15m) back from now, today or yesterday (midnight UTC), a date
    (its midnight UTC), or an RFC 3339 time with its offset."""
    word = text.strip().lower()
    if word in ("today", "yesterday"):
        midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        return format_time(midnight - timedelta(days=1 if word == "yesterday" else 0))
    match = _RELATIVE.fullmatch(text.strip())
    if match:
        moment = datetime.now(UTC) - timedelta(**{_UNITS[match[2]]: int(match[1])})
        return format_time(moment)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 time or an age like 15m: {text!r}") from None
    if moment.tzinfo is None:
        if len(text.strip()) > 10:  # a time of day without an offset is ambiguous
            raise argparse.ArgumentTypeError(f"give a UTC offset (Z or +hh:mm): {text!r}")
        moment = moment.replace(tzinfo=UTC)
    return format_time(moment)
