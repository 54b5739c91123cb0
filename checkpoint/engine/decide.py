"""The decision function: one proposed action in, one verdict with a stable code out.

Pure: no I/O, no log, and no clock of its own: the time a rule reads (`now`) is passed in by
the service, never taken from the request, and the pinned agent versions a request names are
read from the catalog by the caller beforehand (`pinned`, policy/pinned.py). The service stamps
the decision id, signs the grant and records the decision. Steps run in DESIGN.md's order and the first failure wins:
request shape, allowlist, scope, off-limits subjects, CEL rules, breakers, limits across runs
(counted beforehand: `limits`), delegation; then, for
a tool call, the active learnings (engine/learnings.py), which may only warn or deny.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import fastjsonschema

from checkpoint.engine import as_read, authority, breakers, expanded, learnings
from checkpoint.engine import limits as limits_step
from checkpoint.engine.context import Call, resolve
from checkpoint.engine.outcome import ALLOW, APPROVE, DENY, HALT, InvalidRequest, Stop, Trace
from checkpoint.policy import CompiledRule, CompiledTool, PolicySet
from checkpoint.policy.entries import PLACED
from checkpoint.policy.limits import NOTHING as NO_USAGE
from checkpoint.policy.limits import LimitUsage
from checkpoint.policy.pinned import NOTHING, PinnedVersions
from checkpoint.policy.policyset import RuleGroup, read_touched
from checkpoint.policy.roles import roles_of
from checkpoint.policy.subjects import Subject, SubjectError
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.structs import UnacceptableValue, struct_to_dict

MAX_ARGUMENT_BYTES = 64 * 1024
MAX_PLAN_STEPS = 100


def decide(policies: PolicySet, request: pb.CheckRequest, *, approver: str = "",
           approved_rules: frozenset[str] = frozenset(), now: datetime | None = None,
           pinned: PinnedVersions = NOTHING, limits: LimitUsage = NO_USAGE) -> pb.CheckResponse:
    """Decide one request. Raises InvalidRequest when it is not well formed enough to decide.

    `pinned`: the agent versions the request names, as `checkpoint.policy.pinned.load` read them
    from the catalog. Left out, only the versions the policy set itself holds are known (a run
    pinned to an older version is then refused `unknown_agent_version`: closed, not open).

    `limits`: the counts of the Instance's limits this request needs, as the service read them from
    their store (checkpoint/policy/limits.py): a limit with no room left refuses (step 6b), and rules
    read them as `limits.NAME`. Left out, no limit counts the call.

    `now`: the checkpoint's time, the `now` rules read (an aware datetime; the service passes its
    clock, tests a fixed time). Left out, it is the wall clock, read only when a rule reads `now`.

    `approver`: the person whose approval of this very call the service has verified (an
    approval token it signed), and `approved_rules` the approve-if rules (by name) that approval
    answered: the call passes only when every approve-if rule that applies is among them. The
    engine never reads an approver from the request itself. A REQUIRE_APPROVAL answer lists
    every approve-if rule that applies in `approval_rules`.
    """
    trace = Trace(enabled=request.explain, outcomes=[])
    response = pb.CheckResponse(policy_revision=policies.revision)
    call: Call | None = None
    try:
        call = resolve(policies, request, trace, pinned)
        call.approver = approver[:100]
        call.approved_rules = approved_rules
        call.now = now
        call.limits = limits
        action = request.WhichOneof("action")
        if action == "tool_call":
            _tool_call(call, request.tool_call, response)
        elif action == "model_call":
            _model_call(call)
        elif action == "delegation":
            _delegation(call, request.delegation, response)
        else:
            _plan(call, request.plan, response)
        response.verdict, response.code = ALLOW, codes.ALLOWED
        if call.approved_by:
            response.rule = "approval"
            response.reason = f"approved by {call.approved_by} (decision {request.approval.decision_id[:64]})"
        else:
            response.rule, response.reason = "allow", "every rule passed"
        if response.learnings:  # advice a person reviewed: on the record with the answer
            response.reason += "; warned by " + ", ".join(f"learning {n.id}" for n in response.learnings)
    except Stop as stop:
        response.verdict, response.code, response.rule, response.reason = (
            stop.verdict, stop.code, stop.rule, stop.reason
        )
        if stop.verdict == APPROVE and call is not None:
            response.approval_rules.extend(f"rule:{name}" for name in call.asking)
        if call is not None and call.handoff_to:
            response.handoff_to = call.handoff_to
    if call is not None:
        response.tenant, response.accountable_person = call.tenant.name, call.person
        if call.agent is not None:
            response.agent, response.agent_version = call.agent.name, call.agent.version
    elif len(request.run.actor_chain) > 1:  # refused before the chain resolved: say who it named
        last = request.run.actor_chain[-1]
        response.agent, response.agent_version = last.id[:100], last.agent_version[:100]
    if trace.outcomes:
        response.explanation.extend(trace.outcomes)
    return response


def touched_by(policies: PolicySet, request: pb.CheckRequest,
               pinned: PinnedVersions = NOTHING) -> dict[str, list[str]]:
    """What a tool call would touch (dimension -> values), read as decide() reads it; {} when the
    call is not well formed enough to say. For coverage reports, never for a decision."""
    if request.WhichOneof("action") != "tool_call":
        return {}
    try:
        call = resolve(policies, request, Trace(enabled=False, outcomes=[]), pinned)
        tool, args = _shape(call, request.tool_call.tool, request.tool_call.arguments)
        return _touched(call, tool, args)
    except (Stop, InvalidRequest):
        return {}


# -- tool calls ---------------------------------------------------------------------------


def _tool_call(call: Call, tc: pb.ToolCall, response: pb.CheckResponse) -> None:
    tool, args = _shape(call, tc.tool, tc.arguments if tc.HasField("arguments") else None)
    if call.agent is not None:
        authority.check_tool(call, tool)
        authority.check_access(call, tool)
    elif tool.spec.agent_management:
        # a person changes agents through review outside the agent loop, never through a grant
        raise call.trace.stop(
            DENY, codes.AGENT_MANAGEMENT_TOOL, "allowlist.agent_management",
            f"{tool.name!r} manages agents; agent changes go through a tenant admin's review, not a tool call",
        )
    touched, read = _touched_in_bounds(call, tool, args)
    group = call.policies.rules_by_tool[tool.name]
    approvals = _rules(call, "tool_call", group, lambda: {
        "args": args,
        "tool": {"name": tool.name, "access": tool.spec.access.value},
        "subjects": touched.get("subjects", []),
        # a map per value: only for a rule that reads it (the check above read the values already)
        **({"touched": as_read.touched_map(read, _touched_selection(call, tool.name, group))}
           if "touched" in group.reads else {}),
    })
    if call.agent is not None:
        breakers.check(call, "tool_call")
    limits_step.check(call)
    response.counts_as_drift = call.request.run.has_plan and not tc.plan_step
    learnings.check(call, tool, args, _agent_map, response)  # advice: a warning, or a DENY
    if approvals:
        _approve_or_stop(call, approvals)


def _touched_selection(call: Call, tool: str, group: RuleGroup) -> as_read.Selection:
    """What of `touched` the tool's rules read, worked out once per load."""
    key = ("touched_selection", tool)
    found = call.policies.memo.get(key)
    if found is None:
        found = call.policies.memo[key] = as_read.selection(r.spec.condition for r in group.rules)
    return found


