"""What each upstream said its tools were, pinned when the policy first admitted them.

An upstream may change a tool after it was admitted (a new description that carries
instructions, a wider schema, the name of an allowed tool on another tool): the gateway then
refuses that tool until a person accepts the new definition (`warden mcp pins accept NAME`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from warden.canonical import sha256_hex


def digest(definition: dict[str, Any]) -> str:
    try:
        return sha256_hex(definition)
    except (TypeError, ValueError):  # a schema with no canonical form still has one digest
        return hashlib.sha256(json.dumps(definition, sort_keys=True, default=repr).encode()).hexdigest()


class Pins:
    """A JSON file of name -> {sha256, definition, pinned_at}, written whole on each change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pins: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}

    def check(self, name: str, definition: dict[str, Any]) -> bool:
        """True when `definition` is the pinned one; a tool seen for the first time is pinned now."""
        found = self._pins.get(name)
        if found is None:
            self._pins[name] = {"sha256": digest(definition), "definition": definition, "pinned_at": time.time()}
            self._save()
            return True
        return bool(found["sha256"] == digest(definition))

    def accept(self, name: str, definition: dict[str, Any]) -> None:
        self._pins[name] = {"sha256": digest(definition), "definition": definition, "pinned_at": time.time()}
        self._save()

    def pinned(self) -> dict[str, dict[str, Any]]:
        return dict(self._pins)

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(self._pins, indent=1, sort_keys=True) + "\n")
        os.replace(temporary, self.path)  # whole or not at all: a torn pin file would pin nothing
