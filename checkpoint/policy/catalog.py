"""The catalog: every agent version and every policy revision ever loaded, and each version's life.

A run pins its agent's version, and the policy revision in force, when it starts; both must
still decide that run after the policy files change, and after the checkpoint restarts (a later
edit may narrow what a running run may do, never widen it). Versions and revisions are
content-addressed, so recording the same definition twice is a no-op.

The catalog also says which version of each agent is live (what a new run pins), and where a
tenant reviews changes, which versions wait for an admin (states.py has the states and the moves
between them; docs/catalog.md the rules). A version's state changes only here, under one lock, in
one transaction, and only by a move the table of states.py holds. The rows are kept by a
CatalogStore (catalog_store.py; SQLite by default): no SQL here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoint.policy import catalog_upgrade, lifecycle, model, states
from checkpoint.policy.catalog_items import items
from checkpoint.policy.catalog_store import INSERTED, CatalogStore, Not
from checkpoint.policy.entries import EntryCatalog
from checkpoint.policy.policyset import AgentVersion
from checkpoint.policy.sqlite_store import SqliteStore
from checkpoint.policy.states import AGENT, LIVE, PENDING, RETIRED, SUPERSEDED, UNPINNABLE


class CatalogError(Exception):
    """A catalog act that cannot be done; `code` is a stable code (docs/codes.md)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Change:
    """One act on the catalog, as the decision log records it."""

    act: str  # propose, apply, approve, reject, retire, withdraw
    agent: str
    version: str
    tenant: str
    by: str
    source: str = ""
    note: str = ""
    replaces: str = ""  # the live version it replaced, or the pending one a proposal withdrew
    widens: tuple[str, ...] = ()
    # an agent's proposal: the person accountable for its run, who may not review it either
    for_person: str = ""

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"act": self.act, "source": self.source, "note": self.note[:1000]}
        if self.replaces:
            out["replaces"] = self.replaces
        if self.widens:
            out["widens"] = list(self.widens)
        return out


Recorder = Callable[[Change], None]
FILES = "policy-files"
NARROWS = "narrows"  # the note of a file edit applied because it only narrows
RECORDED_AGAIN = "recorded with the definitions of its tools and rules"
MAX_PENDING_PER_AGENT = 20  # proposals (not the files') waiting for review, per agent  # who proposed a version the policy files define


_LIFECYCLE_PK = ("agent", "version")
# what `history` tells of each version's state
_HISTORY = ("status", "source", "proposed_by", "proposed_at", "note", "decided_by", "decided_at", "decision_note")


