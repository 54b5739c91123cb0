"""The model boundary: an untrusted provider reply becomes a typed decision, or a rejection.

A provider adapter turns its SDK's response into a `ProviderReply`: the stop reason, token usage,
a list of raw action objects (one per native tool call, a tool_use block) and the action objects
the model wrote as text (its final or handoff answer). Nothing in that reply is trusted. `decide()`
checks it and returns exactly one of:

- `ToolCalls`: one or more `tool_call` proposals (a model may ask for several calls in one
  turn; each is checked by the checkpoint on its own, and the tool_calls breaker counts them),
- `Final`: the model reports an outcome for each criterion,
- `Handoff`: stop and give the run to a person (the model asked, the reply was cut off, or it
  stopped for a reason the driver does not know),
- `Idle`: the model wrote prose and proposed nothing (the loop nudges once, then pauses),
- `Rejection`: the reply broke the contract; `code` is stable and the rejection is fed back to
  the model as data and counted as a failure.

Checks, first failure wins: cut off (max_tokens / refusal -> handoff `cut_off`, because a
partial tool input is never safe to run); a stop reason other than end_turn and tool_use (handoff
`unknown_stop_reason`: a pause, a stop sequence the driver never set, a reason added to the API
later or none at all says nothing about whether the turn is complete, so nothing in it runs); a
tool call written as text where the provider has native tool calls (`malformed_response`: it has
no id the provider could pair with its result); a content block of a type the adapter does not know
(`malformed_response`: it may be a call in a shape nothing here decides); each action is an object; `action` is one of the
closed set (`unknown_action`); a final or handoff names no tool (`tool_on_final`); no unknown
field anywhere (`unknown_field`); types are right (`malformed_response`); the tool is in this
run's contract (`tool_not_in_contract`); no call id twice (`malformed_response`); the arguments have an exact JSON form, are no larger than
MAX_ARGUMENT_BYTES as an encoded protobuf Struct (what the checkpoint measures) and nested no deeper than MAX_ARGUMENT_DEPTH (`malformed_response`: the
checkpoint refuses such arguments, and a protobuf Struct cannot carry them to it at all, so a call
the boundary let through would fail every time it is decided and wedge the run). Arguments are
deep-copied so no later change to the raw reply can change what runs.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from warden import canonical
from warden.structs import to_struct

ACTIONS = ("tool_call", "final", "handoff")
CUT_OFF_STOP_REASONS = frozenset({"max_tokens", "refusal", "model_context_window_exceeded"})
# The only stop reasons after which a reply is a whole turn whose actions may be decided.
FINISHED_STOP_REASONS = frozenset({"end_turn", "tool_use"})

UNKNOWN_FIELD = "unknown_field"
UNKNOWN_ACTION = "unknown_action"
TOOL_NOT_IN_CONTRACT = "tool_not_in_contract"
TOOL_ON_FINAL = "tool_on_final"
MALFORMED_RESPONSE = "malformed_response"
CUT_OFF = "cut_off"
UNKNOWN_STOP_REASON = "unknown_stop_reason"
REJECTION_CODES = (UNKNOWN_FIELD, UNKNOWN_ACTION, TOOL_NOT_IN_CONTRACT, TOOL_ON_FINAL, MALFORMED_RESPONSE)
# The checkpoint's own bounds on a call's arguments (checkpoint/engine/decide.py MAX_ARGUMENT_BYTES,
# warden/structs.py MAX_DEPTH): beyond them it refuses, and beyond about 33 levels (the
# protobuf decoder's depth limit) or its 1 MiB request limit the Check cannot even be sent.
MAX_ARGUMENT_BYTES = 64 * 1024
MAX_ARGUMENT_DEPTH = 32


def struct_size(arguments: dict[str, Any]) -> int:
    """The arguments' size as the checkpoint measures it: the encoded google.protobuf.Struct the
    Check carries (their JSON text can be larger, `\n` escaped, or smaller, a list of numbers)."""
    return to_struct(arguments).ByteSize()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ProviderReply(BaseModel):
    """What an adapter hands the boundary. `actions` and `text` are untrusted."""

    model_config = ConfigDict(extra="forbid")

    stop_reason: str
    actions: list[Any] = Field(default_factory=list)
    # Actions the model wrote as text, from a provider whose tool calls are native blocks: only a
    # final or a handoff may come this way. A scripted model puts everything under `actions`.
    text_actions: list[Any] = Field(default_factory=list)
    # Types of content blocks the adapter does not know (a provider-run tool's call, thinking the
    # driver never asked for, a type added later): it cannot decide or answer them.
    unknown_blocks: list[str] = Field(default_factory=list)
    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""
    # The provider-shaped assistant message, kept so the adapter can replay the conversation.
    transcript: Any = None


# -- the raw shapes the model may send (validated with extra=forbid) ---------------------------


class _RawToolCall(_Strict):
    action: Literal["tool_call"]
    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str = ""
    plan_step: str = ""


class Outcome(_Strict):
    criterion: str = Field(min_length=1)
    met: bool
    evidence: str = ""


class _RawFinal(_Strict):
    action: Literal["final"]
    outcomes: list[Outcome] = Field(default_factory=list)
    summary: str = ""


class _RawHandoff(_Strict):
    action: Literal["handoff"]
    reason: str = ""


_SHAPES: dict[str, type[_Strict]] = {"tool_call": _RawToolCall, "final": _RawFinal, "handoff": _RawHandoff}


# -- decisions ------------------------------------------------------------------------------


class ToolCallProposal(_Strict):
    call_id: str
    tool: str
    arguments: dict[str, Any]
    plan_step: str = ""


class ToolCalls(_Strict):
    kind: Literal["tool_calls"] = "tool_calls"
    calls: list[ToolCallProposal]


class Final(_Strict):
    kind: Literal["final"] = "final"
    outcomes: list[Outcome]
    summary: str = ""


class Handoff(_Strict):
    kind: Literal["handoff"] = "handoff"
    # "handoff" when the model asked for a person; "cut_off" when the reply was cut short.
    code: str
    reason: str = ""


class Idle(_Strict):
    kind: Literal["idle"] = "idle"
    text: str = ""


class Rejection(_Strict):
    kind: Literal["rejection"] = "rejection"
    code: str
    detail: str
    # tool_use ids of the rejected reply: each still needs a (refused) result in the transcript.
    call_ids: list[str] = Field(default_factory=list)


Decision = ToolCalls | Final | Handoff | Idle | Rejection


class _Reject(Exception):
    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code = code
        self.detail = detail


def _call_ids(actions: list[Any]) -> list[str]:
    """The ids of the reply's tool calls, each once: the provider pairs each with one result."""
    ids: list[str] = []
    for a in actions:
        if isinstance(a, dict) and a.get("action") == "tool_call" and isinstance(a.get("id"), str) and a["id"]:
            if a["id"] not in ids:
                ids.append(a["id"])
    return ids


