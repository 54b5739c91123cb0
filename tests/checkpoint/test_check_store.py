"""`warden check` reads the agent catalog where the store setting says: the catalog a fleet shares on
a real PostgreSQL (tests/pgserver.py), or catalog.db in a SQLite folder named by `--store`; an old
version pinned by a request resolves from it, and the check never writes it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from ckpt_helpers import FOLDERS, build, policies
from google.protobuf import json_format

from checkpoint.policy import AgentCatalog, load_policy_dir
from checkpoint.policy.postgresql_store import CATALOG, SCHEMA, PostgresqlStore
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.cli import main
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url

DOC = {"doc": "doc:readme"}


@contextmanager
def _catalog(backend: str, store: str) -> Iterator[AgentCatalog]:
    """The catalog a checkpoint on that store keeps (written to, as a checkpoint loading a folder does)."""
    if backend == "sqlite":
        yield AgentCatalog(Path(store.removeprefix("sqlite://")) / "catalog.db")
        return
    with Database(parse_store_url(store, default_folder="."), name="test", max_size=2) as db:
        yield AgentCatalog(store=PostgresqlStore(db, CATALOG))


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "sqlite":
        return "sqlite", f"sqlite://{tmp_path / 'shared'}"  # an absolute path: sqlite:///...
    url = request.getfixturevalue("pg_url")
    with Database(parse_store_url(url, default_folder="."), name="test-migrate", max_size=1) as db:
        migrate(db, SCHEMA)
    return "postgresql", url


def _edited(tmp_path: Path, backend: str, store: str) -> tuple[Path, str, Path]:
    """A policy folder whose `reader` was recorded in the store's catalog and then edited (a new
    version), and a request that pins the recorded (old) version and calls what only it allows."""
    folder = tmp_path / "p"
    shutil.copytree(FOLDERS["engine"], folder)
    with _catalog(backend, store) as catalog:
        old = load_policy_dir(folder, catalog=catalog).agents["reader"].version
    agents = folder / "agents" / "agents.yaml"
    agents.write_text(agents.read_text().replace("allowlist: [read_doc, read_note]", "allowlist: [read_doc]"))
    path = tmp_path / "req.json"
    path.write_text(json_format.MessageToJson(build(policies("engine"), chain=["reader"], versions={"reader": old},
                                                    tool="read_note", args=DOC)))
    return folder, old, path


def test_check_resolves_a_pinned_version_from_the_configured_store_and_never_writes_it(store, tmp_path, capsys):
    backend, url = store
    folder, old, path = _edited(tmp_path, backend, url)

    assert main(["check", "--policies", str(folder), "--store", url, str(path)]) == 0
    assert json_format.Parse(capsys.readouterr().out, pb.CheckResponse()).code == "allowed"
    # the edited folder's new version was loaded, and not recorded: the catalog holds the old one only
    with _catalog(backend, url) as catalog:
        assert catalog.versions("reader") == [old]
    # without the store setting there is no catalog: the pinned version is unknown
    assert main(["check", "--policies", str(folder), str(path)]) == 0
    assert json_format.Parse(capsys.readouterr().out, pb.CheckResponse()).code == "unknown_agent_version"


def test_check_reads_the_store_from_warden_store_too(store, tmp_path, capsys, monkeypatch):
    backend, url = store
    folder, _old, path = _edited(tmp_path, backend, url)
    monkeypatch.setenv("WARDEN_STORE", url)
    # --data names a folder without a catalog: the store setting is where the catalog is read
    assert main(["check", "--policies", str(folder), "--data", str(tmp_path / "empty"), str(path)]) == 0
    assert json_format.Parse(capsys.readouterr().out, pb.CheckResponse()).code == "allowed"


def test_check_on_a_postgresql_store_without_the_catalog_schema_says_what_to_run(pg_url, tmp_path, capsys):
    path = tmp_path / "req.json"
    path.write_text(json_format.MessageToJson(build(policies("engine"), chain=["reader"], tool="read_doc", args=DOC)))
    assert main(["check", "--policies", str(FOLDERS["engine"]), "--store", pg_url, str(path)]) == 2
    err = capsys.readouterr().err
    assert "warden store migrate" in err and "[store_schema_mismatch]" in err and "Traceback" not in err, err


def test_check_with_a_sqlite_store_folder_without_a_catalog_says_so(tmp_path, capsys):
    path = tmp_path / "req.json"
    path.write_text(json_format.MessageToJson(build(policies("engine"), chain=["reader"], tool="read_doc", args=DOC)))
    store = f"sqlite://{tmp_path / 'none'}"
    assert main(["check", "--policies", str(FOLDERS["engine"]), "--store", store, str(path)]) == 2
    assert "no agent catalog at" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
