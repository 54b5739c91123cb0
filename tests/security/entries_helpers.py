"""What the skills and templates tests share: a real checkpoint whose acme reviews changes, people
with their own credentials, and short ways to start a run, call a tool and read the record."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml
from server.conftest import TOKEN

from checkpoint.server import AuthPolicy
from warden.checkpoint.v1 import checkpoint_pb2 as pb

# carol and dave administer acme, erin operates it; frank has a credential and no role in acme
PEOPLE = {name: f"{name}-token-0123456789abcdef" for name in ("carol", "dave", "erin", "frank")}
ROLES = {"admin": ["carol", "dave"], "operator": ["erin", "alice"]}  # alice: the person of the runs


def reviewed(start: Any, policy_dir: Path, *, review: bool = True) -> Any:
    """A checkpoint on a copy of the shipped policies, acme with the roles above."""
    path = policy_dir / "tenants" / "acme.yaml"
    tenant = yaml.safe_load(path.read_text())
    tenant.update(review_changes=review, roles=ROLES)
    path.write_text(yaml.safe_dump(tenant))
    tokens = {hashlib.sha256(TOKEN.encode()).digest(): "driver"}
    tokens.update({hashlib.sha256(t.encode()).digest(): name for name, t in PEOPLE.items()})
    return start(auth=AuthPolicy(tokens=tokens))


def as_(running: Any, person: str) -> Any:
    return running.stub(PEOPLE[person])


def run_of(running: Any, agent: str = "recon", **fields: Any) -> pb.StartRunResponse:
    started = running.start_run(agent, **fields)
    assert started.run_token, started.decision
    return started


def context(started: pb.StartRunResponse) -> pb.RunContext:
    return pb.RunContext(run_token=started.run_token)


def call(running: Any, started: pb.StartRunResponse, tool: str, **arguments: Any) -> pb.CheckResponse:
    request = pb.CheckRequest(run=context(started), tool_call=pb.ToolCall(tool=tool))
    request.tool_call.arguments.update(arguments)
    return running.stub().Check(request, timeout=5)


def load(running: Any, started: pb.StartRunResponse, name: str) -> pb.LoadSkillResponse:
    return running.stub().LoadSkill(pb.LoadSkillRequest(run=context(started), name=name), timeout=5)


def propose(running: Any, person: str, kind: str, text: str, note: str = "") -> pb.CatalogEntryActResponse:
    return as_(running, person).ProposeCatalogEntry(
        pb.ProposeCatalogEntryRequest(kind=kind, definition_yaml=text, note=note), timeout=10)


def review(running: Any, person: str, kind: str, name: str, version: str,
           approve: bool = True) -> pb.CatalogEntryActResponse:
    return as_(running, person).ReviewCatalogEntry(pb.ReviewCatalogEntryRequest(
        kind=kind, tenant="acme", name=name, version=version, approve=approve, note="read it"), timeout=10)


def live(running: Any, kind: str, name: str) -> Any:
    return running.server.store.current.catalog.entries.live(kind, "acme", name)


def verdict(response: Any) -> tuple[str, str]:
    return pb.Verdict.Name(response.verdict).removeprefix("VERDICT_"), response.code


def entry_records(running: Any, kind: str) -> list[dict[str, Any]]:
    """The catalog's records of acts on skills or templates, oldest first."""
    return [r for r in running.records(catalog=True) if r["action"] == "catalog"
            and (r["arguments"] or {}).get("kind") == kind]


# -- a grid of calls over the shipped policies, for the property tests ------------------------------

SHIPPED = Path(__file__).resolve().parents[2] / "policies"
TARGETS = ("web.lab.example.com", "payments.lab.example.com", "example.org", "10.20.0.5", "10.20.0.0/24",
           "10.99.0.1", "x.gov")
ARGUMENTS: dict[str, list[dict[str, Any]]] = {
    "create_task_from_template": [
        *({"template": t, "target": x} for t in ("web-basic", "web", "intrusive-bruteforce") for x in TARGETS),
        {"template": "web-basic", "target": "web.lab.example.com", "node": "lab-node-1"},
        {"template": "web-basic", "target": "web.lab.example.com", "node": "prod-node-1"},
        {"template": "web-basic", "target": "web.lab.example.com", "image": "evil/miner:1"}],
    "list_templates": [{}],
    "get_task": [{"task_id": "task-abc"}],
    "cancel_task": [{"task_id": "task-abc"}],
    "lookup_order": [{"order_id": "ord-1", "customer": c} for c in ("customer:acme-1", "customer:vip-1")],
    "read_invoice": [{"invoice_id": "inv-1", "customer": c} for c in ("customer:acme-1", "customer:vip-1")],
    "propose_refund": [{"invoice_id": "inv-1", "payment_id": "pay_1", "customer": "customer:acme-1",
                        "amount_usd": a, "reason": "late"} for a in (10, 5000)],
    "run_shell": [{"program": "echo", "arg": "hi"}],
    "update_agent": [{"agent": "recon"}],
}


def request_of(policies: Any, agent: str, tool: str, args: dict[str, Any], mode: int) -> pb.CheckRequest:
    """A call of a run of `agent` (its current version), with the tenant a token would establish."""
    version = policies.agents[agent]
    run = pb.RunContext(run_id="run-1", root_run_id="run-1", tenant=version.tenant, mode=mode)
    run.actor_chain.add(kind=pb.ACTOR_KIND_PERSON, id="alice")
    run.actor_chain.add(kind=pb.ACTOR_KIND_AGENT, id=agent, agent_version=version.version, run_id="run-1")
    request = pb.CheckRequest(run=run, tool_call=pb.ToolCall(tool=tool))
    request.tool_call.arguments.update(args)
    return request


def shipped_requests(policies: Any) -> Any:
    """(agent, request) for every shipped agent, tool, argument set of ARGUMENTS and mode."""
    for agent in sorted(policies.agents):
        for tool in sorted(policies.tools):
            for args in ARGUMENTS.get(tool, [{}]):
                for mode in (pb.RUN_MODE_INTERACTIVE, pb.RUN_MODE_BACKGROUND):
                    yield agent, request_of(policies, agent, tool, args, mode)
