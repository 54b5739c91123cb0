"""A loaded, compiled policy set: everything a decision reads, built once per load.

Nothing here is parsed or compiled per request: tool schemas are compiled validators, CEL is
compiled programs, scope and off-limits entries are compiled typed patterns (subjects/), and
rules are indexed by action and tool so a call evaluates only the rules that can apply to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from checkpoint.cel import CelProgram
from checkpoint.policy import model
from checkpoint.policy.input_schemas import Explainer
from checkpoint.policy.learning_index import EMPTY as NO_LEARNINGS
from checkpoint.policy.learning_index import LearningIndex
from checkpoint.policy.limits import NO_LIMITS, LimitSet
from checkpoint.policy.principals import Principals
from checkpoint.policy.subjects import OffLimits, Subject, SubjectSet, plain_name, read_value
from warden import codes

if TYPE_CHECKING:
    from checkpoint.policy.catalog import AgentCatalog

SCOPE_DIMENSIONS = ("images", "nodes", "connections", "threads", "subjects")
# Dimensions whose entries and values are typed (host, ip, url, name); images and nodes are names.
TYPED_DIMENSIONS = frozenset({"connections", "subjects"})


def read_touched(dim: str, text: str) -> Subject:
    """A touched value of dimension `dim`, read once per call; SubjectError when it is malformed."""
    return read_value(text) if dim in TYPED_DIMENSIONS else plain_name(text)


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
    # skills its model may load (docs/skills.md); in the snapshot only when there are any, so the
    # ids of versions that list none stay what they were before skills existed
    skills: frozenset[str] = frozenset()
    # what its tools and rules were when the version was made (tool name -> definition, rule name
    # -> definition): an edit of a tool or rule it resolves is a new version, reviewed like any
    # other. None: a version recorded before versions covered them (its snapshot has neither).
    tool_defs: dict[str, Any] | None = field(default=None, compare=False)
    rule_defs: dict[str, Any] | None = field(default=None, compare=False)
    access: frozenset[str] = field(init=False)
    patterns: dict[str, SubjectSet] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "access", frozenset(a.value for a in self.scope.access))
        # lenient: the loader refuses a bad entry with file:line; a version from the catalog may
        # predate a stricter reading, and then the entry matches nothing
        object.__setattr__(self, "patterns", {
            dim: SubjectSet.lenient(getattr(self.scope, dim), typed=dim in TYPED_DIMENSIONS)
            for dim in SCOPE_DIMENSIONS
        })

    def snapshot(self) -> dict[str, Any]:
        """The content the version id is the hash of; also what the catalog stores."""
        snap = {
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
        if self.skills:
            snap["skills"] = sorted(self.skills)
        if self.tool_defs is not None:
            snap["tool_defs"] = self.tool_defs
        if self.rule_defs is not None:
            snap["rule_defs"] = self.rule_defs
        return snap

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
            skills=frozenset(snap.get("skills", ())),
            tool_defs=snap.get("tool_defs"),
            rule_defs=snap.get("rule_defs"),
        )


def tool_definition(spec: model.Tool) -> dict[str, Any]:
    """What a version records of a tool it resolves: everything that decides or runs its calls.
    Defaults are left out, so a setting added to the Tool document later changes no version, and
    the masked argument paths are a set: written in another order, they are the same version."""
    out = spec.model_dump(mode="json", exclude_defaults=True, exclude={"kind", "name"})
    for part, paths in (out.get("audit") or {}).items():
        out["audit"][part] = sorted(paths)
    return out


def rule_definition(spec: model.Rule) -> dict[str, Any] | None:
    """What a version records of a rule that can apply to it, or None when none can (a shadow
    rule is never enforced). `agents` is implied by the rule being there; a description is notes."""
    if spec.mode != "enforce":
        return None
    return spec.model_dump(mode="json", exclude_defaults=True, exclude={"kind", "name", "agents", "description"})


def rules_for(agent: str, rules: Iterable[Any]) -> dict[str, Any]:
    """The definitions of the rules (anything with a `spec`) that can apply to `agent`."""
    out: dict[str, Any] = {}
    for rule in rules:
        spec: model.Rule = rule.spec
        if spec.agents and agent not in spec.agents:
            continue
        found = rule_definition(spec)
        if found is not None:
            out[spec.name] = found
    return out


@dataclass(frozen=True)
class CompiledTool:
    spec: model.Tool
    explainer: Explainer  # jsonschema's words for why a refused call's arguments fail the schema
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
    off_limits: OffLimits
    tenants: dict[str, model.Tenant]
    instance: model.Instance
    catalog: AgentCatalog
    cel_engine: str
    # convert a CEL activation once per request for every program of that declaration set
    prepare_rule_activation: Callable[[dict[str, Any]], Any]
    prepare_touches_activation: Callable[[dict[str, Any]], Any]
    # who may call the checkpoint, and for what (policy files' Principal documents)
    principals: Principals = field(default_factory=Principals)
    # from the catalog: the agents the files define, versions no new run may pin (pending,
    # rejected, withdrawn, retired), versions retired (their runs halt), and what this load changed
    defined_agents: frozenset[str] = frozenset()
    # the version of each agent these files define (the live one may differ: a widening waiting
    # for review, an approved proposal the files have not caught up with)
    file_versions: dict[str, str] = field(default_factory=dict)
    unpinnable: frozenset[tuple[str, str]] = frozenset()
    retired: frozenset[tuple[str, str]] = frozenset()
    catalog_changes: tuple[Any, ...] = ()
    # on a shared store: the versions whose state the catalog held when this set was made
    # (AgentCatalog.stated); None: every version's state is read with the set
    stated: frozenset[tuple[str, str]] | None = None
    # the active learnings, compiled (docs/learnings.md): advice that may add a warning to a tool
    # call's answer or turn it into a DENY, never more. Set by the policy store after every change.
    learnings: LearningIndex = NO_LEARNINGS
    # `mode: shadow` Agent documents: a candidate definition per live agent, decided only in the
    # shadow view (never pinned, versioned in the catalog, nor read by the enforced answer)
    shadow_agents: dict[str, AgentVersion] = field(default_factory=dict)
    # the set whose `mode: shadow` rules and agents are enforced too (`shadow()`): never the one that answers
    enforce_shadow: bool = False
    # the Instance's limits, counted across runs in the store every replica shares (policy/limits.py)
    limits: LimitSet = NO_LIMITS
    # indexes built in __post_init__
    rules_by_tool: dict[str, RuleGroup] = field(init=False)  # every tool of `tools` has an entry
    rules_by_action: dict[str, RuleGroup] = field(init=False)  # model_call, delegation, plan
    has_shadow: bool = field(init=False)  # some rule or agent is `mode: shadow`
    # derived values keyed by what they depend on (e.g. effective ceilings per chain); a new
    # policy set starts empty, so nothing outlives the policies it came from
    memo: dict[Any, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        # shadow rules are indexed only in the shadow view: the enforced answer never reads them
        live = [r for r in self.rules if self.enforce_shadow or r.spec.mode == "enforce"]
        self.has_shadow = bool(self.shadow_agents) or any(r.spec.mode == "shadow" for r in self.rules)
        tool_rules = [r for r in live if "tool_call" in r.spec.actions]
        self.rules_by_tool = {
            name: RuleGroup.of(r for r in tool_rules if not r.spec.tools or name in r.spec.tools)
            for name in self.tools
        }
        self.rules_by_action = {
            action: RuleGroup.of(r for r in live if action in r.spec.actions)
            for action in ("model_call", "delegation", "plan")
        }

    def shadow(self) -> PolicySet:
        """This set with its `mode: shadow` rules enforced and its shadow agents standing in for
        the live ones: what the shadow answer is decided on (docs/policies.md, "Shadow mode").
        Built once per set."""
        found = self.memo.get("shadow-view")
        if found is None:
            found = self.memo["shadow-view"] = replace(self, enforce_shadow=True,
                                                       agents={**self.agents, **self.shadow_agents})
        return found

    def with_catalog(self, live: dict[str, AgentVersion], changes: Iterable[Any] = ()) -> PolicySet:
        """This set with the catalog's live versions and blocked versions as they are now."""
        unpinnable, retired = self.catalog.blocked()
        return replace(self, agents=live, defined_agents=self.defined_agents or frozenset(self.agents),
                       file_versions=self.file_versions or {n: a.version for n, a in self.agents.items()},
                       unpinnable=unpinnable, retired=retired, catalog_changes=tuple(changes),
                       stated=self.catalog.stated())

    def pin_refusal(self, name: str, version: str) -> str | None:
        """Why a new run may not pin `name`@`version` (a stable code), or None when it may."""
        if (name, version) in self.unpinnable:
            return codes.AGENT_VERSION_RETIRED if (name, version) in self.retired else codes.AGENT_VERSION_NOT_APPROVED
        live = self.agents.get(name)
        if self.stated is not None and (name, version) not in self.stated and (live is None or live.version != version):
            # recorded at another replica after this set was read: its state reaches here within a second
            return codes.CATALOG_UNAVAILABLE
        return None

    def refreshed(self) -> PolicySet:
        """After a catalog act: the same files, the live versions the catalog holds now (the
        skills' and templates' too: an act another worker answered is in the file, not the cache)."""
        self.catalog.entries.forget_live()
        live = {}
        for name in self.defined_agents:
            version = self.catalog.live_version(name)
            found = self.catalog.get(name, version) if version else None
            if found is not None:
                live[name] = found
        return self.with_catalog(live)

    def with_learnings(self, learnings: LearningIndex) -> PolicySet:
        """This set with the learning store's active learnings as they are now."""
        return replace(self, learnings=learnings)

    def agent_version(self, name: str, version: str) -> AgentVersion | None:
        if self.enforce_shadow and name in self.shadow_agents and (name, version) not in self.retired:
            # the question the shadow answers: what if the candidate were this agent, whatever
            # version the run pinned
            return self.shadow_agents[name]
        current = self.agents.get(name)
        if current is not None and current.version == version:
            return current
        return self.catalog.get(name, version)

    def version_bound(self, name: str, version: str) -> str:
        """The policy revision that must also decide a call of `name`@`version`, or "" when this
        set's own tools and rules are the version's.

        A version covers the tools and rules it resolves, so where these files define that very
        version, they are its own. Elsewhere (the live version while a widening edit waits for
        review, an approved proposal, a version pinned by id) this set's tools and rules may be
        wider than those the version was reviewed with: the revision it was recorded under holds
        those, and the stricter answer of the two stands."""
        if self.file_versions.get(name) == version:
            return ""
        found = self.agent_version(name, version)
        if found is None or found.tool_defs is None:  # unknown (refused elsewhere), or from before
            return ""
        return self.catalog.revision_of(name, version) or "?"

    def off_limits_reason(self, subject: Subject) -> str | None:
        """The reason `subject` is off-limits, or None (subjects.OffLimits says how it reads)."""
        return self.off_limits.reason(subject)
