"""Live tool output as run events: what `warden watch` shows while a tool is still running.

The toolrunner streams scrubbed output in small chunks; one event per chunk would flood the
event log. Chunks are coalesced per stream and written as `tool_output` events when enough has
gathered or enough time has passed, up to a cap per call: the receipt keeps the output's head and
tail for the model, these events are only for people watching.
"""

from __future__ import annotations

import time

from driver.store import RunStore

FLUSH_CHARS = 2048
FLUSH_SECONDS = 0.5
MAX_CHARS_PER_CALL = 64 * 1024


class OutputEvents:
    def __init__(self, store: RunStore, run_id: str, tool: str, decision_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.tool = tool
        self.decision_id = decision_id
        self._stream = ""
        self._parts: list[str] = []
        self._size = 0
        self._since = 0.0
        self._written = 0
        self._capped = False

    def __call__(self, stream: str, text: str) -> None:
        if self._capped or not text:
            return
        if stream != self._stream:
            self.flush()
            self._stream = stream
        if not self._parts:
            self._since = time.monotonic()
        self._parts.append(text)
        self._size += len(text)
        if self._size >= FLUSH_CHARS or time.monotonic() - self._since >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if not self._parts:
            return
        text = "".join(self._parts)
        self._parts, self._size = [], 0
        room = MAX_CHARS_PER_CALL - self._written
        if len(text) >= room:
            text, self._capped = text[:room], True
        self._written += len(text)
        self.store.append_event(self.run_id, "tool_output", tool=self.tool, decision_id=self.decision_id,
                                stream=self._stream, text=text, capped=self._capped)
