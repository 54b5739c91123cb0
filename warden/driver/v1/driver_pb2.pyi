import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from warden.checkpoint.v1 import checkpoint_pb2 as _checkpoint_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_RUNNING: _ClassVar[RunStatus]
    RUN_STATUS_PAUSED: _ClassVar[RunStatus]
    RUN_STATUS_AWAITING_APPROVAL: _ClassVar[RunStatus]
    RUN_STATUS_SUCCEEDED: _ClassVar[RunStatus]
    RUN_STATUS_FAILED: _ClassVar[RunStatus]
    RUN_STATUS_CANCELLED: _ClassVar[RunStatus]
    RUN_STATUS_AWAITING_CHILD: _ClassVar[RunStatus]

class RunMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_MODE_UNSPECIFIED: _ClassVar[RunMode]
    RUN_MODE_INTERACTIVE: _ClassVar[RunMode]
    RUN_MODE_BACKGROUND: _ClassVar[RunMode]
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_PAUSED: RunStatus
RUN_STATUS_AWAITING_APPROVAL: RunStatus
RUN_STATUS_SUCCEEDED: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_CANCELLED: RunStatus
RUN_STATUS_AWAITING_CHILD: RunStatus
RUN_MODE_UNSPECIFIED: RunMode
RUN_MODE_INTERACTIVE: RunMode
RUN_MODE_BACKGROUND: RunMode

class CriterionCheck(_message.Message):
    __slots__ = ("kind", "tool", "output_contains", "arguments", "arguments_from")
    class ArgumentsFromEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ReceiptValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ReceiptValue, _Mapping]] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FROM_FIELD_NUMBER: _ClassVar[int]
    kind: str
    tool: str
    output_contains: str
    arguments: _struct_pb2.Struct
    arguments_from: _containers.MessageMap[str, ReceiptValue]
    def __init__(self, kind: _Optional[str] = ..., tool: _Optional[str] = ..., output_contains: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., arguments_from: _Optional[_Mapping[str, ReceiptValue]] = ...) -> None: ...

class ReceiptValue(_message.Message):
    __slots__ = ("receipt", "field")
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    receipt: str
    field: str
    def __init__(self, receipt: _Optional[str] = ..., field: _Optional[str] = ...) -> None: ...

class Criterion(_message.Message):
    __slots__ = ("id", "description", "check")
    ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    id: str
    description: str
    check: CriterionCheck
    def __init__(self, id: _Optional[str] = ..., description: _Optional[str] = ..., check: _Optional[_Union[CriterionCheck, _Mapping]] = ...) -> None: ...

