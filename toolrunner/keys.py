"""The runner's keyring: every grant key it accepts, by key id.

During a rotation (docs/grants.md) the runner holds the old and the new key, so grants signed by
either verify while the checkpoint switches; the old key file is dropped once the longest grant
TTL has passed.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from warden.grants import SigningKey


class KeyringError(ValueError):
    code = "keyring_invalid"


def load_keyring(paths: Iterable[str | Path]) -> dict[str, SigningKey]:
    keyring: dict[str, SigningKey] = {}
    origin: dict[str, Path] = {}
    for raw in paths:
        path = Path(raw)
        try:
            key = SigningKey.load(path)
        except (OSError, ValueError, KeyError) as exc:
            raise KeyringError(f"cannot load the grant key {path}: {exc}") from None
        if key.key_id in keyring:
            if keyring[key.key_id].secret != key.secret:
                raise KeyringError(f"{path} and {origin[key.key_id]} both claim key id {key.key_id!r}")
            continue
        keyring[key.key_id] = key
        origin[key.key_id] = path
    if not keyring:
        raise KeyringError("no grant key given")
    return keyring
