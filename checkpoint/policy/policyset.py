"""A loaded, compiled policy set: everything a decision reads, built once per load.

Nothing here is parsed or compiled per request: tool schemas are compiled validators, CEL is
compiled programs, glob patterns are compiled regular expressions, and rules are indexed by
action and tool so a call evaluates only the rules that can apply to it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from checkpoint.cel import CelProgram
from checkpoint.policy import model
from checkpoint.policy.principals import Principals

if TYPE_CHECKING:
    from checkpoint.policy.catalog import AgentCatalog

SCOPE_DIMENSIONS = ("images", "nodes", "connections", "subjects")


def glob_to_regex(pattern: str) -> str:
    """A scope glob as a regular expression.

    `*` matches within one path segment: any run of characters except `/` and whitespace, so
    `10.20.0.*` does not admit `10.20.0.0/8` and `*.lab.example.com` does not admit
    `evil.org .lab.example.com`. `**` also crosses `/` (for connection URLs and image paths).
    `?` matches one such character. Everything else is literal (no character classes).
    A pattern that is only `*` means "anything": the unfenced scope an operator wrote out.
    """
    if pattern == "*":
        pattern = "**"
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(r"\S*")
            i += 2
        elif pattern[i] == "*":
            out.append(r"[^/\s]*")
            i += 1
        elif pattern[i] == "?":
            out.append(r"[^/\s]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


class PatternSet:
    """Glob patterns (`*.lab.example.com`, `10.20.0.*`) compiled into one regular expression."""

    __slots__ = ("patterns", "_regex")

    def __init__(self, patterns: Iterable[str], *, ignore_case: bool = False, subdomains: bool = False):
        """`subdomains=True` also matches any `label.` prefix (`x.` + a match), for deny lists."""
        self.patterns = tuple(patterns)
        flags = re.IGNORECASE if ignore_case else 0
        prefix = r"(?:[^/\s]*\.)?" if subdomains else ""
        self._regex = (
            re.compile(prefix + "(?:" + "|".join(f"(?:{glob_to_regex(p)})" for p in self.patterns) + ")", flags)
            if self.patterns
            else None
        )

    def matches(self, value: str) -> bool:
        return self._regex is not None and self._regex.fullmatch(value) is not None

    def __bool__(self) -> bool:
        return bool(self.patterns)


@dataclass(frozen=True)
class AgentVersion:
    """An immutable, content-addressed snapshot of an agent, its allowlist resolved to tools."""

    name: str
    version: str
    tenant: str
    persona: str
    description: str
    wildcard: bool
    tools: frozenset[str]
    scope: model.Scope
    budget: model.Budget
    delegates: frozenset[str]
    access: frozenset[str] = field(init=False)
    patterns: dict[str, PatternSet] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "access", frozenset(a.value for a in self.scope.access))
        object.__setattr__(
            self, "patterns", {dim: PatternSet(getattr(self.scope, dim)) for dim in SCOPE_DIMENSIONS}
        )

    def snapshot(self) -> dict[str, Any]:
        """The content the version id is the hash of; also what the catalog stores."""
        return {
            "name": self.name,
            "tenant": self.tenant,
            "persona": self.persona,
            "description": self.description,
            "wildcard": self.wildcard,
            "tools": sorted(self.tools),
            "scope": self.scope.model_dump(mode="json"),
            "budget": self.budget.model_dump(mode="json", exclude_none=True),
            "delegates": sorted(self.delegates),
        }

    @classmethod
    def from_snapshot(cls, version: str, snap: dict[str, Any]) -> AgentVersion:
        return cls(
            name=snap["name"],
            version=version,
            tenant=snap["tenant"],
            persona=snap["persona"],
            description=snap.get("description", ""),
            wildcard=snap["wildcard"],
            tools=frozenset(snap["tools"]),
            scope=model.Scope.model_validate(snap["scope"]),
            budget=model.Budget.model_validate(snap["budget"]),
            delegates=frozenset(snap["delegates"]),
        )


@dataclass(frozen=True)
class CompiledTool:
    spec: model.Tool
    validator: Any  # jsonschema validator: the readable error message when a call is refused
    fast_validate: Any  # fastjsonschema compiled function: the hot path, ~25x faster
    touches: dict[str, CelProgram]  # dimension -> program returning list[str]
    touches_need_cel: bool  # False when every touches expression is a plain argument lookup

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class CompiledRule:
    spec: model.Rule
    program: CelProgram
    code: str
    where: str  # file:line, for errors that name the rule
    reads: frozenset[str]  # the top-level variables its condition names (the rest need not be built)

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, slots=True)
class RuleGroup:
    """The rules that can apply to one tool or action, and every variable any of them reads."""

    rules: tuple[CompiledRule, ...]
    reads: frozenset[str]

    @classmethod
    def of(cls, rules: Iterable[CompiledRule]) -> RuleGroup:
        found = tuple(rules)
        return cls(found, frozenset().union(*(r.reads for r in found)))


@dataclass
class PolicySet:
    revision: str
    directory: str
    tools: dict[str, CompiledTool]
    agents: dict[str, AgentVersion]  # current version of each agent, by name
    rules: list[CompiledRule]
    off_limits: list[tuple[PatternSet, str]]  # (pattern, reason)
    tenants: dict[str, model.Tenant]
    instance: model.Instance
    catalog: AgentCatalog
    cel_engine: str
    # convert a CEL activation once per request for every program of that declaration set
    prepare_rule_activation: Callable[[dict[str, Any]], Any]
    prepare_touches_activation: Callable[[dict[str, Any]], Any]
    # who may call the checkpoint, and for what (policy files' Principal documents)
    principals: Principals = field(default_factory=Principals)
    # indexes built in __post_init__
    rules_by_tool: dict[str, RuleGroup] = field(init=False)  # every tool of `tools` has an entry
    rules_by_action: dict[str, RuleGroup] = field(init=False)  # model_call, delegation, plan
    off_limits_any: PatternSet = field(init=False)
    # derived values keyed by what they depend on (e.g. effective ceilings per chain); a new
    # policy set starts empty, so nothing outlives the policies it came from
    memo: dict[Any, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        tool_rules = [r for r in self.rules if "tool_call" in r.spec.actions]
        self.rules_by_tool = {
            name: RuleGroup.of(r for r in tool_rules if not r.spec.tools or name in r.spec.tools)
            for name in self.tools
        }
        self.rules_by_action = {
            action: RuleGroup.of(r for r in self.rules if action in r.spec.actions)
            for action in ("model_call", "delegation", "plan")
        }
        self.off_limits_any = PatternSet(
            (p for ps, _ in self.off_limits for p in ps.patterns), ignore_case=True, subdomains=True
        )

    def agent_version(self, name: str, version: str) -> AgentVersion | None:
        current = self.agents.get(name)
        if current is not None and current.version == version:
            return current
        return self.catalog.get(name, version)

    def off_limits_reason(self, subject: str) -> str | None:
        """The reason `subject` is off-limits, or None.

        A deny list must not be dodged by spelling: matching ignores case, a trailing dot
        (`www.irs.gov.`, a fully qualified DNS name) is the same host, and an off-limits host
        covers its subdomains (`x.payments.lab.example.com` is inside `payments.lab.example.com`).
        Scope matching stays exact, which fails closed.
        """
        subject = subject.rstrip(".")
        if not self.off_limits_any.matches(subject):
            return None
        for patterns, reason in self.off_limits:
            if patterns.matches(subject):
                return reason
        return "off-limits"  # unreachable while the two agree; refusing is the safe answer
