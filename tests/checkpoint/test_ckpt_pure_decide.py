"""decide() is pure: the versions a run pinned are read from the catalog before it, never by it.

A run pinned to a version the files no longer define is decided by a fresh catalog (no version in
its memory) whose database is closed before decide() runs, with opening any file or database
made to fail: the answer must still be the pinned version's.
"""

from __future__ import annotations

import builtins
import dataclasses
import shutil
import sqlite3
from pathlib import Path

import pytest
from ckpt_helpers import FOLDERS, build

from checkpoint.engine import decide
from checkpoint.policy import AgentCatalog, PolicySet, load_policy_dir, pinned
from warden.checkpoint.v1 import checkpoint_pb2 as pb

DOC = {"doc": "doc:readme"}


@pytest.fixture
def pinned_to_an_old_version(tmp_path: Path):
    """A run pinned to `reader`'s first version, after an edit took read_note away and a restart
    (a fresh catalog on the same file) forgot every version it had in memory."""
    folder = tmp_path / "policies"
    shutil.copytree(FOLDERS["engine"], folder)
    db = tmp_path / "data" / "catalog.db"
    old = load_policy_dir(folder, catalog=AgentCatalog(db)).agents["reader"].version
    agents = folder / "agents" / "agents.yaml"
    agents.write_text(agents.read_text().replace("allowlist: [read_doc, read_note]", "allowlist: [read_doc]"))
    policies = load_policy_dir(folder, catalog=AgentCatalog(db))  # its catalog has seen only the new version
    assert policies.agents["reader"].version != old
    request = build(policies, chain=["reader"], versions={"reader": old}, tool="read_note", args=DOC)
    return policies, request, old, db


def _catalog_closed(policies: PolicySet, db: Path) -> PolicySet:
    """The set on a catalog that remembers no version (a fresh one on the same file), whose
    database is closed: any query decide() made of it would raise."""
    fresh = AgentCatalog(db)
    fresh.close()
    return dataclasses.replace(policies, catalog=fresh)


def _no_io(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("decide() opened a file or a database")

    monkeypatch.setattr(sqlite3, "connect", refuse)
    monkeypatch.setattr(builtins, "open", refuse)


def test_decide_reads_no_file_and_no_database(pinned_to_an_old_version, monkeypatch):
    policies, request, old, db = pinned_to_an_old_version
    loaded = pinned.load(policies, request)  # the server's part: the catalog read before the decision
    policies = _catalog_closed(policies, db)
    _no_io(monkeypatch)
    response = decide(policies, request, pinned=loaded)
    assert (response.verdict, response.code, response.agent_version) == (pb.VERDICT_ALLOW, "allowed", old)


def test_an_unknown_version_of_a_catalogued_agent_keeps_its_code_without_the_catalog(pinned_to_an_old_version,
                                                                                     monkeypatch):
    policies, request, _old, db = pinned_to_an_old_version
    request.run.actor_chain[1].agent_version = "0" * 20
    loaded = pinned.load(policies, request)
    policies = _catalog_closed(policies, db)
    _no_io(monkeypatch)
    response = decide(policies, request, pinned=loaded)
    assert (response.verdict, response.code) == (pb.VERDICT_DENY, "unknown_agent_version")


def test_without_the_loaded_versions_an_old_pin_is_refused_not_guessed(pinned_to_an_old_version):
    policies, request, _old, _db = pinned_to_an_old_version
    response = decide(policies, request)
    assert (response.verdict, response.code) == (pb.VERDICT_DENY, "unknown_agent_version")


def test_a_delegation_to_a_childs_older_version_is_decided_without_the_catalog(tmp_path, monkeypatch):
    folder = tmp_path / "policies"
    shutil.copytree(FOLDERS["engine"], folder)
    db = tmp_path / "data" / "catalog.db"
    old = load_policy_dir(folder, catalog=AgentCatalog(db)).agents["helper"].version
    agents = folder / "agents" / "agents.yaml"
    agents.write_text(agents.read_text().replace("A helper with a wider fence", "A helper with a new persona"))
    catalog = AgentCatalog(db)
    edited = load_policy_dir(folder, catalog=catalog)  # a widening: it waits for an admin
    catalog.decide("helper", edited.file_versions["helper"], approve=True, by="carol", note="")
    policies = load_policy_dir(folder, catalog=AgentCatalog(db))  # the old version: superseded, pinnable by id
    assert policies.agents["helper"].version != old
    request = build(policies, chain=["worker"], delegation={"agent": "helper", "agent_version": old})
    loaded = pinned.load(policies, request)
    policies = _catalog_closed(policies, db)
    _no_io(monkeypatch)
    response = decide(policies, request, pinned=loaded)
    assert (response.verdict, response.child_agent_version) == (pb.VERDICT_ALLOW, old)
