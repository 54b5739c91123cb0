"""The output cap: keep the start and the end of what a tool printed, drop the middle.

The start usually says what the tool did and the end how it finished (the error, the summary),
so both survive; the marker between them says how much was dropped. Text is added after
scrubbing, so truncation can never cut a secret in half and leave a part unmasked.
"""

from __future__ import annotations

import hashlib

MARKER = "\n[... {dropped} bytes truncated ...]\n"


class CappedOutput:
    def __init__(self, cap_bytes: int):
        self.cap = cap_bytes
        self._head = bytearray()
        self._tail = bytearray()
        self._head_limit = cap_bytes // 2
        self._tail_limit = cap_bytes - self._head_limit
        self.total = 0

    def add(self, text: str) -> None:
        data = text.encode()
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > 2 * self._tail_limit:
                del self._tail[: len(self._tail) - self._tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self) -> str:
        if not self.truncated:
            return (bytes(self._head) + bytes(self._tail)).decode(errors="replace")
        tail = bytes(self._tail[-self._tail_limit :])
        dropped = self.total - len(self._head) - len(tail)
        # 'ignore' at the two cut points: a multi-byte character split by the cap is dropped
        # rather than shown as a replacement glyph.
        return (
            bytes(self._head).decode(errors="ignore")
            + MARKER.format(dropped=dropped)
            + tail.decode(errors="ignore")
        )


class RawDigest:
    """sha256 and size of the raw bytes, before any scrubbing: what the receipt pins."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.size = 0

    def add(self, data: bytes) -> None:
        self._sha.update(data)
        self.size += len(data)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()
