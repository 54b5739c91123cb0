"""Each right of a principal, at its edges: a tenant it lacks, an agent it lacks, an empty person,
no section at all, its own runs, the audit tenants; and which principal an identity is."""

from __future__ import annotations

from checkpoint.policy import model
from checkpoint.policy.principals import Principal, Principals, caller_name
from warden.checkpoint.v1 import checkpoint_pb2 as pb


def principal(**sections) -> Principal:
    return Principal(model.Principal(kind="Principal", name="p", identities=["token:p"], **sections))


def test_check_rights_name_tenants_and_agents():
    p = principal(check={"tenants": ["acme"], "agents": ["recon"], "persons": "any"})
    assert p.may_check("acme", "recon") and p.may_check("acme", "")  # a person acting needs the tenant only
    assert not p.may_check("other", "recon") and not p.may_check("other", "")
    assert not p.may_check("acme", "ops")
    wildcard = principal(check={"tenants": ["*"], "agents": ["*"]})
    assert wildcard.may_check("any-tenant", "any-agent")
    assert not principal().may_check("acme", "recon")  # no check section: nothing


def test_vouching_needs_a_person_and_the_right_to_name_them():
    anyone = principal(check={"tenants": ["*"], "agents": ["*"], "persons": "any"})
    assert anyone.may_vouch("alice", "driver") and not anyone.may_vouch("", "driver")
    listed = principal(check={"tenants": ["*"], "persons": ["alice"]})
    assert listed.may_vouch("alice", "x") and not listed.may_vouch("bob", "x") and not listed.may_vouch("", "x")
    itself = principal(check={"tenants": ["*"]})  # persons: self by default
    assert itself.may_vouch("carol", "carol") and not itself.may_vouch("alice", "carol")
    assert not itself.may_vouch("", "")
    assert itself.acts_as_self and not anyone.acts_as_self and not principal().acts_as_self
    assert not principal().may_vouch("alice", "alice")


def test_approve_rights_name_tenant_agent_rule_and_own_runs():
    p = principal(approve={"tenants": ["acme"], "agents": ["recon"], "rules": ["wide-scans"]})
    assert p.may_approve("acme", "recon", "rule:wide-scans", own_run=False)
    assert not p.may_approve("acme", "recon", "rule:wide-scans", own_run=True)  # own_runs defaults to false
    assert not p.may_approve("other", "recon", "rule:wide-scans", own_run=False)
    assert not p.may_approve("acme", "ops", "rule:wide-scans", own_run=False)
    assert not p.may_approve("acme", "recon", "rule:other", own_run=False)
    own = principal(approve={"tenants": ["*"], "agents": ["*"], "rules": ["*"], "own_runs": True})
    assert own.may_approve("x", "", "rule:y", own_run=True)
    assert not principal().may_approve("acme", "recon", "rule:wide-scans", own_run=False)


def test_audit_tenants():
    assert principal().audit_tenants() == []
    assert principal(audit={"tenants": ["acme"]}).audit_tenants() == ["acme"]
    assert principal(audit={"tenants": ["*"]}).audit_tenants() is None


def test_an_exact_identity_wins_over_a_pattern_and_unknown_ones_name_nobody():
    people = model.Principal(kind="Principal", name="people", identities=["token:*"])
    driver = model.Principal(kind="Principal", name="driver", identities=["token:driver", "unix"])
    table = Principals([people, driver])
    assert table.of("token:driver").name == "driver" and table.of("unix").name == "driver"
    assert table.of("token:alice").name == "people"
    assert table.of("mtls:alice") is None and Principals().of("token:driver") is None
    assert len(table) == 2 and caller_name("token:alice") == "alice" and caller_name("unix") == "unix"


def test_a_person_cannot_start_a_run_in_a_tenant_their_principal_lacks(checkpoint):
    from server.conftest import PERSON_TOKEN

    got = checkpoint.start_run("", person="carol", token=PERSON_TOKEN, tenant="default")
    assert (got.decision.verdict, got.decision.code) == (pb.VERDICT_DENY, "caller_not_permitted")
