"""Delegation: a child's authority is its own intersected with every ancestor's, plus narrowing."""

from __future__ import annotations

import pytest
from ckpt_helpers import case, params, policies

DOC = {"doc": "doc:readme"}
URL = "https://api.example.com/v1"

DELEGATION_CASES = [
    # a call made by the child (chain worker -> helper) is bounded by worker's fence too
    case("child/own-and-parent-allow", "ALLOW", "allowed", chain=["worker", "helper"], tool="read_doc", args=DOC),
    case("child/tool-parent-lacks", "DENY", "tool_not_allowed", "allowlist",
         chain=["worker", "helper"], tool="learn_note", args={}),
    case("child/subject-parent-lacks", "DENY", "subject_out_of_scope", "scope.subjects",
         chain=["worker", "helper"], tool="read_doc", args={"doc": "other:x"}),
    case("child/connection-parent-lacks", "DENY", "connection_out_of_scope", "scope.connections",
         chain=["worker", "helper"], tool="connect", args={"url": "https://evil.example.org/"}),
    case("child/node-parent-lacks", "DENY", "node_out_of_scope", "scope.nodes",
         chain=["worker", "helper"], tool="connect", args={"url": URL, "node": "prod-1"}),
    case("child/image-parent-lacks", "DENY", "image_out_of_scope", "scope.images",
         chain=["worker", "helper"], tool="connect", args={"url": URL, "image": "evil/miner"}),
    case("child/inside-both-fences", "ALLOW", "allowed", chain=["worker", "helper"], tool="connect",
         args={"url": URL, "node": "node-1", "image": "img/a"}),
    # narrowing the child received
    case("narrowing/tools", "DENY", "tool_not_allowed", "allowlist.narrowing",
         chain=["worker", "helper"], narrowing={"tools": ["read_doc"]}, tool="connect", args={"url": URL}),
    case("narrowing/access", "DENY", "access_not_allowed", "scope.access",
         chain=["worker", "helper"], narrowing={"access": ["read"]}, tool="write_doc", args=DOC),
    case("narrowing/subjects", "DENY", "subject_out_of_scope", "scope.subjects",
         chain=["worker", "helper"], narrowing={"subjects": ["doc:public-*"]}, tool="read_doc",
         args={"doc": "doc:private"}),
    case("narrowing/subjects-inside", "ALLOW", "allowed",
         chain=["worker", "helper"], narrowing={"subjects": ["doc:public-*"]}, tool="read_doc",
         args={"doc": "doc:public-1"}),
    case("narrowing/connections", "DENY", "connection_out_of_scope", "scope.connections",
         chain=["worker", "helper"], narrowing={"connections": ["https://api.example.com/v2/*"]},
         tool="connect", args={"url": URL}),
    case("narrowing/nodes", "DENY", "node_out_of_scope", "scope.nodes",
         chain=["worker", "helper"], narrowing={"nodes": ["node-9"]}, tool="connect",
         args={"url": URL, "node": "node-1"}),
    case("narrowing/images", "DENY", "image_out_of_scope", "scope.images",
         chain=["worker", "helper"], narrowing={"images": ["img/safe"]}, tool="connect",
         args={"url": URL, "image": "img/a"}),
    case("narrowing/wider-than-own-fence-does-not-widen", "DENY", "subject_out_of_scope",
         chain=["worker", "helper"], narrowing={"subjects": ["*"]}, tool="read_doc", args={"doc": "other:x"}),
    # limits: depth 3 (hard), children 5, tree 20; tenant small: depth 1, children 2, tree 3
    case("depth/3-is-allowed", "ALLOW", "allowed", chain=["d0", "d1", "d2"], delegation={"agent": "d3"}),
    case("depth/4-is-refused", "DENY", "delegation_depth", chain=["d0", "d1", "d2", "d3"],
         delegation={"agent": "d4"}),
    case("depth/tenant-1-allowed", "ALLOW", "allowed", chain=["s0"], delegation={"agent": "s1"}),
    case("depth/tenant-2-refused", "DENY", "delegation_depth", chain=["s0", "s1"], delegation={"agent": "s2"}),
    case("children/4-then-fifth-allowed", "ALLOW", "allowed", chain=["worker"], delegation={"agent": "helper"},
         counters={"children": 4}),
    case("children/5-refused", "DENY", "delegation_children", chain=["worker"], delegation={"agent": "helper"},
         counters={"children": 5}),
    case("children/tenant-2-refused", "DENY", "delegation_children", chain=["s0"], delegation={"agent": "s1"},
         counters={"children": 2}),
    case("children/tenant-1-allowed", "ALLOW", "allowed", chain=["s0"], delegation={"agent": "s1"},
         counters={"children": 1}),
    case("tree/19-allowed", "ALLOW", "allowed", chain=["worker"], delegation={"agent": "helper"},
         counters={"tree_runs": 19}),
    case("tree/20-refused", "DENY", "delegation_tree_size", chain=["worker"], delegation={"agent": "helper"},
         counters={"tree_runs": 20}),
    case("tree/tenant-3-refused", "DENY", "delegation_tree_size", chain=["s0"], delegation={"agent": "s1"},
         counters={"tree_runs": 3}),
    case("cycle/a-b-a", "DENY", "delegation_cycle", "delegation.cycle", chain=["a", "b"], delegation={"agent": "a"}),
    case("cycle/a-b-allowed", "ALLOW", "allowed", chain=["a"], delegation={"agent": "b"}),
    case("not-a-delegate", "DENY", "delegation_not_allowed", chain=["helper"], delegation={"agent": "worker"}),
    case("unknown-child-version", "DENY", "unknown_agent_version", chain=["worker"],
         delegation={"agent": "helper", "agentVersion": "ffff"}),
    case("person-cannot-delegate", "DENY", "invalid_request", chain=[], delegation={"agent": "helper"}),
]