def _shape(call: Call, name: str, arguments: Any, validate_absent: bool = True) -> tuple[CompiledTool, dict[str, Any]]:
    """Step 1: a known tool, and arguments that match its input schema.

    A plan step may name a tool without its arguments (`validate_absent=False`): the step is
    then checked for reach (allowlist, access) and its arguments when the call comes.
    """
    trace = call.trace
    tool = call.policies.tools.get(name)
    if tool is None:
        raise trace.stop(DENY, codes.UNKNOWN_TOOL, "request.tool", f"no tool named {name[:100]!r}")
    if arguments is not None and arguments.ByteSize() > MAX_ARGUMENT_BYTES:
        raise trace.stop(
            DENY, codes.INVALID_ARGUMENTS, "request.arguments",
            f"arguments are larger than {MAX_ARGUMENT_BYTES} bytes",
        )
    if arguments is None and not validate_absent:
        trace.add("request.arguments", "skip", detail="plan step without arguments")
        return tool, {}
    try:
        args = struct_to_dict(arguments) if arguments is not None else {}
    except UnacceptableValue as exc:
        raise trace.stop(DENY, codes.INVALID_ARGUMENTS, "request.arguments", str(exc)) from None
    try:
        tool.fast_validate(args)
    except fastjsonschema.JsonSchemaException as fast_error:
        # the slow validator only runs on refusals, for a message a person can act on
        where, message = tool.explainer.explain(args) or ("", str(fast_error))
        raise trace.stop(
            DENY, codes.INVALID_ARGUMENTS, "request.arguments",
            f"arguments do not match {name}'s input schema at {where or '(root)'}: {message[:300]}",
        ) from None
    trace.add("request.arguments", "pass")
    return tool, args