class Goal(_message.Message):
    __slots__ = ("objective", "criteria", "constraints", "budget")
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    CRITERIA_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    objective: str
    criteria: _containers.RepeatedCompositeFieldContainer[Criterion]
    constraints: _containers.RepeatedScalarFieldContainer[str]
    budget: _checkpoint_pb2.Budget
    def __init__(self, objective: _Optional[str] = ..., criteria: _Optional[_Iterable[_Union[Criterion, _Mapping]]] = ..., constraints: _Optional[_Iterable[str]] = ..., budget: _Optional[_Union[_checkpoint_pb2.Budget, _Mapping]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "agent", "agent_version", "tenant", "owner", "mode", "status", "code", "reason", "goal_version", "counters", "budget", "missing", "pending_approvals", "provider", "model", "policy_revision", "created_at", "updated_at", "stretch", "total_tokens", "parent_run_id", "root_run_id", "depth", "lease_holder", "lease_expires_at", "lease_holder_dead")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    GOAL_VERSION_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    PENDING_APPROVALS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    POLICY_REVISION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    STRETCH_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    LEASE_HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    LEASE_HOLDER_DEAD_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    agent: str
    agent_version: str
    tenant: str
    owner: str
    mode: RunMode
    status: RunStatus
    code: str
    reason: str
    goal_version: int
    counters: _checkpoint_pb2.Counters
    budget: _checkpoint_pb2.Budget
    missing: _containers.RepeatedScalarFieldContainer[str]
    pending_approvals: _containers.RepeatedCompositeFieldContainer[Approval]
    provider: str
    model: str
    policy_revision: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    stretch: int
    total_tokens: int
    parent_run_id: str
    root_run_id: str
    depth: int
    lease_holder: str
    lease_expires_at: _timestamp_pb2.Timestamp
    lease_holder_dead: bool
    def __init__(self, run_id: _Optional[str] = ..., agent: _Optional[str] = ..., agent_version: _Optional[str] = ..., tenant: _Optional[str] = ..., owner: _Optional[str] = ..., mode: _Optional[_Union[RunMode, str]] = ..., status: _Optional[_Union[RunStatus, str]] = ..., code: _Optional[str] = ..., reason: _Optional[str] = ..., goal_version: _Optional[int] = ..., counters: _Optional[_Union[_checkpoint_pb2.Counters, _Mapping]] = ..., budget: _Optional[_Union[_checkpoint_pb2.Budget, _Mapping]] = ..., missing: _Optional[_Iterable[str]] = ..., pending_approvals: _Optional[_Iterable[_Union[Approval, _Mapping]]] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., policy_revision: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., stretch: _Optional[int] = ..., total_tokens: _Optional[int] = ..., parent_run_id: _Optional[str] = ..., root_run_id: _Optional[str] = ..., depth: _Optional[int] = ..., lease_holder: _Optional[str] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_holder_dead: _Optional[bool] = ...) -> None: ...

class Approval(_message.Message):
    __slots__ = ("approval_id", "run_id", "tool", "arguments", "code", "rule", "reason", "status", "decided_by", "decision_id")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    run_id: str
    tool: str
    arguments: _struct_pb2.Struct
    code: str
    rule: str
    reason: str
    status: str
    decided_by: str
    decision_id: str
    def __init__(self, approval_id: _Optional[str] = ..., run_id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., code: _Optional[str] = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ..., status: _Optional[str] = ..., decided_by: _Optional[str] = ..., decision_id: _Optional[str] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("seq", "run_id", "time", "kind", "data")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    seq: int
    run_id: str
    time: _timestamp_pb2.Timestamp
    kind: str
    data: _struct_pb2.Struct
    def __init__(self, seq: _Optional[int] = ..., run_id: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., kind: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("agent", "agent_version", "goal", "mode", "provider", "model", "script_yaml", "inputs")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_YAML_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    agent: str
    agent_version: str
    goal: Goal
    mode: RunMode
    provider: str
    model: str
    script_yaml: str
    inputs: _struct_pb2.Struct
    def __init__(self, agent: _Optional[str] = ..., agent_version: _Optional[str] = ..., goal: _Optional[_Union[Goal, _Mapping]] = ..., mode: _Optional[_Union[RunMode, str]] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., script_yaml: _Optional[str] = ..., inputs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class StartRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("status", "limit", "root_run_id")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    ROOT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    status: RunStatus
    limit: int
    root_run_id: str
    def __init__(self, status: _Optional[_Union[RunStatus, str]] = ..., limit: _Optional[int] = ..., root_run_id: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ("run_id", "after_seq", "no_follow", "until_waiting")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    NO_FOLLOW_FIELD_NUMBER: _ClassVar[int]
    UNTIL_WAITING_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_seq: int
    no_follow: bool
    until_waiting: bool
    def __init__(self, run_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., no_follow: _Optional[bool] = ..., until_waiting: _Optional[bool] = ...) -> None: ...

class WatchRunResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: RunEvent
    def __init__(self, event: _Optional[_Union[RunEvent, _Mapping]] = ...) -> None: ...

class ApproveCallRequest(_message.Message):
    __slots__ = ("approval_id", "note", "approval_token")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_TOKEN_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    note: str
    approval_token: str
    def __init__(self, approval_id: _Optional[str] = ..., note: _Optional[str] = ..., approval_token: _Optional[str] = ...) -> None: ...

class ApproveCallResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class RejectCallRequest(_message.Message):
    __slots__ = ("approval_id", "note", "rejection_decision_id")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    REJECTION_DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    note: str
    rejection_decision_id: str
    def __init__(self, approval_id: _Optional[str] = ..., note: _Optional[str] = ..., rejection_decision_id: _Optional[str] = ...) -> None: ...

class RejectCallResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class ResumeRunRequest(_message.Message):
    __slots__ = ("run_id", "reply", "raise_budget")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    RAISE_BUDGET_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reply: str
    raise_budget: _checkpoint_pb2.Budget
    def __init__(self, run_id: _Optional[str] = ..., reply: _Optional[str] = ..., raise_budget: _Optional[_Union[_checkpoint_pb2.Budget, _Mapping]] = ...) -> None: ...

class ResumeRunResponse(_message.Message):
    __slots__ = ("run", "resumed_children")
    RUN_FIELD_NUMBER: _ClassVar[int]
    RESUMED_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    resumed_children: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., resumed_children: _Optional[_Iterable[_Union[Run, _Mapping]]] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class PauseRunRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PauseRunResponse(_message.Message):
    __slots__ = ("run", "paused_children")
    RUN_FIELD_NUMBER: _ClassVar[int]
    PAUSED_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    paused_children: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., paused_children: _Optional[_Iterable[_Union[Run, _Mapping]]] = ...) -> None: ...

class AmendGoalRequest(_message.Message):
    __slots__ = ("run_id", "goal")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    goal: Goal
    def __init__(self, run_id: _Optional[str] = ..., goal: _Optional[_Union[Goal, _Mapping]] = ...) -> None: ...

class AmendGoalResponse(_message.Message):
    __slots__ = ("goal_version",)
    GOAL_VERSION_FIELD_NUMBER: _ClassVar[int]
    goal_version: int
    def __init__(self, goal_version: _Optional[int] = ...) -> None: ...
