"""`warden policy diff --versions pinned` resolves the recorded (old) agent versions from the catalog
the store setting names: the catalog a fleet shares on a real PostgreSQL (tests/pgserver.py), or
catalog.db in the SQLite folder `--store sqlite://...` names; and never writes it."""

from __future__ import annotations

import json
import sqlite3

from checkpoint.policy import AgentCatalog, load_policy_dir
from checkpoint.policy.postgresql_store import CATALOG, SCHEMA, PostgresqlStore
from warden.cli import main
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url

from .test_policy_diff import _candidate, recorded  # noqa: F401 - the fixture, used by name

PINNED = ("--no-tests", "--versions", "pinned", "--format", "json")


def _diff(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["policy", "diff", *PINNED, *argv])
    return code, json.loads(capsys.readouterr().out)


def test_policy_diff_reads_pinned_versions_from_a_postgresql_store(recorded, pg_url, tmp_path, capsys):  # noqa: F811
    url = parse_store_url(pg_url, default_folder=".")
    with Database(url, name="test", max_size=2) as db:
        migrate(db, SCHEMA)
        # the versions the recording checkpoint loaded, as a checkpoint on this store would keep them
        load_policy_dir(recorded.policies, catalog=AgentCatalog(store=PostgresqlStore(db, CATALOG)))
        before = AgentCatalog(store=PostgresqlStore(db, CATALOG)).versions("recon")
    candidate = _candidate(recorded, tmp_path, drop_tool="get_task")  # recon gets a new version

    code, report = _diff(capsys, "--against", str(recorded.data), str(candidate))
    assert code == 0 and report["replayed"] == 0  # no catalog: the pinned recon version is unknown
    code, report = _diff(capsys, "--against", str(recorded.data), "--store", pg_url, str(candidate))
    assert code == 0 and report["replayed"] == 6 and report["changed"] == 0

    with Database(url, name="test", max_size=2) as db:  # the candidate's new version was not recorded
        assert AgentCatalog(store=PostgresqlStore(db, CATALOG)).versions("recon") == before


def test_policy_diff_reads_pinned_versions_from_a_sqlite_store_folder(recorded, tmp_path, capsys):  # noqa: F811
    shared = tmp_path / "shared"
    shared.mkdir()
    # the running checkpoint's catalog, its write-ahead log included (a copy of the file alone lacks it)
    with sqlite3.connect(recorded.data / "catalog.db") as source, sqlite3.connect(shared / "catalog.db") as copy:
        source.backup(copy)
    source.close()
    copy.close()
    candidate = _candidate(recorded, tmp_path, drop_tool="get_task")
    code, report = _diff(capsys, "--against", str(recorded.data), "--store", f"sqlite://{shared}", str(candidate))
    assert code == 0 and report["replayed"] == 6


def test_policy_diff_on_a_store_it_cannot_open_is_a_usage_error(recorded, tmp_path, capsys):  # noqa: F811
    candidate = _candidate(recorded, tmp_path)
    assert main(["policy", "diff", "--against", str(recorded.data), "--store", "mysql://db/warden",
                 str(candidate)]) == 2
    err = capsys.readouterr().err
    assert "[store_url_invalid]" in err and "Traceback" not in err, err
