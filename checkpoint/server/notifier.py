"""Webhook delivery of notifications, off the decision's path.

A Check records its answer and returns it as always; only then is a notification offered here,
which takes it or, when the bounded queue is full, counts it dropped: `offer` never blocks and
never fails, so a slow, failing or silent receiver changes no verdict and slows no answer.

Delivery threads POST each notification to every URL, signed (warden/webhooks.py), with a timeout;
an attempt that gets no 2xx is tried again after a backoff that doubles, up to `attempts` in all.
Every attempt's outcome goes on the decision log as its own record (action `notify`), beside the
decision it is about: the log is already the one tamper-evident place an auditor reads, on SQLite
and on a fleet's PostgreSQL alike, and a run's story then shows who was told and when. A record of
a notification that cannot be written is logged and lost; the decision's own record stands.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from checkpoint.audit.record import format_time_ns
from checkpoint.server.ids import new_decision_id
from checkpoint.server.notifications import NOTE_FIELDS, Notification, body_for, notification
from checkpoint.server.notify_settings import NotifySettings, shown
from warden import codes, webhooks
from warden.checkpoint.v1 import checkpoint_pb2 as pb

log = logging.getLogger("warden.checkpoint.notify")

MAX_BACKOFF = 300.0
NOTIFIED = frozenset({pb.VERDICT_REQUIRE_APPROVAL, pb.VERDICT_HALT})  # a person should hear of these
MAX_BODY_READ = 4096


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:  # a 3xx is an answer, not a new target
        return None


@dataclass(order=True)
class _Delivery:
    due: float
    seq: int
    note: Notification = field(compare=False)
    url: str = field(compare=False)
    body: bytes = field(compare=False)
    attempt: int = field(compare=False, default=1)


class Notifier:
    """Offers notifications to a bounded queue; delivery threads send, retry and record them."""

    def __init__(self, settings: NotifySettings, record: Callable[[dict[str, Any]], object],
                 clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self._record = record
        self._clock = clock
        self._opener = urllib.request.build_opener(_NoRedirect())
        self._cond = threading.Condition()
        self._due: list[_Delivery] = []
        self._pending = 0  # deliveries queued, waiting for a retry or being sent
        self._dropped: list[Notification] = []
        self._seq = itertools.count()
        self._stopping = False
        self._sending = 0  # attempts under way
        self._senders = ThreadPoolExecutor(settings.senders, thread_name_prefix="checkpoint-notify")
        self._thread = threading.Thread(target=self._schedule, name="checkpoint-notify-queue", daemon=True)

    def start(self) -> Notifier:
        """Start sending (what was offered before is sent then)."""
        self._thread.start()
        return self

    # -- the decision's side: never blocks, never raises -----------------------------------

    def offer(self, note: Notification) -> bool:
        """Queue `note` for every URL; False (and counted dropped) when the queue is full."""
        try:
            body = body_for(self.settings.kind, note)
            with self._cond:
                if self._stopping or self._pending + len(self.settings.urls) > self.settings.queue:
                    if len(self._dropped) < self.settings.queue:  # what is recorded of drops is bounded too
                        self._dropped.append(note)
                    self._cond.notify_all()
                    return False
                now = self._clock()
                for url in self.settings.urls:
                    heapq.heappush(self._due, _Delivery(now, next(self._seq), note, url, body))
                    self._pending += 1
                self._cond.notify_all()
            return True
        except Exception:  # noqa: BLE001 - a notification never fails the decision it is about
            log.exception("a notification could not be queued")
            return False

    def offer_recorded(self, record: Any, response: Any) -> None:
        """Offer the notification of an answer just recorded (a DecisionRecord and its CheckResponse),
        when its verdict calls for one: never blocks, never raises, never changes the answer."""
        if response.verdict not in NOTIFIED:  # most answers: nothing to build
            return
        try:
            deadline = (format_time_ns(response.approval_deadline.ToNanoseconds())
                        if response.HasField("approval_deadline") else "")
            note = notification({name: getattr(record, name) for name in NOTE_FIELDS}, deadline=deadline,
                                handoff_to=response.handoff_to, public_url=self.settings.public_url)
            if note is not None:
                self.offer(note)
        except Exception:  # noqa: BLE001 - a lost notification never changes a verdict
            log.exception("decision %s: its notification could not be offered", response.decision_id)

    # -- the delivery side --------------------------------------------------------------------

    def _schedule(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._dropped and (
                        not self._due or self._due[0].due > self._clock()):
                    self._cond.wait(None if not self._due else max(0.0, self._due[0].due - self._clock()))
                if self._stopping:
                    return
                dropped, self._dropped = self._dropped, []
                self._pending += len(dropped)  # until their records are written
                ready = []
                while self._due and self._due[0].due <= self._clock():
                    ready.append(heapq.heappop(self._due))
            for note in dropped:
                self._write(note, "", 0, codes.NOTIFICATION_DROPPED,
                            "the notification queue was full: nobody was told of this decision", {})
                self._done()
            for delivery in ready:
                try:
                    self._senders.submit(self._send, delivery)
                except RuntimeError:  # shutting down
                    return

    def _send(self, delivery: _Delivery) -> None:
        with self._cond:
            self._sending += 1
        try:
            self._attempt(delivery)
        finally:
            with self._cond:
                self._sending -= 1
                self._cond.notify_all()

    def _attempt(self, delivery: _Delivery) -> None:
        status, problem = self._post(delivery)
        where = shown(delivery.url)
        outcome = {"status": status} if status else {}
        if problem is None:
            self._write(delivery.note, where, delivery.attempt, codes.NOTIFICATION_DELIVERED,
                        f"delivered to {where} (HTTP {status})", outcome)
            self._done()
            return
        if delivery.attempt >= self.settings.attempts:
            self._write(delivery.note, where, delivery.attempt, codes.NOTIFICATION_DROPPED,
                        f"{problem}; given up after {delivery.attempt} attempt(s)", outcome)
            self._done()
            return
        wait = min(MAX_BACKOFF, self.settings.backoff * 2 ** (delivery.attempt - 1))
        self._write(delivery.note, where, delivery.attempt, codes.NOTIFICATION_FAILED,
                    f"{problem}; attempt {delivery.attempt + 1} in {wait:g} s", outcome)
        with self._cond:
            if self._stopping:
                return  # not tried again: the checkpoint stopped (this attempt is on the record)
            delivery.due, delivery.attempt = self._clock() + wait, delivery.attempt + 1
            heapq.heappush(self._due, delivery)
            self._cond.notify_all()

    def _post(self, delivery: _Delivery) -> tuple[int, str | None]:
        """(HTTP status or 0, None when delivered or why not)."""
        request = urllib.request.Request(delivery.url, data=delivery.body, method="POST", headers={
            "Content-Type": "application/json",
            "User-Agent": "warden-checkpoint",
            webhooks.HEADER: webhooks.sign_header(self.settings.secret, delivery.body),
            "Warden-Decision": delivery.note.decision_id,
        })
        try:
            with self._opener.open(request, timeout=self.settings.timeout) as answer:
                answer.read(MAX_BODY_READ)
                status = answer.status
        except urllib.error.HTTPError as exc:
            return exc.code, f"the receiver answered HTTP {exc.code}"
        except Exception as exc:  # noqa: BLE001 - timeouts, refused connections, TLS: all retried
            return 0, f"not delivered: {type(exc).__name__}: {str(exc)[:200]}"
        if not 200 <= status < 300:
            return status, f"the receiver answered HTTP {status}"
        return status, None

    def _done(self) -> None:
        with self._cond:
            self._pending -= 1
            self._cond.notify_all()

    def _write(self, note: Notification, where: str, attempt: int, code: str, reason: str,
               outcome: dict[str, Any]) -> None:
        """One attempt's record, filed under the run of the decision it is about."""
        try:
            self._record({
                "decision_id": new_decision_id(),
                "tenant": note.tenant or None,
                "run_id": note.run_id or None,
                "root_run_id": note.root_run_id or None,
                "accountable_person": note.accountable_person or None,
                "agent": note.agent or None,
                "agent_version": note.agent_version or None,
                "action": "notify",
                "tool": note.tool or None,
                "arguments": {"about": note.decision_id, "event": note.event, "webhook": where,
                              "kind": self.settings.kind, "attempt": attempt, **outcome},
                "verdict": "ALLOW" if code == codes.NOTIFICATION_DELIVERED else "DENY",
                "code": code,
                "rule": "webhook",
                "reason": reason,
            })
        except Exception as exc:  # noqa: BLE001 - the decision's own record stands; this one is lost, and logged
            if self._stopping:  # an attempt that ended as the checkpoint stopped: its log is closed
                log.warning("notification of decision %s (%s): not recorded, the checkpoint stopped: %s",
                            note.decision_id, code, exc)
            else:
                log.exception("the record of a notification of decision %s could not be written", note.decision_id)

    # -- tests and shutdown ------------------------------------------------------------------

    def wait_idle(self, timeout: float) -> bool:
        """True once nothing is queued, waiting for a retry or being sent (tests, a drain)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._dropped:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def close(self, grace: float = 2.0) -> None:
        """Stop: queued notifications are not sent; attempts under way get `grace` seconds to end
        and be recorded (each attempt so far is on the record)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            self._due.clear()
        self._senders.shutdown(wait=False, cancel_futures=True)
        ends = time.monotonic() + grace
        with self._cond:
            while self._sending and time.monotonic() < ends:
                self._cond.wait(0.05)
        if self._thread.is_alive():
            self._thread.join(timeout=5)
