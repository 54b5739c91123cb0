"""Skills and templates in the catalog: content-addressed versions, and which one is live.

A **skill** is a named playbook its agent's model may load as data; a **template** is a task spec
with a TARGET placeholder that the tools marked `templates:` serve. Neither grants anything: a
skill is text, and a template's resolved spec goes through the same scope and off-limits checks as
any argument. So their review is about what the model reads and what a task runs, never about
authority (docs/skills.md).

Both live in the checkpoint's catalog database beside the agents, keyed by (kind, tenant, name),
under the agent catalog's lock, kept by its store (catalog_store.py). The life of a version is the
agents' (states.py: one table for both): live, superseded, pending, rejected, withdrawn, retired.
A version is immutable and its id is the hash of its content, so a run that pinned a skill
version reads exactly that text until it ends.

Where a tenant reviews changes (`review_changes: true`), every new version waits for a tenant
admin, whatever it changes (text cannot be told to narrow), except on the first install; elsewhere
a policy file's version goes live at once. A version proposed through the API (a person's save,
an agent's proposal) always waits. Removing a policy file takes its entry out of service.
Each act is written only after `record(change)` returned: recorded first, or not done.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoint.policy import model, states
from checkpoint.policy.catalog_store import INSERTED, CatalogStore, Not
from checkpoint.policy.states import LIVE, PENDING, RETIRED, SUPERSEDED
from warden import canonical

SKILL, TEMPLATE = "skill", "template"
KINDS = (SKILL, TEMPLATE)
DOCUMENT_KIND = {SKILL: "Skill", TEMPLATE: "Template"}
# the argument a `templates:` tool gets filled by the checkpoint; the model never gives it
FILLED = {"list": "templates", "resolve": "spec"}
# a resolved template's image and node are put into these arguments of the call, for `touches`
PLACED = ("image", "node")
MAX_LISTED = 100  # templates a `templates: list` call is given (the first, by name)
FILES = "policy-files"

Key = tuple[str, str, str]  # kind, tenant, name


class EntryError(Exception):
    """An act on a skill or template that cannot be done; `code` is a stable code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Entry:
    """One immutable version of a skill or a template."""

    kind: str
    tenant: str
    name: str
    version: str
    description: str
    content: Mapping[str, Any] = field(compare=False)  # skill: {"text"}; template: {"spec"}

    @property
    def key(self) -> Key:
        return (self.kind, self.tenant, self.name)

    @property
    def text(self) -> str:
        return str(self.content.get("text", ""))

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.content.get("spec") or {})

    def snapshot(self) -> dict[str, Any]:
        """What the version id is the hash of; also what the catalog stores."""
        return {"kind": self.kind, "tenant": self.tenant, "name": self.name, "description": self.description,
                **self.content}

    def definition(self) -> dict[str, Any]:
        """The policy document that loads as this version."""
        doc: dict[str, Any] = {"kind": DOCUMENT_KIND[self.kind], "name": self.name, "tenant": self.tenant,
                               "description": self.description}
        return {**doc, **self.content}

    @classmethod
    def from_snapshot(cls, version: str, snap: Mapping[str, Any]) -> Entry:
        content = {k: v for k, v in snap.items() if k not in ("kind", "tenant", "name", "description")}
        return cls(snap["kind"], snap["tenant"], snap["name"], version, snap.get("description", ""), content)

    @classmethod
    def of(cls, spec: model.Skill | model.Template) -> Entry:
        """The version a policy document defines (its id: the hash of its content)."""
        content: dict[str, Any]
        if isinstance(spec, model.Skill):
            kind, content = SKILL, {"text": spec.text}
        else:
            kind, content = TEMPLATE, {"spec": spec.spec.model_dump(mode="json", exclude_none=True)}
        snap = {"kind": kind, "tenant": spec.tenant, "name": spec.name, "description": spec.description, **content}
        return cls.from_snapshot(canonical.sha256_hex(snap)[:20], snap)


