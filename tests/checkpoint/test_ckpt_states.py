"""One life for agent versions, skills, templates and learnings: one table, every act checked by it.

The table's own promises are checked first (retirement is final, only a proposal is reviewed);
then each store is shown to ask the table: with one move taken out of it, the store refuses that
act with the stable code it has always given.
"""

from __future__ import annotations

import pytest

from checkpoint.policy import states
from checkpoint.policy.catalog import AgentCatalog, CatalogError
from checkpoint.policy.entries import SKILL, Entry, EntryError
from checkpoint.policy.learnings import LearningError, LearningStore, Proposal
from checkpoint.policy.policyset import AgentVersion
from checkpoint.policy.states import AGENT, CATALOG, FAMILIES, LEARNING, PENDING, PROPOSED, RETIRED


def test_retirement_is_final_for_every_family():
    assert not [key for key in states.TRANSITIONS if key[1] == RETIRED]


@pytest.mark.parametrize("family", FAMILIES)
def test_only_a_proposal_is_approved_or_rejected(family):
    proposal = PROPOSED if family == LEARNING else PENDING
    for act in ("approve", "promote", "reject"):
        froms = {state for (f, state, a) in states.TRANSITIONS if f == family and a == act}
        assert froms <= {proposal}
        for state in ("live", "active", "stale", "superseded", "rejected", "retired", None):
            if not states.allows(family, state, act):
                assert states.refusal_code(family, state, act) == "not_pending"


@pytest.mark.parametrize("family", CATALOG)
def test_a_catalog_proposal_of_a_retired_version_keeps_its_code(family):
    with pytest.raises(states.Refused) as info:
        states.next_state(family, RETIRED, "propose")
    assert info.value.code == {"agent": "agent_version_retired", "skill": "skill_retired",
                               "template": "template_retired"}[family]


def test_an_agents_live_version_is_not_retired_but_a_skills_is():
    assert states.refusal_code(AGENT, "live", "retire") == "version_live"
    assert states.next_state("skill", "live", "retire") == RETIRED


def _without(monkeypatch: pytest.MonkeyPatch, family: str, state: str | None, act: str) -> None:
    table = dict(states.TRANSITIONS)
    del table[(family, state, act)]
    monkeypatch.setattr(states, "TRANSITIONS", table)


def _agent(version: str, persona: str) -> AgentVersion:
    snap = {"name": "triage", "tenant": "default", "persona": persona, "description": "", "wildcard": False,
            "tools": ["read_doc"], "delegates": [], "scope": {}, "budget": {}}
    return AgentVersion.from_snapshot(version, snap)


@pytest.fixture
def catalog_with_a_proposal():
    catalog = AgentCatalog()
    live = _agent("v-live", "a triage agent")
    catalog.record([live], "rev-1")
    catalog.settle({"triage": live}, {}, {})
    catalog.propose(_agent("v-next", "a bolder triage agent"), by="bob", source="api", note="")
    return catalog


def test_the_agent_catalog_asks_the_table(catalog_with_a_proposal, monkeypatch):
    catalog = catalog_with_a_proposal
    _without(monkeypatch, AGENT, PENDING, "approve")
    with pytest.raises(CatalogError) as info:
        catalog.decide("triage", "v-next", approve=True, by="carol", note="")
    assert info.value.code == "not_pending"
    assert catalog.status("triage", "v-next") == PENDING
    monkeypatch.undo()
    catalog.decide("triage", "v-next", approve=True, by="carol", note="")
    assert catalog.live_version("triage") == "v-next"


def test_the_skill_catalog_asks_the_table(monkeypatch):
    entries = AgentCatalog().entries
    skill = Entry(SKILL, "default", "triage-howto", "s-1", "how to triage", {"text": "read first"})
    entries.propose(skill, by="bob", source="api", note="")
    _without(monkeypatch, SKILL, PENDING, "retire")
    with pytest.raises(EntryError) as info:
        entries.retire(SKILL, "default", "triage-howto", "s-1", by="carol", note="")
    assert info.value.code == "no_change"
    monkeypatch.undo()
    entries.retire(SKILL, "default", "triage-howto", "s-1", by="carol", note="")
    assert entries.status(SKILL, "default", "triage-howto", "s-1") == RETIRED


def test_the_learning_store_asks_the_table(monkeypatch):
    store = LearningStore()
    _, row = store.propose(Proposal("default", "triage", "v-1", "breaker", "turns", "too many turns", by="driver"))
    _without(monkeypatch, LEARNING, PROPOSED, "promote")
    with pytest.raises(LearningError) as info:
        store.act(row["id"], "promote", by="carol", severity="warning", match="true")
    assert info.value.code == "not_pending"
    monkeypatch.undo()
    _, promoted = store.act(row["id"], "promote", by="carol", severity="warning", match="true")
    assert promoted["status"] == "active"
