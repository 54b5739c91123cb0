"""Provider adapters: the real anthropic SDK against a loopback fake, and the scripted model."""

from __future__ import annotations

import driver_fake_anthropic as fa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver.boundary import Final, Handoff, Idle, Rejection, ToolCalls, decide
from driver.errors import ProviderError
from driver.providers import ToolDef, make_provider
from driver.providers.base import ModelRequest
from driver.providers.scripted import ScriptError, load_script

CONTRACT = {"get_task", "propose_plan"}


def request(attempt=0, transcript=None):
    return ModelRequest(
        run_id="r1", attempt=attempt, system="You are recon.",
        transcript=transcript or [{"role": "user", "text": "goal"}],
        tools=[ToolDef(name="get_task", description="read a task",
                       input_schema={"type": "object", "properties": {"id": {"type": "string"}}})],
    )


@pytest.fixture()
def fake():
    with fa.FakeMessagesAPI() as f:
        yield f


@pytest.fixture()
def provider(fake):
    return make_provider("anthropic", model="claude-test", api_key="sk-test", base_url=fake.base_url)


def test_tool_use_becomes_a_tool_call(fake, provider):
    fake.replies.append(fa.tool_use("get_task", {"id": "42"}, call_id="toolu_7", input_tokens=321))
    r = provider.complete(request())
    d = decide(r, CONTRACT)
    assert isinstance(d, ToolCalls) and d.calls[0].tool == "get_task" and d.calls[0].arguments == {"id": "42"}
    assert d.calls[0].call_id == "toolu_7" and r.input_tokens == 321
    sent = fake.requests[0]
    assert sent["model"] == "claude-test" and sent["tools"][0]["name"] == "get_task"
    assert sent["system"] == "You are recon."
    h = fake.headers[0]
    assert h.get("x-api-key") == "sk-test" or h.get("authorization") == "Bearer sk-test"


def test_end_turn_json_final_and_prose(fake, provider):
    fake.replies.append(fa.end_turn('```json\n{"action": "final", "outcomes": [{"criterion": "c", "met": true}]}\n```'))
    fake.replies.append(fa.end_turn("I am thinking about it."))
    fake.replies.append(fa.end_turn('{"action": "final", "oops": 1}'))
    assert isinstance(decide(provider.complete(request()), CONTRACT), Final)
    assert isinstance(decide(provider.complete(request()), CONTRACT), Idle)
    d = decide(provider.complete(request()), CONTRACT)
    assert isinstance(d, Rejection) and d.code == "unknown_field"


def test_max_tokens_is_a_cut_off_handoff(fake, provider):
    fake.replies.append(fa.max_tokens("get_task"))
    d = decide(provider.complete(request()), CONTRACT)
    assert isinstance(d, Handoff) and d.code == "cut_off"


@pytest.mark.parametrize("reply,kind", [(fa.overloaded, "overloaded"), (fa.credit, "credit")])
def test_provider_refusals_are_typed(fake, provider, reply, kind):
    fake.replies.append(reply())
    with pytest.raises(ProviderError) as err:
        provider.complete(request())
    assert err.value.kind == kind and err.value.code == f"provider_{kind}"
    assert len(fake.requests) == 1  # the SDK did not retry behind the loop's back


def test_transcript_replays_tool_results_as_user_blocks(fake, provider):
    first = fa.tool_use("get_task", {"id": "1"}, call_id="toolu_a")
    fake.replies.append(first)
    r1 = provider.complete(request())
    fake.replies.append(fa.end_turn("done?"))
    transcript = [
        {"role": "user", "text": "goal"},
        {"role": "assistant", "reply": r1.model_dump()},
        {"role": "results", "results": [{"call_id": "toolu_a", "content": "<data>ok</data>", "is_error": False}],
         "text": "note"},
    ]
    provider.complete(request(1, transcript))
    msgs = fake.requests[1]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[2]["content"][0] == {"type": "tool_result", "tool_use_id": "toolu_a",
                                     "content": "<data>ok</data>", "is_error": False}