def _touched(call: Call, tool: CompiledTool, args: dict[str, Any]) -> dict[str, list[str]]:
    """What the call touches, read from the arguments by the tool's CEL expressions."""
    touched: dict[str, list[str]] = {}
    if not tool.touches:
        return touched
    activation: Any = {"args": args}
    if tool.touches_need_cel:
        activation = call.policies.prepare_touches_activation(activation)
    for dim, program in tool.touches.items():
        result = program.evaluate(activation)
        value = result.value
        if result.error is not None or not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problem = result.error or f"returned {type(value).__name__}, not a list of strings"
            raise call.trace.stop(
                DENY, codes.POLICY_ERROR, f"tool:{tool.name}.touches.{dim}",
                f"tool {tool.name!r} touches.{dim} failed: {problem}",
            )
        touched[dim] = value
    return touched


def _touched_in_bounds(call: Call, tool: CompiledTool,
                       args: dict[str, Any]) -> tuple[dict[str, list[str]], dict[str, list[Subject]]]:
    """Steps 3b and 4: what the call touches (as written, and as read), inside the chain's scope
    and not off-limits."""
    touched = _touched(call, tool, args)
    read = {dim: [_read(call, dim, value) for value in values] for dim, values in touched.items()}
    names: list[Subject] = []
    if tool.spec.templates == "resolve" and "spec" in args:
        names = _expanded(call, args["spec"], touched, read)
    if call.agent is not None:
        authority.check_touched(call, read)
    _off_limits(call, (*read.get("subjects", ()), *names))
    return touched, read


def _expanded(call: Call, spec: Any, touched: dict[str, list[str]], read: dict[str, list[Subject]]) -> list[Subject]:
    """The values a filled template expands into (expanded.py), added to the call's subjects: the
    hosts, addresses and URLs for scope, off-limits and rules, like the target; the names (command
    words) are returned for the off-limits check alone, as scope cannot list flags. The image and
    node are the call's `image` and `node`, decided by their own scope dimensions.
    A value that looks like a host or an address and is not a valid one is refused, after the
    hosts inside it were checked against off-limits (a refusal there is evidence)."""
    seen = {s.text for s in read.get("subjects", ())}
    typed: list[Subject] = []
    names: list[Subject] = []
    unreadable: tuple[str, SubjectError] | None = None
    for text in expanded.strings_of(spec, leave_out=PLACED):
        try:
            whole = read_touched("subjects", text)
        except SubjectError as exc:
            unreadable = unreadable or (text, exc)
            found = expanded.pieces(text)
        else:  # a host, address or URL is one subject; a name may hide one
            found = [whole, *expanded.pieces(text)] if whole.kind == "name" else [whole]
        for subject in found:
            if subject.text in seen:
                continue
            seen.add(subject.text)
            (names if subject.kind == "name" else typed).append(subject)
    if unreadable is not None:
        _off_limits(call, (*typed, *names))
        value, problem = unreadable
        raise call.trace.stop(DENY, codes.INVALID_ARGUMENTS, "request.arguments",
                              f"the template's value {value[:100]!r}: {str(problem)[:300]}")
    if typed:
        read.setdefault("subjects", []).extend(typed)
        touched["subjects"] = [*touched.get("subjects", ()), *(s.text for s in typed)]
    return names