@pytest.mark.parametrize("c", params(DELEGATION_CASES))
def test_delegation_table(c):
    c.check()


def test_pinned_child_version_is_accepted():
    version = policies("engine").agents["helper"].version
    case("x", "ALLOW", "allowed", chain=["worker"], delegation={"agent": "helper", "agentVersion": version}).check()


@pytest.mark.parametrize(
    "narrowing, tools, access",
    [
        pytest.param({}, ["connect", "read_doc", "write_doc"], ["read", "write"], id="intersection-only"),
        pytest.param({"tools": ["read_doc", "learn_note"]}, ["read_doc"], ["read", "write"], id="narrow-tools"),
        pytest.param({"access": ["read", "learn"]}, ["connect", "read_doc", "write_doc"], ["read"],
                     id="narrow-access"),
    ],
)
def test_child_authority_is_intersection_of_chain_and_narrowing(narrowing, tools, access):
    got = case("x", "ALLOW", "allowed", chain=["worker"], delegation={"agent": "helper", "narrowing": narrowing}).check()
    auth = got.response.child_authority
    # helper has learn_note and learn access; worker (the parent) has neither, so the child gets neither
    assert list(auth.tools) == tools
    assert list(auth.access) == access


def test_child_authority_patterns_follow_requested_narrowing():
    got = case("x", "ALLOW", "allowed", chain=["worker"],
               delegation={"agent": "helper", "narrowing": {"subjects": ["doc:public-*"]}}).check()
    assert list(got.response.child_authority.subjects) == ["doc:public-*"]


def _matches_any(patterns, value):
    import fnmatch

    return any(fnmatch.fnmatchcase(value, p) for p in patterns)


@pytest.mark.parametrize(
    "narrowing",
    [pytest.param({}, id="no-narrowing"), pytest.param({"subjects": ["*"]}, id="narrowing-wider-than-fence")],
)
def test_child_authority_never_reports_more_than_the_parent_allows(narrowing):
    got = case("x", "ALLOW", "allowed", chain=["worker"],
               delegation={"agent": "helper", "narrowing": narrowing}).check()
    auth = got.response.child_authority
    # worker's fence: subjects doc:*, connections https://api.example.com/*; helper's own is wider
    assert _matches_any(auth.subjects, "doc:a")
    assert not _matches_any(auth.subjects, "other:x")
    assert not _matches_any(auth.connections, "https://evil.example.org/")


def test_delegation_response_names_the_parent_version():
    got = case("x", "ALLOW", "allowed", chain=["worker"], delegation={"agent": "helper"}).check()
    assert got.response.agent == "worker"
    assert got.response.agent_version == policies("engine").agents["worker"].version