def _depth(value: Any) -> int:
    """How deeply objects and lists nest in `value` (a bare value is 0), without recursion: the
    model's reply may nest deeper than Python's stack."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_ARGUMENT_DEPTH:
            return deepest
        stack.extend((c, level + 1) for c in children)
    return deepest


def _parse_action(raw: Any, contract: frozenset[str]) -> _Strict:
    if not isinstance(raw, dict):
        raise _Reject(MALFORMED_RESPONSE, f"an action must be an object, got {type(raw).__name__}")
    action = raw.get("action")
    if action is None:
        raise _Reject(MALFORMED_RESPONSE, "the object has no 'action'")
    if not isinstance(action, str) or action not in ACTIONS:
        raise _Reject(UNKNOWN_ACTION, f"action {action!r} is not one of {', '.join(ACTIONS)}")
    if action != "tool_call" and ("tool" in raw or "arguments" in raw):
        raise _Reject(TOOL_ON_FINAL, f"a {action} must not name a tool")
    try:
        parsed = _SHAPES[action].model_validate(raw)
    except ValidationError as exc:
        extra = [e for e in exc.errors() if e["type"] == "extra_forbidden"]
        if extra:
            where = ".".join(str(p) for p in extra[0]["loc"])
            raise _Reject(UNKNOWN_FIELD, f"unknown field {where!r} in {action}") from None
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or action
        raise _Reject(MALFORMED_RESPONSE, f"{where}: {first['msg']}") from None
    if isinstance(parsed, _RawToolCall) and parsed.tool not in contract:
        raise _Reject(TOOL_NOT_IN_CONTRACT, f"tool {parsed.tool!r} is not in this run's contract")
    return parsed


def decide(reply: ProviderReply, contract: Iterable[str]) -> Decision:
    """Check one reply against the run's contract (the tool names the model may call)."""
    allowed = frozenset(contract)
    native = list(reply.actions)
    actions = native + list(reply.text_actions)
    if reply.stop_reason in CUT_OFF_STOP_REASONS:
        return Handoff(code=CUT_OFF, reason=f"the reply was cut off ({reply.stop_reason}); nothing in it runs")
    if reply.stop_reason not in FINISHED_STOP_REASONS:
        return Handoff(code=UNKNOWN_STOP_REASON,
                       reason=f"the reply stopped for a reason the driver does not know ({reply.stop_reason!r}); "
                              "nothing in it runs")
    if reply.unknown_blocks:
        return Rejection(code=MALFORMED_RESPONSE,
                         detail=f"the reply holds content the driver does not know ({', '.join(reply.unknown_blocks)})",
                         call_ids=_call_ids(native))
    if not actions:
        return Idle(text=reply.text)
    if any(isinstance(a, dict) and a.get("action") == "tool_call" for a in reply.text_actions):
        return Rejection(code=MALFORMED_RESPONSE,
                         detail="a tool call written as text: call a tool only as a tool_use block",
                         call_ids=_call_ids(native))
    try:
        parsed = [_parse_action(a, allowed) for a in actions]
    except _Reject as r:
        return Rejection(code=r.code, detail=r.detail, call_ids=_call_ids(native))
    calls = [p for p in parsed if isinstance(p, _RawToolCall)]
    others = [p for p in parsed if not isinstance(p, _RawToolCall)]
    if calls and others:
        return Rejection(
            code=TOOL_ON_FINAL,
            detail="a reply that finishes or hands off must not also call a tool",
            call_ids=_call_ids(native),
        )
    if len(others) > 1:
        return Rejection(code=MALFORMED_RESPONSE, detail="a reply holds at most one final or handoff")
    if others:
        only = others[0]
        if isinstance(only, _RawFinal):
            return Final(outcomes=list(only.outcomes), summary=only.summary)
        assert isinstance(only, _RawHandoff)
        return Handoff(code="handoff", reason=only.reason)
    seen: set[str] = set()
    proposals = []
    for i, c in enumerate(calls):
        call_id = c.id or f"call_{i}"
        if call_id in seen:
            return Rejection(code=MALFORMED_RESPONSE, detail=f"call id {call_id!r} used twice",
                             call_ids=_call_ids(native))
        seen.add(call_id)
        if _depth(c.arguments) > MAX_ARGUMENT_DEPTH:
            return Rejection(
                code=MALFORMED_RESPONSE,
                detail=f"call {call_id!r}: the arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels",
                call_ids=_call_ids(native),
            )
        try:  # what the grant will bind: a number no double holds exactly would be run rounded
            canonical.dumps(c.arguments)
            size = struct_size(c.arguments)
        except (ValueError, TypeError) as exc:
            return Rejection(
                code=MALFORMED_RESPONSE,
                detail=f"call {call_id!r}: the arguments have no exact JSON form ({exc}); write such numbers as strings",
                call_ids=_call_ids(native),
            )
        if size > MAX_ARGUMENT_BYTES:
            return Rejection(
                code=MALFORMED_RESPONSE,
                detail=f"call {call_id!r}: the arguments are larger than {MAX_ARGUMENT_BYTES} bytes",
                call_ids=_call_ids(native),
            )
        proposals.append(
            ToolCallProposal(
                call_id=call_id, tool=c.tool, arguments=copy.deepcopy(c.arguments), plan_step=c.plan_step
            )
        )
    return ToolCalls(calls=proposals)