def resolve(template: Entry, target: str) -> dict[str, Any]:
    """A template's spec with TARGET replaced by `target`: what the task runs, and what the call's
    scope and off-limits checks read (the target is an argument like any: `touches` reads it)."""
    spec = template.spec
    out: dict[str, Any] = {"template": template.name, "version": template.version, "target": target,
                           "image": spec["image"],
                           "command": [part.replace(model.TARGET, target) for part in spec["command"]]}
    if spec.get("node"):
        out["node"] = spec["node"]
    return out


def listed(template: Entry) -> dict[str, Any]:
    """A template as `templates: list` serves it."""
    return {"name": template.name, "version": template.version, "description": template.description,
            "spec": template.spec}


@dataclass(frozen=True)
class EntryChange:
    """One act on a skill or template, as the decision log records it (action `catalog`)."""

    act: str  # propose, apply, approve, reject, retire, withdraw, remove
    kind: str
    tenant: str
    name: str
    version: str
    by: str
    source: str = ""
    note: str = ""
    replaces: str = ""
    agent: None = None  # not an agent's change: the record names no agent
    for_person: str = ""  # an agent's proposal: the person accountable for its run, who may not review it

    @property
    def label(self) -> str:
        return f"{self.kind} {self.tenant}/{self.name}"

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"act": self.act, "kind": self.kind, "name": self.name, "version": self.version,
                               "source": self.source, "note": self.note[:1000]}
        if self.replaces:
            out["replaces"] = self.replaces
        return out


Recorder = Callable[[EntryChange], None]


def _no_record(_change: EntryChange) -> None:
    return None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


_PK = ("kind", "tenant", "name", "version")
_LIVE_PK = ("kind", "tenant", "name")
# what `history` tells of each version's state
_HISTORY = ("status", "source", "proposed_by", "proposed_at", "note", "decided_by", "decided_at", "decision_note")


def _where(*values: str) -> dict[str, str]:
    """The filter of an entry (kind, tenant, name) or of one of its versions (and version)."""
    return dict(zip(_PK, values, strict=False))


