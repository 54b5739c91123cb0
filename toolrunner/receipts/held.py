"""Receipts the store could not take when their call ended, kept until it can.

A call that was claimed has happened, whatever the database does next: refusing its caller would
say that nothing ran. So when the database goes away while a container runs, the receipt still goes
back to the caller, is kept here (and served to a replay of the same grant from here), and is
written by a background thread as soon as the database answers again. Should the toolrunner end
first, the claim is still `running` in the store, and becomes `interrupted` when the instance
starts again: never run twice, at the cost of the output.
"""

from __future__ import annotations

import logging
import threading

from toolrunner.receipts.store import DONE, Receipts
from warden.store.errors import StoreUnavailable
from warden.toolrunner.v1 import toolrunner_pb2 as pb

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0


class HeldReceipts:
    """A Receipts store whose finish() never loses a receipt to a database that is away."""

    def __init__(self, store: Receipts, retry_seconds: float = RETRY_SECONDS):
        self.store = store
        self.instance = store.instance
        self._retry = retry_seconds
        self._held: dict[str, pb.Receipt] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def claim(self, decision_id: str, run_id: str, tool: str) -> bool:
        return self.store.claim(decision_id, run_id, tool)

    def finish(self, receipt: pb.Receipt) -> None:
        try:
            self.store.finish(receipt)
        except StoreUnavailable as exc:
            log.error("receipt of %s kept in memory until the store is back: %s", receipt.decision_id, exc)
            with self._lock:
                self._held[receipt.decision_id] = receipt
                if self._thread is None:
                    self._thread = threading.Thread(target=self._write_held, name="held-receipts", daemon=True)
                    self._thread.start()
            self._wake.set()

    def get(self, decision_id: str) -> tuple[str, pb.Receipt | None] | None:
        with self._lock:
            held = self._held.get(decision_id)
        if held is not None:
            copy = pb.Receipt()
            copy.CopyFrom(held)
            return DONE, copy
        return self.store.get(decision_id)

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._held)

    def interrupt_cut_off(self) -> list[str]:
        return self.store.interrupt_cut_off()

    def mark_interrupted(self) -> int:
        return self.store.mark_interrupted()

    def ping(self) -> bool:
        return self.store.ping()

    def flush(self) -> int:
        """Write what is held; how many are still held (the store still away)."""
        with self._lock:
            pending = list(self._held.values())
        for receipt in pending:
            try:
                self.store.finish(receipt)
            except StoreUnavailable:
                break
            with self._lock:
                self._held.pop(receipt.decision_id, None)
            log.info("receipt of %s written after the store came back", receipt.decision_id)
        with self._lock:
            return len(self._held)

    def _write_held(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self._retry)
            self._wake.clear()
            if self.flush() == 0:
                with self._lock:
                    if not self._held:  # nothing came in meanwhile: the thread ends
                        self._thread = None
                        return

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        with self._lock:
            thread = self._thread
        if thread is not None:  # one writer at a time, and none left when the store closes
            thread.join(timeout=30)
        left = self.flush()
        if left:
            log.error("%d receipt(s) could not be written before the toolrunner stopped; their calls will "
                      "read `interrupted` when this instance starts again: %s", left, ", ".join(self.held()))
        self.store.close()