def _read(call: Call, dim: str, value: str) -> Subject:
    """A touched value read as a host, address, URL or name: once per call, for scope and off-limits.
    An address or host spelled so that a reader could take it two ways is refused, like bad arguments."""
    try:
        return read_touched(dim, value)
    except SubjectError as exc:
        raise call.trace.stop(
            DENY, codes.INVALID_ARGUMENTS, "request.arguments", f"{dim[:-1]} {value[:100]!r}: {str(exc)[:300]}"
        ) from None


def _off_limits(call: Call, subjects: Iterable[Subject]) -> None:
    """Step 4: off-limits subjects refuse everyone, agent or person."""
    for subject in subjects:
        reason = call.policies.off_limits_reason(subject)
        if reason is not None:
            raise call.trace.stop(
                DENY, codes.SUBJECT_OFF_LIMITS, "off_limits",
                f"subject {subject.text[:200]!r} is off-limits: {reason}",
            )
    call.trace.add("off_limits", "pass")


# -- rules --------------------------------------------------------------------------------


def _rules(call: Call, action: str, group: RuleGroup,
           own_variables: Callable[[], dict[str, Any]]) -> list[CompiledRule]:
    """Step 5: deny-if rules refuse; approve-if rules ask for a person (after the breakers).

    `own_variables` gives the action's own rule variables (`args`, `model`, ...); the activation
    is built once, and only when a rule applies to the acting agent.
    """
    agent_name = call.agent.name if call.agent is not None else ""
    approvals: list[CompiledRule] = []
    activation = None
    for rule in group.rules:
        if rule.spec.agents and agent_name not in rule.spec.agents:
            continue
        if activation is None:
            variables = _base_activation(call, action, group.reads)
            variables.update(own_variables())
            activation = call.policies.prepare_rule_activation(variables)
        result = rule.program.evaluate(activation)
        if result.error is not None or not isinstance(result.value, bool):
            problem = result.error or f"returned {type(result.value).__name__}, not a bool"
            raise call.trace.stop(
                DENY, codes.POLICY_ERROR, f"rule:{rule.name}",
                f"rule {rule.name!r} ({rule.where}) could not be evaluated, so the call is refused: {problem}",
            )
        if not result.value:
            if call.trace.enabled:
                call.trace.add(f"rule:{rule.name}", "pass")
            continue
        if rule.spec.effect == "deny_if":
            raise call.trace.stop(DENY, rule.code, f"rule:{rule.name}", rule.spec.reason or f"rule {rule.name!r} denies this")
        if rule.spec.effect == "handoff_if":  # not a denial: the case goes to a person, the run stops
            call.handoff_to = rule.spec.handoff_to or ""
            to = f" to {call.handoff_to}" if call.handoff_to else ""
            raise call.trace.stop(HALT, rule.code, f"rule:{rule.name}",
                                  f"handed off{to}: {rule.spec.reason or f'rule {rule.name!r} hands this case to a person'}")
        call.trace.add(f"rule:{rule.name}", "approval", rule.code, rule.spec.reason)
        approvals.append(rule)
    return approvals


def _approve_or_stop(call: Call, rules: list[CompiledRule]) -> None:
    """Every approve-if rule that applies must be answered by the verified approval; one approver
    of another rule's calls does not stand in for this rule's approvers."""
    if call.approver and all(rule.name in call.approved_rules for rule in rules):
        for rule in rules:
            call.trace.add(f"rule:{rule.name}", "approved", detail=f"by {call.approver}")
        call.approved_by = call.approver
        return
    call.asking = [rule.name for rule in rules]
    first = rules[0]
    reason = first.spec.reason or f"rule {first.name!r} asks a person to approve this"
    if len(rules) > 1:
        reason += f" (and {', '.join(repr(r.name) for r in rules[1:])})"
    raise call.trace.stop(APPROVE, first.code, f"rule:{first.name}", reason)


