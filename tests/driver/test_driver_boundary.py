"""The model boundary: every stable code, and the typed proposals that pass."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.boundary import (
    MAX_ARGUMENT_BYTES,
    Final,
    Handoff,
    Idle,
    ProviderReply,
    Rejection,
    ToolCalls,
    decide,
    struct_size,
)

CONTRACT = {"get_task", "create_task_from_template", "propose_plan"}


def nested(levels, inner=None):
    """An object (or list) `levels` deep."""
    value = "x" if inner is None else inner
    for _ in range(levels):
        value = [value] if isinstance(inner, list) else {"a": value}
    return value


def reply(*actions, stop="tool_use", text=""):
    return ProviderReply(stop_reason=stop, actions=list(actions), text=text)


CASES = [
    ("unknown_field", reply({"action": "tool_call", "tool": "get_task", "arguments": {}, "confidence": 0.9})),
    ("unknown_field", reply({"action": "final", "outcomes": [{"criterion": "a", "met": True, "approved": True}]},
                            stop="end_turn")),
    ("unknown_action", reply({"action": "approve_myself"})),
    ("unknown_action", reply({"action": 3})),
    ("tool_not_in_contract", reply({"action": "tool_call", "tool": "cancel_task", "arguments": {}})),
    ("tool_on_final", reply({"action": "final", "tool": "get_task", "outcomes": []}, stop="end_turn")),
    ("tool_on_final", reply({"action": "handoff", "arguments": {}}, stop="end_turn")),
    ("tool_on_final", reply({"action": "tool_call", "tool": "get_task", "arguments": {}},
                            {"action": "final", "outcomes": []})),
    ("malformed_response", reply("not an object")),
    ("malformed_response", reply({"tool": "get_task"})),
    ("malformed_response", reply({"action": "tool_call", "tool": "get_task", "arguments": ["x"]})),
    ("malformed_response", reply({"action": "final", "outcomes": [{"criterion": "a", "met": "yes"}]})),
    ("malformed_response", reply({"action": "final", "outcomes": []}, {"action": "handoff"})),
    ("malformed_response", reply({"action": "tool_call", "tool": "get_task", "id": "x"},
                                 {"action": "tool_call", "tool": "get_task", "id": "x"})),
    # no exact JSON number (RFC 8785): the grant could only bind it rounded
    ("malformed_response", reply({"action": "tool_call", "tool": "get_task", "arguments": {"id": 2**60 + 1}})),
    ("malformed_response", reply({"action": "tool_call", "tool": "get_task", "arguments": {"x": float("nan")}})),
    # arguments the checkpoint refuses and a protobuf Struct cannot even carry to it
    ("malformed_response", reply({"action": "tool_call", "tool": "get_task", "arguments": {"x": nested(32)}})),
    ("malformed_response", reply({"action": "tool_call", "tool": "get_task", "arguments": {"x": nested(900, [])}})),
    ("malformed_response", reply({"action": "tool_call", "tool": "get_task",
                                  "arguments": {"x": "y" * MAX_ARGUMENT_BYTES}})),
]


@pytest.mark.parametrize("code,r", CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)])
def test_rejections_carry_stable_codes(code, r):
    d = decide(r, CONTRACT)
    assert isinstance(d, Rejection), d
    assert d.code == code


def test_rejection_keeps_tool_use_ids_so_each_gets_a_refused_result():
    d = decide(reply({"action": "tool_call", "id": "toolu_9", "tool": "rm_rf", "arguments": {}}), CONTRACT)
    assert isinstance(d, Rejection) and d.call_ids == ["toolu_9"]


@pytest.mark.parametrize("stop", ["max_tokens", "refusal"])
def test_cut_off_reply_is_a_handoff_even_with_a_tool_call(stop):
    d = decide(reply({"action": "tool_call", "tool": "get_task", "arguments": {"id": "1"}}, stop=stop), CONTRACT)
    assert isinstance(d, Handoff) and d.code == "cut_off"


def test_tool_call_passes_and_arguments_are_copied():
    raw = {"action": "tool_call", "id": "t1", "tool": "get_task", "arguments": {"q": {"id": "1"}}}
    d = decide(reply(raw), CONTRACT)
    assert isinstance(d, ToolCalls)
    raw["arguments"]["q"]["id"] = "changed"
    assert d.calls[0].arguments == {"q": {"id": "1"}}
    assert d.calls[0].call_id == "t1" and d.calls[0].tool == "get_task"


def test_several_tool_calls_in_one_turn():
    d = decide(reply({"action": "tool_call", "tool": "get_task", "arguments": {}},
                     {"action": "tool_call", "tool": "get_task", "arguments": {"id": "2"}}), CONTRACT)
    assert isinstance(d, ToolCalls) and [c.call_id for c in d.calls] == ["call_0", "call_1"]


def test_final_and_handoff_and_idle():
    f = decide(reply({"action": "final", "summary": "ok",
                      "outcomes": [{"criterion": "scan", "met": True, "evidence": "receipt"}]}, stop="end_turn"),
               CONTRACT)
    assert isinstance(f, Final) and f.outcomes[0].criterion == "scan" and f.outcomes[0].met is True
    h = decide(reply({"action": "handoff", "reason": "need a human"}, stop="end_turn"), CONTRACT)
    assert isinstance(h, Handoff) and h.code == "handoff" and h.reason == "need a human"
    i = decide(reply(stop="end_turn", text="let me think"), CONTRACT)
    assert isinstance(i, Idle) and i.text == "let me think"


def test_arguments_at_the_checkpoints_bounds_pass():
    # 32 levels with the arguments object itself, and exactly MAX_ARGUMENT_BYTES as the Struct the
    # checkpoint measures
    deep = decide(reply({"action": "tool_call", "tool": "get_task", "arguments": {"x": nested(31)}}), CONTRACT)
    text = "y" * (MAX_ARGUMENT_BYTES - (struct_size({"x": "y" * MAX_ARGUMENT_BYTES}) - MAX_ARGUMENT_BYTES))
    assert struct_size({"x": text}) == MAX_ARGUMENT_BYTES
    big = decide(reply({"action": "tool_call", "tool": "get_task", "arguments": {"x": text}}), CONTRACT)
    assert isinstance(deep, ToolCalls) and isinstance(big, ToolCalls)
    over = decide(reply({"action": "tool_call", "tool": "get_task", "arguments": {"x": text + "y"}}), CONTRACT)
    assert isinstance(over, Rejection) and over.code == "malformed_response"


def test_the_size_bound_is_the_checkpoints_not_the_json_texts():
    # escaped newlines make the JSON half again larger than the Struct: the checkpoint takes these
    lines = {"content": "a\n" * 30_000}
    assert struct_size(lines) < MAX_ARGUMENT_BYTES
    assert isinstance(decide(reply({"action": "tool_call", "tool": "get_task", "arguments": lines}), CONTRACT),
                      ToolCalls)
    # thirty thousand small numbers are 60 KB of JSON and 330 KB of Struct: the checkpoint refuses them
    numbers = {"xs": [1] * 30_000}
    assert struct_size(numbers) > MAX_ARGUMENT_BYTES
    refused = decide(reply({"action": "tool_call", "tool": "get_task", "arguments": numbers}), CONTRACT)
    assert isinstance(refused, Rejection) and refused.code == "malformed_response"


@given(stop=st.one_of(st.text(max_size=30), st.sampled_from(["pause_turn", "stop_sequence", "END_TURN", "end_turn ",
                                                            "tool-use", ""])))
def test_only_end_turn_and_tool_use_finish_a_turn(stop):
    """Whatever the reply holds, a stop reason the driver does not know runs nothing of it."""
    final = {"action": "final", "outcomes": [{"criterion": "c", "met": True}]}
    call = {"action": "tool_call", "id": "t1", "tool": "get_task", "arguments": {}}
    for r in (reply(call, stop=stop), reply(final, stop=stop)):
        d = decide(r, CONTRACT)
        if stop in ("end_turn", "tool_use"):
            assert isinstance(d, (ToolCalls, Final))
        else:
            assert isinstance(d, Handoff) and d.code in ("cut_off", "unknown_stop_reason"), (stop, d)


def test_a_call_id_twice_is_refused_and_the_id_answered_once():
    d = decide(reply({"action": "tool_call", "tool": "get_task", "id": "x"},
                     {"action": "tool_call", "tool": "get_task", "id": "x", "arguments": {"id": "2"}}), CONTRACT)
    assert isinstance(d, Rejection) and d.code == "malformed_response" and d.call_ids == ["x"]


def test_a_tool_call_among_the_text_actions_is_refused():
    r = ProviderReply(stop_reason="end_turn", text_actions=[{"action": "tool_call", "tool": "get_task"}])
    d = decide(r, CONTRACT)
    assert isinstance(d, Rejection) and d.code == "malformed_response"
    final = ProviderReply(stop_reason="end_turn", text_actions=[{"action": "final", "outcomes": []}])
    assert isinstance(decide(final, CONTRACT), Final)
