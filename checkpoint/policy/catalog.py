"""The catalog of agent versions: every version ever loaded, kept durably.

A run pins its agent's version when it starts; the version must still decide that run after
the policy files change, and after the checkpoint restarts. Versions are content-addressed,
so recording the same definition twice is a no-op.
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
