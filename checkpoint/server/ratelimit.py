"""Token buckets for recording unauthenticated refusals: a flood is counted, not stored.

Anyone who can reach the TCP port can make the checkpoint record a refusal. Each peer address
(the port left out, so new connections do not start afresh) has its own bucket, and all peers
together share one more, so a flood spread over many addresses is bounded too. At most
`max_peers` addresses are tracked; the one unseen longest is forgotten first.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable


class Bucket:
    __slots__ = ("tokens", "stamp")

    def __init__(self, tokens: float, stamp: float):
        self.tokens = tokens
        self.stamp = stamp


class PeerLimiter:
    def __init__(
        self,
        *,
        rate: float = 10.0,
        burst: float = 20.0,
        total_rate: float = 100.0,
        total_burst: float = 200.0,
        max_peers: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.rate, self.burst = rate, burst
        self.total_rate, self.total_burst = total_rate, total_burst
        self.max_peers = max_peers
        self._clock = clock
        self._peers: OrderedDict[str, Bucket] = OrderedDict()
        self._total = Bucket(total_burst, clock())
        self._lock = threading.Lock()

    def admit(self, peer: str, cost: float = 1.0) -> bool:
        """True when `peer` may have `cost` more records now (and takes them)."""
        key = peer_address(peer)
        with self._lock:
            now = self._clock()
            bucket = self._peers.get(key)
            if bucket is None:
                bucket = self._peers[key] = Bucket(self.burst, now)
                if len(self._peers) > self.max_peers:
                    self._peers.popitem(last=False)
            else:
                self._peers.move_to_end(key)
            _refill(bucket, now, self.rate, self.burst)
            _refill(self._total, now, self.total_rate, self.total_burst)
            if bucket.tokens < cost or self._total.tokens < cost:
                return False
            bucket.tokens -= cost
            self._total.tokens -= cost
            return True

    def tracked(self) -> int:
        return len(self._peers)


def _refill(bucket: Bucket, now: float, rate: float, burst: float) -> None:
    bucket.tokens = min(burst, bucket.tokens + (now - bucket.stamp) * rate)
    bucket.stamp = now


def peer_address(peer: str) -> str:
    """gRPC's peer string without the port: `ipv4:10.0.0.1:5432` -> `ipv4:10.0.0.1`,
    `ipv6:[::1]:5432` -> `ipv6:[::1]`; anything else (a Unix socket) as it is."""
    if peer.startswith(("ipv4:", "ipv6:")):
        host, sep, port = peer.rpartition(":")
        if sep and port.isdigit() and host not in ("ipv4", "ipv6"):
            return host
    return peer
