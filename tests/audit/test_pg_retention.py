"""Retention of the decision log on PostgreSQL (checkpoint/audit/pg_retention.py), on a real cluster:
closed partitions exported into an archive and sealed, dropped a partition at a time, and the rest
still proved from the seal."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import psycopg
import pytest

from checkpoint.audit import segments
from checkpoint.audit.heads import key_path, load_or_create_key
from checkpoint.audit.pg_log import PgDecisionLog
from checkpoint.audit.pg_retention import RetentionError, check_cutoff, locked, prune, rotate
from checkpoint.audit.pg_schema import _V1, PARTITIONS, SCHEMA, TABLE
from checkpoint.audit.reader import DecisionReader
from checkpoint.audit.record import now
from warden import codes
from warden.store.migrations import Schema, migrate

from .conftest import make_record
from .test_pg_log import _db, _warden


@pytest.fixture
def migrated(pg_url: str) -> str:
    with _db(pg_url) as db:
        migrate(db, SCHEMA)
    return pg_url


def _fill(db, n: int, size: int = 5) -> None:
    log = PgDecisionLog(db, partition_seqs=size)
    try:
        for _ in range(n):
            log.append(make_record())
    finally:
        log.close()


def _attached(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s) ORDER BY c.relname", (TABLE,)).fetchall()]


def test_rotate_exports_closed_partitions_prune_drops_them_and_verify_proves_the_rest(migrated, tmp_path):
    data = tmp_path / "data"
    key = load_or_create_key(key_path(data / "decisions.db"))
    archive = tmp_path / "archive"
    with _db(migrated) as db:
        _fill(db, 12)  # p0 1..5, p1 6..10, p2 11..12 (the head's)
        seals = rotate(db, archive, key)
        assert [(s.first_seq, s.last_seq) for s in seals] == [(1, 5), (6, 10)]
        assert rotate(db, archive, key) == []  # the head's partition is never sealed
        # the archive is a SQLite log's retention folder: it verifies as one chain with the key
        report = DecisionReader(archive / "decisions.db").verify(public_key=key.public_key())
        assert report.ok and report.checked == 10 and report.head_seq == 10, report
        removed = prune(db, key, before_time=now())
    assert [r["number"] for r in removed] == [0, 1]
    assert _attached(migrated) == [f"{TABLE}_p2"]
    with psycopg.connect(migrated) as conn:
        assert conn.execute(f"SELECT min(seq), count(*) FROM {TABLE}").fetchone() == (11, 2)
    verified = _warden("audit", "verify", "--store", migrated, "--data", str(data))
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("ok: 2 records, head seq 12") and "starts at the pruned head seq 10" in verified.stdout
    archived = _warden("audit", "verify", "--log", str(archive / "decisions.db"), "--pubkey", str(key_path(data / "x")))
    assert archived.returncode == 0 and "ok: 10 records" in archived.stdout, archived.stderr


def test_the_command_line_rotates_and_prunes_with_detach(migrated, tmp_path):
    data = tmp_path / "data"
    with _db(migrated) as db:
        _fill(db, 11)
    rotated = _warden("audit", "rotate", "--store", migrated, "--data", str(data))
    assert rotated.returncode == 0, rotated.stderr
    assert "sealed partition 0: seqs 1..5" in rotated.stdout and "sealed partition 1: seqs 6..10" in rotated.stdout
    assert (data / "decisions-archive" / "decisions.d" / "segment-000002.db").is_file()
    pruned = _warden("audit", "prune", "--store", migrated, "--data", str(data), "--before", "0s", "--detach")
    assert pruned.returncode == 0, pruned.stderr
    assert "detached partition 0" in pruned.stdout and "detached partition 1" in pruned.stdout
    assert _attached(migrated) == [f"{TABLE}_p2"]
    with psycopg.connect(migrated) as conn:  # detached: kept as a table of its own, outside the log
        assert conn.execute(f"SELECT count(*) FROM {TABLE}_p1").fetchone() == (5,)
    assert _warden("audit", "verify", "--store", migrated, "--data", str(data)).returncode == 0


def test_prune_refuses_a_partition_never_exported_and_drops_nothing(migrated, tmp_path):
    key = load_or_create_key(tmp_path / "k.key")
    with _db(migrated) as db:
        _fill(db, 7)
        rotate(db, tmp_path / "archive", key)  # seals p0 only: p1 holds the head
        _fill(db, 5)  # p1 is closed now, never exported
        with pytest.raises(RetentionError) as refused:
            prune(db, key, before_time=now())
    assert refused.value.code == codes.PARTITION_NOT_EXPORTED
    assert _attached(migrated) == [f"{TABLE}_p0", f"{TABLE}_p1", f"{TABLE}_p2"]  # not even p0, which was sealed
    with psycopg.connect(migrated) as conn:
        assert conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone() == (12,)
        assert conn.execute(f"SELECT count(*) FROM {PARTITIONS} WHERE removed IS NOT NULL").fetchone() == (0,)


def test_a_cutoff_before_the_oldest_partition_drops_nothing(migrated, tmp_path):
    key = load_or_create_key(tmp_path / "k.key")
    with _db(migrated) as db:
        _fill(db, 12)
        rotate(db, tmp_path / "archive", key)
        assert prune(db, key, before_time="2000-01-01T00:00:00.000000Z") == []
    assert len(_attached(migrated)) == 3


@pytest.mark.parametrize("cutoff", ["tomorrow", "2999-01-01T00:00:00Z", "", "12", "1d ago", "2026-13-01"])
def test_bad_cutoffs_are_refused_with_their_code_and_nothing_is_dropped(migrated, tmp_path, cutoff):
    data = tmp_path / "data"
    with _db(migrated) as db:
        _fill(db, 12)
    assert _warden("audit", "rotate", "--store", migrated, "--data", str(data)).returncode == 0
    pruned = _warden("audit", "prune", "--store", migrated, "--data", str(data), "--before", cutoff)
    assert pruned.returncode == 2 and "retention_cutoff_invalid" in pruned.stderr, pruned.stderr
    assert len(_attached(migrated)) == 3


def test_a_cutoff_in_the_future_by_one_second_is_refused():
    with pytest.raises(RetentionError) as refused:
        check_cutoff("2026-01-01T00:00:01Z", at="2026-01-01T00:00:00.000000Z")
    assert refused.value.code == codes.RETENTION_CUTOFF_INVALID


def test_two_rotates_at_once_seal_each_partition_once(migrated, tmp_path):
    key = load_or_create_key(tmp_path / "k.key")
    archive = tmp_path / "archive"
    results: list[object] = []
    with _db(migrated) as db:
        _fill(db, 23)
        barrier = threading.Barrier(2)

        def one() -> None:
            barrier.wait()
            try:
                results.append(rotate(db, archive, key))
            except Exception as exc:  # noqa: BLE001 - recorded, asserted below
                results.append(exc)

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not [r for r in results if isinstance(r, Exception)], results
    sealed = sorted(s.first_seq for r in results for s in r)  # type: ignore[union-attr]
    assert sealed == [1, 6, 11, 16]  # p0..p3, each once, between the two
    manifest = segments.read_manifest(archive / "decisions.db")
    assert [s.number for s in manifest.seals] == [1, 2, 3, 4]
    with psycopg.connect(migrated) as conn:
        assert conn.execute(f"SELECT array_agg(number ORDER BY number) FROM {PARTITIONS}").fetchone() == ([0, 1, 2, 3],)


def test_a_rotate_waiting_for_the_lock_gives_up_saying_so(migrated, tmp_path):
    key = load_or_create_key(tmp_path / "k.key")
    with _db(migrated) as db:
        _fill(db, 12)
        with locked(db), pytest.raises(RetentionError, match="another rotate or prune"):
            rotate(db, tmp_path / "archive", key, wait=0.3)


def test_records_are_still_written_and_verify_while_rotate_and_prune_run(migrated, tmp_path):
    key = load_or_create_key(tmp_path / "k.key")
    archive = tmp_path / "archive"
    stop = threading.Event()
    seqs: list[int] = []
    errors: list[BaseException] = []
    with _db(migrated) as db:
        log = PgDecisionLog(db, partition_seqs=20)
        try:
            def write() -> None:
                while not stop.is_set():
                    try:
                        seqs.append(log.append(make_record()))
                    except BaseException as exc:  # noqa: BLE001
                        errors.append(exc)
                        return

            writer = threading.Thread(target=write)
            writer.start()
            try:
                while log.head()[0] < 70:
                    threading.Event().wait(0.01)
                for _ in range(3):
                    # a cutoff taken before the rotate: every partition it reaches was closed, so sealed
                    cutoff = now()
                    threading.Event().wait(0.01)
                    rotate(db, archive, key)
                    prune(db, key, before_time=cutoff)
            finally:
                stop.set()
                writer.join()
            seqs.append(log.append(make_record()))  # and after
            report = log.verify(public_key=key.public_key())
        finally:
            log.close()
    assert not errors
    assert seqs == list(range(1, len(seqs) + 1))
    assert report.ok and report.head_seq == seqs[-1] and report.start_seq >= 20, report
    assert DecisionReader(archive / "decisions.db").verify(public_key=key.public_key()).ok


def test_a_partition_dropped_behind_retentions_back_breaks_verify(migrated, tmp_path):
    key = load_or_create_key(tmp_path / "k.key")
    with _db(migrated) as db:
        _fill(db, 12)
        rotate(db, tmp_path / "archive", key)
        with psycopg.connect(migrated, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {TABLE}_p0")  # sealed, never pruned
        with _db(migrated) as db2:
            log = PgDecisionLog(db2)
            try:
                assert log.verify(public_key=key.public_key()).reason == "gap"
                with psycopg.connect(migrated, autocommit=True) as conn:  # and claimed pruned, unsigned
                    conn.execute(f"UPDATE {PARTITIONS} SET removed = 'dropped' WHERE number = 0")
                report = log.verify(public_key=key.public_key())
                assert not report.ok and "prune line" in report.detail
                other = load_or_create_key(tmp_path / "other.key")  # another key cannot vouch for the seals
                assert not log.verify(public_key=other.public_key()).ok
            finally:
                log.close()


def test_a_version_1_store_migrates_with_its_records(pg_url, tmp_path):
    with _db(pg_url) as db:
        migrate(db, Schema("decisions", (_V1,)))
        _fill(db, 7)
        assert migrate(db, SCHEMA) == (1, 2)
        _fill(db, 5)
        seals = rotate(db, tmp_path / "archive", load_or_create_key(tmp_path / "k.key"))
        assert [s.last_seq for s in seals] == [5, 10]
        log = PgDecisionLog(db)
        try:
            assert log.verify().ok and log.head()[0] == 12
        finally:
            log.close()


def test_a_segment_left_without_its_manifest_line_is_made_again(migrated, tmp_path):
    key = load_or_create_key(tmp_path / "k.key")
    archive = tmp_path / "archive"
    with _db(migrated) as db:
        _fill(db, 12)
        folder = segments.folder(archive / "decisions.db")
        folder.mkdir(parents=True)
        (folder / "segment-000001.db").write_bytes(b"half written")
        (folder / "segment-000002.db.tmp").write_bytes(b"half")
        assert len(rotate(db, archive, key)) == 2
    assert DecisionReader(archive / "decisions.db").verify(public_key=key.public_key()).ok
    assert not list(Path(folder).glob("*.tmp"))


def test_the_command_line_refuses_an_unexported_partition_with_its_code(migrated, tmp_path):
    with _db(migrated) as db:
        _fill(db, 12)
    pruned = _warden("audit", "prune", "--store", migrated, "--data", str(tmp_path / "data"), "--before", "0s")
    assert pruned.returncode == 2 and "partition_not_exported" in pruned.stderr, pruned.stderr
    assert len(_attached(migrated)) == 3


def test_a_seal_listed_in_the_archive_but_not_in_the_table_is_recorded_once_checked(migrated, pg_server, tmp_path):
    key = load_or_create_key(tmp_path / "k.key")
    archive = tmp_path / "archive"
    with _db(migrated) as db:
        _fill(db, 12)
        rotate(db, archive, key)
    with psycopg.connect(migrated, autocommit=True) as conn:  # as if stopped after the manifest line
        conn.execute(f"DELETE FROM {PARTITIONS} WHERE number = 1")
    with _db(migrated) as db:
        assert rotate(db, archive, key) == []
    with psycopg.connect(migrated) as conn:
        assert conn.execute(f"SELECT array_agg(number ORDER BY number) FROM {PARTITIONS}").fetchone() == ([0, 1],)
    # another log's archive (same shape, other records) is never taken for this one's
    other = pg_server.create_database(f"retention_other_{uuid.uuid4().hex[:8]}")
    with _db(other) as db:
        migrate(db, SCHEMA)
        _fill(db, 12)
        with pytest.raises(RetentionError, match="not this log's"):
            rotate(db, archive, key)
        with psycopg.connect(other) as conn:
            assert conn.execute(f"SELECT count(*) FROM {PARTITIONS}").fetchone() == (0,)
