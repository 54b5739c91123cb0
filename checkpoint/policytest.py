"""Policy tests that live beside the policies: `*_test.yaml` files, table-driven.

A case names the acting agent by name (its current version is pinned for the case), the
proposed action in shorthand, and the expected verdict, code and (optionally) rule:

    suite: recon agent
    defaults: {person: alice, agent: recon, mode: interactive}
    cases:
      - name: a lab host can be scanned
        tool: create_task_from_template
        args: {template: web-basic, target: www.lab.example.com}
        expect: {verdict: ALLOW, code: allowed}
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from google.protobuf import json_format
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from checkpoint.engine import InvalidRequest, decide
from checkpoint.engine.decide import touched_by
from checkpoint.policy import PolicyError, PolicyLoadError, PolicySet
from checkpoint.policy.pinned import load as load_pinned
from checkpoint.policy.policyset import SCOPE_DIMENSIONS, TYPED_DIMENSIONS, read_touched
from checkpoint.policy.subjects import SubjectError, SubjectSet
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.codes import DECISION_CODES
from warden.policyfiles import TEST_SUFFIXES
from warden.yamlsource import YamlIssue, load_documents


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Expect(_Strict):
    verdict: Literal["ALLOW", "DENY", "REQUIRE_APPROVAL", "HALT"]
    code: str
    rule: str | None = None
    reason_contains: str | None = None


class StepSpec(_Strict):
    id: str = ""
    tool: str
    args: dict[str, Any] | None = None


class Case(_Strict):
    name: str = Field(..., min_length=1)
    person: str | None = None
    agent: str | None = Field(None, description="the acting agent; its current version is pinned")
    chain: list[str] | None = Field(None, description="agents from the root run down to the acting one")
    narrowing: dict[str, list[str]] | None = Field(None, description="narrowing the acting agent received")
    mode: Literal["interactive", "background"] | None = None
    tenant: str | None = None
    has_plan: bool | None = None
    inputs: dict[str, Any] | None = Field(None, description="run inputs the operator vouched for (run.inputs)")
    budget: dict[str, float] | None = None
    counters: dict[str, float] | None = None
    tool: str | None = None
    args: dict[str, Any] | None = None
    plan_step: str = ""
    model_call: dict[str, Any] | None = None
    delegation: dict[str, Any] | None = None
    plan: list[StepSpec] | None = None
    # the person whose approval of this very call the checkpoint verified (an approval token)
    approved_by: str | None = None
    now: AwareDatetime | None = Field(
        None, description="the checkpoint's time the rules read as `now` (RFC 3339 with an offset, quoted); "
                          "default: the wall clock")
    expect: Expect

    @model_validator(mode="after")
    def _one_action(self) -> Case:
        actions = [a for a in ("tool", "model_call", "delegation", "plan") if getattr(self, a) is not None]
        if len(actions) != 1:
            raise ValueError("a case proposes exactly one of: tool, model_call, delegation, plan")
        return self


class Suite(_Strict):
    suite: str
    defaults: dict[str, Any] = Field(default_factory=dict)
    cases: list[dict[str, Any]] = Field(..., min_length=1)


def find_test_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name.endswith(TEST_SUFFIXES))


def build_request(policies: PolicySet, case: Case) -> pb.CheckRequest:
    """Turn a case's shorthand into the CheckRequest a driver would send."""
    chain = case.chain or ([case.agent] if case.agent else [])
    run = pb.RunContext(
        run_id=f"test-{case.name[:40]}",
        tenant=case.tenant or "",
        mode=pb.RUN_MODE_BACKGROUND if case.mode == "background" else pb.RUN_MODE_INTERACTIVE,
        has_plan=bool(case.has_plan),
    )
    run.actor_chain.add(kind=pb.ACTOR_KIND_PERSON, id=case.person or "tester")
    for i, name in enumerate(chain):
        current = policies.agents.get(name)
        actor = run.actor_chain.add(kind=pb.ACTOR_KIND_AGENT, id=name,
                                    agent_version=current.version if current else "unknown")
        if i == len(chain) - 1 and case.narrowing:
            json_format.ParseDict(case.narrowing, actor.narrowing)
    if case.budget:
        json_format.ParseDict(case.budget, run.budget)
    if case.inputs:
        run.inputs.update(case.inputs)
    request = pb.CheckRequest(run=run)
    if case.counters:
        json_format.ParseDict(case.counters, request.counters)
    if case.tool is not None:
        request.tool_call.tool = case.tool
        request.tool_call.plan_step = case.plan_step
        request.tool_call.arguments.update(case.args or {})
    elif case.model_call is not None:
        json_format.ParseDict(case.model_call, request.model_call)
    elif case.delegation is not None:
        json_format.ParseDict(case.delegation, request.delegation)
    elif case.plan is not None:
        for step in case.plan:
            s = request.plan.steps.add(id=step.id, tool=step.tool)
            if step.args is not None:
                s.arguments.update(step.args)
    return request


