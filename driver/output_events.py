"""Live tool output as run events: what `warden watch` shows while a tool is still running.

The toolrunner streams scrubbed output in small chunks; one event per chunk would flood the
event log. Chunks are coalesced per stream and written as `tool_output` events once 2 KiB has
gathered or the oldest waiting chunk is half a second old (a timer, so a line followed by
silence still shows), up to a cap per call: the receipt keeps the output's head and tail for the
model, these events are only for people watching.
"""

from __future__ import annotations

import threading

from driver.runs.model import EventKind
from driver.runs.store import RunStore

FLUSH_CHARS = 2048
FLUSH_SECONDS = 0.5
MAX_CHARS_PER_CALL = 64 * 1024


class OutputEvents:
    def __init__(self, store: RunStore, run_id: str, tool: str, decision_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.tool = tool
        self.decision_id = decision_id
        self._lock = threading.Lock()  # the gRPC reader and the flush timer both write
        self._timer: threading.Timer | None = None
        self._stream = ""
        self._parts: list[str] = []
        self._size = 0
        self._written = 0
        self._capped = False

    def __call__(self, stream: str, text: str) -> None:
        with self._lock:
            if self._capped or not text:
                return
            if stream != self._stream:
                self._flush()
                self._stream = stream
            self._parts.append(text)
            self._size += len(text)
            if self._size >= FLUSH_CHARS:
                self._flush()
            elif self._timer is None:
                self._timer = threading.Timer(FLUSH_SECONDS, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._parts:
            return
        text = "".join(self._parts)
        self._parts, self._size = [], 0
        room = MAX_CHARS_PER_CALL - self._written
        if len(text) >= room:
            text, self._capped = text[:room], True
        self._written += len(text)
        self.store.append_event(self.run_id, EventKind.TOOL_OUTPUT, tool=self.tool, decision_id=self.decision_id,
                                stream=self._stream, text=text, capped=self._capped)
