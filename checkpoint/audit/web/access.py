"""Who is asking: an auditor's checkpoint credential, checked as the checkpoint checks it.

The web view holds no accounts of its own. A request carries `Authorization: Bearer TOKEN`, a
key of the checkpoint's key file (`warden keys add`, or a `NAME TOKEN` line; `warden/auth.py`) or,
when OIDC is configured, an identity token of the organisation's provider (`warden/oidc.py`); its
identity (`person:NAME`, `token:NAME`, `oidc:NAME`) is then asked, against the policy folder the checkpoint loads, the same
question `WatchDecisions` asks (`checkpoint/policy/audit_scope.py`): which tenants' records it
may read. Both files are re-read when they change, so a token revoked or an auditor removed from
a tenant's roles loses access without a restart:

- the key file is looked at on every request (a stat) and re-read when it changed; a key file
  that cannot be read any more lets nobody in with a key (fail closed); a key's roles must
  include auditor (or be unrestricted), as an identity token's must;
- the policy folder is compared at most every `reload_interval` seconds (its revision, a hash of
  its files); an edit that does not load keeps the set that last loaded, as the checkpoint does.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from checkpoint.policy.audit_scope import AuditRefused, readable_tenants
from checkpoint.policy.loader import load_policy_dir
from checkpoint.policy.policyset import PolicySet
from checkpoint.policy.principals import caller_name
from warden.auth import AuthPolicy, KeySource, TokenFileError, Verifier
from warden.credentials import AUDIT_PAGE
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
    def __init__(self, tokens_path: Path | None, policy_dir: Path, *, reload_interval: float = 5.0,
                 oidc: Verifier | None = None) -> None:
        self.tokens_path = Path(tokens_path) if tokens_path else None
        self.policy_dir = Path(policy_dir)
        self.reload_interval = reload_interval
        self._lock = threading.Lock()
        self._policies: PolicySet | None = None
        self._revision = ""
        self._policies_checked = 0.0
        if self.tokens_path is None and oidc is None:
            raise TokenFileError("the audit page needs the key file or OIDC settings: nobody could sign in")
        # Both must load at start: a view that cannot say who may read anything must not start.
        # The key file is followed (warden/auth.py, KeySource): a key revoked is refused at once.
        self._auth = AuthPolicy(keys=KeySource(self.tokens_path) if self.tokens_path else None, oidc=oidc)
        self._load_policies(force=True)

    @property
    def policy_revision(self) -> str:
        return self._revision

    def authenticate(self, header: str | None) -> Auditor | None:
        """The auditor an `Authorization` header names, or None (no or a wrong credential, or one
        whose roles do not include reading the log). Raises AuditRefused for a credential that
        may read no record (answered 403)."""
        if not header:
            return None
        credential = self._auth.credential(header)
        with self._lock:
            self._refresh_policies()
            policies = self._policies
        if credential is None or not credential.may(AUDIT_PAGE) or policies is None:
            return None
        identity = credential.identity
        tenants = readable_tenants(policies.principals, policies.tenants, identity)
        principal = policies.principals.of(identity)
        return Auditor(caller_name(identity), principal.name if principal else "", tenants)

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

