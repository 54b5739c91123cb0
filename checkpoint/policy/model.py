"""The policy files' schema: what an operator may write, and nothing else.

Every model forbids unknown keys, so a typo is an error with file:line, never a silently ignored
setting. `warden policy schema` writes the JSON Schema generated from these models for editors.

Every policy load, `warden check` included, builds these classes first, so two things here are for
start time: annotations are evaluated as written (no `from __future__ import annotations`, whose
strings pydantic would compile one by one), and list and dict defaults come from the small
functions below rather than `list` and `dict` (pydantic reads each default factory's signature,
and a builtin's is parsed from text, with tokenize's regular expressions compiled the first time).
"""

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from checkpoint.policy.subjects import Kind
from warden.budget import Budget
from warden.tools import (  # noqa: F401 - the tool model is part of the policy schema
    Access,
    Limits,
    Masking,
    Name,
    Pattern,
    Run,
    Strict,
    Tool,
    Touches,
    _no_entries,
    _no_items,
)


class Scope(Strict):
    """What an agent's tools may touch. Images and nodes are glob patterns (`recon/nmap:*`);
    connections and subjects are typed (host, ip, url or name; docs/policies.md)."""

    access: list[Access] = Field(default_factory=_no_items)
    images: list[Pattern] = Field(default_factory=_no_items)
    nodes: list[Pattern] = Field(default_factory=_no_items)
    connections: list[Pattern] = Field(default_factory=_no_items)
    threads: list[Pattern] = Field(default_factory=_no_items, description="conversation threads (glob names)")
    subjects: list[Pattern] = Field(default_factory=_no_items)


class Agent(Strict):
    kind: Literal["Agent"]
    name: Name
    description: str = ""
    persona: str = Field(..., min_length=1, description="the role in plain words")
    tenant: Name = "default"
    allowlist: list[str] = Field(
        default_factory=_no_items, description="tool names; empty means none; '*' must be written out"
    )
    scope: Scope = Field(default_factory=Scope)
    budget: Budget = Field(default_factory=Budget)
    delegates: list[Name] = Field(default_factory=_no_items, description="agents this agent may delegate to")
    skills: list[Name] = Field(
        default_factory=_no_items,
        description="skills of its tenant its model may load by name (docs/skills.md): read as data, never authority",
    )
    mode: Literal["enforce", "shadow"] = Field(
        "enforce", description="shadow: a candidate definition of the live agent of the same name, decided beside it "
                               "and recorded (shadow_verdict), never enforced, pinned or versioned; promote it by "
                               "replacing the live file's content with it")

    @field_validator("allowlist")
    @classmethod
    def _allowlist_names(cls, v: list[str]) -> list[str]:
        for item in v:
            if item != "*" and not re.fullmatch(r"[a-z][a-z0-9_.-]{0,63}", item):
                raise ValueError(f"allowlist entry {item!r} is not a tool name or '*'")
        if len(set(v)) != len(v):
            raise ValueError("allowlist names a tool twice")
        return v


# A call nobody answers is refused rather than left waiting forever (docs/approvals.md).
DEFAULT_APPROVAL_TIMEOUT_SECONDS = 24 * 3600
MAX_APPROVAL_TIMEOUT_SECONDS = 30 * 24 * 3600


class Effect(StrEnum):
    DENY_IF = "deny_if"
    APPROVE_IF = "approve_if"
    # the case goes to a person: the call is refused and the run stops, handed to `handoff_to`
    HANDOFF_IF = "handoff_if"


ActionKind = Literal["tool_call", "model_call", "delegation", "plan"]


class Rule(Strict):
    kind: Literal["Rule"]
    name: Name
    description: str = ""
    effect: Effect
    condition: str = Field(..., min_length=1, description="CEL; true means the effect applies")
    code: Name | None = Field(None, description="defaults to rule_denied / approval_required / handoff")
    reason: str = ""
    handoff_to: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = Field(
        None, description="handoff_if: the person or queue that takes the case over")
    actions: list[ActionKind] = Field(default_factory=lambda: list[ActionKind](["tool_call"]))
    tools: list[Name] = Field(default_factory=_no_items, description="only these tools; empty means every tool")
    agents: list[Name] = Field(default_factory=_no_items, description="only these agents; empty means every agent")
    mode: Literal["enforce", "shadow"] = Field(
        "enforce", description="shadow: evaluated and recorded (shadow_verdict) beside the enforced answer, never "
                               "enforced; promote it by removing this line")
    approval_timeout_seconds: float | None = Field(
        None, gt=0, le=MAX_APPROVAL_TIMEOUT_SECONDS,
        description="approve_if: how long a person has to answer (and the approved call to be sent); "
                    "defaults to the Instance's approval_timeout_seconds")

    @model_validator(mode="after")
    def _timeout_only_asks(self) -> "Rule":
        if self.approval_timeout_seconds is not None and self.effect != Effect.APPROVE_IF:
            raise ValueError("approval_timeout_seconds applies to approve_if rules only")
        return self

    def default_code(self) -> str:
        return {Effect.DENY_IF: "rule_denied", Effect.APPROVE_IF: "approval_required",
                Effect.HANDOFF_IF: "handoff"}[self.effect]

    def effective_code(self) -> str:
        return self.code or self.default_code()


