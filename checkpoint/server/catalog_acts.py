"""The agent catalog's RPCs: read it, propose a change, review a proposal, retire a version.

Who may do what: reads need a principal that names the agent's tenant and, for a person's own
credential, a role there. A change is proposed by a person (operator or admin of the tenant,
with their own credential) or by an agent (its run token: the proposer is the run's agent, and
the live version stays until an admin decides). Reviews and retirements are an admin's, never
of their own proposal. Every act is recorded in the decision log before it takes effect; a
refusal is recorded too. After an act the policy store's live versions are refreshed at once.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format

from checkpoint.policy import PolicySet, lifecycle
from checkpoint.policy.catalog import CatalogError, Change
from checkpoint.policy.loader import load_agent_definition
from checkpoint.policy.principals import Principal, caller_name
from checkpoint.policy.roles import role_refusal, roles_of
from checkpoint.server import convert
from checkpoint.server.act_records import CatalogAct, stamp
from checkpoint.server.recorded_acts import perform
from checkpoint.server.runs import Refused
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import InvalidArgument, PermissionDenied

if TYPE_CHECKING:
    from checkpoint.server.collaborators import PoliciesInForce, Recorder, RunState

ALLOW, DENY = pb.VERDICT_ALLOW, pb.VERDICT_DENY
log = logging.getLogger("warden.checkpoint.service")
CHANGEABLE = frozenset({"allowlist", "scope", "budget", "persona", "description", "delegates"})
MAX_DEFINITION_BYTES = 64 * 1024


def version_info(policies: PolicySet, row: dict[str, Any], agent: str) -> pb.AgentVersionInfo:
    """A history row (catalog.history) as the wire has it, compared with the live version."""
    info = pb.AgentVersionInfo(agent=agent, tenant=row["snapshot"]["tenant"])
    for field in ("version", "status", "source", "proposed_by", "proposed_at", "note", "decided_by", "decided_at",
                  "decision_note", "first_seen"):
        setattr(info, field, row.get(field) or "")
    info.definition.update(json.loads(json.dumps(lifecycle.definition(row["snapshot"]))))
    live = policies.catalog.live_version(agent)
    current = policies.catalog.get(agent, live) if live else None
    if row["version"] != live:
        before = current.snapshot() if current else None
        info.widens.extend(lifecycle.widenings(before, row["snapshot"]))
        info.diff.extend(lifecycle.diff(before, row["snapshot"]))
    return info


def owning_tenant(policies: PolicySet, agent: str, rows: list[dict[str, Any]]) -> str:
    """The tenant an agent belongs to: its live version's, else its first version's. Never a pending
    proposal's: a proposal must not move who may read or review the agent."""
    live = policies.agents.get(agent)
    if live is not None:
        return live.tenant
    return str(rows[0]["snapshot"]["tenant"]) if rows else ""


def may_read(policies: PolicySet, caller: str, tenant: str) -> bool:
    """Whether the caller may read the catalog of `tenant` (its agents, skills, statistics)."""
    principal = policies.principals.of(caller)
    if principal is None or not principal.covers(tenant):
        return False
    return not principal.acts_as_self or bool(roles_of(policies.tenants.get(tenant), caller_name(caller)))


def person_acting(policies: PolicySet, principal: Principal, caller: str, tenant: str, role: str) -> str:
    """The person acting with their own credential, holding `role` in `tenant`."""
    person = caller_name(caller)
    if not principal.acts_as_self or not principal.covers(tenant):
        raise Refused(codes.CALLER_NOT_PERMITTED, f"{person!r} (principal {principal.name!r}) may not change "
                      f"the catalog of tenant {tenant!r}: a person's own credential is needed", "principal")
    refusal = role_refusal(policies.tenants, tenant, person, role)
    if refusal is not None:
        raise Refused(codes.ROLE_REQUIRED, refusal, "role")
    return person