COUNTER_FIELDS = tuple(f.name for f in pb.Counters.DESCRIPTOR.fields)


def _agent_map(call: Call) -> dict[str, Any]:
    agent = call.agent
    if agent is None:
        return {}
    key = ("agent_map", agent.name, agent.version)
    found = call.policies.memo.get(key)
    if found is None:
        found = call.policies.memo[key] = {
            "name": agent.name, "version": agent.version, "tenant": agent.tenant,
            "tools": sorted(agent.tools), "access": sorted(agent.access),
        }
    return found


def _person_map(call: Call) -> dict[str, Any]:
    return {"name": call.person, "roles": roles_of(call.tenant, call.person)}


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # `now` when no applicable rule reads it


def _now(call: Call) -> datetime:
    if call.now is None:
        call.now = datetime.now(UTC)
    return call.now


def _base_activation(call: Call, action: str, reads: frozenset[str]) -> dict[str, Any]:
    """The rule variables, the action's own ones empty; those no applicable rule names are left
    empty too (CEL needs them declared, not filled), which saves building and converting them."""
    counters = call.request.counters
    return {
        "action": action,
        "args": {},
        "tool": {},
        "agent": _agent_map(call) if "agent" in reads else {},
        "run": call.run_map() if "run" in reads else {},
        "counters": {name: getattr(counters, name) for name in COUNTER_FIELDS} if "counters" in reads else {},
        "subjects": [],
        "touched": as_read.NOTHING if "touched" in reads else {},
        "model": {},
        "delegation": {},
        "plan": [],
        "person": _person_map(call) if "person" in reads else {},
        "now": _now(call) if "now" in reads else EPOCH,
        "limits": call.limits.cel_map() if "limits" in reads else {},
    }


# -- model calls, delegations, plans -------------------------------------------------------


def _require_agent(call: Call, what: str) -> None:
    if call.agent is None:
        raise call.trace.stop(DENY, codes.INVALID_REQUEST, "request.actor", f"only an agent makes {what}")


def _model_call(call: Call) -> None:
    _require_agent(call, "model calls")
    mc = call.request.model_call
    approvals = _rules(call, "model_call", call.policies.rules_by_action["model_call"], lambda: {
        "model": {"provider": mc.provider, "name": mc.model, "max_tokens": mc.max_tokens,
                  "input_tokens": mc.input_tokens},
    })
    breakers.check(call, "model_call")
    limits_step.check(call)
    if approvals:
        _approve_or_stop(call, approvals)


def _delegation(call: Call, d: pb.Delegation, response: pb.CheckResponse) -> None:
    _require_agent(call, "delegations")
    parent, trace = call.agent, call.trace
    assert parent is not None
    if d.agent not in parent.delegates:
        raise trace.stop(
            DENY, codes.DELEGATION_NOT_ALLOWED, "delegation.allowlist",
            f"agent {parent.name!r} may not delegate to {d.agent[:100]!r}",
        )
    child = (call.pinned.version(call.policies, d.agent, d.agent_version) if d.agent_version
             else call.policies.agents.get(d.agent))
    if child is None:
        code = codes.UNKNOWN_AGENT_VERSION if d.agent in call.policies.agents else codes.UNKNOWN_AGENT
        raise trace.stop(DENY, code, "delegation.agent", f"cannot resolve agent {d.agent!r} {d.agent_version}".strip())
    refusal = call.policies.pin_refusal(child.name, child.version)
    if refusal is not None:
        raise trace.stop(DENY, refusal, "delegation.agent", f"version {child.version} of agent {child.name!r} may not be "
                         "pinned by a new run")
    trace.add("delegation.allowlist", "pass")
    approvals = _rules(call, "delegation", call.policies.rules_by_action["delegation"], lambda: {
        "delegation": {"agent": child.name, "version": child.version},
    })
    breakers.check(call, "delegation")
    _delegation_limits(call, child.name)
    response.child_agent_version = child.version
    response.child_authority.CopyFrom(authority.child_authority(call, child, d.narrowing))
    ceilings = dict(breakers.effective_budget(call, d.budget if d.HasField("budget") else None))  # memo: a copy
    for name, left in breakers.turns_left(call).items():  # the child's turns come out of the parent's
        ceilings[name] = min(ceilings.get(name, left), left)
    for name, value in ceilings.items():
        setattr(response.child_budget, name, value)
    if approvals:
        _approve_or_stop(call, approvals)