def load_cases(path: Path, shown: str) -> tuple[str, list[tuple[int, Case]]]:
    """Parse one test file strictly; raise PolicyLoadError naming every problem with its line."""
    errors: list[PolicyError] = []
    try:
        docs = load_documents(path.read_text(encoding="utf-8"))
    except YamlIssue as issue:
        raise PolicyLoadError([PolicyError(shown, issue.line, issue.message, issue.column)]) from None
    if len(docs) != 1:
        raise PolicyLoadError([PolicyError(shown, 1, "a test file holds exactly one suite document")])
    doc = docs[0]
    try:
        suite = Suite.model_validate(doc.data)
    except ValidationError as exc:
        raise PolicyLoadError(
            [PolicyError(shown, doc.line_of(tuple(e["loc"])), f"{'.'.join(map(str, e['loc']))}: {e['msg']}")
             for e in exc.errors()]
        ) from None
    cases = []
    for i, raw in enumerate(suite.cases):
        line = doc.line_of(("cases", i))
        try:
            cases.append((line, Case.model_validate({**suite.defaults, **raw})))
        except ValidationError as exc:
            for e in exc.errors():
                loc = ("cases", i, *e["loc"])
                errors.append(PolicyError(shown, doc.line_of(loc), f"case {i + 1}: {'.'.join(map(str, e['loc'])) or 'case'}: {e['msg']}"))
    if errors:
        raise PolicyLoadError(errors)
    return suite.suite, cases


@dataclass(frozen=True)
class CaseResult:
    ok: bool
    detail: str  # what went wrong, or verdict/code when it passed
    verdict: str
    code: str
    rules_held: frozenset[str]  # rule:NAME of every rule whose condition held
    rules_evaluated: frozenset[str]
    agent: str  # the acting agent ("" for a person acting directly)
    touched: dict[str, list[str]]  # what a tool call would touch, by scope dimension


_HELD = frozenset({"fail", "approval", "approved"})  # a rule's outcome when its condition held