def test_scripted_replays_by_attempt_and_raises_errors(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text(
        "responses:\n"
        "  - {action: tool_call, tool: get_task, arguments: {id: '1'}}\n"
        "  - {error: overloaded}\n"
        "  - {stop_reason: max_tokens}\n"
        "  - {text: hmm}\n"
    )
    p = make_provider("scripted", script=script)
    assert isinstance(decide(p.complete(request(0)), CONTRACT), ToolCalls)
    with pytest.raises(ProviderError) as err:
        p.complete(request(1))
    assert err.value.kind == "overloaded"
    assert isinstance(decide(p.complete(request(2)), CONTRACT), Handoff)
    assert isinstance(decide(p.complete(request(3)), CONTRACT), Idle)
    end = decide(p.complete(request(4)), CONTRACT)
    assert isinstance(end, Handoff) and "no more responses" in end.reason


def test_script_with_unknown_keys_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("responses:\n  - {txt: typo}\n")
    with pytest.raises(ScriptError):
        load_script(bad)


def test_the_scripted_model_is_never_a_default():
    """A run that names no provider gets the real one; the scripted model only when asked for."""
    from driver.loop import Driver
    from warden.cli import build_parser

    assert build_parser().parse_args(["driver", "serve"]).provider == "anthropic"
    assert build_parser().parse_args(["up"]).provider == "anthropic"
    assert Driver.__init__.__kwdefaults__["default_provider"] == "anthropic"


# -- every request the adapter sends is one the real API takes, whatever the transcript holds ------

_IDS = ["toolu_a", "toolu_b", "toolu_a", "", "bad id!", "call_0"]


@st.composite
def transcripts(draw: st.DrawFn) -> list[dict]:
    """A run's transcript in any state a crash, a pause or a model's odd reply can leave it in:
    replies with repeated or unusable tool_use ids and empty text blocks, results for ids no reply
    offered, missing results, notes in between, two replies in a row."""
    entries: list[dict] = [{"role": "user", "text": "goal"}]
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["assistant", "assistant", "results", "user"]))
        if kind == "assistant":
            blocks = []
            for _ in range(draw(st.integers(0, 3))):
                if draw(st.booleans()):
                    blocks.append({"type": "tool_use", "id": draw(st.sampled_from(_IDS)), "name": "get_task",
                                   "input": {"id": "1"}})
                else:
                    blocks.append({"type": "text", "text": draw(st.sampled_from(["", "thinking", "{\"x\": 1}"]))})
            actions = [{"action": "tool_call", "id": b["id"], "tool": b["name"], "arguments": b["input"]}
                       for b in blocks if b["type"] == "tool_use"]
            entries.append({"role": "assistant", "reply": {"stop_reason": "tool_use", "actions": actions,
                                                           "transcript": blocks}})
        elif kind == "results":
            results = [{"call_id": draw(st.sampled_from(_IDS)), "content": "<data>r</data>",
                        "is_error": draw(st.booleans())} for _ in range(draw(st.integers(0, 3)))]
            entries.append({"role": "results", "results": results, "text": draw(st.sampled_from(["", "note"]))})
        else:
            entries.append({"role": "user", "text": draw(st.sampled_from(["", "a person's reply"]))})
    return entries


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(transcript=transcripts())
def test_every_follow_up_request_is_one_the_api_takes(fake, provider, transcript):
    fake.replies.append(fa.end_turn("ok"))
    provider.complete(request(1, transcript))
    assert fake.refused == [], (fake.refused, fake.requests[-1]["messages"])
    sent = fake.requests[-1]["messages"]
    offered = [b["id"] for m in sent for b in m["content"] if b["type"] == "tool_use"]
    answered = [b["tool_use_id"] for m in sent for b in m["content"] if b["type"] == "tool_result"]
    assert sorted(offered) == sorted(answered) and len(set(offered)) == len(offered)


@pytest.mark.parametrize("stop", [None, "pause_turn", "stop_sequence", "something_new"])
def test_an_unknown_stop_reason_comes_through_as_it_is(fake, provider, stop):
    fake.replies.append(fa.message([{"type": "text", "text": '{"action": "final", "outcomes": []}'}], stop))
    r = provider.complete(request())
    assert r.stop_reason == (stop or "")
    d = decide(r, CONTRACT)
    assert isinstance(d, Handoff) and d.code == "unknown_stop_reason"


