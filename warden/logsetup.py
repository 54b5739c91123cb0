"""Process logging for the three servers: plain text (the default) or one JSON object per line.

`--log-format json` is for log shippers (Loki, Elasticsearch, CloudWatch, `jq`): every event is
one line, a traceback included, so no collector has to guess where an event ends. Each line has
`time` (UTC, RFC 3339 with milliseconds), `level`, `logger` and `message`; `trace_id` and
`span_id` when the event happened inside a span (warden/tracing.py); `exception` for a
traceback; and any structured fields the caller passed with `extra={...}`.

The standard library's logging only: one formatter class is all JSON needs here, and structlog
would add a dependency to the checkpoint's lean install without giving more.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import UTC, datetime
from typing import Any

from warden import tracing

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# The attributes every LogRecord has: anything else on a record came from `extra=` and is a field.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        ids = tracing.current_ids()
        if ids is not None:
            event["trace_id"], event["span_id"] = ids
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            event["exception"] = record.exc_text
        if record.stack_info:
            event["stack"] = self.formatStack(record.stack_info)
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in event and not key.startswith("_"):
                event[key] = value
        # default=str: a field that is no JSON type (a Path, an enum) is written as its text
        # rather than losing the whole event; ensure_ascii keeps the line one line in any terminal.
        return json.dumps(event, default=str, ensure_ascii=True, separators=(",", ":"))


def setup_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    """Configure the root logger for a server process (stderr), replacing earlier handlers."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    if fmt == "json":
        # What would otherwise reach stderr as several raw lines becomes one event too: warnings,
        # and exceptions that escape the main thread or a worker thread.
        logging.captureWarnings(True)
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_uncaught_in_thread


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
    logging.getLogger("warden.uncaught").critical("uncaught exception", exc_info=(kind, exc, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("warden.uncaught").critical(
        "uncaught exception in thread %s", name,
        exc_info=(args.exc_type, args.exc_value or args.exc_type(), args.exc_traceback),  # type: ignore[arg-type]
        extra={"thread_name": name},
    )
