import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_ALLOW: _ClassVar[Verdict]
    VERDICT_DENY: _ClassVar[Verdict]
    VERDICT_REQUIRE_APPROVAL: _ClassVar[Verdict]
    VERDICT_HALT: _ClassVar[Verdict]

class RunMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_MODE_UNSPECIFIED: _ClassVar[RunMode]
    RUN_MODE_INTERACTIVE: _ClassVar[RunMode]
    RUN_MODE_BACKGROUND: _ClassVar[RunMode]

class ActorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTOR_KIND_UNSPECIFIED: _ClassVar[ActorKind]
    ACTOR_KIND_PERSON: _ClassVar[ActorKind]
    ACTOR_KIND_AGENT: _ClassVar[ActorKind]

class LearningSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEARNING_SOURCE_UNSPECIFIED: _ClassVar[LearningSource]
    LEARNING_SOURCE_BREAKER: _ClassVar[LearningSource]
    LEARNING_SOURCE_RUN_FAILED: _ClassVar[LearningSource]
    LEARNING_SOURCE_TASK_FAILED: _ClassVar[LearningSource]
    LEARNING_SOURCE_AGENT: _ClassVar[LearningSource]

class LearningAct(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEARNING_ACT_UNSPECIFIED: _ClassVar[LearningAct]
    LEARNING_ACT_PROMOTE: _ClassVar[LearningAct]
    LEARNING_ACT_REVIEW: _ClassVar[LearningAct]
    LEARNING_ACT_REJECT: _ClassVar[LearningAct]
    LEARNING_ACT_RETIRE: _ClassVar[LearningAct]
VERDICT_UNSPECIFIED: Verdict
VERDICT_ALLOW: Verdict
VERDICT_DENY: Verdict
VERDICT_REQUIRE_APPROVAL: Verdict
VERDICT_HALT: Verdict
RUN_MODE_UNSPECIFIED: RunMode
RUN_MODE_INTERACTIVE: RunMode
RUN_MODE_BACKGROUND: RunMode
ACTOR_KIND_UNSPECIFIED: ActorKind
ACTOR_KIND_PERSON: ActorKind
ACTOR_KIND_AGENT: ActorKind
LEARNING_SOURCE_UNSPECIFIED: LearningSource
LEARNING_SOURCE_BREAKER: LearningSource
LEARNING_SOURCE_RUN_FAILED: LearningSource
LEARNING_SOURCE_TASK_FAILED: LearningSource
LEARNING_SOURCE_AGENT: LearningSource
LEARNING_ACT_UNSPECIFIED: LearningAct
LEARNING_ACT_PROMOTE: LearningAct
LEARNING_ACT_REVIEW: LearningAct
LEARNING_ACT_REJECT: LearningAct
LEARNING_ACT_RETIRE: LearningAct

class Scope(_message.Message):
    __slots__ = ("tools", "access", "images", "nodes", "connections", "subjects", "threads")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    SUBJECTS_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedScalarFieldContainer[str]
    access: _containers.RepeatedScalarFieldContainer[str]
    images: _containers.RepeatedScalarFieldContainer[str]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    connections: _containers.RepeatedScalarFieldContainer[str]
    subjects: _containers.RepeatedScalarFieldContainer[str]
    threads: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tools: _Optional[_Iterable[str]] = ..., access: _Optional[_Iterable[str]] = ..., images: _Optional[_Iterable[str]] = ..., nodes: _Optional[_Iterable[str]] = ..., connections: _Optional[_Iterable[str]] = ..., subjects: _Optional[_Iterable[str]] = ..., threads: _Optional[_Iterable[str]] = ...) -> None: ...

class Budget(_message.Message):
    __slots__ = ("tokens", "turns", "turns_total", "tool_calls", "wall_clock_seconds", "repetition", "failures", "drift", "tree_tokens", "spend_usd", "provider_refusals")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    TURNS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    WALL_CLOCK_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REPETITION_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    DRIFT_FIELD_NUMBER: _ClassVar[int]
    TREE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPEND_USD_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_REFUSALS_FIELD_NUMBER: _ClassVar[int]
    tokens: int
    turns: int
    turns_total: int
    tool_calls: int
    wall_clock_seconds: float
    repetition: int
    failures: int
    drift: int
    tree_tokens: int
    spend_usd: float
    provider_refusals: int
    def __init__(self, tokens: _Optional[int] = ..., turns: _Optional[int] = ..., turns_total: _Optional[int] = ..., tool_calls: _Optional[int] = ..., wall_clock_seconds: _Optional[float] = ..., repetition: _Optional[int] = ..., failures: _Optional[int] = ..., drift: _Optional[int] = ..., tree_tokens: _Optional[int] = ..., spend_usd: _Optional[float] = ..., provider_refusals: _Optional[int] = ...) -> None: ...