def run_case(policies: PolicySet, case: Case) -> CaseResult:
    request = build_request(policies, case)
    request.explain = True  # the trace says which rules were evaluated and which held (coverage)
    pinned = load_pinned(policies, request)
    outcomes: list[pb.RuleOutcome] = []
    try:
        # `approved_by`: a person approved this very call, for every approve-if rule it asks
        response = decide(policies, request, approver=case.approved_by or "",
                          approved_rules=frozenset(r.name for r in policies.rules) if case.approved_by else frozenset(),
                          now=case.now, pinned=pinned)
    except InvalidRequest as exc:
        got = ("INVALID", exc.code, "", exc.message)
    else:
        got = (pb.Verdict.Name(response.verdict).removeprefix("VERDICT_"), response.code, response.rule, response.reason)
        outcomes = list(response.explanation)
    want = case.expect
    problems = []
    if got[0] != want.verdict or got[1] != want.code:
        problems.append(f"expected {want.verdict}/{want.code}, got {got[0]}/{got[1]}")
    if want.rule is not None and got[2] != want.rule:
        problems.append(f"expected rule {want.rule!r}, got {got[2]!r}")
    if want.reason_contains is not None and want.reason_contains not in got[3]:
        problems.append(f"reason {got[3]!r} does not contain {want.reason_contains!r}")
    rules = [o for o in outcomes if o.rule.startswith("rule:")]
    chain = request.run.actor_chain
    return CaseResult(
        ok=not problems, detail="; ".join(problems) or f"{got[0]}/{got[1]}", verdict=got[0], code=got[1],
        rules_held=frozenset(o.rule for o in rules if o.outcome in _HELD),
        rules_evaluated=frozenset(o.rule for o in rules),
        agent=chain[-1].id if len(chain) > 1 else "",
        touched=touched_by(policies, request, pinned),
    )


def unknown_codes(policies: PolicySet, cases: list[tuple[int, Case]], shown: str) -> list[PolicyError]:
    """A case expecting a code warden never gives (a typo) could never pass for the right reason."""
    known = set(DECISION_CODES) | {r.code for r in policies.rules}
    errors = []
    for line, case in cases:
        if case.expect.code not in known:
            near = difflib.get_close_matches(case.expect.code, sorted(known), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            errors.append(PolicyError(shown, line, f"case {case.name!r}: expect.code {case.expect.code!r} is not "
                                                   f"a code warden gives{hint}"))
    return errors


@dataclass
class Coverage:
    """What the cases never exercised: rules that never held, scope entries nothing touched."""

    rules_never_held: list[str]
    rules_never_evaluated: list[str]
    scope_never_touched: list[tuple[str, str, str]]  # (agent, dimension, entry)

    def as_dict(self) -> dict[str, Any]:
        return {"rules_never_held": self.rules_never_held, "rules_never_evaluated": self.rules_never_evaluated,
                "scope_never_touched": [{"agent": a, "dimension": d, "entry": e}
                                        for a, d, e in self.scope_never_touched]}


def coverage(policies: PolicySet, results: list[CaseResult]) -> Coverage:
    held = set().union(*(r.rules_held for r in results)) if results else set()
    evaluated = set().union(*(r.rules_evaluated for r in results)) if results else set()
    names = [f"rule:{r.name}" for r in policies.rules]
    untouched = []
    for name, agent in sorted(policies.agents.items()):
        values = {dim: [v for r in results if r.agent == name for v in r.touched.get(dim, [])]
                  for dim in SCOPE_DIMENSIONS}
        for dim in SCOPE_DIMENSIONS:
            for entry in getattr(agent.scope, dim):
                if not any(_matches(dim, entry, value) for value in values[dim]):
                    untouched.append((name, dim, entry))
    return Coverage(rules_never_held=[n for n in names if n not in held],
                    rules_never_evaluated=[n for n in names if n not in evaluated],
                    scope_never_touched=untouched)


def _matches(dim: str, entry: str, value: str) -> bool:
    try:
        return SubjectSet.lenient([entry], typed=dim in TYPED_DIMENSIONS).matches(read_touched(dim, value))
    except SubjectError:
        return False


def suite_json_schema() -> dict[str, Any]:
    """The JSON Schema of a `*_test.yaml` file (a suite; each case as it reads after `defaults`)."""
    schema = Suite.model_json_schema()
    schema["$defs"] = {**schema.get("$defs", {}), "Case": Case.model_json_schema()}
    schema["properties"]["cases"]["items"] = {"$ref": "#/$defs/Case"}
    for sub in list(schema["$defs"]["Case"].pop("$defs", {}).items()):
        schema["$defs"].setdefault(*sub)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "warden policy test suite"
    return schema
