"""Filling a tool's argv template from its validated arguments.

Each element of ``run.command`` is one argv element, and stays one: a value with spaces, quotes
or ``$(...)`` is passed as bytes to the program, never through a shell. Placeholders are
``{name}`` for a top-level argument; ``{{`` and ``}}`` are literal braces. An element that is
exactly ``{name}`` whose value is a list expands to one argv element per item (how `run_shell`
takes a program and its arguments), and such an element whose argument is absent (an optional
argument not given) is left out. `str.format` is deliberately not used: it would let an
argument name reach attributes and indexes (``{x.__class__}``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from toolrunner.errors import InvalidArguments

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")


def render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        return repr(value) if isinstance(value, float) else str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fill(template: list[str], arguments: Mapping[str, Any]) -> list[str]:
    argv: list[str] = []
    for element in template:
        whole = re.fullmatch(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", element)
        if whole and whole.group(1) not in arguments:
            continue
        if whole and isinstance(arguments[whole.group(1)], list):
            argv.extend(render(item) for item in arguments[whole.group(1)])
            continue
        argv.append(_PLACEHOLDER.sub(_replacer(arguments, element), element))
    for element in argv:
        if "\x00" in element:
            raise InvalidArguments("an argument contains a NUL byte, which argv cannot carry")
    return argv


def _replacer(arguments: Mapping[str, Any], element: str) -> Callable[[re.Match[str]], str]:
    return lambda match: _replace(match, arguments, element)


def _replace(match: re.Match[str], arguments: Mapping[str, Any], element: str) -> str:
    token = match.group(0)
    if token == "{{":
        return "{"
    if token == "}}":
        return "}"
    name = match.group(1)
    if name is None:
        raise InvalidArguments(f"argv template element {element!r} has an unmatched brace")
    if name not in arguments:
        raise InvalidArguments(f"argument {name!r} is required by the tool's command but missing")
    return render(arguments[name])
