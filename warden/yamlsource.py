"""Read policy YAML strictly and remember where every value came from.

PyYAML's safe loader silently keeps the last of two duplicate keys; an operator who writes
`allowlist:` twice must hear about it. So documents are composed to nodes and built here,
with duplicate keys refused and the line of every key path recorded for error messages.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

Path_ = tuple[str | int, ...]

# libyaml's parser when PyYAML was built with it: the same nodes and marks, several times faster
# than the pure-Python one (policy loading is most of a `warden check`)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_DEPTH = 64
# Values a text may hold once its aliases are expanded: about one per character (without aliases
# every value takes at least two), so this refuses only aliases that expand a few lines into
# millions of values, which would hold the loader (a hot reload, or a proposal sent to the
# checkpoint) for minutes and fill memory, and it costs no more than reading that much text.
SPARE_VALUES = 1024
# Tags a policy value may carry: YAML's core schema. Any other (`!!python/object`, `!!set`,
# `!custom`) says the author meant something a policy file cannot hold; refuse it, never guess.
_CORE_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in
                       ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "binary"))


class YamlIssue(Exception):
    """A problem at a 1-based line and, where the parser knows it, column (0: the line alone)."""

    def __init__(self, line: int, message: str, column: int = 0):
        super().__init__(message)
        self.line = line
        self.column = column
        self.message = message

    def where(self, shown: str) -> str:
        """`file:line:column` as editors and compilers write it (`file:line` without a column)."""
        return f"{shown}:{self.line}:{self.column}" if self.column else f"{shown}:{self.line}"


def _at(mark: Any, message: str) -> YamlIssue:
    return YamlIssue(mark.line + 1, message, mark.column + 1)


@dataclass
class SourceDocument:
    """One YAML document: its data and the 1-based line of every key path in it."""

    data: Any
    line: int
    lines: dict[Path_, int] = field(default_factory=dict)
    # literal block scalars (`|`): the line their text starts on, so that line n of the text
    # (a multi-line CEL condition) is line `start + n - 1` of the file
    blocks: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_) -> int:
        """The line of the deepest recorded prefix of `path` (a pydantic `loc`, say)."""
        for end in range(len(path), 0, -1):
            found = self.lines.get(tuple(path[:end]))
            if found is not None:
                return found
        return self.line


class _Builder:
    def __init__(self, max_values: int) -> None:
        self._scalars = SafeConstructor()
        self._values = 0  # built so far, aliases expanded, across the text's documents
        self._max_values = max_values

    def _scalar(self, node: Node) -> Any:
        if node.tag not in _CORE_TAGS:
            raise _at(node.start_mark, f"YAML tag {node.tag!r} is not allowed in a policy file")
        try:
            return self._scalars.construct_object(node)
        except Exception:  # noqa: BLE001 - `!!int abc`, `!!bool maybe`: the constructors raise anything
            raise _at(node.start_mark, f"cannot read {node.value!r} as YAML tag {node.tag!r}"[:300]) from None

    def build(self, node: Node) -> SourceDocument:
        doc = SourceDocument(data=None, line=node.start_mark.line + 1)
        doc.data = self._value(node, (), doc, 0)
        return doc

    def _value(self, node: Node, path: Path_, doc: SourceDocument, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise _at(node.start_mark, f"nesting deeper than {MAX_DEPTH} levels")
        self._values += 1
        if self._values > self._max_values:
            raise _at(node.start_mark, f"more than {self._max_values} values once its aliases are expanded")
        doc.lines.setdefault(path, node.start_mark.line + 1)
        if not isinstance(node, ScalarNode) and node.tag not in _CORE_TAGS:
            raise _at(node.start_mark, f"YAML tag {node.tag!r} is not allowed in a policy file")
        if isinstance(node, MappingNode):
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise _at(key_node.start_mark, "merge keys (<<) are not allowed")
                key = self._scalar(key_node) if isinstance(key_node, ScalarNode) else None
                if not isinstance(key, str):
                    raise _at(key_node.start_mark, "keys must be strings")
                if key in result:
                    first = doc.lines[(*path, key)]
                    raise _at(key_node.start_mark, f"duplicate key {key!r} (first at line {first})")
                doc.lines[(*path, key)] = key_node.start_mark.line + 1
                result[key] = self._value(value_node, (*path, key), doc, depth + 1)
            return result
        if isinstance(node, SequenceNode):
            return [self._value(item, (*path, i), doc, depth + 1) for i, item in enumerate(node.value)]
        if getattr(node, "style", None) == "|":
            doc.blocks[path] = node.start_mark.line + 2
        value = self._scalar(node)
        if not isinstance(value, (str, int, float, bool)) and value is not None:
            # dates and binary scalars have no meaning in policy files; refuse rather than guess
            quote = " (quote it to write it as text)" if isinstance(value, (datetime.date, bytes)) else ""
            raise _at(node.start_mark, f"unsupported YAML value of type {type(value).__name__}{quote}")
        return value


def load_documents(text: str) -> list[SourceDocument]:
    """Every document in a YAML stream; raises YamlIssue with the line of the first problem."""
    try:
        nodes = [n for n in yaml.compose_all(text, Loader=_LOADER) if n is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise (_at(mark, f"YAML syntax: {exc.problem or exc}") if mark else YamlIssue(1, f"YAML syntax: {exc}")) from None
    except yaml.YAMLError as exc:
        raise YamlIssue(1, f"YAML: {exc}") from None
    builder = _Builder(len(text) + SPARE_VALUES)
    return [builder.build(n) for n in nodes]
