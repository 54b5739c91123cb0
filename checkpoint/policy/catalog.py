"""The catalog: every agent version and every policy revision ever loaded, kept durably.

A run pins its agent's version, and the policy revision in force, when it starts; both must
still decide that run after the policy files change, and after the checkpoint restarts (a later
edit may narrow what a running run may do, never widen it). Versions and revisions are
content-addressed, so recording the same definition twice is a no-op.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from urllib.parse import quote

import sqlite_utils

from checkpoint.policy.policyset import AgentVersion
from warden.private import private_sqlite


class AgentCatalog:
    def __init__(self, path: str | Path | None = None, *, read_only: bool = False):
        """`path=None` keeps versions in memory only (one-shot CLI checks, tests).

        `read_only` opens an existing catalog to resolve old versions without ever writing it
        (a CLI check next to a running checkpoint); the versions it loads stay in memory.
        """
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], AgentVersion] = {}
        # in memory only without a database (path=None or read-only); else the ids already stored
        self._revisions: dict[str, list[tuple[str, bytes]]] = {}
        self._stored_revisions: set[str] = set()
        self._db: sqlite_utils.Database | None = None
        self._read_only = read_only
        if path is not None and read_only:
            if not Path(path).exists():
                raise FileNotFoundError(f"no agent catalog at {path}")
            uri = f"file:{quote(str(Path(path).resolve()))}?mode=ro"
            self._db = sqlite_utils.Database(sqlite3.connect(uri, uri=True, check_same_thread=False))
            if "agent_versions" not in self._db.table_names():  # raises sqlite3.Error on a non-database
                raise ValueError(f"{path} is not an agent catalog (no agent_versions table)")
        elif path is not None:
            private_sqlite(path)
            # the server reads the catalog from gRPC worker threads and the reload watcher; the
            # lock below serialises every use of the one connection
            self._db = sqlite_utils.Database(sqlite3.connect(str(path), check_same_thread=False))
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.table("agent_versions").create(
                {"agent": str, "version": str, "snapshot": str, "first_seen": str, "policy_revision": str},
                pk=("agent", "version"),
                if_not_exists=True,
            )
            self._db.table("policy_revisions").create(
                {"revision": str, "files": str, "first_seen": str}, pk="revision", if_not_exists=True
            )

    def record(self, versions: list[AgentVersion], policy_revision: str) -> None:
        with self._lock:
            fresh = [v for v in versions if (v.name, v.version) not in self._cache]
            if self._db is not None and fresh and not self._read_only:
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                with self._db.conn:
                    self._db.table("agent_versions").insert_all(
                        (
                            {
                                "agent": v.name,
                                "version": v.version,
                                "snapshot": json.dumps(v.snapshot(), sort_keys=True),
                                "first_seen": now,
                                "policy_revision": policy_revision,
                            }
                            for v in fresh
                        ),
                        ignore=True,
                    )
            for v in fresh:
                self._cache[(v.name, v.version)] = v

    def record_revision(self, revision: str, contents: list[tuple[str, bytes]]) -> None:
        """Keep a loaded folder's files (path, bytes), in folder order, under its revision."""
        with self._lock:
            if revision in self._revisions or revision in self._stored_revisions:
                return
            if self._db is None or self._read_only:
                self._revisions[revision] = contents
                return
            self._stored_revisions.add(revision)
            files = json.dumps([[name, data.decode("utf-8")] for name, data in contents])
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            with self._db.conn:
                self._db.table("policy_revisions").insert(
                    {"revision": revision, "files": files, "first_seen": now}, ignore=True
                )

    def revision_files(self, revision: str) -> list[tuple[str, bytes]] | None:
        """The files of a revision this catalog recorded, or None."""
        with self._lock:
            found = self._revisions.get(revision)
            if found is not None or self._db is None:
                return found
            if "policy_revisions" not in self._db.table_names():  # a catalog from before revisions were kept
                return None
            rows = list(self._db.query("select files from policy_revisions where revision = ?", [revision]))
            if not rows:
                return None
            return [(name, text.encode("utf-8")) for name, text in json.loads(rows[0]["files"])]

    def get(self, agent: str, version: str) -> AgentVersion | None:
        found = self._cache.get((agent, version))
        if found is not None or self._db is None:
            return found
        with self._lock:
            rows = list(
                self._db.query(
                    "select snapshot from agent_versions where agent = ? and version = ?", [agent, version]
                )
            )
            if not rows:
                return None
            found = AgentVersion.from_snapshot(version, json.loads(rows[0]["snapshot"]))
            self._cache[(agent, version)] = found
            return found

    def versions(self, agent: str) -> list[str]:
        if self._db is None:
            return sorted(v for (a, v) in self._cache if a == agent)
        with self._lock:
            return [r["version"] for r in self._db.query(
                "select version from agent_versions where agent = ? order by first_seen, version", [agent])]