def test_a_final_beside_a_tool_call_and_a_tool_call_as_text_are_refused(fake, provider):
    fake.replies.append(fa.message([{"type": "tool_use", "id": "toolu_x", "name": "get_task", "input": {}},
                                    {"type": "text", "text": '{"action": "final", "outcomes": []}'}], "tool_use"))
    fake.replies.append(fa.end_turn('{"action": "tool_call", "id": "toolu_y", "tool": "get_task", "arguments": {}}'))
    d = decide(provider.complete(request()), CONTRACT)
    assert isinstance(d, Rejection) and d.code == "tool_on_final" and d.call_ids == ["toolu_x"]
    d = decide(provider.complete(request()), CONTRACT)
    # the id it wrote is no tool_use the API knows: nothing is answered under it
    assert isinstance(d, Rejection) and d.code == "malformed_response" and d.call_ids == []


def _use(i: str) -> dict:
    return {"type": "tool_use", "id": i, "name": "get_task", "input": {}}


def _result(i: str) -> dict:
    return {"type": "tool_result", "tool_use_id": i, "content": "r"}


@pytest.mark.parametrize("messages,problem", [
    ([{"role": "assistant", "content": "hi"}], "first message"),
    ([{"role": "user", "content": "go"}, {"role": "assistant", "content": [_use("a"), _use("a")]},
      {"role": "user", "content": [_result("a")]}], "must be unique"),
    ([{"role": "user", "content": "go"}, {"role": "assistant", "content": [_use("a"), _use("b")]},
      {"role": "user", "content": [_result("a")]}], "without `tool_result`"),
    ([{"role": "user", "content": "go"}, {"role": "assistant", "content": [_use("a")]},
      {"role": "user", "content": [_result("a"), _result("a")]}], "more than once"),
    ([{"role": "user", "content": "go"}, {"role": "assistant", "content": [_use("a")]},
      {"role": "user", "content": [{"type": "text", "text": "note"}, _result("a")]}], "must come first"),
    ([{"role": "user", "content": [_result("zzz")]}], "unexpected `tool_use_id`"),
    ([{"role": "user", "content": [{"type": "text", "text": ""}]}], "non-empty"),
    ([{"role": "user", "content": "go"}, {"role": "assistant", "content": [_use("bad id")]},
      {"role": "user", "content": [_result("bad id")]}], "should match pattern"),
])
def test_the_fake_refuses_what_the_real_api_refuses(messages, problem):
    """The fake's checks are what make the follow-up tests mean something: each one bites."""
    assert any(problem in p for p in fa.request_problems({"model": "m", "max_tokens": 1, "messages": messages}))
    assert fa.request_problems({"model": "m", "max_tokens": 1, "messages": [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": [{"type": "text", "text": "x"}, _use("a")]},
        {"role": "user", "content": [_result("a"), {"type": "text", "text": "note"}]}]}) == []


@pytest.mark.parametrize("block", [
    {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "get_task", "server_name": "s", "input": {}},
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
    {"type": "a_block_from_next_year", "payload": 1},
])
def test_a_content_block_the_driver_does_not_know_refuses_the_reply(fake, provider, block):
    """A block type the driver never asked for may be a call in a shape it cannot decide or answer:
    the reply is refused whole, never read as prose (Idle) or as its other blocks alone."""
    fake.replies.append(fa.message([{"type": "tool_use", "id": "toolu_k", "name": "get_task", "input": {}}, block],
                                   "tool_use"))
    d = decide(provider.complete(request()), CONTRACT)
    assert isinstance(d, Rejection) and d.code == "malformed_response" and block["type"] in d.detail
    assert d.call_ids == ["toolu_k"]
    fake.replies.append(fa.message([block], "end_turn"))
    d = decide(provider.complete(request()), CONTRACT)
    assert isinstance(d, Rejection) and d.code == "malformed_response"
