"""Bad requests: a clear DENY or InvalidRequest, never an ALLOW."""

from __future__ import annotations

import pytest
from ckpt_helpers import ENGINES, build, case, outcome, params, policies

from checkpoint.engine import InvalidRequest, decide
from warden.checkpoint.v1 import checkpoint_pb2 as pb

HOSTILE = {
    "very-long": "x" * 100_000,
    "nul": "read_doc\x00",
    "nul-inside": "read\x00doc",
    "unicode-lookalike": "r\u0435ad_doc",  # Cyrillic e
    "rtl-override": "read_doc\u202e",
    "emoji": "\U0001f4a3",
    "sql": "read_doc' OR '1'='1",
    "shell": "read_doc; rm -rf / #",
    "path": "../../etc/passwd",
    "newline": "read_doc\n",
    "uppercase": "READ_DOC",
    "empty": "",
}

UNREADABLE_NAMES = ("rtl-override", "newline")

BAD_REQUEST_CASES = [
    *[case(f"tool-name/{k}", "DENY", "unknown_tool", "request.tool", chain=["reader"], tool=v, args={})
      for k, v in HOSTILE.items()],
    *[case(f"agent-id/{k}", "DENY", "unknown_agent", "request.agent", chain=[v], tool="read_doc",
           args={"doc": "doc:a"}) for k, v in HOSTILE.items() if v],
    # a name with a control, an invisible format character or edge whitespace is not read at all
    *[case(f"argument/{k}", "DENY", "invalid_arguments" if k in UNREADABLE_NAMES else "subject_out_of_scope",
           chain=["reader"], tool="read_doc", args={"doc": v})
      for k, v in HOSTILE.items() if k not in ("very-long", "nul", "nul-inside")],
    case("argument/too-long-for-schema", "DENY", "invalid_arguments", chain=["reader"], tool="read_doc",
         args={"doc": "doc:" + "x" * 300}),
    case("argument/huge", "DENY", "invalid_arguments", "request.arguments", chain=["worker"], tool="write_doc",
         args={"doc": "doc:a", "text": "x" * (65 * 1024)}),
    case("argument/huge-on-person-call", "DENY", "invalid_arguments", "request.arguments", chain=[],
         tool="write_doc", args={"doc": "doc:a", "text": "x" * (65 * 1024)}),
    case("argument/huge-plan-step", "DENY", "plan_step_not_allowed", chain=["worker"],
         plan=[{"id": "s", "tool": "write_doc", "args": {"doc": "doc:a", "text": "x" * (65 * 1024)}}]),
    case("argument/many-keys", "DENY", "invalid_arguments", chain=["worker"], tool="write_doc",
         args={"doc": "doc:a", **{f"k{i}": i for i in range(5000)}}),
    case("argument/sql-in-shipped-task-id", "DENY", "invalid_arguments", folder="shipped", chain=["recon"],
         tool="get_task", args={"task_id": "task-1' OR 1=1 --"}),
    case("argument/shell-in-shipped-template", "DENY", "invalid_arguments", folder="shipped", chain=["recon"],
         tool="create_task_from_template", args={"template": "web;rm -rf /", "target": "www.lab.example.com"}),
    case("argument/unicode-in-shipped-task-id", "DENY", "invalid_arguments", folder="shipped",
         chain=["recon"], tool="get_task", args={"task_id": "task-\u0661"}),
    case("unknown-version-with-hostile-string", "DENY", "unknown_agent_version", chain=["reader"],
         versions={"reader": "\x00' OR 1=1"}, tool="read_doc", args={"doc": "doc:a"}),
]


@pytest.mark.parametrize("c", params(BAD_REQUEST_CASES))
def test_bad_request_table(c):
    got = c.check()
    if not c.id.startswith("agent-id/"):
        assert len(got.reason) < 1000, "a hostile string is not echoed back whole"


@pytest.mark.parametrize("where", ["id", "version"])
def test_a_very_long_agent_id_or_version_is_not_echoed_whole(where):
    p = policies("engine")
    long = "x" * 100_000
    kw = {"chain": [long]} if where == "id" else {"chain": ["reader"], "versions": {"reader": long}}
    got = outcome(p, build(p, tool="read_doc", args={"doc": "doc:a"}, **kw))
    assert got.verdict == "DENY"
    assert len(got.reason) < 1000


def _chain_request(p, *actors, mode=pb.RUN_MODE_INTERACTIVE):
    r = build(p, chain=["reader"], tool="read_doc", args={"doc": "doc:a"})
    del r.run.actor_chain[:]
    for a in actors:
        r.run.actor_chain.add(**a)
    r.run.mode = mode
    return r


