"""Provider adapters: the real anthropic SDK against a loopback fake, and the scripted model."""

from __future__ import annotations

import driver_fake_anthropic as fa
import pytest

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
