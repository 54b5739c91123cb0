"""`warden audit ship`: push the decision log to a JSON-lines file or an HTTP endpoint (a SIEM),
at least once, from a persisted cursor (checkpoint/audit/ship.py; docs/audit.md, "Shipping")."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_BROKEN, EXIT_USAGE = 0, 1, 2


def register(commands: argparse._SubParsersAction, where: argparse.ArgumentParser,
             reader_of: Callable[[argparse.Namespace], Any], *more: argparse.ArgumentParser) -> None:
    """`more`: further shared flags (the store setting, to ship the log a fleet shares)."""
    ship = commands.add_parser(
        "ship", parents=[where, *more],
        help="push records to a JSON-lines file or an HTTP endpoint, at least once, from a saved cursor",
        description="Ships every record after the cursor, in order, then (with --follow) new ones as they "
                    "are committed. The cursor moves only after the destination took a batch (a file: "
                    "written and fsynced; HTTP: a 2xx answer), so a restart neither loses nor floods: a "
                    "batch cut off by a crash is sent again, and the receiver drops repeats by seq.",
    )
    ship.add_argument("--to", required=True, metavar="DEST",
                      help="a file path (JSON lines, appended) or an http(s):// address (POSTed as "
                           "application/x-ndjson, one body per batch)")
    ship.add_argument("--cursor", metavar="FILE",
                      help="where the position is kept (default DATA/ship/<hash of DEST>.json)")
    ship.add_argument("--follow", action="store_true",
                      help="keep shipping new records until SIGTERM or Ctrl-C (retrying a refusing "
                           "destination with backoff, for ever)")
    ship.add_argument("--batch", type=_positive, default=500, metavar="N", help="records per batch (default 500)")
    ship.add_argument("--poll", type=float, default=1.0, metavar="SECONDS",
                      help="how often --follow looks for new records (default 1)")
    ship.add_argument("--retries", type=int, default=5, metavar="N",
                      help="without --follow: tries of a refused batch before giving up (default 5)")
    # named --file-rotate-size first so its variable is WARDEN_FILE_ROTATE_SIZE: WARDEN_ROTATE_SIZE
    # (or a top-level rotate_size) is the checkpoint's, and must not start deleting shipped files
    ship.add_argument("--file-rotate-size", "--rotate-size", dest="rotate_size", type=float, metavar="MB",
                      help="file destination: start a new file when it reaches this size; the old ones "
                           "become DEST.1 .. DEST.KEEP (env WARDEN_FILE_ROTATE_SIZE)")
    ship.add_argument("--keep", type=_positive, default=5, metavar="KEEP",
                      help="rotated files kept (default 5)")
    ship.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                      help="HTTP destination: a header to send (repeatable)")
    ship.add_argument("--token-file", metavar="FILE",
                      help="HTTP destination: send `Authorization: Bearer <the file's content>` (kept off "
                           "the command line, where other users could read it)")
    ship.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                      help="HTTP destination: per-request timeout (default 10)")
    ship.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    ship.set_defaults(func=lambda args: _ship(args, reader_of))


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _ship(args: argparse.Namespace, reader_of: Callable[[argparse.Namespace], Any]) -> int:
    from checkpoint.audit import ship as shipping

    try:
        sink = _sink(args)
    except (OSError, ValueError) as exc:
        print(f"warden audit ship: {exc}", file=sys.stderr)
        return EXIT_USAGE
    reader = reader_of(args)
    if reader is None:
        return EXIT_USAGE
    data = Path(args.log).parent if args.log else Path(args.data)
    path = Path(args.cursor) if args.cursor else shipping.Cursor.default_path(data, sink.describe())
    cursor = shipping.Cursor(path, sink.describe())
    stop = threading.Event()
    if args.follow:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())

    def report(progress: Any, records: list[dict[str, Any]]) -> None:
        if not args.quiet:
            print(f"shipped records {records[0]['seq']}..{records[-1]['seq']} to {sink.describe()} "
                  f"({progress.shipped} since this command started)", file=sys.stderr, flush=True)

    def refused(exc: Exception, records: list[dict[str, Any]], tries: int, wait: float) -> None:
        # said even with -q: a sink that refuses is what an operator must hear of
        print(f"warden audit ship: {sink.describe()} refused records {records[0]['seq']}..{records[-1]['seq']} "
              f"({exc}); try {tries + 1} in {wait:g}s", file=sys.stderr, flush=True)

    try:
        progress = shipping.ship(reader, sink, cursor, batch=args.batch, follow=args.follow,
                                 poll_interval=args.poll, retries=args.retries, stop=stop, report=report,
                                 refused=refused)
    except shipping.ShipError as exc:
        print(f"warden audit ship: {exc}", file=sys.stderr)
        return EXIT_BROKEN
    except OSError as exc:  # a full disk, a lost directory: the cursor stays where it was
        print(f"warden audit ship: {exc}; the cursor stays at its last saved record", file=sys.stderr)
        return EXIT_BROKEN
    if not args.quiet:
        at = progress.position.seq if progress.position else 0
        again = f" after {progress.failures} refused tries" if progress.failures else ""
        print(f"{progress.shipped} records shipped{again}; cursor at {at} ({path})", file=sys.stderr)
    return EXIT_OK


def _sink(args: argparse.Namespace) -> Any:
    from checkpoint.audit import ship as shipping

    if args.to.startswith(("http://", "https://")):
        headers = shipping.parse_headers(args.header)
        if args.token_file:
            from warden.private import read_trusted_text

            token = read_trusted_text(args.token_file, "token file").strip()
            if not token or any(c in token for c in "\r\n"):
                raise ValueError(f"{args.token_file}: the token must be one non-empty line")
            headers["Authorization"] = f"Bearer {token}"
        if args.rotate_size is not None:
            raise ValueError("--file-rotate-size is for a file destination")
        return shipping.HttpSink(args.to, headers=headers, timeout=args.timeout)
    if args.header or args.token_file:
        raise ValueError("--header and --token-file are for an http(s) destination")
    target = Path(args.to)
    if target.is_dir():
        raise ValueError(f"{target} is a folder: give a file to append to")
    if not target.parent.is_dir():
        raise ValueError(f"no folder {target.parent} for {target}")
    rotate = None if args.rotate_size is None else max(1, int(args.rotate_size * 1024 * 1024))
    return shipping.FileSink(target.absolute(), rotate_bytes=rotate, keep=args.keep)