class CatalogActs:
    def __init__(self, in_force: PoliciesInForce, recorder: Recorder, run_state: RunState):
        self.in_force = in_force
        self.recorder = recorder
        self.run_state = run_state

    # -- the policy files' own changes ---------------------------------------------------------

    def record_file_changes(self, policies: PolicySet) -> None:
        """A load applied or proposed policy files' agent changes: each goes on the record. Best
        effort: the files changed on the operator's disk whatever the log says."""
        for change in policies.catalog_changes:
            response = pb.CheckResponse(verdict=ALLOW, rule="catalog", policy_revision=policies.revision,
                                        code=codes.PROPOSED if change.act == "propose" else codes.CATALOG_CHANGED,
                                        reason=f"{change.act} {getattr(change, 'label', change.agent)} "
                                               f"{change.version} from {change.source}")
            record = CatalogAct.answering(response, stamp(response), policies, change.by, None, tenant=change.tenant,
                                          agent=change.agent, agent_version=change.version, action="catalog",
                                          arguments=change.details()).to_dict()
            try:
                self.recorder.append(record)
            except Exception as exc:  # noqa: BLE001
                self.recorder.metrics.audit_failures.inc()
                log.error("catalog change %s %s %s not recorded: %s", change.act, change.agent, change.version, exc)
            self.recorder.count(response.verdict, response.code)

    # -- reads ---------------------------------------------------------------------------------

    def list_agents(self, request: pb.ListAgentsRequest, caller: str) -> pb.ListAgentsResponse:
        policies = self.in_force.current()
        out = pb.ListAgentsResponse()
        catalog = policies.catalog
        for name in sorted(policies.defined_agents):
            rows = catalog.history(name)
            if not rows:
                continue
            tenant = owning_tenant(policies, name, rows)
            if (request.tenant and tenant != request.tenant) or not may_read(policies, caller, tenant):
                continue
            out.agents.add(agent=name, tenant=tenant, live_version=catalog.live_version(name) or "",
                           pending_versions=[r["version"] for r in rows if r["status"] == lifecycle.PENDING])
        return out

    def agent_history(self, request: pb.AgentHistoryRequest, caller: str) -> pb.AgentHistoryResponse:
        policies = self.in_force.current()
        rows = policies.catalog.history(request.agent) if request.agent else []
        if not rows or not may_read(policies, caller, owning_tenant(policies, request.agent, rows)):
            # the same answer for an agent that does not exist and one the caller may not see
            raise PermissionDenied(codes.CALLER_NOT_PERMITTED,
                                   f"no agent {request.agent[:100]!r} that {caller_name(caller)!r} may read", "agent")
        out = pb.AgentHistoryResponse(live_version=policies.catalog.live_version(request.agent) or "")
        out.versions.extend(version_info(policies, r, request.agent) for r in rows)
        if request.compare_from:
            by_version = {r["version"]: r["snapshot"] for r in rows}
            to = request.compare_to or out.live_version
            for field, wanted in (("compare_from", request.compare_from), ("compare_to", to)):
                if wanted not in by_version:
                    raise InvalidArgument(codes.UNKNOWN_AGENT_VERSION,
                                          f"no version {wanted[:100]!r} of agent {request.agent[:100]!r}", field)
            before, after = by_version[request.compare_from], by_version[to]
            out.comparison.CopyFrom(pb.AgentVersionComparison(
                from_version=request.compare_from, to_version=to, diff=lifecycle.diff(before, after),
                widens=lifecycle.widenings(before, after)))
        return out

    # -- acts ----------------------------------------------------------------------------------

    def propose(self, request: pb.ProposeAgentChangeRequest, caller: str) -> pb.CatalogActResponse:
        def act(policies: PolicySet, principal: Principal, record: Any, fields: dict[str, Any]) -> Change:
            live = policies.agents.get(request.agent)
            if live is None:
                raise Refused(codes.UNKNOWN_AGENT, f"no live agent named {request.agent[:100]!r}: an agent is created "
                              "in the policy files", "catalog.agent")
            fields.update(tenant=live.tenant, agent=live.name)
            if request.HasField("run"):
                if request.WhichOneof("change") != "changes":  # an agent changes fields, nothing else
                    raise Refused(codes.INVALID_REQUEST, "an agent proposes changed fields ("
                                  f"{', '.join(sorted(CHANGEABLE))}), never a whole definition or a rollback",
                                  "catalog.change")
                by, source = self._proposing_agent(policies, request, principal, caller, live.tenant, fields)
            else:
                by = person_acting(policies, principal, caller, live.tenant, "operator")
                source = f"proposed by {by}"
            version = self._proposed_version(policies, request, live.snapshot())
            if version.name != live.name:
                raise Refused(codes.INVALID_REQUEST, f"the definition names agent {version.name!r}, not "
                              f"{live.name!r}", "catalog.definition")
            if request.rollback_to:
                source = f"rollback to {request.rollback_to[:40]} by {by}"
            fields["agent_version"] = version.version
            return policies.catalog.propose(version, by=by, source=source, note=request.note[:1000],
                                            for_person=fields.get("accountable_person") or "", record=record,
                                            revision=policies.revision)

        return self._act("propose", act, codes.PROPOSED, caller)

    def review(self, request: pb.ReviewAgentChangeRequest, caller: str) -> pb.CatalogActResponse:
        def act(policies: PolicySet, principal: Principal, record: Any, fields: dict[str, Any]) -> Change:
            tenant = self._tenant_of(policies, request.agent, request.version)
            fields.update(tenant=tenant, agent=request.agent[:100], agent_version=request.version[:40])
            by = self._admin_of_both(policies, principal, caller, request.agent, request.version)
            return policies.catalog.decide(request.agent, request.version, approve=request.approve, by=by,
                                           note=request.note[:1000], record=record)

        return self._act("approve" if request.approve else "reject", act, codes.CATALOG_CHANGED, caller)

    def retire(self, request: pb.RetireAgentVersionRequest, caller: str) -> pb.CatalogActResponse:
        def act(policies: PolicySet, principal: Principal, record: Any, fields: dict[str, Any]) -> Change:
            tenant = self._tenant_of(policies, request.agent, request.version)
            fields.update(tenant=tenant, agent=request.agent[:100], agent_version=request.version[:40])
            by = self._admin_of_both(policies, principal, caller, request.agent, request.version)
            return policies.catalog.retire(request.agent, request.version, by=by, note=request.note[:1000],
                                           record=record)

        return self._act("retire", act, codes.CATALOG_CHANGED, caller)

    def _act(self, name: str, act: Any, code: str, caller: str) -> pb.CatalogActResponse:
        """Check and do one act; record it (ALLOW) before it is written, or record its refusal."""

        def answer(response: pb.CheckResponse, change: Change) -> None:
            response.code = code
            response.reason = f"{change.act} {change.agent} {change.version} by {change.by}" + (
                f": {change.note[:300]}" if change.note else "")

        def record_of(response: pb.CheckResponse, policies: PolicySet, principal: Principal | None,
                      fields: dict[str, Any], change: Change | None) -> dict[str, Any]:
            details = change.details() if change is not None else {"act": name}
            return self._record(response, policies, caller, principal, fields, details)

        done = perform(self.in_force, self.recorder, caller, name, "catalog", act, answer=answer, record_of=record_of,
                       store_errors=(CatalogError,))
        out = pb.CatalogActResponse(decision=done.response)
        change = done.result
        if change is not None:
            self.in_force.refresh()
            rows = [r for r in done.policies.catalog.history(change.agent) if r["version"] == change.version]
            if rows:
                out.version.CopyFrom(version_info(done.policies, rows[0], change.agent))
        return out

    def _record(self, response: pb.CheckResponse, policies: PolicySet, caller: str, principal: Principal | None,
                fields: dict[str, Any], details: dict[str, Any]) -> dict[str, Any]:

        return CatalogAct.answering(
            response, stamp(response), policies, caller_name(caller), principal,
            tenant=fields.get("tenant"), agent=fields.get("agent"),
            agent_version=fields.get("agent_version"), run_id=fields.get("run_id"),
            root_run_id=fields.get("root_run_id"), parent_run_id=fields.get("parent_run_id"),
            actor_chain=fields.get("actor_chain"), accountable_person=fields.get("accountable_person"),
            action="catalog", arguments=details
        ).to_dict()

    # -- who, what -----------------------------------------------------------------------------

    def _proposing_agent(self, policies: PolicySet, request: pb.ProposeAgentChangeRequest, principal: Principal,
                         caller: str, tenant: str, fields: dict[str, Any]) -> tuple[str, str]:
        """An agent's proposal: the run its token establishes, acting in the target's tenant."""
        check = pb.CheckRequest(run=request.run)
        established = self.run_state.establish(check, principal, caller)
        run = check.run
        chain = convert.actor_chain(run.actor_chain)
        fields.update(run_id=run.run_id, root_run_id=run.root_run_id or run.run_id,
                      parent_run_id=run.parent_run_id or None, actor_chain=chain,
                      accountable_person=chain[0]["id"] if chain else None)
        if established.agent == "" or run.tenant != tenant or not principal.may_check(tenant, established.agent):
            raise Refused(codes.CALLER_NOT_PERMITTED, f"run {run.run_id!r} may not propose changes to agents of "
                          f"tenant {tenant!r}", "catalog.run")
        acting = chain[-1]
        by = f"agent:{acting['id']}@{acting.get('agent_version', '')}"
        return by, f"proposed by agent {acting['id']} in run {run.run_id}"

    @staticmethod
    def _proposed_version(policies: PolicySet, request: pb.ProposeAgentChangeRequest, live: dict[str, Any]) -> Any:
        which = request.WhichOneof("change")
        shown = f"<proposal for {request.agent[:100]}>"
        if which == "rollback_to":
            old = policies.catalog.get(request.agent, request.rollback_to)
            if old is None:
                raise Refused(codes.UNKNOWN_AGENT_VERSION, f"agent {request.agent[:100]!r} has no version "
                              f"{request.rollback_to[:40]!r}", "catalog.rollback_to")
            # copied forward as it was, re-checked against today's tools and agents
            return load_agent_definition(json.dumps(lifecycle.definition(old.snapshot())), shown, policies)
        if which == "definition_yaml":
            text = request.definition_yaml
        elif which == "changes":
            changes = json_format.MessageToDict(request.changes)
            unknown = sorted(set(changes) - CHANGEABLE)
            if unknown:
                raise Refused(codes.INVALID_REQUEST, f"cannot change {', '.join(unknown)} (only "
                              f"{', '.join(sorted(CHANGEABLE))})", "catalog.changes")
            text = json.dumps({**lifecycle.definition(live), **changes})
        else:
            raise Refused(codes.INVALID_REQUEST, "a proposal carries a definition, changes or a version to roll "
                          "back to", "catalog.change")
        if len(text.encode("utf-8")) > MAX_DEFINITION_BYTES:
            raise Refused(codes.INVALID_REQUEST, f"the definition is larger than {MAX_DEFINITION_BYTES} bytes",
                          "catalog.definition")
        return load_agent_definition(text, shown, policies)

    @staticmethod
    def _tenant_of(policies: PolicySet, agent: str, version: str) -> str:
        """The tenant that owns the agent (its live version's); the version named must exist."""
        found = policies.catalog.get(agent, version) if agent and version else None
        if found is None:
            raise Refused(codes.UNKNOWN_AGENT_VERSION, f"agent {agent[:100]!r} has no version {version[:40]!r}",
                          "catalog.version")
        live = policies.agents.get(agent)
        return live.tenant if live is not None else found.tenant

    def _admin_of_both(self, policies: PolicySet, principal: Principal, caller: str, agent: str, version: str) -> str:
        """An admin of the tenant that owns the agent, and of the version's tenant when a policy file
        moves the agent: neither tenant's agents change without its own admin."""
        found = policies.catalog.get(agent, version)
        tenants = {self._tenant_of(policies, agent, version), found.tenant if found is not None else ""} - {""}
        by = ""
        for tenant in sorted(tenants):
            by = person_acting(policies, principal, caller, tenant, "admin")
        return by
