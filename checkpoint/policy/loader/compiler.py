"""The policy set compiled from its documents: every cross-check between them (names defined once,
tenants, principals, ceilings, rules' codes) and every CEL expression type-checked and compiled.
Problems are collected, never raised one at a time."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from checkpoint.cel import CelCompileError, CelType
from checkpoint.cel import typed as cel_typed
from checkpoint.policy import celtypes, entries, model
from checkpoint.policy.catalog import AgentCatalog
from checkpoint.policy.defaults import with_defaults
from checkpoint.policy.errors import PolicyError
from checkpoint.policy.loader.agents import agent_skills, compile_agent, shadow_agents
from checkpoint.policy.loader.documents import Doc
from checkpoint.policy.loader.limits import compile_limits
from checkpoint.policy.loader.tools import compile_tool
from checkpoint.policy.loader.variables import RULE_VARIABLES, TOUCHES_VARIABLES
from checkpoint.policy.policyset import CompiledRule, PolicySet
from checkpoint.policy.principals import Principals
from checkpoint.policy.subjects import OffLimits, Pattern, SubjectError, read_pattern
from warden import codes


class Compiler:
    sources: dict[str, str]  # agent name -> file:line of its definition
    defined: dict[entries.Key, tuple[entries.Entry, str]]  # the skills and templates, with file:line

    def __init__(self, engine: Any, errors: list[PolicyError], broken: set[tuple[str, str]] | None = None):
        self.engine = engine
        self.errors = errors
        self.broken = broken or set()  # (kind, name) of documents whose own problems are reported
        self.defaulted: frozenset[str] = frozenset()  # instance ceilings taken from the built-in defaults
        self.limits_shape = celtypes.NO_LIMITS  # `limits` as rules read it: the instance's, once compiled

    def error(self, doc: Doc, path: tuple[str | int, ...], message: str) -> None:
        self.errors.append(PolicyError(doc.file, doc.at(*path), message))

    def unknown(self, doc: Doc, path: tuple[str | int, ...], kind: str, name: str, known: Iterable[str],
                message: str) -> None:
        """A name that no document of `kind` defines: said with the name most likely meant. A name
        whose document is broken is not unknown: its own problems are reported, once, where it is."""
        if (kind, name) in self.broken:
            return
        near = difflib.get_close_matches(name, [k for k in known if k != "*"], n=1)
        self.error(doc, path, f"{message}; did you mean {near[0]!r}?" if near else message)

    def compile_cel(
        self,
        doc: Doc,
        path: tuple[str | int, ...],
        source: str,
        variables: dict[str, CelType],
        result_types: tuple[str, ...],
        shapes: Mapping[str, cel_typed.Shape] | None = None,
    ) -> Any:
        """Type-check against the typed declarations (`shapes`, else `variables`) with Google's
        checker, whichever engine evaluates; then compile for the engine (over `variables`).
        The checked result type must be one of `result_types`."""
        what = f"{doc.spec.kind.lower()} {getattr(doc.spec, 'name', '')!r} {'.'.join(map(str, path))}: "
        checked = None
        if cel_typed.AVAILABLE:  # without the native wheel, the engine's own checks stand
            try:
                checked = cel_typed.checker_for(shapes or variables).check(source)
            except cel_typed.TypedCompileError as exc:
                for p in exc.problems:
                    self.errors.append(PolicyError(doc.file, doc.line_in(path, p.line),
                                                   f"{what}CEL does not compile: {p.line}:{p.column}: {p.message}\n"
                                                   + cel_typed.frame(source, p.line, p.column, p.length)))
                return None
        try:
            program = self.engine.compile(source, variables)
        except CelCompileError as exc:
            where = "" if exc.line is None else "\n" + cel_typed.frame(source, exc.line, exc.column or 1)
            self.errors.append(PolicyError(doc.file, doc.line_in(path, exc.line or 1),
                                           f"{what}CEL does not compile: {exc.message}{where}"))
            return None
        if checked is not None and checked not in result_types:
            why = (" (a value whose type is only known when it runs: compare it, e.g. `== true`)"
                   if checked == "DYN" else "")
            self.error(doc, path, f"{what}CEL returns {checked}{why}; it must return {' or '.join(result_types)}")
            return None
        return program

    def build(
        self, docs: list[Doc], revision: str, directory: str, catalog: AgentCatalog, cel_engine: str
    ) -> PolicySet | None:
        by_kind: dict[str, list[Doc]] = {k: [] for k in model.KINDS}
        for d in docs:
            by_kind[d.spec.kind].append(d)
        candidates = [d for d in by_kind["Agent"] if d.spec.mode == "shadow"]
        by_kind["Agent"] = [d for d in by_kind["Agent"] if d.spec.mode == "enforce"]
        named = {k: self.unique(by_kind[k]) for k in ("Agent", "Tool", "Rule", "Tenant", "Principal")}

        instance = self._instance(by_kind["Instance"])
        limits = compile_limits(self, by_kind["Instance"][0] if by_kind["Instance"] else None, instance,
                                named["Tool"])
        self.limits_shape = limits.shape()
        tenants = {name: d.spec for name, d in named["Tenant"].items()}
        tenants.setdefault("default", model.Tenant(kind="Tenant", name="default"))
        for d in named["Tenant"].values():
            self._ceilings_narrow(d, instance)

        tools = {name: compile_tool(self, d) for name, d in named["Tool"].items()}
        rule_docs = list(named["Rule"].values())
        agents = {name: compile_agent(self, d, named["Tool"], named["Agent"], tenants, rule_docs)
                  for name, d in named["Agent"].items()}
        self.sources = {name: f"{d.file}:{d.at()}" for name, d in named["Agent"].items()}
        self.defined = self._entries([*by_kind["Skill"], *by_kind["Template"]], tenants)
        for d in named["Agent"].values():
            agent_skills(self, d, self.defined, catalog)
        shadows = shadow_agents(self, candidates, named["Tool"], named["Agent"], tenants, catalog, rule_docs)
        rules = [self._rule(d, named["Tool"], named["Agent"]) for d in named["Rule"].values()]
        off_limits = OffLimits(self._off_limits(by_kind["OffLimits"]))
        principals = self._principals(named["Principal"], tenants, named["Agent"])
        if self.errors:
            return None
        return PolicySet(
            prepare_rule_activation=self.engine.preparer(RULE_VARIABLES),
            prepare_touches_activation=self.engine.preparer(TOUCHES_VARIABLES),
            revision=revision,
            directory=directory,
            tools={k: v for k, v in tools.items() if v is not None},
            agents={k: v for k, v in agents.items() if v is not None},
            shadow_agents=shadows,
            rules=[r for r in rules if r is not None],
            off_limits=off_limits,
            tenants=tenants,
            instance=instance,
            catalog=catalog,
            cel_engine=cel_engine,
            principals=principals,
            limits=limits,
        )

    def _principals(self, docs: dict[str, Doc], tenants: dict[str, model.Tenant],
                    agents: dict[str, Doc]) -> Principals:
        """Each exact identity belongs to one principal; named tenants and agents must exist."""
        owner: dict[str, Doc] = {}
        for d in docs.values():
            spec: model.Principal = d.spec
            for i, identity in enumerate(spec.identities):
                first = owner.get(identity)
                if first is not None and "*" not in identity:
                    self.error(d, ("identities", i),
                               f"identity {identity!r} already names principal {first.spec.name!r} ({first.file})")
                owner.setdefault(identity, d)
            for section in ("check", "approve"):
                rights = getattr(spec, section)
                if rights is None:
                    continue
                for i, name in enumerate(rights.tenants):
                    if name != "*" and name not in tenants:
                        self.unknown(d, (section, "tenants", i), "Tenant", name, tenants, f"principal {spec.name!r}: unknown tenant {name!r}")
                for i, name in enumerate(rights.agents):
                    if name != "*" and name not in agents:
                        self.unknown(d, (section, "agents", i), "Agent", name, agents, f"principal {spec.name!r}: unknown agent {name!r}")
        return Principals(d.spec for d in docs.values())

    def _entries(self, docs: list[Doc], tenants: dict[str, model.Tenant]) -> dict[entries.Key, tuple[entries.Entry, str]]:
        """Skills and templates: one of each name per tenant, in a tenant that exists."""
        found: dict[entries.Key, tuple[entries.Entry, str]] = {}
        for d in docs:
            spec = d.spec
            entry = entries.Entry.of(spec)
            first = found.get(entry.key)
            if spec.tenant not in tenants:
                self.unknown(d, ("tenant",), "Tenant", spec.tenant, tenants, f"{spec.kind} {spec.name!r}: unknown tenant {spec.tenant!r}")
            elif first is not None:
                self.error(d, ("name",), f"{spec.kind} {spec.name!r} of tenant {spec.tenant!r} is defined twice "
                           f"(first in {first[1]})")
            else:
                found[entry.key] = (entry, f"{d.file}:{d.at()}")
        return found

    def _off_limits(self, docs: list[Doc]) -> list[tuple[Pattern, str]]:
        entries = []
        for d in docs:
            for i, subject in enumerate(d.spec.subjects):
                try:
                    entries.append((read_pattern(subject.pattern, subject.type), subject.reason))
                except SubjectError as exc:
                    self.error(d, ("subjects", i, "pattern"), f"off-limits subject: {exc}")
        return entries

    def unique(self, docs: list[Doc]) -> dict[str, Doc]:
        seen: dict[str, Doc] = {}
        for d in docs:
            first = seen.get(d.spec.name)
            if first is not None:
                self.error(d, ("name",), f"{d.spec.kind} {d.spec.name!r} is defined twice (first in {first.file}:{first.at('name')})")
            else:
                seen[d.spec.name] = d
        return seen

    def _instance(self, docs: list[Doc]) -> model.Instance:
        for extra in docs[1:]:
            self.error(extra, ("kind",), f"only one Instance document is allowed (first in {docs[0].file})")
        instance, self.defaulted = with_defaults(docs[0].spec if docs else model.Instance(kind="Instance"))
        return instance

    def _ceilings_narrow(self, doc: Doc, instance: model.Instance) -> None:
        """A tenant may only narrow the instance's ceilings; widening is a mistake worth stopping."""
        for name, value in doc.spec.ceilings:
            above = getattr(instance.ceilings, name)
            if value is not None and above is not None and value > above:
                self.error(doc, ("ceilings", name), f"tenant ceiling {name}={value} exceeds the instance's {above}"
                           + self._default_note(name))
        for name in ("per_owner_usd", "tenant_usd"):
            value, above = getattr(doc.spec.daily_spend, name), getattr(instance.daily_spend, name)
            if value is not None and above is not None and value > above:
                self.error(doc, ("daily_spend", name), f"tenant daily_spend {name}={value} exceeds the instance's {above}"
                           + self._default_note(name))

    def _default_note(self, name: str) -> str:
        return " (the built-in default: set it in instance.yaml to raise it)" if name in self.defaulted else ""

    def _rule(self, doc: Doc, tools: dict[str, Doc], agents: dict[str, Doc]) -> CompiledRule | None:
        spec: model.Rule = doc.spec
        for i, name in enumerate(spec.tools):
            if name not in tools:
                self.unknown(doc, ("tools", i), "Tool", name, tools, f"rule {spec.name!r} names unknown tool {name!r}")
        for i, name in enumerate(spec.agents):
            if name not in agents:
                self.unknown(doc, ("agents", i), "Agent", name, agents, f"rule {spec.name!r} names unknown agent {name!r}")
        if spec.tools and spec.actions != ["tool_call"]:
            self.error(doc, ("tools",), f"rule {spec.name!r}: 'tools' only applies to tool_call rules")
        own = spec.default_code()
        if spec.code is not None and spec.code != own and (spec.code in codes.DECISION_CODES
                                                           or spec.code.startswith("breaker_")):
            # clients, dashboards and the driver act on codes: a DENY counted as `allowed`, or a
            # handoff the driver reads as a tripped breaker (and whose person it never names)
            self.error(doc, ("code",), f"rule {spec.name!r}: code {spec.code!r} is a stable code warden gives for "
                       f"something else; a {spec.effect.value} rule's code is {own!r} or a name of its own")
        if spec.handoff_to is not None and spec.effect is not model.Effect.HANDOFF_IF:
            self.error(doc, ("handoff_to",), f"rule {spec.name!r}: 'handoff_to' only applies to handoff_if rules")
        named = [(n, tools[n].spec.input_schema) for n in spec.tools if n in tools]
        shapes = celtypes.rule_shapes(named if len(named) == len(spec.tools) else [], self.limits_shape)
        program = self.compile_cel(doc, ("condition",), spec.condition, RULE_VARIABLES, ("BOOL",), shapes)
        if program is None:
            return None
        return CompiledRule(
            spec=spec, program=program, code=spec.effective_code(), where=f"{doc.file}:{doc.at('condition')}",
            reads=frozenset(name for name in RULE_VARIABLES if re.search(rf"\b{name}\b", spec.condition)),
        )