def _no_record(_change: Change) -> None:
    return None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class AgentCatalog:
    def __init__(self, path: str | Path | None = None, *, read_only: bool = False, store: CatalogStore | None = None):
        """`path=None` keeps the catalog in memory only (one-shot CLI checks, tests).

        `read_only` opens an existing catalog to resolve old versions without ever writing it
        (a CLI check next to a running checkpoint); what it loads stays in memory. `store`: the
        rows kept elsewhere than the SQLite file at `path` (catalog_store.py).
        """
        self._cache: dict[tuple[str, str], AgentVersion] = {}
        self._read_only = read_only
        # read-only: revisions and lifecycle of this process's own loads, never written
        self._revisions: dict[str, list[tuple[str, bytes]]] = {}
        self._stored_revisions: set[str] = set()
        self._version_revisions: dict[tuple[str, str], str] = {}
        if store is None and path is not None and read_only:
            if not Path(path).exists():
                raise FileNotFoundError(f"no agent catalog at {path}")
            store = SqliteStore(path, read_only=True, upgrade=catalog_upgrade)
        # the tables below are views of the one table shape (catalog_items.py)
        self._store = items(store if store is not None else SqliteStore(path, upgrade=catalog_upgrade))
        # the server reads the catalog from gRPC worker threads and the reload watcher; the store's
        # lock (across processes too, for a shared file) serialises every act's check and write
        self._lock = self._store.lock
        if read_only:
            if not self._store.has_table("agent_versions"):  # raises sqlite3.Error on a non-database
                raise ValueError(f"{path} is not an agent catalog (no agent_versions table)")
            self.entries = EntryCatalog(self._store, read_only=True)
            return
        # workers opening a new file together race to make the schema: one at a time
        with self._lock:
            db = self._store
            db.create_table("agent_versions", ("agent", "version", "snapshot", "first_seen", "policy_revision"),
                            ("agent", "version"))
            db.create_table("policy_revisions", ("revision", "files", "first_seen"), "revision")
            db.create_table("agent_lifecycle", ("agent", "version", "status", "source", "proposed_by", "proposed_at",
                                                "note", "decided_by", "decided_at", "decision_note"), ("agent", "version"))
            # added after catalogs were first made: catalogs of older checkpoints get it too
            db.add_column("agent_lifecycle", "proposed_for")
            # per agent: the live version, and the version its policy file last defined
            db.create_table("agent_live", ("agent", "version", "file_version"), "agent")
            # the skills and templates (entries.py): the same store, the same lock; their schema
            # too is made under it (outside, two workers both added a column: one died at start)
            self.entries = EntryCatalog(self._store)

    def _has(self, table: str) -> bool:
        return self._store.has_table(table)

    # -- versions and revisions --------------------------------------------------------------

    def record(self, versions: list[AgentVersion], policy_revision: str) -> None:
        """Keep `versions`, each under the policy revision it was first made from: that revision's
        files hold the very tool and rule definitions the version covers (revision_of)."""
        with self._lock:
            for v in versions:
                self._version_revisions.setdefault((v.name, v.version), policy_revision)
            fresh = [v for v in versions if (v.name, v.version) not in self._cache]
            if fresh and not self._read_only:
                now = _now()
                with self._store.transaction():
                    self._store.insert_ignore("agent_versions", (
                        {"agent": v.name, "version": v.version, "snapshot": json.dumps(v.snapshot(), sort_keys=True),
                         "first_seen": now, "policy_revision": policy_revision} for v in fresh))
            for v in fresh:
                self._cache[(v.name, v.version)] = v

    def record_revision(self, revision: str, contents: list[tuple[str, bytes]]) -> None:
        """Keep a loaded folder's files (path, bytes), in folder order, under its revision."""
        with self._lock:
            if revision in self._revisions or revision in self._stored_revisions:
                return
            if self._read_only:
                self._revisions[revision] = contents
                return
            self._stored_revisions.add(revision)
            files = json.dumps([[name, data.decode("utf-8")] for name, data in contents])
            with self._store.transaction():
                self._store.insert_ignore("policy_revisions", [{"revision": revision, "files": files, "first_seen": _now()}])

    def revision_files(self, revision: str) -> list[tuple[str, bytes]] | None:
        """The files of a revision this catalog recorded, or None."""
        with self._lock:
            found = self._revisions.get(revision)
            if found is not None:
                return found
            if not self._has("policy_revisions"):  # a catalog from before revisions were kept
                return None
            rows = self._store.rows("policy_revisions", {"revision": revision})
            if not rows:
                return None
            return [(name, text.encode("utf-8")) for name, text in json.loads(rows[0]["files"])]

    def revision_of(self, agent: str, version: str) -> str:
        """The policy revision `version` was first recorded under ("" when none was)."""
        found = self._version_revisions.get((agent, version))
        if found:  # a version's first revision never changes: once read, kept (a Check may ask each time)
            return found
        with self._lock:
            rows = self._store.rows("agent_versions", {"agent": agent, "version": version})
            found = (rows[0]["policy_revision"] or "") if rows else ""
            if found:
                self._version_revisions[(agent, version)] = found
            return found

    def get(self, agent: str, version: str) -> AgentVersion | None:
        found = self._cache.get((agent, version))
        if found is not None:
            return found
        with self._lock:
            rows = self._store.rows("agent_versions", {"agent": agent, "version": version})
            if not rows:
                return None
            found = AgentVersion.from_snapshot(version, json.loads(rows[0]["snapshot"]))
            self._cache[(agent, version)] = found
            return found

    def versions(self, agent: str) -> list[str]:
        with self._lock:
            stored = [r["version"] for r in self._store.rows("agent_versions", {"agent": agent},
                                                             order=("first_seen", "version"))]
        # read-only: this process's own loads too
        return stored + sorted(v for (a, v) in self._cache if a == agent and v not in stored)

    # -- the lifecycle -----------------------------------------------------------------------

    def _status_row(self, agent: str, version: str) -> dict[str, Any] | None:
        if not self._has("agent_lifecycle"):
            return None
        rows = self._store.rows("agent_lifecycle", {"agent": agent, "version": version})
        return rows[0] if rows else None

    def _live_row(self, agent: str) -> dict[str, Any] | None:
        if not self._has("agent_live"):
            return None
        rows = self._store.rows("agent_live", {"agent": agent})
        return rows[0] if rows else None

    def status(self, agent: str, version: str) -> str | None:
        with self._lock:
            row = self._status_row(agent, version)
            return row["status"] if row else None

    def live_version(self, agent: str) -> str | None:
        with self._lock:
            row = self._live_row(agent)
            return (row["version"] or None) if row else None

    def blocked(self) -> tuple[frozenset[tuple[str, str]], frozenset[tuple[str, str]]]:
        """(versions no new run may pin, versions retired): what the decision function reads."""
        with self._lock:
            if not self._has("agent_lifecycle"):
                return frozenset(), frozenset()
            rows = self._store.rows("agent_lifecycle", {"status": UNPINNABLE})
        unpinnable = frozenset((r["agent"], r["version"]) for r in rows)
        return unpinnable, frozenset((r["agent"], r["version"]) for r in rows if r["status"] == RETIRED)

    def stated(self) -> frozenset[tuple[str, str]] | None:
        """On a shared store, the versions whose state this read holds (None elsewhere): a version
        proposed at another replica since is read from the store before the snapshot knows it is
        pending, and must not be pinned meanwhile."""
        if not self._store.shared:
            return None
        with self._lock:
            rows = self._store.rows("agent_lifecycle")
        return frozenset((r["agent"], r["version"]) for r in rows)

    def history(self, agent: str) -> list[dict[str, Any]]:
        """Every version of `agent`, oldest first, with its state and who moved it there."""
        with self._lock:
            versions = self._store.rows("agent_versions", {"agent": agent}, order=("first_seen", INSERTED))
            states_of = {r["version"]: r for r in self._store.rows("agent_lifecycle", {"agent": agent})}
            rows = [{"version": v["version"], "first_seen": v["first_seen"], "snapshot": v["snapshot"],
                     **{k: states_of.get(v["version"], {}).get(k) for k in _HISTORY}} for v in versions]
        live = self.live_version(agent)
        for r in rows:  # a version from before the lifecycle was kept has no status of its own
            r["snapshot"] = json.loads(r["snapshot"])
            r["status"] = r["status"] or (LIVE if r["version"] == live else SUPERSEDED)
        return rows

    def first_install(self) -> bool:
        """Has this catalog never had a live agent version? (Its first load puts the folder live.)"""
        with self._lock:
            return not self._has("agent_live") or not self._store.rows("agent_live", {"version": Not("")}, limit=1)

    def settle(self, from_files: Mapping[str, AgentVersion], tenants: Mapping[str, model.Tenant],
               sources: Mapping[str, str], *, write: bool = True) -> tuple[dict[str, AgentVersion], list[Change]]:
        """The live version of each agent the files define, and the changes this load made.

        A file version the catalog has not seen from the files before is the operator's change:
        it goes live at once unless its tenant reviews changes and it widens what the live version
        may do (a new agent widens, except in a catalog that has never had a live version: the
        first install). Then it waits as a proposal, and the live version stays. Read-only
        catalogs and pinned revisions compute the same answer without writing anything.
        """
        with self._lock:
            first_install = self.first_install()
            live: dict[str, AgentVersion] = {}
            changes: list[Change] = []
            for name, file_version in from_files.items():
                row = self._live_row(name)
                current = self.get(name, row["version"]) if row and row["version"] else None
                if row and row["file_version"] == file_version.version:
                    if current is not None:
                        live[name] = current
                    continue
                change = self._file_change(file_version, current, tenants, sources.get(name, "policy files"),
                                           first_install=first_install)
                if change is not None and change.act == "apply":
                    current = file_version
                if current is not None:
                    live[name] = current
                if self._read_only or not write:
                    continue
                with self._store.transaction():
                    if change is not None:
                        changes += self._apply(change)
                    self._store.upsert("agent_live",
                                   {"agent": name, "version": current.version if current else "",
                                    "file_version": file_version.version}, "agent")
            return live, changes

    def _file_change(self, file_version: AgentVersion, current: AgentVersion | None,
                     tenants: Mapping[str, model.Tenant], source: str, *, first_install: bool) -> Change | None:
        """What a version the files newly define does: nothing, go live, or wait for review."""
        if current is not None and current.version == file_version.version:
            return None  # the files caught up with the live version (an approved proposal)
        if not states.allows(AGENT, self.status(file_version.name, file_version.version), "file"):
            return None  # retired is final: the files must say something else
        tenant = tenants.get(file_version.tenant)
        # a move out of a reviewing tenant is reviewed too: the tenant it leaves has a say
        leaving = tenants.get(current.tenant) if current is not None else None
        reviews = any(t is not None and t.review_changes for t in (tenant, leaving))
        reviewed = reviews and not first_install
        widens = lifecycle.widenings(current.snapshot() if current else None, file_version.snapshot())
        args = (file_version.name, file_version.version, file_version.tenant, FILES)
        if reviewed and widens:
            return Change("propose", *args, source=source, widens=tuple(widens))
        why = (NARROWS if current is not None and not widens else
               "first install" if reviews else "the tenant does not review changes")
        if why == NARROWS and current is not None and current.tool_defs is None and file_version.tool_defs is not None \
                and not lifecycle.widenings(file_version.snapshot(), current.snapshot()):
            # the same agent, recorded again now that versions cover tools and rules: the old one
            # is superseded, not narrowed away (it resolved the very tools and rules on disk)
            why = RECORDED_AGAIN
        return Change("apply", *args, source=source, note=why, replaces=current.version if current else "",
                      widens=tuple(widens))

    def _apply(self, change: Change) -> list[Change]:
        """Write one change (inside the caller's transaction); the changes it caused, in order."""
        done = [change]
        now = _now()
        if change.act in ("propose", "apply"):
            if change.by == FILES:  # the files have one pending proposal per agent: their latest
                for old in self._store.rows("agent_lifecycle", {"agent": change.agent, "status": PENDING,
                                                                "proposed_by": change.by, "version": Not(change.version)}):
                    self._store.update("agent_lifecycle", _LIFECYCLE_PK, (change.agent, old["version"]),
                                   {"status": states.next_state(AGENT, PENDING, "withdraw"), "decided_at": now,
                                    "decision_note": f"replaced by {change.version}"})
                    done.append(Change("withdraw", change.agent, old["version"], change.tenant, change.by,
                                       note=f"replaced by {change.version}"))
            proposed = states.next_state(AGENT, self.status(change.agent, change.version),
                                         "file" if change.by == FILES else "propose")
            self._store.upsert("agent_lifecycle", {
                "agent": change.agent, "version": change.version, "status": proposed, "source": change.source,
                "proposed_by": change.by, "proposed_for": change.for_person, "proposed_at": now,
                "note": change.note, "decided_by": "", "decided_at": "", "decision_note": ""}, _LIFECYCLE_PK)
        if change.act in ("apply", "approve"):
            previous = self._live_row(change.agent)
            if previous and previous["version"] and previous["version"] != change.version:
                # replaced by an edit that only narrows: pinning the old one would undo the edit
                replaced = states.next_state(AGENT, self.status(change.agent, previous["version"]),
                                             "narrow" if change.act == "apply" and change.note == NARROWS else "supersede")
                self._store.upsert("agent_lifecycle",
                               {"agent": change.agent, "version": previous["version"], "status": replaced},
                               _LIFECYCLE_PK)
            self._store.update("agent_lifecycle", _LIFECYCLE_PK, (change.agent, change.version),
                           {"status": states.next_state(AGENT, self.status(change.agent, change.version), "approve"),
                            "decided_by": change.by, "decided_at": now, "decision_note": change.note})
            self._store.upsert("agent_live",
                           {"agent": change.agent, "version": change.version,
                            "file_version": previous["file_version"] if previous else change.version}, "agent")
        elif change.act in ("reject", "retire"):
            self._store.upsert("agent_lifecycle",
                           {"agent": change.agent, "version": change.version,
                            "status": states.next_state(AGENT, self.status(change.agent, change.version), change.act),
                            "decided_by": change.by, "decided_at": now, "decision_note": change.note}, _LIFECYCLE_PK)
        return done

    # Each act below checks, then calls `record(change)` (which appends it to the decision log and
    # raises when it cannot), then writes: an act is recorded before it takes effect, or not at all.

    def propose(self, version: AgentVersion, *, by: str, source: str, note: str, for_person: str = "",
                record: Recorder = _no_record, revision: str = "") -> Change:
        """A proposal by a person or an agent: it waits for a tenant admin, whatever it changes.
        `revision`: the policy revision whose tools and rules the definition was checked against."""
        with self._lock:
            self._writable()
            live = self.live_version(version.name)
            if live is None:
                raise CatalogError("unknown_agent", f"agent {version.name!r} has no live version: an agent is "
                                   "created in the policy files")
            if version.version == live:
                raise CatalogError("no_change", f"version {version.version} is already the live version of {version.name!r}")
            self._check(version.name, version.version, "propose")
            waiting = len(self._store.rows("agent_lifecycle", {"agent": version.name, "status": PENDING,
                                                               "proposed_by": Not(FILES)}))
            if waiting >= MAX_PENDING_PER_AGENT:  # a run cannot fill the catalog, nor bury the admin's list
                raise CatalogError("too_many_proposals", f"{waiting} proposals for agent {version.name!r} already "
                                   "wait for review: an admin reviews them before more are taken")
            current = self.get(version.name, live)
            widens = lifecycle.widenings(current.snapshot() if current else None, version.snapshot())
            if current is not None and version.tenant != current.tenant:
                raise CatalogError("invalid_request", f"a proposal keeps agent {version.name!r} in tenant "
                                   f"{current.tenant!r}: moving an agent is an edit of the policy files")
            change = Change("propose", version.name, version.version, version.tenant, by, source=source, note=note,
                            widens=tuple(widens), for_person=for_person)
            record(change)
            self.record([version], revision)
            with self._store.transaction():
                return self._apply(change)[0]

    def decide(self, agent: str, version: str, *, approve: bool, by: str, note: str,
               record: Recorder = _no_record) -> Change:
        """An admin's answer to a pending proposal; approving makes it live."""
        with self._lock:
            self._writable()
            row = self._status_row(agent, version)
            self._check(agent, version, "approve" if approve else "reject")
            assert row is not None  # only a pending version is approved or rejected
            if by in (row["proposed_by"], row.get("proposed_for") or ""):
                raise CatalogError("caller_not_permitted", f"{by!r} proposed this version (or is accountable for the "
                                   "run that did): another admin must review it")
            found = self.get(agent, version)
            assert found is not None
            live = self.live_version(agent) or ""
            change = Change("approve" if approve else "reject", agent, version, found.tenant, by, note=note,
                            source=row["source"], replaces=live if approve else "")
            record(change)
            with self._store.transaction():
                return self._apply(change)[0]

    def retire(self, agent: str, version: str, *, by: str, note: str, record: Recorder = _no_record) -> Change:
        """No new run may pin `version`; runs pinned to it halt at their next check."""
        with self._lock:
            self._writable()
            found = self.get(agent, version)
            if found is None:
                raise CatalogError("unknown_agent_version", f"agent {agent[:100]!r} has no version {version[:40]!r}")
            if self.live_version(agent) == version:  # a version from before states were kept has none
                raise CatalogError("version_live", f"version {version} is live: approve or roll back to another first")
            self._check(agent, version, "retire")
            change = Change("retire", agent, version, found.tenant, by, note=note)
            record(change)
            with self._store.transaction():
                return self._apply(change)[0]

    def _check(self, agent: str, version: str, act: str) -> None:
        """`act` is a move the table of states holds from the version's state, or a CatalogError
        with the stable code (and the words) this catalog has always given."""
        status = self.status(agent, version)
        try:
            states.next_state(AGENT, status, act)
        except states.Refused as refused:
            what = f"version {version[:40]} of {agent[:100]!r}"
            message = (f"{what} was retired: retirement is final" if act == "propose" and status == RETIRED else
                       f"{what} already waits for review" if act == "propose" and status == PENDING else
                       f"{what} is already the live version" if act == "propose" else
                       f"{what} is already retired" if act == "retire" and status == RETIRED else
                       f"version {version} is live: approve or roll back to another first" if act == "retire" else
                       f"version {version[:40]!r} of {agent[:100]!r} does not wait for review"
                       + (f" (it is {status})" if status else ""))
            raise CatalogError(refused.code, message) from None

    def _writable(self) -> None:
        if self._read_only:
            raise CatalogError("catalog_read_only", "this catalog was opened read-only")

    def close(self) -> None:
        self._store.close()
