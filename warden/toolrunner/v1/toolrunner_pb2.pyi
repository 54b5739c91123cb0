import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from warden.checkpoint.v1 import checkpoint_pb2 as _checkpoint_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecuteRequest(_message.Message):
    __slots__ = ("run_id", "agent", "agent_version", "tool", "arguments", "grant")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    agent: str
    agent_version: str
    tool: str
    arguments: _struct_pb2.Struct
    grant: _checkpoint_pb2.Grant
    def __init__(self, run_id: _Optional[str] = ..., agent: _Optional[str] = ..., agent_version: _Optional[str] = ..., tool: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., grant: _Optional[_Union[_checkpoint_pb2.Grant, _Mapping]] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("decision_id", "run_id", "tool", "image_id", "exit_code", "oom_killed", "timed_out", "duration_seconds", "bytes_out", "truncated", "output", "raw_output_sha256", "masked_count", "started_at", "finished_at", "code", "replayed")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    IMAGE_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLED_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RAW_OUTPUT_SHA256_FIELD_NUMBER: _ClassVar[int]
    MASKED_COUNT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    run_id: str
    tool: str
    image_id: str
    exit_code: int
    oom_killed: bool
    timed_out: bool
    duration_seconds: float
    bytes_out: int
    truncated: bool
    output: str
    raw_output_sha256: str
    masked_count: int
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    code: str
    replayed: bool
    def __init__(self, decision_id: _Optional[str] = ..., run_id: _Optional[str] = ..., tool: _Optional[str] = ..., image_id: _Optional[str] = ..., exit_code: _Optional[int] = ..., oom_killed: _Optional[bool] = ..., timed_out: _Optional[bool] = ..., duration_seconds: _Optional[float] = ..., bytes_out: _Optional[int] = ..., truncated: _Optional[bool] = ..., output: _Optional[str] = ..., raw_output_sha256: _Optional[str] = ..., masked_count: _Optional[int] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., code: _Optional[str] = ..., replayed: _Optional[bool] = ...) -> None: ...

class ExecuteResponse(_message.Message):
    __slots__ = ("receipt",)
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    receipt: Receipt
    def __init__(self, receipt: _Optional[_Union[Receipt, _Mapping]] = ...) -> None: ...

class OutputChunk(_message.Message):
    __slots__ = ("stream", "data")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    stream: str
    data: str
    def __init__(self, stream: _Optional[str] = ..., data: _Optional[str] = ...) -> None: ...

class ExecuteStreamResponse(_message.Message):
    __slots__ = ("chunk", "receipt")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    chunk: OutputChunk
    receipt: Receipt
    def __init__(self, chunk: _Optional[_Union[OutputChunk, _Mapping]] = ..., receipt: _Optional[_Union[Receipt, _Mapping]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("decision_id", "run_id")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    run_id: str
    def __init__(self, decision_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: int
    def __init__(self, cancelled: _Optional[int] = ...) -> None: ...

class GetReceiptRequest(_message.Message):
    __slots__ = ("decision_id",)
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    def __init__(self, decision_id: _Optional[str] = ...) -> None: ...

class GetReceiptResponse(_message.Message):
    __slots__ = ("receipt",)
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    receipt: Receipt
    def __init__(self, receipt: _Optional[_Union[Receipt, _Mapping]] = ...) -> None: ...
