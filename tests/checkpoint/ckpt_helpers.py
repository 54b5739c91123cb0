"""Shared helpers for the checkpoint engine tests: policy folders, request building, table cases.

No conftest.py and no __init__.py on purpose: a package named `checkpoint` under tests/ would
shadow the real `checkpoint` package, so this folder's modules carry unique `ckpt` names.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from checkpoint.engine import InvalidRequest, decide
from checkpoint.policy import PolicySet, load_policy_dir, pinned
from warden.checkpoint.v1 import checkpoint_pb2 as pb

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
FOLDERS = {
    "shipped": REPO / "policies",
    "engine": FIXTURES / "engine",
    "narrowing": FIXTURES / "narrowing",
}
ENGINES = ("native", "python")


@functools.cache
def policies(folder: str = "engine", cel_engine: str = "native") -> PolicySet:
    return load_policy_dir(FOLDERS[folder], cel_engine=cel_engine)


def build(
    p: PolicySet,
    *,
    chain: tuple[str, ...] | list[str] = ("worker",),
    person: str = "alice",
    mode: str = "interactive",
    tenant: str = "",
    tool: str | None = None,
    args: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    delegation: dict[str, Any] | None = None,
    plan: list[dict[str, Any]] | None = None,
    counters: dict[str, float] | None = None,
    budget: dict[str, float] | None = None,
    narrowing: dict[str, list[str]] | None = None,
    actor_budgets: dict[str, dict[str, float]] | None = None,
    versions: dict[str, str] | None = None,
    has_plan: bool = False,
    plan_step: str = "",
    explain: bool = False,
) -> pb.CheckRequest:
    """The CheckRequest a driver would send; each agent of `chain` pinned to its current version
    unless `versions` says otherwise. `narrowing` is what the acting (last) agent received."""
    run = pb.RunContext(
        run_id="run-1",
        tenant=tenant,
        mode={"interactive": pb.RUN_MODE_INTERACTIVE, "background": pb.RUN_MODE_BACKGROUND}[mode],
        has_plan=has_plan,
    )
    run.actor_chain.add(kind=pb.ACTOR_KIND_PERSON, id=person)
    for i, name in enumerate(chain):
        version = (versions or {}).get(name) or (p.agents[name].version if name in p.agents else "v-unknown")
        actor = run.actor_chain.add(kind=pb.ACTOR_KIND_AGENT, id=name, agent_version=version, run_id=f"run-{i}")
        if narrowing and i == len(chain) - 1:
            json_format.ParseDict(narrowing, actor.narrowing)
        if actor_budgets and name in actor_budgets:
            json_format.ParseDict(actor_budgets[name], actor.budget)
    if budget:
        json_format.ParseDict(budget, run.budget)
    request = pb.CheckRequest(run=run, explain=explain)
    if counters:
        json_format.ParseDict(counters, request.counters)
    if tool is not None:
        request.tool_call.tool = tool
        request.tool_call.plan_step = plan_step
        request.tool_call.arguments.update(args or {})
    elif model is not None:
        json_format.ParseDict(model, request.model_call)
    elif delegation is not None:
        json_format.ParseDict(delegation, request.delegation)
    elif plan is not None:
        request.plan.SetInParent()  # an empty plan is still a plan action
        for step in plan:
            s = request.plan.steps.add(id=step.get("id", ""), tool=step["tool"])
            if "args" in step:
                s.arguments.update(step["args"])
    return request


@dataclass
class Outcome:
    verdict: str  # ALLOW, DENY, REQUIRE_APPROVAL, HALT, or INVALID (InvalidRequest raised)
    code: str
    rule: str
    reason: str
    response: pb.CheckResponse | None


def outcome(p: PolicySet, request: pb.CheckRequest, approver: str = "") -> Outcome:
    """`approver`: a person's approval the service verified (the engine never reads one from the request).
    The versions the request names are read from the catalog first, as the server reads them."""
    try:
        r = decide(p, request, approver=approver, pinned=pinned.load(p, request),
                   approved_rules=frozenset(rule.name for rule in p.rules) if approver else frozenset())
    except InvalidRequest as exc:
        return Outcome("INVALID", exc.code, exc.field, exc.message, None)
    return Outcome(pb.Verdict.Name(r.verdict).removeprefix("VERDICT_"), r.code, r.rule, r.reason, r)


@dataclass
class Case:
    id: str
    verdict: str
    code: str
    rule: str | None = None
    folder: str = "engine"
    kw: dict[str, Any] = field(default_factory=dict)

    def run(self, cel_engine: str = "native") -> Outcome:
        p = policies(self.folder, cel_engine)
        kw = dict(self.kw)
        approver = kw.pop("approver", "")
        return outcome(p, build(p, **kw), approver)

    def check(self, cel_engine: str = "native") -> Outcome:
        got = self.run(cel_engine)
        assert (got.verdict, got.code) == (self.verdict, self.code), f"{self.id}: {got}"
        if self.rule is not None:
            assert got.rule == self.rule, f"{self.id}: {got}"
        assert got.reason, f"{self.id}: a verdict always carries a reason a person can read"
        return got


def case(id: str, verdict: str, code: str, rule: str | None = None, folder: str = "engine", **kw: Any) -> Case:
    return Case(id, verdict, code, rule, folder, kw)


def params(cases: list[Case]) -> list[Any]:
    import pytest

    return [pytest.param(c, id=c.id) for c in cases]
