"""A policy set over a shared catalog (PostgreSQL) knows which versions' states it read: a version
another replica recorded since is never pinned before the set is refreshed, and an old revision's
set, never refreshed, does not refuse what is newer than it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from checkpoint.policy import AgentCatalog, load_policy_dir
from checkpoint.policy.loader.files import load_policy_files
from checkpoint.policy.policyset import AgentVersion
from checkpoint.policy.postgresql_store import SCHEMA, PostgresqlStore
from warden import codes
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url

POLICIES = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture
def db(pg_url, tmp_path) -> Iterator[Database]:
    with Database(parse_store_url(pg_url, default_folder=tmp_path), name="test", max_size=4) as database:
        migrate(database, SCHEMA)
        yield database


def test_a_version_recorded_since_the_set_was_read_is_not_pinned_until_it_is_refreshed(db):
    policies = load_policy_dir(POLICIES, catalog=AgentCatalog(store=PostgresqlStore(db)))
    assert policies.stated is not None
    agent = policies.agents["triage"]
    assert policies.pin_refusal("triage", agent.version) is None
    # another replica's catalog, on the same database, takes a proposal
    other = AgentCatalog(store=PostgresqlStore(db))
    newer = AgentVersion.from_snapshot("v-newer", {**agent.snapshot(), "persona": "Another persona."})
    other.propose(newer, by="bob", source="api", note="")
    assert policies.catalog.get("triage", "v-newer") is not None  # readable here at once ...
    assert policies.pin_refusal("triage", "v-newer") == codes.CATALOG_UNAVAILABLE  # ... never pinnable
    assert policies.refreshed().pin_refusal("triage", "v-newer") == codes.AGENT_VERSION_NOT_APPROVED
    other.decide("triage", "v-newer", approve=True, by="carol", note="")
    assert policies.refreshed().pin_refusal("triage", "v-newer") is None


def test_an_old_revisions_set_refuses_nothing_for_being_old(db):
    catalog = AgentCatalog(store=PostgresqlStore(db))
    policies = load_policy_dir(POLICIES, catalog=catalog)
    files = catalog.revision_files(policies.revision)
    assert files is not None
    pinned = load_policy_files(files, "<revision>", catalog=catalog, settle=False)
    assert pinned.stated is None
    agent = policies.agents["triage"]
    AgentCatalog(store=PostgresqlStore(db)).propose(
        AgentVersion.from_snapshot("v-newer", {**agent.snapshot(), "persona": "Another persona."}),
        by="bob", source="api", note="")
    assert pinned.pin_refusal("triage", "v-newer") is None  # the set in force (kept current) refuses it


def test_a_catalog_of_its_own_files_keeps_no_snapshot():
    assert load_policy_dir(POLICIES, catalog=AgentCatalog(None)).stated is None
