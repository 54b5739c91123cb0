"""The PostgreSQL ground on a real server (tests/pgserver.py): the pool's failures as codes, the
schema versions, and `warden store migrate|status` as an operator runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from warden import store_cli
from warden.codes import STORE_SCHEMA, STORE_UNAVAILABLE
from warden.store.errors import StoreSchemaMismatch, StoreUnavailable
from warden.store.migrations import Schema, current_version, migrate, require_current
from warden.store.pg import Database
from warden.store.url import parse_store_url

THINGS = Schema("things", (
    "CREATE TABLE things (id text PRIMARY KEY); CREATE INDEX things_id ON things (id)",
    "ALTER TABLE things ADD COLUMN n integer NOT NULL DEFAULT 0",
))


def open_db(url: str, **kw) -> Database:
    return Database(parse_store_url(url, default_folder="/unused"), name="test", **kw).open()


def test_migrate_applies_each_script_once_and_start_checks_the_version(pg_url):
    with open_db(pg_url) as db:
        assert current_version(db, "things") == 0
        with pytest.raises(StoreSchemaMismatch, match="run `warden store migrate") as caught:
            require_current(db, THINGS)
        assert caught.value.code == STORE_SCHEMA
        first = Schema("things", THINGS.scripts[:1])
        assert migrate(db, first) == (0, 1)
        assert migrate(db, THINGS) == (1, 2)
        assert migrate(db, THINGS) == (2, 2)  # nothing left: no script runs twice
        require_current(db, THINGS)
        with db.connection() as conn:
            conn.execute("INSERT INTO things (id) VALUES ('a')")
            assert conn.execute("SELECT n FROM things").fetchall() == [(0,)]
        # an older release finds a newer schema: it stops, and migrating it refuses too
        with pytest.raises(StoreSchemaMismatch, match="newer than 1"):
            require_current(db, first)
        with pytest.raises(StoreSchemaMismatch, match="upgrade warden"):
            migrate(db, first)
        assert current_version(db, "things") == 2


def test_a_failing_script_leaves_the_version_where_it_was(pg_url):
    broken = Schema("things", (THINGS.scripts[0], "ALTER TABLE nope ADD COLUMN x integer"))
    with open_db(pg_url) as db:
        with pytest.raises(psycopg.errors.UndefinedTable):
            migrate(db, broken)
        assert current_version(db, "things") == 0  # one transaction: the first script is undone too
        with db.connection() as conn:
            assert conn.execute("SELECT to_regclass('things')").fetchone() == (None,)


def test_two_nodes_migrating_at_once_apply_each_script_once(pg_url):
    counted = Schema("counted", ("CREATE TABLE runs_of_script (n integer); INSERT INTO runs_of_script VALUES (1)",))
    results = []

    def node():
        with open_db(pg_url) as db:
            results.append(migrate(db, counted))

    threads = [threading.Thread(target=node) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [(0, 1)] + [(1, 1)] * 3
    with open_db(pg_url) as db, db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM runs_of_script").fetchone() == (1,)


def test_a_wrong_password_or_database_stops_the_start_with_one_line(pg_server, tmp_path):
    wrong = tmp_path / "pw"
    wrong.write_text("not-the-password\n")
    wrong.chmod(0o600)
    url = parse_store_url(pg_server.url("postgres"), default_folder="/unused", password_file=wrong)
    with pytest.raises(StoreUnavailable) as caught:
        Database(url, name="test").open()
    assert "password authentication failed" in str(caught.value) and "not-the-password" not in str(caught.value)
    assert caught.value.code == STORE_UNAVAILABLE and "\n" not in str(caught.value)
    with pytest.raises(StoreUnavailable, match="does not exist"):
        open_db(pg_server.url("no_such_database"))


def test_a_slow_statement_is_cancelled_at_the_timeout(pg_url):
    with open_db(pg_url, statement_timeout=0.2) as db:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="statement timeout"), db.connection() as conn:
            conn.execute("SELECT pg_sleep(5)")
        assert time.monotonic() - started < 4
        assert db.ping()  # the connection is usable again


def test_a_full_pool_refuses_instead_of_hanging(pg_url):
    with open_db(pg_url, max_size=1, pool_timeout=0.3) as db, db.connection():
        with pytest.raises(StoreUnavailable, match="no free connection within 0.3s") as caught:
            with db.connection():
                pass
        assert caught.value.code == STORE_UNAVAILABLE


def test_the_database_gone_is_a_code_and_its_return_needs_no_restart(pg_server, pg_url):
    db = open_db(pg_url, pool_timeout=1.0)
    try:
        assert db.ping()
        pg_server.stop()
        try:
            with pytest.raises(StoreUnavailable):
                with db.connection() as conn:
                    conn.execute("SELECT 1")
            assert not db.ping()
        finally:
            pg_server.start()
        deadline = time.monotonic() + 15
        while not db.ping():  # the pool finds the database again by itself
            assert time.monotonic() < deadline, "the store did not come back after the database did"
            time.sleep(0.2)
    finally:
        db.close()


def test_after_a_long_outage_the_store_is_back_as_soon_as_the_database(pg_server, pg_url):
    """The pool's own retries back off (1, 2, 4, 8 s...); left alone, it would sleep on well after
    the database returned. 12 s down: the next attempt of a backed-off pool would be 3 s late."""
    db = open_db(pg_url, pool_timeout=0.5)
    try:
        pg_server.stop()
        try:
            down_until = time.monotonic() + 12
            while time.monotonic() < down_until:
                assert not db.ping()
                time.sleep(0.5)
        finally:
            pg_server.start()
        back = time.monotonic()
        while not db.ping():
            time.sleep(0.05)
        assert time.monotonic() - back < 2.0
    finally:
        db.close()


def _warden(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warden.cli", *argv], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


def test_store_status_and_migrate_commands(pg_url, tmp_path):
    if not store_cli.SCHEMAS:
        pytest.skip("no store has registered a PostgreSQL schema yet")
    done = _warden("store", "status", "--store", pg_url)
    assert done.returncode == 1 and "behind" in done.stdout, done.stdout + done.stderr
    done = _warden("store", "migrate", "--store", pg_url)
    assert done.returncode == 0 and "migrated from 0" in done.stdout, done.stdout + done.stderr
    done = _warden("store", "status", "--store", pg_url)
    assert done.returncode == 0 and "behind" not in done.stdout, done.stdout + done.stderr


def test_store_commands_refuse_what_they_cannot_open(pg_server, tmp_path):
    done = _warden("store", "status", "--store", "mysql://root:s3cret@db/x")
    assert done.returncode == 2 and "[store_url_invalid]" in done.stderr and "s3cret" not in done.stderr
    done = _warden("store", "migrate", "--store", pg_server.url("no_such_database"))
    assert done.returncode == 2 and "[store_unavailable]" in done.stderr
    done = _warden("store", "status", "--store", f"sqlite://{tmp_path}")
    assert done.returncode == 0 and "nothing to migrate" in done.stdout
