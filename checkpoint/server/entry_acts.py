"""Skills and templates at the checkpoint (docs/skills.md): their catalog acts, what a run may load,
and the arguments the checkpoint fills in for a `templates:` tool.

Nothing here widens what an agent may do. A skill's text reaches the model as data, only the
versions the run pinned at its start (its run token names them), and every load is recorded
before the text leaves. A template is resolved into the call's arguments *before* the call is
decided, so its image, node, target and every other value it expands into are checked by the
same allowlist, scope, off-limits and rules as any argument (engine/expanded.py), and the grant
covers exactly what the toolrunner runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from google.protobuf import struct_pb2
from pydantic import ValidationError

from checkpoint.audit.bounded import bound_refusal
from checkpoint.policy import PolicySet, model
from checkpoint.policy.entries import (
    FILLED,
    KINDS,
    MAX_LISTED,
    PLACED,
    SKILL,
    TEMPLATE,
    Entry,
    EntryChange,
    EntryError,
)
from checkpoint.policy.entries import listed as listed_template
from checkpoint.policy.entries import resolve as resolve_template
from checkpoint.policy.lifecycle import RETIRED
from checkpoint.policy.loader import load_entry_definition
from checkpoint.policy.policyset import AgentVersion
from checkpoint.policy.principals import Principal, caller_name
from checkpoint.policy.roles import has_role
from checkpoint.server import convert
from checkpoint.server.act_records import CatalogAct, SkillLoaded, forget_claimed_run, stamp
from checkpoint.server.catalog_acts import MAX_DEFINITION_BYTES, may_read, person_acting
from checkpoint.server.recorded_acts import perform
from checkpoint.server.runs import Refused
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import InvalidArgument, PermissionDenied

if TYPE_CHECKING:
    from checkpoint.policy.entries import EntryCatalog
    from checkpoint.server.collaborators import PoliciesInForce, Recorder, RunState

ALLOW, DENY = pb.VERDICT_ALLOW, pb.VERDICT_DENY


# -- what a run may load, and what a `templates:` call is given -----------------------------------


def pins(policies: PolicySet, agent: AgentVersion | None) -> dict[str, str]:
    """The skill versions a run of `agent` may load: of the skills it lists, those live now. A
    skill with no live version (waiting for its first review, retired) is not pinned."""
    if agent is None or not agent.skills:
        return {}
    out = {}
    for name in sorted(agent.skills):
        live = policies.catalog.entries.live(SKILL, agent.tenant, name)
        if live is not None:
            out[name] = live.version
    return out


def fill_arguments(policies: PolicySet, request: pb.CheckRequest) -> bool:
    """Fill a `templates:` tool call's arguments from the run's tenant's reviewed templates, in place,
    before the call is decided; True when it did. The run's tenant is the token's (established).

    `list` fills `templates`; `resolve` fills `spec` with the live template `template` names, TARGET
    replaced by `target`, and puts the template's image and node into the arguments `image` and
    `node` (a call that names others is refused), where the tool's `touches` read them for scope. A
    call may not give the filled argument itself (invalid_arguments), and a name that is not a
    live template of the tenant is unknown_template. Arguments that are not strings are left for
    the input schema to refuse."""
    if request.WhichOneof("action") != "tool_call":
        return False
    tool = policies.tools.get(request.tool_call.tool)
    if tool is None or tool.spec.templates is None:
        return False
    arguments = request.tool_call.arguments
    filled = FILLED[tool.spec.templates]
    if filled in arguments.fields:
        raise Refused(codes.INVALID_ARGUMENTS, f"argument {filled!r} of {tool.name} is filled by the checkpoint from "
                      "the tenant's reviewed templates; a call never gives it", "request.arguments")
    tenant = request.run.tenant or "default"
    catalog = policies.catalog.entries
    if tool.spec.templates == "list":
        arguments.update({filled: [listed_template(t) for t in catalog.live_entries(TEMPLATE, tenant)[:MAX_LISTED]]})
        return True
    name, target = arguments.fields.get("template"), arguments.fields.get("target")
    if name is None or target is None or name.WhichOneof("kind") != "string_value" \
            or target.WhichOneof("kind") != "string_value":
        return False
    template = catalog.live(TEMPLATE, tenant, name.string_value)
    if template is None:
        raise Refused(codes.UNKNOWN_TEMPLATE, f"no reviewed template named {name.string_value[:100]!r} in tenant "
                      f"{tenant!r} (list_templates shows them)", "template")
    spec = resolve_template(template, target.string_value)
    node = arguments.fields.get("node")
    if "node" not in spec and node is not None and node.WhichOneof("kind") == "string_value":
        spec["node"] = node.string_value  # the template leaves the node to the call
    # the template's image and node become the call's, so `touches` reads them like any argument
    for key in PLACED:
        if key not in spec:
            continue
        given = arguments.fields.get(key)
        if given is not None and (given.WhichOneof("kind") != "string_value" or given.string_value != spec[key]):
            raise Refused(codes.INVALID_ARGUMENTS, f"template {template.name!r} runs {key} {spec[key]!r}; the call "
                          f"may not name another", "request.arguments")
        arguments.update({key: spec[key]})
    arguments.update({filled: spec})
    return True


# -- the catalog acts ------------------------------------------------------------------------------


def _definition(entry: Entry) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(json.loads(json.dumps(entry.definition())))
    return out


def entry_info(row: dict[str, Any], kind: str, tenant: str, name: str) -> pb.CatalogEntryInfo:
    """A history row (EntryCatalog.history) as the wire has it."""
    entry = Entry.from_snapshot(row["version"], row["snapshot"])
    info = pb.CatalogEntryInfo(kind=kind, tenant=tenant, name=name, description=entry.description,
                               definition=_definition(entry))
    for field in ("version", "status", "source", "proposed_by", "proposed_at", "note", "decided_by", "decided_at",
                  "decision_note", "first_seen"):
        setattr(info, field, row.get(field) or "")
    return info


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise Refused(codes.INVALID_REQUEST, f"kind must be one of {', '.join(KINDS)}", "kind")
    return kind


Act = Callable[[PolicySet, Principal, Callable[[EntryChange], None], dict[str, Any]], EntryChange]


class EntryActs:
    def __init__(self, in_force: PoliciesInForce, recorder: Recorder, run_state: RunState):
        self.in_force = in_force
        self.recorder = recorder
        self.run_state = run_state

    @property
    def _catalog(self) -> EntryCatalog:
        return self.in_force.current().catalog.entries

    # -- reads ---------------------------------------------------------------------------------

    def list_entries(self, request: pb.ListCatalogEntriesRequest, caller: str) -> pb.ListCatalogEntriesResponse:
        policies = self.in_force.current()
        if request.kind not in KINDS:
            raise InvalidArgument(codes.INVALID_REQUEST, f"kind must be one of {', '.join(KINDS)}", "kind")
        out = pb.ListCatalogEntriesResponse()
        for s in policies.catalog.entries.summaries(request.kind):
            if (request.tenant and s["tenant"] != request.tenant) or \
                    not may_read(policies, caller, s["tenant"]):
                continue
            out.entries.add(kind=request.kind, **s)
        return out

    def history(self, request: pb.CatalogEntryHistoryRequest, caller: str) -> pb.CatalogEntryHistoryResponse:
        policies = self.in_force.current()
        if request.kind not in KINDS:
            raise InvalidArgument(codes.INVALID_REQUEST, f"kind must be one of {', '.join(KINDS)}", "kind")
        tenant = request.tenant or "default"
        rows = policies.catalog.entries.history(request.kind, tenant, request.name) if request.name else []
        if not rows or not may_read(policies, caller, tenant):
            # the same answer for an entry that does not exist and one the caller may not see
            raise PermissionDenied(codes.CALLER_NOT_PERMITTED, f"no {request.kind} {request.name[:100]!r} in tenant "
                                   f"{tenant[:100]!r} that {caller_name(caller)!r} may read", "name")
        live = policies.catalog.entries.live(request.kind, tenant, request.name)
        out = pb.CatalogEntryHistoryResponse(live_version=live.version if live else "")
        out.versions.extend(entry_info(r, request.kind, tenant, request.name) for r in rows)
        return out

    # -- acts ----------------------------------------------------------------------------------

    def propose(self, request: pb.ProposeCatalogEntryRequest, caller: str) -> pb.CatalogEntryActResponse:
        def act(policies: PolicySet, principal: Principal, record: Callable[[EntryChange], None],
                fields: dict[str, Any]) -> EntryChange:
            kind = fields["kind"] = _kind(request.kind)
            run_tenant = ""
            if request.HasField("run"):
                run_tenant = self._proposing_run(policies, request, principal, caller, fields)
                if request.WhichOneof("source") != "from_call":
                    # what an agent saves is a spec that ran, from the checkpoint's own record: never
                    # a definition it wrote (a spec nobody ran, a skill's text its next runs would read)
                    raise Refused(codes.INVALID_REQUEST, "an agent proposes only a template saved from a call of its "
                                  "own run (from_call), never a written definition; skills are proposed by people",
                                  "catalog.source")
            entry = self._proposed(policies, request, kind, fields, run_tenant, caller)
            fields["tenant"] = entry.tenant
            if request.HasField("run"):
                if entry.tenant != run_tenant:
                    raise Refused(codes.CALLER_NOT_PERMITTED, f"a run of tenant {run_tenant!r} may not propose a "
                                  f"{kind} for tenant {entry.tenant!r}", "catalog.run")
                acting = fields["actor_chain"][-1]
                by = f"agent:{acting['id']}@{acting.get('agent_version', '')}"
                source = f"proposed by agent {acting['id']} in run {fields['run_id']}"
            else:
                by = person_acting(policies, principal, caller, entry.tenant, "operator")
                source = f"saved by {by}"
            if request.HasField("from_call"):
                source += f" from call {request.from_call.decision_id[:64]} of run {request.from_call.run_id[:64]}"
            return policies.catalog.entries.propose(entry, by=by, source=source, note=request.note[:1000],
                                                    for_person=fields.get("accountable_person") or "",
                                                    record=record)

        return self._act("propose", act, codes.PROPOSED, caller)

    def review(self, request: pb.ReviewCatalogEntryRequest, caller: str) -> pb.CatalogEntryActResponse:
        def act(policies: PolicySet, principal: Principal, record: Callable[[EntryChange], None],
                fields: dict[str, Any]) -> EntryChange:
            kind, tenant = _kind(request.kind), request.tenant or "default"
            fields.update(kind=kind, tenant=tenant)
            by = person_acting(policies, principal, caller, tenant, "admin")
            return policies.catalog.entries.decide(kind, tenant, request.name, request.version,
                                                   approve=request.approve, by=by, note=request.note[:1000],
                                                   record=record)

        return self._act("approve" if request.approve else "reject", act, codes.CATALOG_CHANGED, caller)

    def retire(self, request: pb.RetireCatalogEntryRequest, caller: str) -> pb.CatalogEntryActResponse:
        def act(policies: PolicySet, principal: Principal, record: Callable[[EntryChange], None],
                fields: dict[str, Any]) -> EntryChange:
            kind, tenant = _kind(request.kind), request.tenant or "default"
            fields.update(kind=kind, tenant=tenant)
            by = person_acting(policies, principal, caller, tenant, "admin")
            return policies.catalog.entries.retire(kind, tenant, request.name, request.version, by=by,
                                                   note=request.note[:1000], record=record)

        return self._act("retire", act, codes.CATALOG_CHANGED, caller)

    def _act(self, name: str, act: Act, code: str, caller: str) -> pb.CatalogEntryActResponse:
        """Check and do one act; record it (ALLOW) before it is written, or record its refusal."""

        def answer(response: pb.CheckResponse, change: EntryChange) -> None:
            response.code = code
            response.reason = f"{change.act} {change.label} {change.version} by {change.by}" + (
                f": {change.note[:300]}" if change.note else "")

        def record_of(response: pb.CheckResponse, policies: PolicySet, principal: Principal | None,
                      fields: dict[str, Any], change: EntryChange | None) -> dict[str, Any]:
            details = change.details() if change is not None else {
                "act": name, **({"kind": fields["kind"]} if fields.get("kind") else {})}
            return self._record(response, policies, caller, principal, fields, details)

        done = perform(self.in_force, self.recorder, caller, name, "catalog", act, answer=answer, record_of=record_of,
                       store_errors=(EntryError,))
        out = pb.CatalogEntryActResponse(decision=done.response)
        change = done.result
        if change is not None:
            rows = [r for r in done.policies.catalog.entries.history(change.kind, change.tenant, change.name)
                    if r["version"] == change.version]
            if rows:
                out.entry.CopyFrom(entry_info(rows[0], change.kind, change.tenant, change.name))
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

    # -- who proposes, what -----------------------------------------------------------------------

    def _proposing_run(self, policies: PolicySet, request: pb.ProposeCatalogEntryRequest, principal: Principal,
                       caller: str, fields: dict[str, Any]) -> str:
        """An agent's proposal: the run its token establishes; returns the run's tenant."""
        check = pb.CheckRequest(run=request.run)
        established = self.run_state.establish(check, principal, caller)
        run = check.run
        chain = convert.actor_chain(run.actor_chain)
        fields.update(run_id=run.run_id, root_run_id=run.root_run_id or run.run_id,
                      parent_run_id=run.parent_run_id or None, actor_chain=chain,
                      accountable_person=chain[0]["id"] if chain else None, tenant=run.tenant)
        if established.agent == "" or not principal.may_check(run.tenant, established.agent):
            raise Refused(codes.CALLER_NOT_PERMITTED, f"run {run.run_id!r} may not propose to the catalog of "
                          f"tenant {run.tenant!r}", "catalog.run")
        fields.update(agent=chain[-1]["id"], agent_version=chain[-1].get("agent_version"))
        return run.tenant

    def _proposed(self, policies: PolicySet, request: pb.ProposeCatalogEntryRequest, kind: str,
                  fields: dict[str, Any], run_tenant: str, caller: str) -> Entry:
        which = request.WhichOneof("source")
        shown = f"<proposal for {kind} {request.name[:100] or '?'}>"
        if which == "definition_yaml":
            if len(request.definition_yaml.encode("utf-8")) > MAX_DEFINITION_BYTES:
                raise Refused(codes.INVALID_REQUEST, f"the definition is larger than {MAX_DEFINITION_BYTES} bytes",
                              "catalog.definition")
            entry = load_entry_definition(request.definition_yaml, shown, kind, policies)
            if request.name and request.name != entry.name:
                raise Refused(codes.INVALID_REQUEST, f"the definition names {kind} {entry.name!r}, not "
                              f"{request.name[:100]!r}", "catalog.definition")
            return entry
        if which == "from_call":
            if kind != TEMPLATE:
                raise Refused(codes.INVALID_REQUEST, "only a template is saved from a call", "catalog.from_call")
            return self._from_call(policies, request, fields, run_tenant, caller)
        raise Refused(codes.INVALID_REQUEST, "a proposal carries a definition or the call to save", "catalog.source")

    def _from_call(self, policies: PolicySet, request: pb.ProposeCatalogEntryRequest, fields: dict[str, Any],
                   run_tenant: str, caller: str) -> Entry:
        """A template from a call the checkpoint allowed: its resolved spec, the target put back as
        TARGET. The decision log is the source, never the caller's account of the call."""
        ref = request.from_call
        if run_tenant and ref.run_id != fields.get("run_id"):
            raise Refused(codes.CALLER_NOT_PERMITTED, "an agent saves a template from a call of its own run",
                          "catalog.from_call")
        found = next((r for r in self.recorder.read(run_id=ref.run_id[:128], verdict="ALLOW")
                      if r.get("decision_id") == ref.decision_id), None) if ref.run_id and ref.decision_id else None
        if found is not None and not run_tenant and not has_role(
                policies.tenants.get(found.get("tenant") or "default"), caller_name(caller), "operator"):
            found = None  # another tenant's call: the same answer as none, so nothing about it leaks
        tool = policies.tools.get(found.get("tool") or "") if found else None
        args = found.get("arguments") if found else None
        if found is None or found.get("action") != "tool_call" or tool is None or tool.spec.templates != "resolve" \
                or not isinstance(args, dict) or not isinstance(args.get("spec"), dict) \
                or not isinstance(args.get("target"), str):
            raise Refused(codes.INVALID_REQUEST, f"decision {ref.decision_id[:64]!r} of run {ref.run_id[:64]!r} is "
                          "not an allowed call of a template tool whose record keeps its spec", "catalog.from_call")
        spec, target = args["spec"], args["target"]
        document = {"kind": "Template", "name": request.name, "tenant": found.get("tenant") or "default",
                    "description": request.description,
                    "spec": {"image": spec.get("image"), "command": [str(p).replace(target, model.TARGET)
                                                                     for p in spec.get("command") or []],
                             **({"node": spec["node"]} if spec.get("node") else {})}}
        try:
            return Entry.of(model.Template.model_validate(document))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            raise Refused(codes.INVALID_REQUEST, f"the saved template is not valid: {problems[:500]}",
                          "catalog.from_call") from None

    # -- a run's skills --------------------------------------------------------------------------

    def run_skills(self, request: pb.RunSkillsRequest, caller: str) -> pb.RunSkillsResponse:
        """The skills the run's token pinned, with their descriptions. A read: not recorded."""
        policies = self.in_force.current()
        principal = policies.principals.of(caller)
        check = pb.CheckRequest(run=request.run)
        try:
            if principal is None:
                raise Refused(codes.CALLER_NOT_PERMITTED, "no principal", "principal")
            established = self.run_state.establish(check, principal, caller)
        except Refused as refused:
            raise PermissionDenied(refused.code, refused.reason, "run") from None
        out = pb.RunSkillsResponse()
        for name, version in sorted(established.skills.items()):
            entry = policies.catalog.entries.get(SKILL, check.run.tenant, name, version)
            out.skills.add(name=name, version=version, description=entry.description if entry else "")
        return out

    def load_skill(self, request: pb.LoadSkillRequest, caller: str) -> pb.LoadSkillResponse:
        """Serve one of the run's pinned skills, recorded before its text is returned."""
        policies = self.in_force.current()
        principal = policies.principals.of(caller)
        response = pb.CheckResponse(verdict=DENY, rule="skill", policy_revision=policies.revision)
        check = pb.CheckRequest(run=request.run)
        name = request.name[:100]
        established = None
        entry: Entry | None = None
        reviewed_by = ""
        try:
            if principal is None:
                raise Refused(codes.CALLER_NOT_PERMITTED, f"the credential {caller_name(caller)[:100]!r} names no "
                              "principal in the policy files", "principal")
            established = self.run_state.establish(check, principal, caller)
            tenant = check.run.tenant or "default"
            if not established.agent or not principal.may_check(tenant, established.agent):
                raise Refused(codes.CALLER_NOT_PERMITTED, f"principal {principal.name!r} may not load skills for "
                              f"this run", "principal")
            catalog = policies.catalog.entries
            version = established.skills.get(request.name)
            if version is None:
                known = bool(request.name) and catalog.known(SKILL, tenant, request.name)
                raise Refused(codes.SKILL_NOT_LISTED if known else codes.UNKNOWN_SKILL,
                              f"skill {name!r} is not one this run may load: its agent does not list it, or it had "
                              "no reviewed version when the run began" if known else
                              f"no skill named {name!r} in tenant {tenant!r}", "skill")
            if catalog.status(SKILL, tenant, request.name, version) == RETIRED:
                raise Refused(codes.SKILL_RETIRED, f"version {version} of skill {name!r}, which this run pinned, was "
                              "retired", "skill")
            entry = catalog.get(SKILL, tenant, request.name, version)
            if entry is None:
                raise Refused(codes.POLICY_ERROR, f"the catalog has no version {version} of skill {name!r}", "skill")
            reviewed_by = next((r["decided_by"] for r in catalog.history(SKILL, tenant, request.name)
                                if r["version"] == version), "") or ""
            response.verdict, response.code = ALLOW, codes.ALLOWED
            response.reason = f"skill {name} {version} loaded"
        except Refused as refused:
            response.code, response.rule, response.reason = refused.code, refused.rule, refused.reason

        if established is None:  # never filed under a run nobody vouched for
            response.reason += forget_claimed_run(check)
        run = check.run
        chain = convert.actor_chain(run.actor_chain)
        last = chain[-1] if chain and chain[-1].get("kind") == "agent" else {}
        record = SkillLoaded.answering(
            response, stamp(response), policies, caller_name(caller), principal,
            tenant=run.tenant or None, run_id=run.run_id or None, root_run_id=run.root_run_id or run.run_id or None,
            parent_run_id=run.parent_run_id or None, actor_chain=chain or None,
            accountable_person=chain[0]["id"] if chain else None, agent=last.get("id"),
            agent_version=last.get("agent_version"), action="load_skill",
            arguments={"skill": name, "version": entry.version if entry else None}).to_dict()
        if established is None:
            record = bound_refusal(record)
        self.recorder.append_or_deny(record, response)
        self.recorder.count(response.verdict, response.code)
        out = pb.LoadSkillResponse(decision=response)
        if response.verdict == ALLOW and entry is not None:
            out.skill.CopyFrom(pb.RunSkill(name=entry.name, version=entry.version, description=entry.description))
            out.text, out.reviewed_by = entry.text, reviewed_by
        return out


