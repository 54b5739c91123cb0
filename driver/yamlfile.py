"""Reading a person's YAML file (goal, model script) strictly, remembering the line of every key.

The policy loader's reader (`warden.yamlsource`) is reused: duplicate keys and merge
keys are errors, and each error can be reported as `file:line: message`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from warden.yamlsource import SourceDocument, YamlIssue, load_documents


def read_document(text: str, source: str) -> tuple[SourceDocument | None, list[str]]:
    """The one document in `text`, or None and the problems, each `source:line: message`."""
    try:
        docs = load_documents(text)
    except YamlIssue as issue:
        return None, [f"{issue.where(source)}: {issue.message}"]
    if len(docs) != 1:
        return None, [f"{source}:1: expected one YAML document, found {len(docs)}"]
    return docs[0], []


def pydantic_problems(source: str, doc: SourceDocument | None, errors: Iterable[dict[str, Any]],
                      prefix: Sequence[str | int] = ()) -> list[str]:
    """`source:line: loc: msg` for each pydantic error (the line of its deepest known key)."""
    out = []
    for e in errors:
        loc = (*prefix, *e["loc"])
        line = doc.line_of(tuple(loc)) if doc is not None else 0
        where = f"{source}:{line}" if line else source
        out.append(f"{where}: {'.'.join(str(p) for p in loc) or '(top)'}: {e['msg']}")
    return sorted(out, key=_line_key)


def _line_key(problem: str) -> tuple[int, str]:
    parts = problem.split(":", 2)
    return (int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0, problem)
