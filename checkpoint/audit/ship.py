"""Shipping the decision log to a SIEM: at least once, resumable, never skipping.

`ship` reads records after a persisted cursor, hands them to a sink in batches, and moves the
cursor only after the sink has taken the batch (a file: written and fsynced; HTTP: a 2xx answer).
A crash between the two ships that batch again on restart: a record may arrive twice, never
zero times. Every line is the record as `warden audit export` writes it (seq, hashes and all),
so the receiver can drop repeats by `seq` or `decision_id` and verify the chain itself.

The cursor names the record it ends at by seq *and* hash: a log that was replaced or rewritten
under it is refused (ShipError), not shipped from a wrong position.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from checkpoint.audit import segments
from checkpoint.audit.port import DecisionLogReader
from checkpoint.audit.reader import DecisionReader
from warden.private import fsync_path

DEFAULT_BATCH = 500
MAX_BACKOFF = 30.0


class ShipError(Exception):
    """Shipping cannot go on safely: the cursor does not fit the log, or the sink refuses."""


class Sink(Protocol):
    def send(self, lines: Sequence[str]) -> None:
        """Take a batch (each a JSON line without its newline) durably, or raise."""

    def describe(self) -> str: ...


def encode(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


# -- cursor -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Position:
    seq: int
    hash: str


class Cursor:
    """Where shipping to one destination stands, in a small JSON file replaced atomically."""

    def __init__(self, path: Path, destination: str) -> None:
        self.path = path
        self.destination = destination

    @staticmethod
    def default_path(data: Path, destination: str) -> Path:
        # one cursor per destination: shipping to a second SIEM must not start where the first stands
        return data / "ship" / (hashlib.sha256(destination.encode()).hexdigest()[:16] + ".json")

    def load(self) -> Position | None:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            data = json.loads(raw)
            position = Position(int(data["seq"]), str(data["hash"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ShipError(f"cursor {self.path} is unreadable ({exc}): move it aside to ship from the start") from exc
        if data.get("destination") not in (None, self.destination):
            raise ShipError(f"cursor {self.path} belongs to {data['destination']!r}, not {self.destination!r}")
        return position

    def save(self, position: Position) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temp = self.path.with_name(self.path.name + ".tmp")
        body = json.dumps({"seq": position.seq, "hash": position.hash, "destination": self.destination,
                           "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, body.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, self.path)
        fsync_path(self.path.parent)


# -- sinks --------------------------------------------------------------------------------


class FileSink:
    """JSON lines appended to a file, fsynced per batch; rotated to FILE.1 .. FILE.KEEP by size."""

    def __init__(self, path: Path, *, rotate_bytes: int | None = None, keep: int = 5) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.path = path
        self.rotate_bytes = rotate_bytes
        self.keep = keep

    def describe(self) -> str:
        return str(self.path)

    def send(self, lines: Sequence[str]) -> None:
        self._rotate_if_full()
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def _rotate_if_full(self) -> None:
        if self.rotate_bytes is None:
            return
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size < self.rotate_bytes:
            return
        # oldest first, so no rename lands on a file not yet moved; what falls past KEEP is gone
        self.path.with_name(f"{self.path.name}.{self.keep}").unlink(missing_ok=True)
        for n in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{n}")
            if older.exists():
                older.rename(self.path.with_name(f"{self.path.name}.{n + 1}"))
        self.path.rename(self.path.with_name(f"{self.path.name}.1"))
        fsync_path(self.path.parent)


class HttpSink:
    """Each batch POSTed as one application/x-ndjson body; only a 2xx answer takes it."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None, timeout: float = 10.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"not an http(s) address: {url!r}")
        self.url = url
        self.headers = {"Content-Type": "application/x-ndjson", **(headers or {})}
        self.timeout = timeout

    def describe(self) -> str:
        return self.url

    def send(self, lines: Sequence[str]) -> None:
        body = "".join(line + "\n" for line in lines).encode("utf-8")
        request = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
        try:
            with _OPENER.open(request, timeout=self.timeout) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                where = exc.headers.get("Location", "") if exc.headers else ""
                raise SinkRefused(f"{self.url} answered {exc.code} {exc.reason}, a redirect{' to ' + where if where else ''}"
                                  ": a redirect is not delivery, and the batch and its credentials go only to the "
                                  "address given; give --to the address that takes the records") from None
            raise SinkRefused(f"{self.url} answered {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise SinkRefused(f"{self.url}: {getattr(exc, 'reason', exc)}") from None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is answered as it stands: urllib would otherwise follow it, resending the headers
    (the bearer token among them) to wherever Location points and counting that page's 200 as the
    batch taken, so the cursor would move past records the SIEM never received."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


class SinkRefused(Exception):
    """The sink did not take the batch this time; the cursor stays, the batch is sent again."""


# -- the loop -----------------------------------------------------------------------------


@dataclass
class Progress:
    shipped: int = 0
    batches: int = 0
    failures: int = 0
    position: Position | None = None


def check_cursor(reader: DecisionLogReader, position: Position | None) -> None:
    """The cursor's record must be the log's record at that seq, or pruned away behind the head."""
    if position is None:
        return
    found = next(iter(reader.read(position.seq - 1, limit=1)), None)
    if found is not None and found["seq"] == position.seq:
        if found["hash"] != position.hash:
            raise ShipError(f"the log's record {position.seq} is not the one this cursor shipped (hash "
                            f"{found['hash'][:12]}.. vs {position.hash[:12]}..): the log was replaced or rewritten; "
                            "verify it, then move the cursor aside to ship it from the start")
        return
    head = reader.head()
    if head is None or head[0] < position.seq:
        raise ShipError(f"the cursor stands at record {position.seq} but the log ends at {head[0] if head else 0}: "
                        "the log was truncated or replaced; verify it before shipping")
    # the record is gone and later ones exist: pruned after it was shipped, which is fine as long as
    # nothing after it was pruned too (check_unbroken, on the first batch)


def check_unbroken(reader: DecisionLogReader, position: Position | None, records: list[dict[str, Any]]) -> None:
    """The batch must follow the cursor with no seq missing: records are read across segments, and
    a segment pruned (or deleted) before its records were shipped is skipped by the reader, so
    without this the shipper would go on past them and the SIEM would never learn they existed.

    A destination shipped to for the first time (no cursor) starts at the oldest record the log
    kept: what retention pruned before that was never this destination's to receive."""
    after = position.seq if position else 0
    expected = after + 1
    if position is None:
        expected = max(expected, _manifest(reader).start[0] + 1)
    for record in records:
        if record["seq"] != expected:
            raise ShipError(_gap(reader, expected, record["seq"] - 1))
        expected += 1
    if position is not None and records[0]["seq"] == position.seq + 1 and records[0]["prev_hash"] != position.hash:
        raise ShipError(f"record {records[0]['seq']} does not chain onto the cursor's record {position.seq} (its "
                        f"prev_hash {records[0]['prev_hash'][:12]}.. vs {position.hash[:12]}..): the log was replaced "
                        "or rewritten; verify it before shipping")


def _manifest(reader: DecisionLogReader) -> segments.Manifest:
    """The sealed segments of a SQLite log; none for the PostgreSQL log, which is never sealed."""
    return segments.read_manifest(reader.path) if isinstance(reader, DecisionReader) else segments.Manifest()


def _gap(reader: DecisionLogReader, first: int, last: int) -> str:
    manifest = _manifest(reader)
    pruned = [s for s in manifest.seals if manifest.pruned(s) and s.first_seq <= last and s.last_seq >= first]
    what = (f"records {first}..{last} were pruned (`warden audit prune`) before they were shipped: they are "
            "gone from this log" if pruned else
            f"records {first}..{last} are missing from the log (a sealed segment gone without a prune?): run "
            "`warden audit verify`")
    return (f"{what}. Nothing after them was shipped and the cursor stays at {first - 1}. Ship them from a "
            "backup of the segments, or, to accept the loss and ship on, move the cursor aside (shipping then "
            "starts at the oldest record kept; see docs/audit.md, \"Shipping\")")


def ship(
    reader: DecisionLogReader,
    sink: Sink,
    cursor: Cursor,
    *,
    batch: int = DEFAULT_BATCH,
    follow: bool = False,
    poll_interval: float = 1.0,
    retries: int = 5,
    stop: threading.Event | None = None,
    report: Callable[[Progress, list[dict[str, Any]]], None] | None = None,
    sleep: Callable[[float], Any] | None = None,
    refused: Callable[[SinkRefused, list[dict[str, Any]], int, float], None] | None = None,
) -> Progress:
    """Ship every record after the cursor; with `follow`, keep shipping new ones until `stop`.

    A refused batch is retried with backoff: `retries` times, then ShipError (one-shot), or for
    ever while following. The cursor moves only after the sink took the batch. `refused` hears of
    each refusal that will be retried: the error, the batch, the tries so far, the wait before the next."""
    stop = stop or threading.Event()
    wait = sleep or stop.wait
    progress = Progress(position=cursor.load())
    check_cursor(reader, progress.position)
    backoff = 0.5
    failed_in_row = 0
    while not stop.is_set():
        after = progress.position.seq if progress.position else 0
        records = list(reader.read(after, limit=batch))
        if not records:
            if not follow:
                break
            wait(poll_interval)
            continue
        check_unbroken(reader, progress.position, records)
        try:
            sink.send([encode(r) for r in records])
        except SinkRefused as exc:
            progress.failures += 1
            failed_in_row += 1
            if not follow and failed_in_row > retries:
                raise ShipError(f"{exc} ({failed_in_row} tries); the cursor stays at "
                                f"{after}: run again to ship from there") from None
            if refused is not None:
                refused(exc, records, failed_in_row, backoff)
            wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)
            continue
        failed_in_row, backoff = 0, 0.5
        last = records[-1]
        progress.position = Position(last["seq"], last["hash"])
        cursor.save(progress.position)
        progress.shipped += len(records)
        progress.batches += 1
        if report is not None:
            report(progress, records)
    return progress


def parse_headers(items: Iterable[str]) -> dict[str, str]:
    headers = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or not name.strip() or any(c in item for c in "\r\n"):
            raise ValueError(f"a header is NAME: VALUE on one line, got {item!r}")
        headers[name.strip()] = value.strip()
    return headers
