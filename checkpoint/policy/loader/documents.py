"""A policy file's documents, each validated by the schema of its kind and kept with the lines
its values came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from checkpoint.policy import model
from checkpoint.policy.errors import PolicyError
from warden.policydocs import read_documents, validation_problems
from warden.yamlsource import SourceDocument, YamlIssue


@dataclass
class Doc:
    file: str
    source: SourceDocument
    spec: Any  # a model.* instance

    def at(self, *path: str | int) -> int:
        return self.source.line_of(path)

    def line_in(self, path: tuple[str | int, ...], line: int) -> int:
        """The file line of line `line` of the text at `path` (a literal block spans lines)."""
        start = self.source.blocks.get(path)
        return self.at(*path) if start is None else start + line - 1


def parse_file(raw: bytes, shown: str, errors: list[PolicyError],
               broken: set[tuple[str, str]] | None = None) -> list[Doc]:
    """The file's documents that validate; the problems of the rest in `errors`, and the (kind,
    name) of each of those in `broken`, so that a name defined there is not also reported as
    unknown wherever it is used."""
    try:
        sources = read_documents(raw)
    except YamlIssue as issue:
        errors.append(PolicyError(shown, issue.line, issue.message, issue.column))
        return []
    if not sources:
        errors.append(PolicyError(shown, 1, "file holds no document"))
    out: list[Doc] = []
    for source in sources:
        data = source.data
        if not isinstance(data, dict):
            errors.append(PolicyError(shown, source.line, "a policy document must be a mapping with a 'kind'"))
            continue
        kind = data.get("kind")
        cls = model.KINDS.get(kind) if isinstance(kind, str) else None
        if cls is None:
            errors.append(
                PolicyError(
                    shown,
                    source.line_of(("kind",)),
                    f"unknown kind {kind!r}; expected one of: {', '.join(model.KINDS)}",
                )
            )
            continue
        try:
            out.append(Doc(shown, source, cls.model_validate(data)))
        except ValidationError as exc:
            if broken is not None and isinstance(data.get("name"), str):
                broken.add((str(kind), data["name"]))
            errors.extend(PolicyError(shown, issue.line, issue.message)
                          for issue in validation_problems(exc, source, str(kind)))
    return out
