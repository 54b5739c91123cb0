"""The runs a hook checks for, kept between its calls (each call is a process of its own).

One run per agent session, and one per sub-agent of it; and the calls of each run that wait for
a person, by the digest of the exact call, so the agent's retry of that call presents the
person's approval instead of asking again.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from warden.client import Run

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (key TEXT PRIMARY KEY, run TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS waiting (key TEXT NOT NULL, call TEXT NOT NULL, decision_id TEXT NOT NULL,
                                    PRIMARY KEY (key, call));
"""


class Sessions:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        with self._db() as db:
            db.executescript(_SCHEMA)
        path.chmod(0o600)  # run tokens: the holder may check calls in that run

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        try:
            yield db
        finally:
            db.close()

    def run(self, key: str) -> Run | None:
        with self._db() as db:
            row = db.execute("SELECT run FROM runs WHERE key = ?", (key,)).fetchone()
        return Run.from_dict(json.loads(row[0])) if row else None

    def save(self, key: str, run: Run) -> None:
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?)", (key, json.dumps(run.to_dict())))

    def forget(self, key: str) -> None:
        with self._db() as db:
            db.execute("DELETE FROM runs WHERE key = ?", (key,))
            db.execute("DELETE FROM waiting WHERE key = ?", (key,))

    def waiting(self, key: str, call: str) -> str | None:
        with self._db() as db:
            row = db.execute("SELECT decision_id FROM waiting WHERE key = ? AND call = ?", (key, call)).fetchone()
        return row[0] if row else None

    def wait_for(self, key: str, call: str, decision_id: str) -> None:
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO waiting VALUES (?, ?, ?)", (key, call, decision_id))

    def answered(self, key: str, call: str) -> None:
        with self._db() as db:
            db.execute("DELETE FROM waiting WHERE key = ? AND call = ?", (key, call))
