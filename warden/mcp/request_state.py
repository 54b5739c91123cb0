"""The `requestState` of an MCP `input_required` answer (protocol 2026-07-28), for a call that waits
for a person (docs/mcp.md, "Approvals").

The client echoes the state back verbatim when it retries, so it is attacker-controlled: it carries
who it was issued to, for which run and REQUIRE_APPROVAL decision, until when, for which upstream and
for which exact call, under an HMAC-SHA256 of the gateway's own key. The state is a ticket to ask
again, never an approval: what approves is the token the checkpoint signs for a person's credential,
which the gateway takes from the approval inbox and presents with the call. Each state is spent
once, in this gateway's memory: a fleet of gateways sharing one key needs a shared list of spent
states (not built), which is why the key is per gateway state folder.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from warden import canonical
from warden.mcp import codes
from warden.mcp.settings import Client
from warden.private import FILE_MODE, private_folder, read_trusted

KEY_FILE = "mcp-request-state.key"
TTL = 600.0  # seconds: long enough for a person to read the call, short enough to age out of memory
PREFIX = "wrs1."  # the format's version, under the MAC
KEY_BYTES = 32
MAX_STATE = 2048  # an echo longer than any state this gateway issues is not read


class StateRefused(Exception):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class Bound:
    """What one state was issued for."""

    principal: str  # a digest of the client's name, person, agent and tenant (the state is readable)
    run: str
    approval: str  # the REQUIRE_APPROVAL decision id
    expires: float
    upstream: str
    call: str  # warden.client.runs.call_digest of the exposed tool and the arguments


def principal_digest(who: Client) -> str:
    return canonical.sha256_hex({"client": who.name, "person": who.person, "agent": who.agent, "tenant": who.tenant})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(raw) != text:  # one spelling per state: no second encoding of the same bytes
        raise ValueError("not canonical base64url")
    return raw


def load_key(folder: Path) -> bytes:
    """The gateway's state key (FOLDER/mcp-request-state.key, 0600), made on first use. A key
    someone else could have written or read is refused (warden.private), so the gateway stops."""
    path = private_folder(folder) / KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(KEY_BYTES).hex().encode())
            f.flush()
            os.fsync(f.fileno())
    key = bytes.fromhex(read_trusted(path, "MCP request-state key", secret=True).decode().strip())
    if len(key) < KEY_BYTES:
        raise ValueError(f"{path}: the key is {len(key)} bytes, fewer than {KEY_BYTES}")
    return key


class RequestStates:
    def __init__(self, key: bytes, *, ttl: float = TTL, clock: Callable[[], float] = time.time) -> None:
        self._key = key
        self.ttl = ttl
        self._clock = clock
        self._spent: dict[str, float] = {}  # approval id -> when its states expire

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._key, (PREFIX + body).encode(), hashlib.sha256).digest()

    def issue(self, who: Client, run: str, approval: str, upstream: str, call: str) -> str:
        bound = Bound(principal_digest(who), run, approval, round(self._clock() + self.ttl, 3), upstream, call)
        body = _b64(canonical.dumps(asdict(bound)))
        return f"{PREFIX}{body}.{_b64(self._mac(body))}"

    def read(self, state: object) -> Bound:
        """The state's claims once its MAC holds; `request_state_invalid` otherwise."""
        try:
            if not isinstance(state, str) or len(state) > MAX_STATE or not state.startswith(PREFIX):
                raise ValueError("not a state of this gateway")
            body, mac = state[len(PREFIX):].split(".")
            if not hmac.compare_digest(_unb64(mac), self._mac(body)):
                raise ValueError("MAC")
            return Bound(**json.loads(_unb64(body)))
        except (ValueError, TypeError):
            raise StateRefused(codes.REQUEST_STATE_INVALID, "the requestState is not one this gateway issued "
                               "(altered, truncated, or under another key)") from None

    def verify(self, state: object, who: Client, run: str, upstream: str, call: str) -> Bound:
        """The state's claims, checked in order against the retry: MAC, expiry, principal, call,
        not spent. Raises StateRefused with the code of the first that fails."""
        bound = self.read(state)
        if not self._clock() < bound.expires:
            raise StateRefused(codes.REQUEST_STATE_EXPIRED, "the requestState has expired: make the call again "
                               "without it to ask a person anew")
        if not hmac.compare_digest(bound.principal, principal_digest(who)):
            raise StateRefused(codes.REQUEST_STATE_OTHER_PRINCIPAL, "the requestState was issued to another client")
        if bound.run != run:  # the gateway restarted or the run ended: a new run, and its approvals are its own
            raise StateRefused(codes.REQUEST_STATE_EXPIRED, "the requestState belongs to an earlier run of this "
                               "client: make the call again without it")
        if bound.upstream != upstream or not hmac.compare_digest(bound.call, call):
            raise StateRefused(codes.REQUEST_STATE_OTHER_CALL, "the requestState was issued for another call (tool, "
                               "arguments or upstream differ): a person approves each exact call")
        if self.spent(bound.approval):
            raise StateRefused(codes.REQUEST_STATE_SPENT, "the requestState was already used: make the call "
                               "again without it to ask a person anew")
        return bound

    def spent(self, approval: str) -> bool:
        return approval in self._spent

    def spend(self, approval: str, expires: float | None = None) -> None:
        """Mark the approval's states used. Entries past their expiry are dropped: an expired state
        is refused before it is looked up here."""
        now = self._clock()
        self._spent = {a: e for a, e in self._spent.items() if e > now}
        self._spent[approval] = expires if expires is not None else now + self.ttl