class OffLimitsSubject(Strict):
    pattern: Pattern
    reason: str = Field(..., min_length=1)
    type: Kind | None = Field(
        None, description="what the pattern is; inferred from its text when unset, and checked against it"
    )


class OffLimits(Strict):
    kind: Literal["OffLimits"]
    subjects: list[OffLimitsSubject] = Field(..., min_length=1)


class DelegationLimits(Strict):
    max_depth: int | None = Field(None, ge=0, le=3)
    max_children: int | None = Field(None, ge=0, le=5)
    max_tree: int | None = Field(None, ge=1, le=20)


class DailySpend(Strict):
    per_owner_usd: float | None = Field(None, ge=0, allow_inf_nan=False)
    tenant_usd: float | None = Field(None, ge=0, allow_inf_nan=False)


class ModelPrice(Strict):
    input_per_mtok_usd: float = Field(..., ge=0)
    output_per_mtok_usd: float = Field(..., ge=0)


PersonNames = list[Annotated[str, StringConstraints(pattern=r"^[^\s:*]{1,128}$")]]


class TenantRoles(Strict):
    """Who does what in a tenant: persons by their credential's name (a token line's name). An
    admin holds every role. docs/catalog.md says what each role may do."""

    admin: PersonNames = Field(default_factory=_no_items, description="reviews agent changes, retires versions; every role")
    approver: PersonNames = Field(default_factory=_no_items, description="approves or rejects calls that wait for a person")
    operator: PersonNames = Field(default_factory=_no_items, description="starts, pauses, resumes, amends and cancels runs")
    auditor: PersonNames = Field(default_factory=_no_items, description="reads the tenant's decision records and runs")


class Tenant(Strict):
    kind: Literal["Tenant"]
    name: Name
    ceilings: Budget = Field(default_factory=Budget)
    daily_spend: DailySpend = Field(default_factory=DailySpend)
    delegation: DelegationLimits = Field(default_factory=DelegationLimits)
    roles: TenantRoles | None = Field(
        None, description="without it, the principals' rights alone govern, and nobody is an admin"
    )
    review_changes: bool = Field(
        True, description="an agent change that widens what it may do (its own file, or a tool or rule it "
                          "resolves) waits for a tenant admin (docs/catalog.md); false applies it at once"
    )


LimitName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
# a count of minutes, hours or days: 30m, 1h, 24h, 7d
Window = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{0,4}[mhd]$")]


class Limit(Strict):
    """A limit that needs memory across runs, counted in the store every replica shares after an
    ALLOW (docs/policies.md, "Limits"): the calls of some tools, or the spend of model calls, per
    principal, tenant, agent or person, in a window of time."""

    name: LimitName = Field(..., description="how rules read it: limits.NAME.used, .remaining, .max")
    description: str = ""
    counts: Literal["calls", "spend"] = Field(
        ..., description="calls: each allowed call of `tools`; spend: each allowed model call's price at its "
                         "max_tokens (USD, from model_prices)")
    tools: list[Name] = Field(default_factory=_no_items,
                              description="calls: only these tools' calls; empty means every tool's")
    per: Literal["principal", "tenant", "agent", "person"] = Field(
        ..., description="whose calls share one count: the calling principal, the run's tenant, the acting agent "
                         "(its calls only) or the accountable person")
    window: Window = Field(..., description="30m, 1h, 24h, 7d: fixed windows of the checkpoint's clock, from the "
                                           "Unix epoch (a 24h window is a UTC day)")
    max: float = Field(..., ge=0, allow_inf_nan=False, description="calls: a whole number; spend: USD")
    verdict: Literal["deny", "halt"] = Field("deny", description="the answer once the limit is reached")
    code: Name | None = Field(None, description="defaults to limit_exceeded")

    @model_validator(mode="after")
    def _shape(self) -> "Limit":
        if self.counts == "calls" and self.max != int(self.max):
            raise ValueError(f"limit {self.name!r} counts calls: max must be a whole number, not {self.max}")
        if self.counts == "spend" and self.tools:
            raise ValueError(f"limit {self.name!r} counts spend (model calls): 'tools' only applies to calls")
        return self


class Instance(Strict):
    kind: Literal["Instance"]
    ceilings: Budget = Field(default_factory=Budget)
    daily_spend: DailySpend = Field(default_factory=DailySpend)
    delegation: DelegationLimits = Field(default_factory=DelegationLimits)
    model_prices: dict[str, ModelPrice] = Field(default_factory=_no_entries)
    grant_ttl_seconds: float = Field(120, gt=0, le=3600)
    approval_timeout_seconds: float = Field(
        DEFAULT_APPROVAL_TIMEOUT_SECONDS, gt=0, le=MAX_APPROVAL_TIMEOUT_SECONDS,
        description="how long a REQUIRE_APPROVAL waits for a person before the call is refused "
                    "(approval_timed_out); a rule's own approval_timeout_seconds overrides it")
    limits: list[Limit] = Field(default_factory=_no_items,
                                description="limits counted across runs and replicas (docs/policies.md, \"Limits\")")