class Actor(_message.Message):
    __slots__ = ("kind", "id", "agent_version", "run_id", "narrowing", "budget")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    NARROWING_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    kind: ActorKind
    id: str
    agent_version: str
    run_id: str
    narrowing: Scope
    budget: Budget
    def __init__(self, kind: _Optional[_Union[ActorKind, str]] = ..., id: _Optional[str] = ..., agent_version: _Optional[str] = ..., run_id: _Optional[str] = ..., narrowing: _Optional[_Union[Scope, _Mapping]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ...) -> None: ...

class RunContext(_message.Message):
    __slots__ = ("tenant", "run_id", "root_run_id", "parent_run_id", "actor_chain", "mode", "budget", "has_plan", "run_token", "inputs")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_CHAIN_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    HAS_PLAN_FIELD_NUMBER: _ClassVar[int]
    RUN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    run_id: str
    root_run_id: str
    parent_run_id: str
    actor_chain: _containers.RepeatedCompositeFieldContainer[Actor]
    mode: RunMode
    budget: Budget
    has_plan: bool
    run_token: str
    inputs: _struct_pb2.Struct
    def __init__(self, tenant: _Optional[str] = ..., run_id: _Optional[str] = ..., root_run_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., actor_chain: _Optional[_Iterable[_Union[Actor, _Mapping]]] = ..., mode: _Optional[_Union[RunMode, str]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., has_plan: _Optional[bool] = ..., run_token: _Optional[str] = ..., inputs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Counters(_message.Message):
    __slots__ = ("stretch_tokens", "stretch_turns", "total_turns", "turn_tool_calls", "wall_clock_seconds", "identical_calls", "consecutive_failures", "drift", "tree_tokens", "owner_spend_today_usd", "tenant_spend_today_usd", "provider_refusals", "children", "tree_runs", "run_spend_usd", "provider_refused_for_good", "descendant_stretch_turns", "descendant_total_turns")
    STRETCH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STRETCH_TURNS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TURNS_FIELD_NUMBER: _ClassVar[int]
    TURN_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    WALL_CLOCK_SECONDS_FIELD_NUMBER: _ClassVar[int]
    IDENTICAL_CALLS_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    DRIFT_FIELD_NUMBER: _ClassVar[int]
    TREE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OWNER_SPEND_TODAY_USD_FIELD_NUMBER: _ClassVar[int]
    TENANT_SPEND_TODAY_USD_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_REFUSALS_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    TREE_RUNS_FIELD_NUMBER: _ClassVar[int]
    RUN_SPEND_USD_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_REFUSED_FOR_GOOD_FIELD_NUMBER: _ClassVar[int]
    DESCENDANT_STRETCH_TURNS_FIELD_NUMBER: _ClassVar[int]
    DESCENDANT_TOTAL_TURNS_FIELD_NUMBER: _ClassVar[int]
    stretch_tokens: int
    stretch_turns: int
    total_turns: int
    turn_tool_calls: int
    wall_clock_seconds: float
    identical_calls: int
    consecutive_failures: int
    drift: int
    tree_tokens: int
    owner_spend_today_usd: float
    tenant_spend_today_usd: float
    provider_refusals: int
    children: int
    tree_runs: int
    run_spend_usd: float
    provider_refused_for_good: bool
    descendant_stretch_turns: int
    descendant_total_turns: int
    def __init__(self, stretch_tokens: _Optional[int] = ..., stretch_turns: _Optional[int] = ..., total_turns: _Optional[int] = ..., turn_tool_calls: _Optional[int] = ..., wall_clock_seconds: _Optional[float] = ..., identical_calls: _Optional[int] = ..., consecutive_failures: _Optional[int] = ..., drift: _Optional[int] = ..., tree_tokens: _Optional[int] = ..., owner_spend_today_usd: _Optional[float] = ..., tenant_spend_today_usd: _Optional[float] = ..., provider_refusals: _Optional[int] = ..., children: _Optional[int] = ..., tree_runs: _Optional[int] = ..., run_spend_usd: _Optional[float] = ..., provider_refused_for_good: _Optional[bool] = ..., descendant_stretch_turns: _Optional[int] = ..., descendant_total_turns: _Optional[int] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("tool", "arguments", "plan_step")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    PLAN_STEP_FIELD_NUMBER: _ClassVar[int]
    tool: str
    arguments: _struct_pb2.Struct
    plan_step: str
    def __init__(self, tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., plan_step: _Optional[str] = ...) -> None: ...

class ModelCall(_message.Message):
    __slots__ = ("provider", "model", "max_tokens", "input_tokens")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    max_tokens: int
    input_tokens: int
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ..., max_tokens: _Optional[int] = ..., input_tokens: _Optional[int] = ...) -> None: ...

class Delegation(_message.Message):
    __slots__ = ("agent", "agent_version", "narrowing", "budget")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NARROWING_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    agent: str
    agent_version: str
    narrowing: Scope
    budget: Budget
    def __init__(self, agent: _Optional[str] = ..., agent_version: _Optional[str] = ..., narrowing: _Optional[_Union[Scope, _Mapping]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ...) -> None: ...

class PlanStep(_message.Message):
    __slots__ = ("id", "tool", "arguments", "description")
    ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    id: str
    tool: str
    arguments: _struct_pb2.Struct
    description: str
    def __init__(self, id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., description: _Optional[str] = ...) -> None: ...

class Plan(_message.Message):
    __slots__ = ("steps",)
    STEPS_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[PlanStep]
    def __init__(self, steps: _Optional[_Iterable[_Union[PlanStep, _Mapping]]] = ...) -> None: ...

class CheckRequest(_message.Message):
    __slots__ = ("run", "tool_call", "model_call", "delegation", "plan", "counters", "explain", "approval")
    RUN_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALL_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    run: RunContext
    tool_call: ToolCall
    model_call: ModelCall
    delegation: Delegation
    plan: Plan
    counters: Counters
    explain: bool
    approval: Approval
    def __init__(self, run: _Optional[_Union[RunContext, _Mapping]] = ..., tool_call: _Optional[_Union[ToolCall, _Mapping]] = ..., model_call: _Optional[_Union[ModelCall, _Mapping]] = ..., delegation: _Optional[_Union[Delegation, _Mapping]] = ..., plan: _Optional[_Union[Plan, _Mapping]] = ..., counters: _Optional[_Union[Counters, _Mapping]] = ..., explain: _Optional[bool] = ..., approval: _Optional[_Union[Approval, _Mapping]] = ...) -> None: ...

class Approval(_message.Message):
    __slots__ = ("decision_id", "token")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    token: str
    def __init__(self, decision_id: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ("decision_id", "run_id", "agent", "agent_version", "tool", "arguments_sha256", "policy_revision", "expires_at", "key_id", "signature")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    POLICY_REVISION_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    run_id: str
    agent: str
    agent_version: str
    tool: str
    arguments_sha256: str
    policy_revision: str
    expires_at: _timestamp_pb2.Timestamp
    key_id: str
    signature: bytes
    def __init__(self, decision_id: _Optional[str] = ..., run_id: _Optional[str] = ..., agent: _Optional[str] = ..., agent_version: _Optional[str] = ..., tool: _Optional[str] = ..., arguments_sha256: _Optional[str] = ..., policy_revision: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., key_id: _Optional[str] = ..., signature: _Optional[bytes] = ...) -> None: ...

class RuleOutcome(_message.Message):
    __slots__ = ("rule", "outcome", "code", "detail")
    RULE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    rule: str
    outcome: str
    code: str
    detail: str
    def __init__(self, rule: _Optional[str] = ..., outcome: _Optional[str] = ..., code: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class PlanStepResult(_message.Message):
    __slots__ = ("step_id", "index", "verdict", "code", "rule", "reason")
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    step_id: str
    index: int
    verdict: Verdict
    code: str
    rule: str
    reason: str
    def __init__(self, step_id: _Optional[str] = ..., index: _Optional[int] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., code: _Optional[str] = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CheckResponse(_message.Message):
    __slots__ = ("decision_id", "verdict", "code", "rule", "reason", "agent", "agent_version", "policy_revision", "grant", "explanation", "counts_as_drift", "child_authority", "plan_steps", "decided_at", "child_budget", "tenant", "accountable_person", "child_agent_version", "child_run_id", "child_run_token", "approval_rules", "handoff_to", "arguments", "learnings", "approval_deadline")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_REVISION_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    COUNTS_AS_DRIFT_FIELD_NUMBER: _ClassVar[int]
    CHILD_AUTHORITY_FIELD_NUMBER: _ClassVar[int]
    PLAN_STEPS_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    CHILD_BUDGET_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTABLE_PERSON_FIELD_NUMBER: _ClassVar[int]
    CHILD_AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CHILD_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CHILD_RUN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_RULES_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_TO_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    LEARNINGS_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    verdict: Verdict
    code: str
    rule: str
    reason: str
    agent: str
    agent_version: str
    policy_revision: str
    grant: Grant
    explanation: _containers.RepeatedCompositeFieldContainer[RuleOutcome]
    counts_as_drift: bool
    child_authority: Scope
    plan_steps: _containers.RepeatedCompositeFieldContainer[PlanStepResult]
    decided_at: _timestamp_pb2.Timestamp
    child_budget: Budget
    tenant: str
    accountable_person: str
    child_agent_version: str
    child_run_id: str
    child_run_token: str
    approval_rules: _containers.RepeatedScalarFieldContainer[str]
    handoff_to: str
    arguments: _struct_pb2.Struct
    learnings: _containers.RepeatedCompositeFieldContainer[LearningNote]
    approval_deadline: _timestamp_pb2.Timestamp
    def __init__(self, decision_id: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., code: _Optional[str] = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ..., agent: _Optional[str] = ..., agent_version: _Optional[str] = ..., policy_revision: _Optional[str] = ..., grant: _Optional[_Union[Grant, _Mapping]] = ..., explanation: _Optional[_Iterable[_Union[RuleOutcome, _Mapping]]] = ..., counts_as_drift: _Optional[bool] = ..., child_authority: _Optional[_Union[Scope, _Mapping]] = ..., plan_steps: _Optional[_Iterable[_Union[PlanStepResult, _Mapping]]] = ..., decided_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., child_budget: _Optional[_Union[Budget, _Mapping]] = ..., tenant: _Optional[str] = ..., accountable_person: _Optional[str] = ..., child_agent_version: _Optional[str] = ..., child_run_id: _Optional[str] = ..., child_run_token: _Optional[str] = ..., approval_rules: _Optional[_Iterable[str]] = ..., handoff_to: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., learnings: _Optional[_Iterable[_Union[LearningNote, _Mapping]]] = ..., approval_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CheckBatchItem(_message.Message):
    __slots__ = ("correlation_id", "request")
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    correlation_id: str
    request: CheckRequest
    def __init__(self, correlation_id: _Optional[str] = ..., request: _Optional[_Union[CheckRequest, _Mapping]] = ...) -> None: ...

class CheckBatchRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[CheckBatchItem]
    def __init__(self, items: _Optional[_Iterable[_Union[CheckBatchItem, _Mapping]]] = ...) -> None: ...

class ErrorDetail(_message.Message):
    __slots__ = ("code", "message", "field")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    field: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., field: _Optional[str] = ...) -> None: ...

class CheckBatchResult(_message.Message):
    __slots__ = ("correlation_id", "response", "error")
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    correlation_id: str
    response: CheckResponse
    error: ErrorDetail
    def __init__(self, correlation_id: _Optional[str] = ..., response: _Optional[_Union[CheckResponse, _Mapping]] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ...) -> None: ...

class CheckBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CheckBatchResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CheckBatchResult, _Mapping]]] = ...) -> None: ...

class CheckStreamRequest(_message.Message):
    __slots__ = ("correlation_id", "request")
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    correlation_id: str
    request: CheckRequest
    def __init__(self, correlation_id: _Optional[str] = ..., request: _Optional[_Union[CheckRequest, _Mapping]] = ...) -> None: ...

class CheckStreamResponse(_message.Message):
    __slots__ = ("correlation_id", "response", "error")
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    correlation_id: str
    response: CheckResponse
    error: ErrorDetail
    def __init__(self, correlation_id: _Optional[str] = ..., response: _Optional[_Union[CheckResponse, _Mapping]] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ...) -> None: ...

class CheckPlanRequest(_message.Message):
    __slots__ = ("run", "plan", "counters", "explain")
    RUN_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    run: RunContext
    plan: Plan
    counters: Counters
    explain: bool
    def __init__(self, run: _Optional[_Union[RunContext, _Mapping]] = ..., plan: _Optional[_Union[Plan, _Mapping]] = ..., counters: _Optional[_Union[Counters, _Mapping]] = ..., explain: _Optional[bool] = ...) -> None: ...

class CheckPlanResponse(_message.Message):
    __slots__ = ("decision",)
    DECISION_FIELD_NUMBER: _ClassVar[int]
    decision: CheckResponse
    def __init__(self, decision: _Optional[_Union[CheckResponse, _Mapping]] = ...) -> None: ...

class ResolveAgentRequest(_message.Message):
    __slots__ = ("agent", "agent_version")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    agent: str
    agent_version: str
    def __init__(self, agent: _Optional[str] = ..., agent_version: _Optional[str] = ...) -> None: ...

class ResolveAgentResponse(_message.Message):
    __slots__ = ("agent", "agent_version", "persona", "tools", "scope", "budget", "policy_revision", "tenant", "tool_specs", "delegates")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PERSONA_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    POLICY_REVISION_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TOOL_SPECS_FIELD_NUMBER: _ClassVar[int]
    DELEGATES_FIELD_NUMBER: _ClassVar[int]
    agent: str
    agent_version: str
    persona: str
    tools: _containers.RepeatedScalarFieldContainer[str]
    scope: Scope
    budget: Budget
    policy_revision: str
    tenant: str
    tool_specs: _containers.RepeatedCompositeFieldContainer[ToolSpec]
    delegates: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, agent: _Optional[str] = ..., agent_version: _Optional[str] = ..., persona: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., scope: _Optional[_Union[Scope, _Mapping]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., policy_revision: _Optional[str] = ..., tenant: _Optional[str] = ..., tool_specs: _Optional[_Iterable[_Union[ToolSpec, _Mapping]]] = ..., delegates: _Optional[_Iterable[str]] = ...) -> None: ...

class ToolSpec(_message.Message):
    __slots__ = ("name", "description", "input_schema", "access", "templates")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    TEMPLATES_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    input_schema: _struct_pb2.Struct
    access: str
    templates: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., access: _Optional[str] = ..., templates: _Optional[str] = ...) -> None: ...

class DecisionRecord(_message.Message):
    __slots__ = ("seq", "decision_id", "time", "tenant", "run_id", "root_run_id", "parent_run_id", "actor_chain", "accountable_person", "agent", "agent_version", "action", "tool", "arguments", "verdict", "code", "rule", "reason", "policy_revision", "latency_us", "prev_hash", "hash", "principal", "caller", "approval_rules", "shadow_verdict", "shadow_code", "shadow_rule", "approver", "approval_id", "trace_id")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_CHAIN_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTABLE_PERSON_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    POLICY_REVISION_FIELD_NUMBER: _ClassVar[int]
    LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    PREV_HASH_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_RULES_FIELD_NUMBER: _ClassVar[int]
    SHADOW_VERDICT_FIELD_NUMBER: _ClassVar[int]
    SHADOW_CODE_FIELD_NUMBER: _ClassVar[int]
    SHADOW_RULE_FIELD_NUMBER: _ClassVar[int]
    APPROVER_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    seq: int
    decision_id: str
    time: _timestamp_pb2.Timestamp
    tenant: str
    run_id: str
    root_run_id: str
    parent_run_id: str
    actor_chain: _containers.RepeatedCompositeFieldContainer[Actor]
    accountable_person: str
    agent: str
    agent_version: str
    action: str
    tool: str
    arguments: _struct_pb2.Struct
    verdict: Verdict
    code: str
    rule: str
    reason: str
    policy_revision: str
    latency_us: int
    prev_hash: str
    hash: str
    principal: str
    caller: str
    approval_rules: str
    shadow_verdict: Verdict
    shadow_code: str
    shadow_rule: str
    approver: str
    approval_id: str
    trace_id: str
    def __init__(self, seq: _Optional[int] = ..., decision_id: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tenant: _Optional[str] = ..., run_id: _Optional[str] = ..., root_run_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., actor_chain: _Optional[_Iterable[_Union[Actor, _Mapping]]] = ..., accountable_person: _Optional[str] = ..., agent: _Optional[str] = ..., agent_version: _Optional[str] = ..., action: _Optional[str] = ..., tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., code: _Optional[str] = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ..., policy_revision: _Optional[str] = ..., latency_us: _Optional[int] = ..., prev_hash: _Optional[str] = ..., hash: _Optional[str] = ..., principal: _Optional[str] = ..., caller: _Optional[str] = ..., approval_rules: _Optional[str] = ..., shadow_verdict: _Optional[_Union[Verdict, str]] = ..., shadow_code: _Optional[str] = ..., shadow_rule: _Optional[str] = ..., approver: _Optional[str] = ..., approval_id: _Optional[str] = ..., trace_id: _Optional[str] = ...) -> None: ...

class WatchDecisionsRequest(_message.Message):
    __slots__ = ("after_seq", "run_id", "agent", "verdict", "code", "no_follow", "root_run_id")
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    NO_FOLLOW_FIELD_NUMBER: _ClassVar[int]
    ROOT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    run_id: str
    agent: str
    verdict: Verdict
    code: str
    no_follow: bool
    root_run_id: str
    def __init__(self, after_seq: _Optional[int] = ..., run_id: _Optional[str] = ..., agent: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., code: _Optional[str] = ..., no_follow: _Optional[bool] = ..., root_run_id: _Optional[str] = ...) -> None: ...

class WatchDecisionsResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: DecisionRecord
    def __init__(self, record: _Optional[_Union[DecisionRecord, _Mapping]] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("tenant", "person", "agent", "agent_version", "mode", "inputs")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PERSON_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    person: str
    agent: str
    agent_version: str
    mode: RunMode
    inputs: _struct_pb2.Struct
    def __init__(self, tenant: _Optional[str] = ..., person: _Optional[str] = ..., agent: _Optional[str] = ..., agent_version: _Optional[str] = ..., mode: _Optional[_Union[RunMode, str]] = ..., inputs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class StartRunResponse(_message.Message):
    __slots__ = ("decision", "run_id", "run_token", "agent")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    decision: CheckResponse
    run_id: str
    run_token: str
    agent: ResolveAgentResponse
    def __init__(self, decision: _Optional[_Union[CheckResponse, _Mapping]] = ..., run_id: _Optional[str] = ..., run_token: _Optional[str] = ..., agent: _Optional[_Union[ResolveAgentResponse, _Mapping]] = ...) -> None: ...

class ApproveRequest(_message.Message):
    __slots__ = ("run_id", "decision_id", "note")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    decision_id: str
    note: str
    def __init__(self, run_id: _Optional[str] = ..., decision_id: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class ApproveResponse(_message.Message):
    __slots__ = ("decision", "approval_token")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_TOKEN_FIELD_NUMBER: _ClassVar[int]
    decision: CheckResponse
    approval_token: str
    def __init__(self, decision: _Optional[_Union[CheckResponse, _Mapping]] = ..., approval_token: _Optional[str] = ...) -> None: ...

class RejectRequest(_message.Message):
    __slots__ = ("run_id", "decision_id", "note")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    decision_id: str
    note: str
    def __init__(self, run_id: _Optional[str] = ..., decision_id: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class RejectResponse(_message.Message):
    __slots__ = ("decision",)
    DECISION_FIELD_NUMBER: _ClassVar[int]
    decision: CheckResponse
    def __init__(self, decision: _Optional[_Union[CheckResponse, _Mapping]] = ...) -> None: ...

class RecordActRequest(_message.Message):
    __slots__ = ("run", "act", "person", "note", "details", "act_id")
    RUN_FIELD_NUMBER: _ClassVar[int]
    ACT_FIELD_NUMBER: _ClassVar[int]
    PERSON_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    ACT_ID_FIELD_NUMBER: _ClassVar[int]
    run: RunContext
    act: str
    person: str
    note: str
    details: _struct_pb2.Struct
    act_id: str
    def __init__(self, run: _Optional[_Union[RunContext, _Mapping]] = ..., act: _Optional[str] = ..., person: _Optional[str] = ..., note: _Optional[str] = ..., details: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., act_id: _Optional[str] = ...) -> None: ...

class RecordActResponse(_message.Message):
    __slots__ = ("decision", "run_token")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    RUN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    decision: CheckResponse
    run_token: str
    def __init__(self, decision: _Optional[_Union[CheckResponse, _Mapping]] = ..., run_token: _Optional[str] = ...) -> None: ...

class AgentVersionInfo(_message.Message):
    __slots__ = ("agent", "version", "tenant", "status", "source", "proposed_by", "proposed_at", "note", "decided_by", "decided_at", "decision_note", "first_seen", "definition", "widens", "diff")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_BY_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_AT_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    DECISION_NOTE_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    WIDENS_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    agent: str
    version: str
    tenant: str
    status: str
    source: str
    proposed_by: str
    proposed_at: str
    note: str
    decided_by: str
    decided_at: str
    decision_note: str
    first_seen: str
    definition: _struct_pb2.Struct
    widens: _containers.RepeatedScalarFieldContainer[str]
    diff: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, agent: _Optional[str] = ..., version: _Optional[str] = ..., tenant: _Optional[str] = ..., status: _Optional[str] = ..., source: _Optional[str] = ..., proposed_by: _Optional[str] = ..., proposed_at: _Optional[str] = ..., note: _Optional[str] = ..., decided_by: _Optional[str] = ..., decided_at: _Optional[str] = ..., decision_note: _Optional[str] = ..., first_seen: _Optional[str] = ..., definition: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., widens: _Optional[_Iterable[str]] = ..., diff: _Optional[_Iterable[str]] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class AgentSummary(_message.Message):
    __slots__ = ("agent", "tenant", "live_version", "pending_versions")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    LIVE_VERSION_FIELD_NUMBER: _ClassVar[int]
    PENDING_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    agent: str
    tenant: str
    live_version: str
    pending_versions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, agent: _Optional[str] = ..., tenant: _Optional[str] = ..., live_version: _Optional[str] = ..., pending_versions: _Optional[_Iterable[str]] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[AgentSummary]
    def __init__(self, agents: _Optional[_Iterable[_Union[AgentSummary, _Mapping]]] = ...) -> None: ...

class AgentHistoryRequest(_message.Message):
    __slots__ = ("agent", "compare_from", "compare_to")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    COMPARE_FROM_FIELD_NUMBER: _ClassVar[int]
    COMPARE_TO_FIELD_NUMBER: _ClassVar[int]
    agent: str
    compare_from: str
    compare_to: str
    def __init__(self, agent: _Optional[str] = ..., compare_from: _Optional[str] = ..., compare_to: _Optional[str] = ...) -> None: ...

class AgentHistoryResponse(_message.Message):
    __slots__ = ("live_version", "versions", "comparison")
    LIVE_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    COMPARISON_FIELD_NUMBER: _ClassVar[int]
    live_version: str
    versions: _containers.RepeatedCompositeFieldContainer[AgentVersionInfo]
    comparison: AgentVersionComparison
    def __init__(self, live_version: _Optional[str] = ..., versions: _Optional[_Iterable[_Union[AgentVersionInfo, _Mapping]]] = ..., comparison: _Optional[_Union[AgentVersionComparison, _Mapping]] = ...) -> None: ...

class AgentVersionComparison(_message.Message):
    __slots__ = ("from_version", "to_version", "diff", "widens")
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    WIDENS_FIELD_NUMBER: _ClassVar[int]
    from_version: str
    to_version: str
    diff: _containers.RepeatedScalarFieldContainer[str]
    widens: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, from_version: _Optional[str] = ..., to_version: _Optional[str] = ..., diff: _Optional[_Iterable[str]] = ..., widens: _Optional[_Iterable[str]] = ...) -> None: ...

class ProposeAgentChangeRequest(_message.Message):
    __slots__ = ("agent", "definition_yaml", "changes", "rollback_to", "note", "run")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_YAML_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_TO_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    agent: str
    definition_yaml: str
    changes: _struct_pb2.Struct
    rollback_to: str
    note: str
    run: RunContext
    def __init__(self, agent: _Optional[str] = ..., definition_yaml: _Optional[str] = ..., changes: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., rollback_to: _Optional[str] = ..., note: _Optional[str] = ..., run: _Optional[_Union[RunContext, _Mapping]] = ...) -> None: ...

class ReviewAgentChangeRequest(_message.Message):
    __slots__ = ("agent", "version", "approve", "note")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    agent: str
    version: str
    approve: bool
    note: str
    def __init__(self, agent: _Optional[str] = ..., version: _Optional[str] = ..., approve: _Optional[bool] = ..., note: _Optional[str] = ...) -> None: ...

class RetireAgentVersionRequest(_message.Message):
    __slots__ = ("agent", "version", "note")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    agent: str
    version: str
    note: str
    def __init__(self, agent: _Optional[str] = ..., version: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class CatalogActResponse(_message.Message):
    __slots__ = ("decision", "version")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    decision: CheckResponse
    version: AgentVersionInfo
    def __init__(self, decision: _Optional[_Union[CheckResponse, _Mapping]] = ..., version: _Optional[_Union[AgentVersionInfo, _Mapping]] = ...) -> None: ...

class TokenKeysRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TokenKey(_message.Message):
    __slots__ = ("key_id", "algorithm", "public_key_pem", "active")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_PEM_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    algorithm: str
    public_key_pem: str
    active: bool
    def __init__(self, key_id: _Optional[str] = ..., algorithm: _Optional[str] = ..., public_key_pem: _Optional[str] = ..., active: _Optional[bool] = ...) -> None: ...

class TokenKeysResponse(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[TokenKey]
    def __init__(self, keys: _Optional[_Iterable[_Union[TokenKey, _Mapping]]] = ...) -> None: ...

class RolesRequest(_message.Message):
    __slots__ = ("person",)
    PERSON_FIELD_NUMBER: _ClassVar[int]
    person: str
    def __init__(self, person: _Optional[str] = ...) -> None: ...

class TenantRoles(_message.Message):
    __slots__ = ("tenant", "roles", "roles_declared")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    ROLES_DECLARED_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    roles_declared: bool
    def __init__(self, tenant: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., roles_declared: _Optional[bool] = ...) -> None: ...

class RolesResponse(_message.Message):
    __slots__ = ("person", "tenants", "policy_revision")
    PERSON_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    POLICY_REVISION_FIELD_NUMBER: _ClassVar[int]
    person: str
    tenants: _containers.RepeatedCompositeFieldContainer[TenantRoles]
    policy_revision: str
    def __init__(self, person: _Optional[str] = ..., tenants: _Optional[_Iterable[_Union[TenantRoles, _Mapping]]] = ..., policy_revision: _Optional[str] = ...) -> None: ...

class AgentStatsRequest(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: str
    def __init__(self, agent: _Optional[str] = ...) -> None: ...

class AgentVersionStats(_message.Message):
    __slots__ = ("version", "status", "live", "runs", "succeeded", "failed", "cancelled", "paused", "pauses", "open", "breaker_trips", "tokens", "runs_with_tokens", "average_tokens")
    class BreakerTripsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PAUSES_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    BREAKER_TRIPS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    RUNS_WITH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    AVERAGE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    version: str
    status: str
    live: bool
    runs: int
    succeeded: int
    failed: int
    cancelled: int
    paused: int
    pauses: int
    open: int
    breaker_trips: _containers.ScalarMap[str, int]
    tokens: int
    runs_with_tokens: int
    average_tokens: float
    def __init__(self, version: _Optional[str] = ..., status: _Optional[str] = ..., live: _Optional[bool] = ..., runs: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., cancelled: _Optional[int] = ..., paused: _Optional[int] = ..., pauses: _Optional[int] = ..., open: _Optional[int] = ..., breaker_trips: _Optional[_Mapping[str, int]] = ..., tokens: _Optional[int] = ..., runs_with_tokens: _Optional[int] = ..., average_tokens: _Optional[float] = ...) -> None: ...

class AgentStatsResponse(_message.Message):
    __slots__ = ("agent", "tenant", "live_version", "versions", "log_seq")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    LIVE_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    LOG_SEQ_FIELD_NUMBER: _ClassVar[int]
    agent: str
    tenant: str
    live_version: str
    versions: _containers.RepeatedCompositeFieldContainer[AgentVersionStats]
    log_seq: int
    def __init__(self, agent: _Optional[str] = ..., tenant: _Optional[str] = ..., live_version: _Optional[str] = ..., versions: _Optional[_Iterable[_Union[AgentVersionStats, _Mapping]]] = ..., log_seq: _Optional[int] = ...) -> None: ...

class CatalogEntryInfo(_message.Message):
    __slots__ = ("kind", "tenant", "name", "version", "status", "source", "proposed_by", "proposed_at", "note", "decided_by", "decided_at", "decision_note", "first_seen", "definition", "description")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_BY_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_AT_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    DECISION_NOTE_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    kind: str
    tenant: str
    name: str
    version: str
    status: str
    source: str
    proposed_by: str
    proposed_at: str
    note: str
    decided_by: str
    decided_at: str
    decision_note: str
    first_seen: str
    definition: _struct_pb2.Struct
    description: str
    def __init__(self, kind: _Optional[str] = ..., tenant: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[str] = ..., status: _Optional[str] = ..., source: _Optional[str] = ..., proposed_by: _Optional[str] = ..., proposed_at: _Optional[str] = ..., note: _Optional[str] = ..., decided_by: _Optional[str] = ..., decided_at: _Optional[str] = ..., decision_note: _Optional[str] = ..., first_seen: _Optional[str] = ..., definition: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., description: _Optional[str] = ...) -> None: ...

class ListCatalogEntriesRequest(_message.Message):
    __slots__ = ("kind", "tenant")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    tenant: str
    def __init__(self, kind: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class CatalogEntrySummary(_message.Message):
    __slots__ = ("kind", "tenant", "name", "live_version", "pending_versions", "description")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LIVE_VERSION_FIELD_NUMBER: _ClassVar[int]
    PENDING_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    kind: str
    tenant: str
    name: str
    live_version: str
    pending_versions: _containers.RepeatedScalarFieldContainer[str]
    description: str
    def __init__(self, kind: _Optional[str] = ..., tenant: _Optional[str] = ..., name: _Optional[str] = ..., live_version: _Optional[str] = ..., pending_versions: _Optional[_Iterable[str]] = ..., description: _Optional[str] = ...) -> None: ...

class ListCatalogEntriesResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[CatalogEntrySummary]
    def __init__(self, entries: _Optional[_Iterable[_Union[CatalogEntrySummary, _Mapping]]] = ...) -> None: ...

class CatalogEntryHistoryRequest(_message.Message):
    __slots__ = ("kind", "tenant", "name")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    tenant: str
    name: str
    def __init__(self, kind: _Optional[str] = ..., tenant: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class CatalogEntryHistoryResponse(_message.Message):
    __slots__ = ("live_version", "versions")
    LIVE_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    live_version: str
    versions: _containers.RepeatedCompositeFieldContainer[CatalogEntryInfo]
    def __init__(self, live_version: _Optional[str] = ..., versions: _Optional[_Iterable[_Union[CatalogEntryInfo, _Mapping]]] = ...) -> None: ...

class DecisionRef(_message.Message):
    __slots__ = ("run_id", "decision_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    decision_id: str
    def __init__(self, run_id: _Optional[str] = ..., decision_id: _Optional[str] = ...) -> None: ...

class ProposeCatalogEntryRequest(_message.Message):
    __slots__ = ("kind", "definition_yaml", "from_call", "name", "description", "note", "run")
    KIND_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_YAML_FIELD_NUMBER: _ClassVar[int]
    FROM_CALL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    kind: str
    definition_yaml: str
    from_call: DecisionRef
    name: str
    description: str
    note: str
    run: RunContext
    def __init__(self, kind: _Optional[str] = ..., definition_yaml: _Optional[str] = ..., from_call: _Optional[_Union[DecisionRef, _Mapping]] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., note: _Optional[str] = ..., run: _Optional[_Union[RunContext, _Mapping]] = ...) -> None: ...

class ReviewCatalogEntryRequest(_message.Message):
    __slots__ = ("kind", "tenant", "name", "version", "approve", "note")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    tenant: str
    name: str
    version: str
    approve: bool
    note: str
    def __init__(self, kind: _Optional[str] = ..., tenant: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[str] = ..., approve: _Optional[bool] = ..., note: _Optional[str] = ...) -> None: ...

class RetireCatalogEntryRequest(_message.Message):
    __slots__ = ("kind", "tenant", "name", "version", "note")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    tenant: str
    name: str
    version: str
    note: str
    def __init__(self, kind: _Optional[str] = ..., tenant: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class CatalogEntryActResponse(_message.Message):
    __slots__ = ("decision", "entry")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    decision: CheckResponse
    entry: CatalogEntryInfo
    def __init__(self, decision: _Optional[_Union[CheckResponse, _Mapping]] = ..., entry: _Optional[_Union[CatalogEntryInfo, _Mapping]] = ...) -> None: ...

class RunSkill(_message.Message):
    __slots__ = ("name", "version", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class RunSkillsRequest(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: RunContext
    def __init__(self, run: _Optional[_Union[RunContext, _Mapping]] = ...) -> None: ...

class RunSkillsResponse(_message.Message):
    __slots__ = ("skills",)
    SKILLS_FIELD_NUMBER: _ClassVar[int]
    skills: _containers.RepeatedCompositeFieldContainer[RunSkill]
    def __init__(self, skills: _Optional[_Iterable[_Union[RunSkill, _Mapping]]] = ...) -> None: ...

class LoadSkillRequest(_message.Message):
    __slots__ = ("run", "name")
    RUN_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    run: RunContext
    name: str
    def __init__(self, run: _Optional[_Union[RunContext, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class LoadSkillResponse(_message.Message):
    __slots__ = ("decision", "skill", "text", "reviewed_by")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    SKILL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    REVIEWED_BY_FIELD_NUMBER: _ClassVar[int]
    decision: CheckResponse
    skill: RunSkill
    text: str
    reviewed_by: str
    def __init__(self, decision: _Optional[_Union[CheckResponse, _Mapping]] = ..., skill: _Optional[_Union[RunSkill, _Mapping]] = ..., text: _Optional[str] = ..., reviewed_by: _Optional[str] = ...) -> None: ...

class LearningNote(_message.Message):
    __slots__ = ("id", "severity", "text", "reviewed_by")
    ID_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    REVIEWED_BY_FIELD_NUMBER: _ClassVar[int]
    id: str
    severity: str
    text: str
    reviewed_by: str
    def __init__(self, id: _Optional[str] = ..., severity: _Optional[str] = ..., text: _Optional[str] = ..., reviewed_by: _Optional[str] = ...) -> None: ...

class LearningProvenance(_message.Message):
    __slots__ = ("run_id", "decision_id", "agent", "agent_version", "code", "time", "tool")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    decision_id: str
    agent: str
    agent_version: str
    code: str
    time: str
    tool: str
    def __init__(self, run_id: _Optional[str] = ..., decision_id: _Optional[str] = ..., agent: _Optional[str] = ..., agent_version: _Optional[str] = ..., code: _Optional[str] = ..., time: _Optional[str] = ..., tool: _Optional[str] = ...) -> None: ...

class LearningInfo(_message.Message):
    __slots__ = ("id", "tenant", "agent", "agent_version", "tool", "status", "source", "code", "text", "severity", "match", "suggested_match", "proposed_by", "proposed_at", "reviewed_by", "reviewed_at", "review_note", "occurrences", "last_occurrence_at", "triggers", "last_triggered_at", "stale_at", "provenance", "severity_capped")
    ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    SUGGESTED_MATCH_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_BY_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_AT_FIELD_NUMBER: _ClassVar[int]
    REVIEWED_BY_FIELD_NUMBER: _ClassVar[int]
    REVIEWED_AT_FIELD_NUMBER: _ClassVar[int]
    REVIEW_NOTE_FIELD_NUMBER: _ClassVar[int]
    OCCURRENCES_FIELD_NUMBER: _ClassVar[int]
    LAST_OCCURRENCE_AT_FIELD_NUMBER: _ClassVar[int]
    TRIGGERS_FIELD_NUMBER: _ClassVar[int]
    LAST_TRIGGERED_AT_FIELD_NUMBER: _ClassVar[int]
    STALE_AT_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_CAPPED_FIELD_NUMBER: _ClassVar[int]
    id: str
    tenant: str
    agent: str
    agent_version: str
    tool: str
    status: str
    source: str
    code: str
    text: str
    severity: str
    match: str
    suggested_match: str
    proposed_by: str
    proposed_at: str
    reviewed_by: str
    reviewed_at: str
    review_note: str
    occurrences: int
    last_occurrence_at: str
    triggers: int
    last_triggered_at: str
    stale_at: str
    provenance: _containers.RepeatedCompositeFieldContainer[LearningProvenance]
    severity_capped: bool
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., agent: _Optional[str] = ..., agent_version: _Optional[str] = ..., tool: _Optional[str] = ..., status: _Optional[str] = ..., source: _Optional[str] = ..., code: _Optional[str] = ..., text: _Optional[str] = ..., severity: _Optional[str] = ..., match: _Optional[str] = ..., suggested_match: _Optional[str] = ..., proposed_by: _Optional[str] = ..., proposed_at: _Optional[str] = ..., reviewed_by: _Optional[str] = ..., reviewed_at: _Optional[str] = ..., review_note: _Optional[str] = ..., occurrences: _Optional[int] = ..., last_occurrence_at: _Optional[str] = ..., triggers: _Optional[int] = ..., last_triggered_at: _Optional[str] = ..., stale_at: _Optional[str] = ..., provenance: _Optional[_Iterable[_Union[LearningProvenance, _Mapping]]] = ..., severity_capped: _Optional[bool] = ...) -> None: ...

class ProposeLearningRequest(_message.Message):
    __slots__ = ("run", "source", "text", "tool", "severity", "code", "decision_id")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    run: RunContext
    source: LearningSource
    text: str
    tool: str
    severity: str
    code: str
    decision_id: str
    def __init__(self, run: _Optional[_Union[RunContext, _Mapping]] = ..., source: _Optional[_Union[LearningSource, str]] = ..., text: _Optional[str] = ..., tool: _Optional[str] = ..., severity: _Optional[str] = ..., code: _Optional[str] = ..., decision_id: _Optional[str] = ...) -> None: ...

class ReviewLearningRequest(_message.Message):
    __slots__ = ("id", "act", "severity", "match", "text", "note")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACT_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    id: str
    act: LearningAct
    severity: str
    match: str
    text: str
    note: str
    def __init__(self, id: _Optional[str] = ..., act: _Optional[_Union[LearningAct, str]] = ..., severity: _Optional[str] = ..., match: _Optional[str] = ..., text: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class LearningActResponse(_message.Message):
    __slots__ = ("decision", "learning")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    LEARNING_FIELD_NUMBER: _ClassVar[int]
    decision: CheckResponse
    learning: LearningInfo
    def __init__(self, decision: _Optional[_Union[CheckResponse, _Mapping]] = ..., learning: _Optional[_Union[LearningInfo, _Mapping]] = ...) -> None: ...

class ListLearningsRequest(_message.Message):
    __slots__ = ("tenant", "agent", "status", "id")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    agent: str
    status: str
    id: str
    def __init__(self, tenant: _Optional[str] = ..., agent: _Optional[str] = ..., status: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class ListLearningsResponse(_message.Message):
    __slots__ = ("learnings",)
    LEARNINGS_FIELD_NUMBER: _ClassVar[int]
    learnings: _containers.RepeatedCompositeFieldContainer[LearningInfo]
    def __init__(self, learnings: _Optional[_Iterable[_Union[LearningInfo, _Mapping]]] = ...) -> None: ...

class RunLessonsRequest(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: RunContext
    def __init__(self, run: _Optional[_Union[RunContext, _Mapping]] = ...) -> None: ...

class RunLessonsResponse(_message.Message):
    __slots__ = ("lessons",)
    LESSONS_FIELD_NUMBER: _ClassVar[int]
    lessons: _containers.RepeatedCompositeFieldContainer[LearningInfo]
    def __init__(self, lessons: _Optional[_Iterable[_Union[LearningInfo, _Mapping]]] = ...) -> None: ...