def _invalid_requests():
    p = policies("engine")
    version = p.agents["reader"].version
    person = {"kind": pb.ACTOR_KIND_PERSON, "id": "alice"}
    agent = {"kind": pb.ACTOR_KIND_AGENT, "id": "reader", "agent_version": version}
    no_run = build(p, chain=["reader"], tool="read_doc", args={"doc": "doc:a"})
    no_run.ClearField("run")
    no_action = build(p, chain=["reader"])
    return [
        ("no-run", no_run, "run"),
        ("no-action", no_action, "action"),
        ("empty-chain", _chain_request(p), "run.actor_chain"),
        ("chain-starts-with-agent", _chain_request(p, agent), "run.actor_chain"),
        ("person-without-id", _chain_request(p, {"kind": pb.ACTOR_KIND_PERSON}, agent), "run.actor_chain"),
        ("actor-kind-unspecified-first", _chain_request(p, {"id": "alice"}, agent), "run.actor_chain"),
        ("person-in-the-middle", _chain_request(p, person, agent, person), "run.actor_chain"),
        ("agent-without-version", _chain_request(p, person, {"kind": pb.ACTOR_KIND_AGENT, "id": "reader"}),
         "run.actor_chain[1]"),
        ("agent-without-id", _chain_request(p, person, {"kind": pb.ACTOR_KIND_AGENT, "agent_version": version}),
         "run.actor_chain[1]"),
        ("mode-unspecified", _chain_request(p, person, agent, mode=pb.RUN_MODE_UNSPECIFIED), "run.mode"),
    ]


@pytest.mark.parametrize("label, request_, field", [pytest.param(*r, id=r[0]) for r in _invalid_requests()])
def test_malformed_requests_raise_invalid_request(label, request_, field):
    with pytest.raises(InvalidRequest) as info:
        decide(policies("engine"), request_)
    assert info.value.code == "invalid_request"
    assert info.value.field == field
    assert info.value.message


def test_invalid_request_codes_count_in_the_meta_table():
    got = outcome(policies("engine"), _invalid_requests()[0][1])
    assert (got.verdict, got.code) == ("INVALID", "invalid_request")


def test_deeply_nested_arguments_are_a_clear_deny():
    p = policies("engine")
    r = build(p, chain=["worker"], tool="write_doc", args={"doc": "doc:a"})
    nested = r.tool_call.arguments.fields["text"].struct_value
    for _ in range(2000):
        nested = nested.fields["a"].struct_value
    assert r.tool_call.arguments.ByteSize() < 64 * 1024
    got = outcome(p, r)
    assert got.verdict in ("DENY", "INVALID")


def test_moderately_nested_arguments_are_decided():
    p = policies("engine")
    r = build(p, chain=["worker"], tool="write_doc", args={"doc": "doc:a"})
    nested = r.tool_call.arguments.fields["text"].struct_value
    for _ in range(50):
        nested = nested.fields["a"].struct_value
    got = outcome(p, r)
    assert (got.verdict, got.code) == ("DENY", "invalid_arguments")  # text must be a string


@pytest.mark.parametrize("cel_engine, tool", [
    pytest.param("native", "read_doc", id="native-fast-path-touches"),
    pytest.param("python", "read_doc", id="python-fast-path-touches"),
    pytest.param("native", "read_note", id="native-cel-touches"),
    pytest.param("python", "read_note", id="python-cel-touches"),
])
@pytest.mark.parametrize("value", [
    pytest.param("www.lab.example.com\x00.gov", id="nul-then-off-limits"),
    pytest.param("www.lab.example.com\x00.evil.org", id="nul-then-out-of-scope"),
])
def test_nul_inside_a_touched_value_never_allows(cel_engine, tool, value):
    p = policies("engine", cel_engine)
    got = outcome(p, build(p, chain=["reader"], tool=tool, args={"doc": value}))
    assert got.verdict != "ALLOW", got


@pytest.mark.parametrize("value", ["WWW.IRS.GOV", "www.irs.gov.", "DOC:FORBIDDEN-x"])
@pytest.mark.parametrize("chain", [pytest.param([], id="person"), pytest.param(["star"], id="agent-scope-star")])
def test_off_limits_cannot_be_dodged_by_spelling(value, chain):
    p = policies("engine")
    got = outcome(p, build(p, chain=chain, tool="read_doc", args={"doc": value}))
    assert (got.verdict, got.code) == ("DENY", "subject_off_limits"), got


@pytest.mark.parametrize("cel_engine", ENGINES)
def test_hostile_strings_never_allow_on_shipped_policies(cel_engine):
    p = policies("shipped", cel_engine)
    for value in HOSTILE.values():
        for chain in (["recon"], ["ops"], ["refunds"]):
            for tool, args in (
                ("create_task_from_template", {"template": "web-basic", "target": value}),
                ("get_task", {"task_id": value}),
                ("lookup_order", {"order_id": "ord-1", "customer": value}),
                ("run_shell", {"program": value}),
            ):
                got = outcome(p, build(p, chain=chain, tool=tool, args=args))
                assert got.verdict != "ALLOW" or value == "", (chain, tool, value[:40], got)