class EntryCatalog:
    """The skills and templates of one catalog database. Shares the agent catalog's connection and
    lock (catalog.py), so an act on either is one writer at a time."""

    def __init__(self, store: CatalogStore, *, read_only: bool = False):
        self._store = store
        self._lock = store.lock
        self._read_only = read_only
        self._live: dict[Key, Entry | None] = {}  # a cache of live versions, cleared by every write
        if read_only:
            return
        store.create_table("entry_versions", (*_PK, "snapshot", "first_seen"), _PK)
        store.create_table("entry_lifecycle",
                             (*_PK, "status", "source", "proposed_by", "proposed_at", "note", "decided_by",
                              "decided_at", "decision_note"), _PK)
        store.add_column("entry_lifecycle", "proposed_for")  # older catalogs
        # per entry: its live version ("" when none) and the version its policy file last defined
        store.create_table("entry_live", ("kind", "tenant", "name", "version", "file_version"), _LIVE_PK)

    def _has(self, table: str) -> bool:
        return self._store.has_table(table)

    def _query(self, table: str, where: dict[str, Any], order: tuple[str, ...] = (),
               limit: int | None = None) -> list[dict[str, Any]]:
        if not self._has(table):  # a catalog from before skills and templates (read-only)
            return []
        return self._store.rows(table, where, order=order, limit=limit)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, kind: str, tenant: str, name: str, version: str) -> Entry | None:
        with self._lock:
            rows = self._query("entry_versions", _where(kind, tenant, name, version))
        return Entry.from_snapshot(version, json.loads(rows[0]["snapshot"])) if rows else None

    def _live_row(self, key: Key) -> dict[str, Any] | None:
        rows = self._query("entry_live", _where(*key))
        return rows[0] if rows else None

    def live(self, kind: str, tenant: str, name: str) -> Entry | None:
        """The version a new run pins (a skill) or a call is served (a template), or None."""
        key = (kind, tenant, name)
        with self._lock:
            if key in self._live:
                return self._live[key]
            row = self._live_row(key)
            found = self.get(kind, tenant, name, row["version"]) if row and row["version"] else None
            self._live[key] = found
            return found

    def forget_live(self) -> None:
        """Read the live versions again from the file: another process (a worker sharing this
        catalog) may have approved or retired one since this process cached it."""
        with self._lock:
            self._live.clear()

    def live_entries(self, kind: str, tenant: str) -> list[Entry]:
        """Every live entry of a kind in a tenant, by name."""
        with self._lock:
            rows = self._query("entry_live", {"kind": kind, "tenant": tenant, "version": Not("")}, ("name",))
            return [e for e in (self.live(kind, tenant, r["name"]) for r in rows) if e is not None]

    def status(self, kind: str, tenant: str, name: str, version: str) -> str | None:
        with self._lock:
            rows = self._query("entry_lifecycle", _where(kind, tenant, name, version))
        return rows[0]["status"] if rows else None

    def known(self, kind: str, tenant: str, name: str) -> bool:
        """Has the catalog ever held a version of this entry?"""
        with self._lock:
            return bool(self._query("entry_versions", _where(kind, tenant, name), limit=1))

    def history(self, kind: str, tenant: str, name: str) -> list[dict[str, Any]]:
        """Every version, oldest first, with its state and who moved it there."""
        with self._lock:
            versions = self._query("entry_versions", _where(kind, tenant, name), ("first_seen", INSERTED))
            states_of = {r["version"]: r for r in self._query("entry_lifecycle", _where(kind, tenant, name))}
            rows = [{"version": v["version"], "first_seen": v["first_seen"], "snapshot": v["snapshot"],
                     **{k: states_of.get(v["version"], {}).get(k) for k in _HISTORY}} for v in versions]
            live = self.live(kind, tenant, name)
        for r in rows:
            r["snapshot"] = json.loads(r["snapshot"])
            if live is not None and r["version"] == live.version:
                r["status"] = LIVE
            r["status"] = r["status"] or SUPERSEDED
        return rows

    def summaries(self, kind: str) -> list[dict[str, Any]]:
        """Each entry of a kind: tenant, name, live version (or ""), pending versions, description."""
        with self._lock:
            keys = [{"tenant": t, "name": n} for t, n in dict.fromkeys(
                (r["tenant"], r["name"]) for r in self._query("entry_versions", {"kind": kind}, ("tenant", "name")))]
            out = []
            for k in keys:
                pending = [r["version"] for r in self._query(
                    "entry_lifecycle", {**_where(kind, k["tenant"], k["name"]), "status": PENDING},
                    ("proposed_at", INSERTED))]
                live = self.live(kind, k["tenant"], k["name"])
                if live is None and not pending:
                    continue  # retired, rejected or removed: `history` still shows it
                out.append({"tenant": k["tenant"], "name": k["name"], "live_version": live.version if live else "",
                            "pending_versions": pending, "description": live.description if live else ""})
            return out

    # -- what the policy files say ---------------------------------------------------------------

    def settle(self, from_files: Mapping[Key, tuple[Entry, str]], tenants: Mapping[str, model.Tenant], *,
               first_install: bool, write: bool = True) -> list[EntryChange]:
        """Record what the files define (`key -> (version, file:line)`) and what that changes.

        A version the files newly define goes live at once, unless its tenant reviews changes (and
        this is not the first install): then it waits as a proposal, and the live version stays. An
        entry whose file was removed goes out of service. Compiling an old revision for a pinned run
        (`write=False`) and read-only catalogs change nothing: skills and templates are always read
        from the catalog, never from a revision's files."""
        self._live.clear()  # a load reads again what another process may have changed
        if not write or self._read_only:
            return []
        changes: list[EntryChange] = []
        with self._lock, self._store.transaction():
            self._keep([e for e, _ in from_files.values()])
            for key, (entry, source) in from_files.items():
                row = self._live_row(key)
                if row and row["file_version"] == entry.version:
                    continue  # the files say what they said at the last load
                live = row["version"] if row else ""
                status = self.status(*key, entry.version)
                if entry.version != live and states.allows(entry.kind, status, "file"):
                    tenant = tenants.get(entry.tenant)
                    reviewed = tenant is not None and tenant.review_changes and not first_install
                    args = (entry.kind, entry.tenant, entry.name, entry.version, FILES)
                    if reviewed:
                        changes += self._apply(EntryChange("propose", *args, source=source))
                    else:
                        why = "first install" if tenant is not None and tenant.review_changes else \
                            "the tenant does not review changes"
                        changes += self._apply(EntryChange("apply", *args, source=source, note=why, replaces=live))
                self._set_file_version(key, entry.version)
            for row in self._query("entry_live", {"file_version": Not("")}):
                key = (row["kind"], row["tenant"], row["name"])
                if key not in from_files:
                    changes += self._apply(EntryChange("remove", *key, row["version"], FILES,
                                                       note="its policy file was removed"))
        return changes

    def _set_file_version(self, key: Key, version: str) -> None:
        row = self._live_row(key)
        self._store.upsert("entry_live",
                       {"kind": key[0], "tenant": key[1], "name": key[2], "version": row["version"] if row else "",
                        "file_version": version}, _LIVE_PK)

    def _keep(self, entries: Iterable[Entry]) -> None:
        now = _now()
        self._store.insert_ignore("entry_versions", (
            {"kind": e.kind, "tenant": e.tenant, "name": e.name, "version": e.version, "first_seen": now,
             "snapshot": json.dumps(e.snapshot(), sort_keys=True)} for e in entries))

    def _apply(self, change: EntryChange) -> list[EntryChange]:
        """Write one change (inside the caller's transaction); the changes it caused, in order."""
        self._live.clear()
        done = [change]
        key = (change.kind, change.tenant, change.name)
        now = _now()
        pk = (*key, change.version)

        def lc_upsert(record: dict[str, Any]) -> None:
            self._store.upsert("entry_lifecycle", record, _PK)

        if change.act in ("propose", "apply", "remove") and change.by == FILES:
            # the files have one pending proposal per entry: their latest (none once removed)
            for old in self._query("entry_lifecycle", {**_where(*key), "status": PENDING, "proposed_by": FILES,
                                                       "version": Not(change.version if change.act != "remove" else "")}):
                self._store.update("entry_lifecycle", _PK, (*key, old["version"]),
                                   {"status": states.next_state(change.kind, PENDING, "withdraw"), "decided_at": now,
                                    "decision_note": f"replaced by {change.version}"})
                done.append(EntryChange("withdraw", *key, old["version"], FILES, note=f"replaced by {change.version}"))
        if change.act in ("propose", "apply"):
            proposed = states.next_state(change.kind, self.status(*pk), "file" if change.by == FILES else "propose")
            lc_upsert({"kind": key[0], "tenant": key[1], "name": key[2], "version": change.version, "status": proposed,
                       "source": change.source, "proposed_by": change.by, "proposed_for": change.for_person,
                       "proposed_at": now, "note": change.note,
                       "decided_by": "", "decided_at": "", "decision_note": ""})
        row = self._live_row(key)
        previous = row["version"] if row else ""
        file_version = row["file_version"] if row else ""
        if change.act in ("apply", "approve"):
            if previous and previous != change.version:
                lc_upsert({"kind": key[0], "tenant": key[1], "name": key[2], "version": previous,
                           "status": states.next_state(change.kind, self.status(*key, previous), "supersede")})
            self._store.update("entry_lifecycle", _PK, pk,
                               {"status": states.next_state(change.kind, self.status(*pk), "approve"),
                                "decided_by": change.by, "decided_at": now, "decision_note": change.note})
            self._set_live(key, change.version, file_version)
        elif change.act in ("reject", "retire"):
            lc_upsert({"kind": key[0], "tenant": key[1], "name": key[2], "version": change.version,
                       "status": states.next_state(change.kind, self.status(*pk), change.act), "decided_by": change.by,
                       "decided_at": now, "decision_note": change.note})
            if change.act == "retire" and previous == change.version:
                self._set_live(key, "", file_version)
        elif change.act == "remove":
            if previous:
                lc_upsert({"kind": key[0], "tenant": key[1], "name": key[2], "version": previous,
                           "status": states.next_state(change.kind, self.status(*key, previous), "remove"),
                           "decided_by": change.by, "decided_at": now,
                           "decision_note": change.note})
            self._set_live(key, "", "")
        return done

    def _set_live(self, key: Key, version: str, file_version: str) -> None:
        self._store.upsert("entry_live", {"kind": key[0], "tenant": key[1], "name": key[2], "version": version,
                                                "file_version": file_version}, _LIVE_PK)

    # -- acts through the API: check, record(change), then write -----------------------------------

    def propose(self, entry: Entry, *, by: str, source: str, note: str, for_person: str = "",
                record: Recorder = _no_record) -> EntryChange:
        """A person's save or an agent's proposal: it waits for a tenant admin, whatever it says."""
        with self._lock:
            self._writable()
            live = self.live(*entry.key)
            if live is not None and live.version == entry.version:
                raise EntryError("no_change", f"version {entry.version} is already the live version of "
                                 f"{entry.kind} {entry.name!r}")
            self._check(entry.kind, entry.tenant, entry.name, entry.version, "propose")
            change = EntryChange("propose", entry.kind, entry.tenant, entry.name, entry.version, by, source=source,
                                 note=note, replaces=live.version if live else "", for_person=for_person)
            record(change)
            with self._store.transaction():
                self._keep([entry])
                return self._apply(change)[0]

    def decide(self, kind: str, tenant: str, name: str, version: str, *, approve: bool, by: str, note: str,
               record: Recorder = _no_record) -> EntryChange:
        """A tenant admin's answer to a pending version; approving makes it live. Never one's own."""
        with self._lock:
            self._writable()
            rows = self._query("entry_lifecycle", _where(kind, tenant, name, version))
            self._check(kind, tenant, name, version, "approve" if approve else "reject")
            if by in (rows[0]["proposed_by"], rows[0].get("proposed_for") or ""):
                raise EntryError("caller_not_permitted", f"{by!r} proposed this version (or is accountable for the "
                                 "run that did): another admin must review it")
            live = self.live(kind, tenant, name)
            change = EntryChange("approve" if approve else "reject", kind, tenant, name, version, by, note=note,
                                 source=rows[0]["source"], replaces=live.version if live and approve else "")
            record(change)
            with self._store.transaction():
                return self._apply(change)[0]

    def retire(self, kind: str, tenant: str, name: str, version: str, *, by: str, note: str,
               record: Recorder = _no_record) -> EntryChange:
        """Out of service for good: no run loads it, no call is served it (the live one included)."""
        with self._lock:
            self._writable()
            if self.get(kind, tenant, name, version) is None:
                raise EntryError(f"unknown_{kind}", f"{kind} {name[:100]!r} of tenant {tenant[:100]!r} has no "
                                 f"version {version[:40]!r}")
            self._check(kind, tenant, name, version, "retire")
            change = EntryChange("retire", kind, tenant, name, version, by, note=note)
            record(change)
            with self._store.transaction():
                return self._apply(change)[0]

    def _check(self, kind: str, tenant: str, name: str, version: str, act: str) -> None:
        """`act` is a move the table of states holds from the version's state, or an EntryError
        with the stable code (and the words) this catalog has always given."""
        status = self.status(kind, tenant, name, version)
        try:
            states.next_state(kind, status, act)
        except states.Refused as refused:
            what = f"version {version} of {kind} {name!r}"
            message = (f"{what} was retired: retirement is final" if act == "propose" and status == RETIRED else
                       f"{what} already waits for review" if act == "propose" and status == PENDING else
                       f"{what} is already live" if act == "propose" else
                       f"{what} is already retired" if act == "retire" else
                       f"version {version[:40]!r} of {kind} {name[:100]!r} does not wait for review"
                       + (f" (it is {status})" if status else ""))
            raise EntryError(refused.code, message) from None

    def _writable(self) -> None:
        if self._read_only:
            raise EntryError("catalog_read_only", "this catalog was opened read-only")
