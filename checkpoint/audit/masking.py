"""Masking of tool-call arguments before they reach the decision log.

Policy names fields by dotted path (``card.number``). A dropped field disappears; a hashed field
becomes ``"sha256:<hex>"``, so an auditor can still tell whether two calls used the same value
without the log holding it. A path that crosses a list applies to every element of the list
(``items.card.number`` masks each item's card). A path that is absent is not an error: the same
rule covers calls that leave optional fields out.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any

from checkpoint.audit.record import canonical_json

_DROP = "drop"
_HASH = "hash"


def mask_arguments(
    args: Mapping[str, Any],
    *,
    drop: Iterable[str] = (),
    hash: Iterable[str] = (),  # noqa: A002 - the policy key is called `hash`
    key: bytes | None = None,
) -> dict[str, Any]:
    """Return a masked copy of ``args``; ``args`` itself is never modified.

    When a path and one of its prefixes are both named, the prefix wins (it covers the whole
    subtree); when one path is both dropped and hashed, dropping wins. With ``key`` the digest
    is HMAC-SHA256 (``"hmac-sha256:<hex>"``): low-entropy values such as card numbers can be
    brute-forced from a plain sha256, a keyed digest cannot without the key.
    """
    tree: dict[str, Any] = {}
    for path in hash:
        _add(tree, path, _HASH)
    for path in drop:
        _add(tree, path, _DROP)
    if not tree:
        return dict(args)
    return _apply(args, tree, key)


def digest(value: Any, key: bytes | None = None) -> str:
    # Strings are hashed as their UTF-8 bytes so `sha256("4111...")` matches any other tool;
    # other values as their canonical JSON, so equal values always hash alike.
    data = (value if isinstance(value, str) else canonical_json(value)).encode("utf-8")
    if key is None:
        return "sha256:" + hashlib.sha256(data).hexdigest()
    return "hmac-sha256:" + hmac.new(key, data, hashlib.sha256).hexdigest()


def _add(tree: dict[str, Any], path: str, op: str) -> None:
    parts = path.split(".")
    if not path or any(not part for part in parts):
        raise ValueError(f"bad masking path {path!r}: expected dotted field names like 'card.number'")
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if isinstance(child, str):  # a prefix is already masked whole
            return
        node = node.setdefault(part, {})
    last = parts[-1]
    if op == _DROP or not isinstance(node.get(last), str):
        node[last] = op


def _apply(value: Any, node: dict[str, Any], key: bytes | None) -> Any:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for name, item in value.items():
            rule = node.get(name)
            if rule is None:
                out[name] = item
            elif rule == _DROP:
                continue
            elif rule == _HASH:
                out[name] = digest(item, key)
            else:
                out[name] = _apply(item, rule, key)
        return out
    if isinstance(value, list | tuple):
        return [_apply(item, node, key) for item in value]
    return value
