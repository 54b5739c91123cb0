"""Who is asking: an auditor's checkpoint credential, checked as the checkpoint checks it.

The web view holds no accounts of its own. A request carries `Authorization: Bearer TOKEN`, a
token of the checkpoint's token file (`NAME TOKEN` lines, `warden/auth.py`); its
identity `token:NAME` is then asked, against the policy folder the checkpoint loads, the same
question `WatchDecisions` asks (`checkpoint/policy/audit_scope.py`): which tenants' records it
may read. Both files are re-read when they change, so a token revoked or an auditor removed from
a tenant's roles loses access without a restart:

- the token file is looked at on every request (a stat) and re-read when it changed; a token file
  that cannot be read any more lets nobody in (fail closed);
- the policy folder is compared at most every `reload_interval` seconds (its revision, a hash of
  its files); an edit that does not load keeps the set that last loaded, as the checkpoint does.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from checkpoint.policy.audit_scope import AuditRefused, readable_tenants
from checkpoint.policy.loader import load_policy_dir
from checkpoint.policy.policyset import PolicySet
from checkpoint.policy.principals import caller_name
from warden.auth import TokenFileError, bearer_identity, load_tokens
from warden.policyfiles import read_policy_files, revision_of

log = logging.getLogger(__name__)

__all__ = ["Auditor", "AuditRefused", "Gate"]


@dataclass(frozen=True)
class Auditor:
    """An authenticated reader and what it may read: `tenants` None is every record."""

    caller: str  # the credential's name (a token line's NAME)
    principal: str
    tenants: list[str] | None


class Gate:
    def __init__(self, tokens_path: Path, policy_dir: Path, *, reload_interval: float = 5.0) -> None:
        self.tokens_path = Path(tokens_path)
        self.policy_dir = Path(policy_dir)
        self.reload_interval = reload_interval
        self._lock = threading.Lock()
        self._tokens: dict[bytes, str] = {}
        self._tokens_stamp: tuple[int, int, int] | None = None
        self._policies: PolicySet | None = None
        self._revision = ""
        self._policies_checked = 0.0
        # Both must load at start: a view that cannot say who may read anything must not start.
        self._tokens = load_tokens(self.tokens_path, require_names=True)
        self._tokens_stamp = _stamp(self.tokens_path)
        self._load_policies(force=True)

    @property
    def policy_revision(self) -> str:
        return self._revision

    def authenticate(self, header: str | None) -> Auditor | None:
        """The auditor an `Authorization` header names, or None (no or a wrong credential).
        Raises AuditRefused for a credential that may read no record (answered 403)."""
        if not header:
            return None
        with self._lock:
            self._refresh_tokens()
            self._refresh_policies()
            identity = bearer_identity(self._tokens, header)
            policies = self._policies
        if identity is None or policies is None:
            return None
        tenants = readable_tenants(policies.principals, policies.tenants, identity)
        principal = policies.principals.of(identity)
        return Auditor(caller_name(identity), principal.name if principal else "", tenants)

    def _refresh_tokens(self) -> None:
        try:
            stamp = _stamp(self.tokens_path)
        except OSError as exc:
            if self._tokens:
                log.error("token file %s unreadable (%s): nobody is let in until it is back", self.tokens_path, exc)
            self._tokens, self._tokens_stamp = {}, None
            return
        if stamp == self._tokens_stamp:
            return
        try:
            self._tokens = load_tokens(self.tokens_path, require_names=True)
        except (OSError, TokenFileError) as exc:
            log.error("token file %s does not load (%s): nobody is let in until it does", self.tokens_path, exc)
            self._tokens = {}
        self._tokens_stamp = stamp

    def _refresh_policies(self) -> None:
        if time.monotonic() - self._policies_checked >= self.reload_interval:
            self._load_policies(force=False)

    def _load_policies(self, *, force: bool) -> None:
        self._policies_checked = time.monotonic()
        try:
            revision = revision_of(read_policy_files(self.policy_dir))
        except OSError as exc:
            if force:
                raise
            log.error("policy folder %s unreadable (%s); keeping revision %s", self.policy_dir, exc, self._revision)
            return
        if revision == self._revision and not force:
            return
        try:
            # An in-memory catalog: the view reads principals and roles, and writes nothing.
            self._policies = load_policy_dir(self.policy_dir)
            self._revision = revision
        except Exception as exc:  # noqa: BLE001 - a bad edit: keep the set that loaded, as the checkpoint does
            if force:
                raise
            log.error("policy folder %s does not load (%s); keeping revision %s", self.policy_dir, exc, self._revision)


def _stamp(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns)