Identity = Annotated[str, StringConstraints(pattern=r"^(unix|(token|mtls|person|service|oidc):[^\s]{1,256})$")]
Names = list[Annotated[str, StringConstraints(min_length=1, max_length=128)]]


class CheckRights(Strict):
    """Whom a principal may ask decisions for. `*` in a list means any."""

    tenants: Names = Field(default_factory=_no_items)
    agents: Names = Field(default_factory=_no_items, description="agents its runs may act as")
    persons: Literal["any", "self"] | Names = Field(
        "self",
        description="accountable persons it may vouch for: any, a list, or self (the person must "
        "call with their own credential, whose name is then the person)",
    )


class ApproveRights(Strict):
    """What a principal may approve or reject. `*` in a list means any."""

    tenants: Names = Field(default_factory=_no_items)
    agents: Names = Field(default_factory=_no_items)
    rules: Names = Field(default_factory=_no_items, description="rule names whose REQUIRE_APPROVAL it may answer")
    own_runs: bool = Field(False, description="may approve calls of runs it is the accountable person of")


class AuditRights(Strict):
    """Which tenants' records a principal may read. `*` means every tenant's, and records that
    name no tenant (refusals before a run was established)."""

    tenants: Names = Field(default_factory=_no_items)


class Principal(Strict):
    """A caller of the checkpoint, and what it may do. The credential names it: a key of `warden
    keys add` is `person:NAME` or `service:NAME` by its kind, a key file line `NAME TOKEN` is
    `token:NAME`, an OIDC identity token `oidc:NAME`, a verified client certificate `mtls:SUBJECT`,
    a connection on the Unix socket `unix`. An identity with `*` (e.g. `token:*`) is a pattern; an
    exact identity of another principal wins over a pattern."""

    kind: Literal["Principal"]
    name: Name
    description: str = ""
    identities: list[Identity] = Field(..., min_length=1)
    check: CheckRights | None = Field(None, description="may call Check, StartRun, ResolveAgent")
    approve: ApproveRights | None = Field(None, description="may call Approve and Reject")
    audit: AuditRights | None = Field(None, description="may read these tenants' decision records (WatchDecisions)")


class Skill(Strict):
    """A named playbook for a recurring kind of work. An agent that lists it may load its text, which
    reaches the model as data: it grants no tool and widens no scope (docs/skills.md)."""

    kind: Literal["Skill"]
    name: Name
    tenant: Name = "default"
    # one line in every spelling: a CR, VT, FF, NEL or Unicode line/paragraph separator would start
    # a line of the system prompt, where the description goes
    description: Annotated[str, StringConstraints(min_length=1, max_length=200,
                                                  pattern="^[^\n\r\x0b\x0c\x85\u2028\u2029]*$")] = Field(
        ..., description="one line, shown to the model beside the skill's name")
    text: Annotated[str, StringConstraints(min_length=1, max_length=16384)] = Field(
        ..., description="what the model reads when it loads the skill")


TARGET = "TARGET"  # the placeholder a template's command names its subject by
TemplateName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")]


class TemplateSpec(Strict):
    """The task a template starts: an image, where it runs, and its argv with TARGET in it."""

    image: Pattern = Field(..., description="the image the task runs; the agent's scope.images decides")
    node: Pattern | None = Field(None, description="where it runs; the agent's scope.nodes decides")
    command: list[Annotated[str, StringConstraints(min_length=1, max_length=1024)]] = Field(
        ..., min_length=1, max_length=64, description=f"argv; {TARGET} is replaced by the call's target")

    @model_validator(mode="after")
    def _names_target(self) -> "TemplateSpec":
        if not any(TARGET in part for part in self.command):
            raise ValueError(f"the command never names {TARGET}: a template works on the target it is given")
        return self


class Template(Strict):
    """A spec that worked once, saved with a TARGET placeholder; the tools marked `templates:` serve
    the tenant's reviewed ones (docs/skills.md)."""

    kind: Literal["Template"]
    name: TemplateName
    tenant: Name = "default"
    description: Annotated[str, StringConstraints(max_length=300)] = ""
    spec: TemplateSpec


Document = Agent | Tool | Rule | OffLimits | Tenant | Instance | Principal | Skill | Template
KINDS: dict[str, type[Strict]] = {
    "Principal": Principal,
    "Agent": Agent,
    "Tool": Tool,
    "Rule": Rule,
    "OffLimits": OffLimits,
    "Tenant": Tenant,
    "Instance": Instance,
    "Skill": Skill,
    "Template": Template,
}
