"""A NUL in any text of a record (an attacker controls a tool's arguments, keys included) is stored
as U+FFFD on both backends, before the record is hashed: the decision is recorded (never turned
into a refusal the PostgreSQL log could not store), and the same record hashes the same on SQLite
and on PostgreSQL, so one chain means one thing wherever it lives."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from checkpoint.audit.backends import open_log
from checkpoint.audit.pg_schema import SCHEMA
from checkpoint.audit.record import json_column, to_row
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url

from .conftest import make_record

NUL, FFFD = "\x00", "\ufffd"


def _nul_record() -> dict:
    return make_record(
        decision_id="dec-nul", time="2026-01-02T03:04:05.000006Z",
        tool=f"refund{NUL}", reason=f"refused{NUL}: a reason quoting the call",
        arguments={f"or{NUL}der": f"o-1{NUL}.gov", "nested": [{f"k{NUL}": NUL}], "plain": "café"},
        actor_chain=[{"kind": "person", "id": f"ann{NUL}"}],
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def log(request, tmp_path: Path) -> Iterator:
    store = None
    if request.param == "postgresql":
        store = parse_store_url(request.getfixturevalue("pg_url"), default_folder=tmp_path)
        with Database(store, name="migrate", max_size=1) as db:
            migrate(db, SCHEMA)
    opened = open_log(store, tmp_path)
    yield opened
    opened.close()


def test_a_record_with_nul_in_its_text_and_keys_is_stored_with_u_fffd_and_verifies(log):
    seq = log.append(_nul_record())
    assert seq == 1 and log.writable
    (stored,) = list(log.read())
    assert stored["tool"] == f"refund{FFFD}" and stored["reason"].startswith(f"refused{FFFD}")
    assert stored["arguments"] == {f"or{FFFD}der": f"o-1{FFFD}.gov", "nested": [{f"k{FFFD}": FFFD}], "plain": "café"}
    assert stored["actor_chain"] == [{"kind": "person", "id": f"ann{FFFD}"}]
    assert NUL not in json.dumps(stored, ensure_ascii=False)
    report = log.verify()
    assert report.ok and report.checked == 1, report
    # found by the text an auditor searches for
    assert [r["decision_id"] for r in log.read(text=f"o-1{FFFD}")] == ["dec-nul"]


def test_the_same_record_hashes_the_same_on_both_backends(tmp_path, pg_url):
    heads = []
    for store in (None, parse_store_url(pg_url, default_folder=tmp_path)):
        if store is not None:
            with Database(store, name="migrate", max_size=1) as db:
                migrate(db, SCHEMA)
        log = open_log(store, tmp_path / ("pg" if store else "sqlite"))
        try:
            log.append(_nul_record())
            heads.append(log.head())
        finally:
            log.close()
    assert heads[0] == heads[1]


def test_the_grant_text_keeps_the_arguments_as_sent_while_the_row_stores_u_fffd():
    # the grant's hash covers the call the toolrunner will run, NUL and all; only the record's
    # copy is made storable
    signed = json_column("arguments", {"k": f"a{NUL}b"})
    assert "\\u0000" in signed
    row = to_row(make_record(arguments=signed))
    assert json.loads(row[[i for i, v in enumerate(row) if isinstance(v, str) and '"k"' in v][0]]) == {"k": f"a{FFFD}b"}


def test_an_escaped_backslash_before_u0000_is_not_taken_for_a_nul():
    text = "a\\u0000b"  # a backslash, then the six characters u0000: no NUL anywhere
    row = to_row(make_record(arguments={"k": text}))
    assert any(isinstance(v, str) and json.loads(v) == {"k": text} for v in row if isinstance(v, str)
               and v.startswith("{\"k\""))
