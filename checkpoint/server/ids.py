"""Decision ids: time-ordered, unique across replicas, sortable as text.

The layout is UUIDv7's (RFC 9562): 48 bits of Unix milliseconds, then a per-process counter in
the 12 "rand_a" bits and 62 random bits. Ids sort by the time they were issued, so an auditor
can order decisions from several replicas without a shared clock service, and the random part
keeps replicas from colliding. Python 3.11 has no uuid7(), hence this module.
"""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_counter = 0
# Random bits come from os.urandom in blocks: one system call per 512 ids instead of one each.
_BLOCK = 512
_random: list[int] = []
_RAND_MASK = (1 << 62) - 1


def _refill() -> None:
    data = os.urandom(8 * _BLOCK)
    _random.extend(int.from_bytes(data[i : i + 8], "big") & _RAND_MASK for i in range(0, len(data), 8))


def new_decision_id() -> str:
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            # Same millisecond (or the clock stepped back): keep ids increasing within the process.
            _counter += 1
            if _counter > 0xFFF:
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        else:
            _last_ms, _counter = ms, 0
        counter = _counter
        if not _random:
            _refill()
        rand = _random.pop()
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand
    # The same text as str(uuid.UUID(int=value)), without building the object.
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_run_id() -> str:
    """Run ids are minted here, never chosen by a caller: none is empty, none is reused."""
    return "run-" + new_decision_id()