def _delegation_limits(call: Call, child: str) -> None:
    """Step 7: depth, children per run, runs per tree, and no agent twice in a chain."""
    trace, counters = call.trace, call.request.counters
    limits = [call.policies.instance.delegation, call.tenant.delegation]

    def limit(field: str, hard: int) -> int:
        return min([hard, *(getattr(lv, field) for lv in limits if getattr(lv, field) is not None)])

    if any(link.agent.name == child for link in call.links):
        raise trace.stop(DENY, codes.DELEGATION_CYCLE, "delegation.cycle",
                         f"agent {child!r} is already in this chain; authority does not go round in circles")
    max_depth, max_children, max_tree = limit("max_depth", 3), limit("max_children", 5), limit("max_tree", 20)
    if call.depth + 1 > max_depth:
        raise trace.stop(DENY, codes.DELEGATION_DEPTH, "delegation.depth",
                         f"a child here would be at depth {call.depth + 1}; the limit is {max_depth}")
    if counters.children >= max_children:
        raise trace.stop(DENY, codes.DELEGATION_CHILDREN, "delegation.children",
                         f"this run already started {counters.children} children; the limit is {max_children}")
    if counters.tree_runs >= max_tree:
        raise trace.stop(DENY, codes.DELEGATION_TREE_SIZE, "delegation.tree_size",
                         f"the tree already holds {counters.tree_runs} runs; the limit is {max_tree}")
    trace.add("delegation.limits", "pass")


def _plan(call: Call, plan: pb.Plan, response: pb.CheckResponse) -> None:
    """Every step checked against the pinned allowlist and scope before anything runs."""
    _require_agent(call, "plans")
    trace = call.trace
    if not plan.steps or len(plan.steps) > MAX_PLAN_STEPS:
        raise trace.stop(DENY, codes.INVALID_REQUEST, "plan.shape",
                         f"a plan holds between 1 and {MAX_PLAN_STEPS} steps")
    first_refusal: pb.PlanStepResult | None = None
    for i, step in enumerate(plan.steps):
        result = pb.PlanStepResult(step_id=step.id, index=i, verdict=ALLOW, code=codes.ALLOWED, rule="allow")
        try:
            tool, args = _shape(call, step.tool, step.arguments if step.HasField("arguments") else None,
                                validate_absent=False)
            authority.check_tool(call, tool)
            authority.check_access(call, tool)
            if step.HasField("arguments"):
                _touched_in_bounds(call, tool, args)
        except Stop as stop:
            result.verdict, result.code, result.rule, result.reason = DENY, stop.code, stop.rule, stop.reason
            first_refusal = first_refusal or result
        response.plan_steps.append(result)
    if first_refusal is not None:
        raise trace.stop(
            DENY, codes.PLAN_STEP_NOT_ALLOWED, f"plan.step[{first_refusal.index}]",
            f"step {first_refusal.index + 1} ({first_refusal.step_id or plan.steps[first_refusal.index].tool}) "
            f"is refused: {first_refusal.code}: {first_refusal.reason}",
        )
    approvals = _rules(call, "plan", call.policies.rules_by_action["plan"], lambda: {
        "plan": [{"id": s.id, "tool": s.tool} for s in plan.steps],
    })
    breakers.check(call, "plan")
    if approvals:
        _approve_or_stop(call, approvals)
