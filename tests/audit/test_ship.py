"""`warden audit ship`: at least once to a JSON-lines file with rotation or
to an HTTP endpoint, from a persisted cursor, so a restart neither loses nor floods."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from checkpoint.audit import DecisionLog
from checkpoint.audit import ship as shipping
from checkpoint.audit.reader import DecisionReader
from warden.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def data(tmp_path: Path, make_record) -> Path:
    folder = tmp_path / "data"
    with DecisionLog(folder / "decisions.db") as log:
        for _ in range(7):
            log.append(make_record())
    return folder


def _append(data: Path, make_record, n: int) -> None:
    with DecisionLog(data / "decisions.db") as log:
        for _ in range(n):
            log.append(make_record())


def _lines(*paths: Path) -> list[dict]:
    return [json.loads(line) for path in paths for line in path.read_text().splitlines()]


def _export(data: Path, capsys) -> list[dict]:
    capsys.readouterr()
    assert main(["audit", "export", "--data", str(data)]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_ship_to_a_file_is_the_export_and_a_rerun_ships_only_what_is_new(data, tmp_path, make_record, capsys):
    out = tmp_path / "siem.jsonl"
    assert main(["audit", "ship", "--data", str(data), "--to", str(out), "--batch", "3"]) == 0
    assert "7 records shipped; cursor at 7" in capsys.readouterr().err
    assert _lines(out) == _export(data, capsys)  # byte for byte what export writes, hashes and all
    assert main(["audit", "ship", "--data", str(data), "--to", str(out)]) == 0  # nothing new: nothing sent
    assert [r["seq"] for r in _lines(out)] == list(range(1, 8))
    _append(data, make_record, 2)
    assert main(["audit", "ship", "--data", str(data), "--to", str(out)]) == 0
    assert [r["seq"] for r in _lines(out)] == list(range(1, 10))
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    (cursor,) = (data / "ship").iterdir()  # one cursor per destination, in the data folder
    assert json.loads(cursor.read_text())["seq"] == 9 and oct(cursor.stat().st_mode & 0o777) == "0o600"


def test_a_second_destination_has_its_own_cursor(data, tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert main(["audit", "ship", "--data", str(data), "--to", str(first), "-q"]) == 0
    assert main(["audit", "ship", "--data", str(data), "--to", str(second), "-q"]) == 0
    assert len(_lines(second)) == 7  # not skipped because the first destination had them


def test_a_file_rotates_by_size_and_keeps_keep_files(data, tmp_path, make_record):
    out = tmp_path / "siem.jsonl"
    _append(data, make_record, 40)  # 47 records of ~700 bytes
    args = ["audit", "ship", "--data", str(data), "--to", str(out), "--batch", "5", "--rotate-size", "0.005",
            "--keep", "2", "-q"]
    assert main(args) == 0
    rotated = sorted(tmp_path.glob("siem.jsonl.*"))
    assert [p.name for p in rotated] == ["siem.jsonl.1", "siem.jsonl.2"]  # .3 and older fell away
    shipped = _lines(out.with_name("siem.jsonl.2"), out.with_name("siem.jsonl.1"), out)
    seqs = [r["seq"] for r in shipped]
    assert seqs == list(range(seqs[0], 48))  # in order, contiguous up to the head
    assert all(p.stat().st_size < 5 * 1024 * 1024 for p in rotated)


def test_a_crash_between_sending_and_saving_the_cursor_ships_again_never_loses(data, tmp_path, monkeypatch):
    out = tmp_path / "siem.jsonl"
    reader = DecisionReader(data / "decisions.db")
    cursor = shipping.Cursor(tmp_path / "cursor.json", str(out))
    saved = shipping.Cursor.save
    calls = []

    def crash_on_second(self, position):
        calls.append(position.seq)
        if len(calls) == 2:
            raise OSError("power cut")
        saved(self, position)

    monkeypatch.setattr(shipping.Cursor, "save", crash_on_second)
    with pytest.raises(OSError):
        shipping.ship(reader, shipping.FileSink(out), cursor, batch=3)
    monkeypatch.setattr(shipping.Cursor, "save", saved)
    assert cursor.load() == shipping.Position(3, _lines(out)[2]["hash"])
    shipping.ship(reader, shipping.FileSink(out), cursor, batch=3)
    seqs = [r["seq"] for r in _lines(out)]
    assert seqs == [1, 2, 3, 4, 5, 6, 4, 5, 6, 7]  # 4..6 twice (at least once), nothing missing
    assert sorted(set(seqs)) == list(range(1, 8))


def test_a_cursor_from_another_log_is_refused_and_ships_nothing(data, tmp_path, make_record, capsys):
    out = tmp_path / "siem.jsonl"
    assert main(["audit", "ship", "--data", str(data), "--to", str(out), "-q"]) == 0
    before = out.read_text()
    # the log is replaced by another one of the same length: same seqs, other hashes
    (data / "decisions.db").unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(data / "decisions.db") + suffix).unlink(missing_ok=True)
    _append(data, make_record, 8)
    capsys.readouterr()
    assert main(["audit", "ship", "--data", str(data), "--to", str(out)]) == 1
    assert "not the one this cursor shipped" in capsys.readouterr().err
    assert out.read_text() == before


def test_a_cursor_past_the_end_of_the_log_is_refused(data, tmp_path, make_record, capsys):
    out = tmp_path / "siem.jsonl"
    cursor = tmp_path / "c.json"
    cursor.write_text(json.dumps({"seq": 50, "hash": "a" * 64, "destination": str(out)}))
    capsys.readouterr()
    assert main(["audit", "ship", "--data", str(data), "--to", str(out), "--cursor", str(cursor)]) == 1
    assert "truncated or replaced" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("body", ["", "{", '{"seq": "x"}', "[]"])
def test_an_unreadable_cursor_is_refused(data, tmp_path, body, capsys):
    cursor = tmp_path / "c.json"
    cursor.write_text(body)
    assert main(["audit", "ship", "--data", str(data), "--to", str(tmp_path / "o"), "--cursor", str(cursor)]) == 1
    assert "unreadable" in capsys.readouterr().err


def test_a_cursor_of_another_destination_is_refused(data, tmp_path, capsys):
    cursor = tmp_path / "c.json"
    assert main(["audit", "ship", "--data", str(data), "--to", str(tmp_path / "a"), "--cursor", str(cursor)]) == 0
    assert main(["audit", "ship", "--data", str(data), "--to", str(tmp_path / "b"), "--cursor", str(cursor)]) == 1
    assert "belongs to" in capsys.readouterr().err


@pytest.mark.parametrize("args", [
    ["--to", "http://127.0.0.1:9/x", "--rotate-size", "1"],
    ["--to", "FILE", "--header", "X-A: b"],
    ["--to", "http://127.0.0.1:9/x", "--header", "no colon"],
    ["--to", "DIR"],
    ["--to", "NOWHERE/x.jsonl"],
])
def test_bad_arguments_are_usage_errors(data, tmp_path, args, capsys):
    args = [a.replace("FILE", str(tmp_path / "f")).replace("DIR", str(tmp_path)).replace(
        "NOWHERE", str(tmp_path / "missing")) for a in args]
    assert main(["audit", "ship", "--data", str(data), *args]) == 2
    assert "warden audit ship:" in capsys.readouterr().err
    assert not (data / "ship").exists()


class _Siem:
    """A real HTTP receiver: refuses the first `refuse` POSTs with 503, then takes each body."""

    def __init__(self, refuse: int = 0, status: int = 503) -> None:
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.refuse, self.status = refuse, status
        siem = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                siem.headers.append(dict(self.headers))
                if siem.refuse > 0:
                    siem.refuse -= 1
                    self.send_response(siem.status)
                    self.end_headers()
                    return
                siem.bodies.append(body)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ingest"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def records(self) -> list[dict]:
        return [json.loads(line) for body in self.bodies for line in body.decode().splitlines()]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_ship_over_http_retries_a_refusing_endpoint_and_sends_the_token(data, tmp_path):
    siem = _Siem(refuse=2)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    reader = DecisionReader(data / "decisions.db")
    sink = shipping.HttpSink(siem.url, headers={"Authorization": "Bearer s3cret", "X-Source": "warden"})
    cursor = shipping.Cursor(tmp_path / "c.json", siem.url)
    try:
        progress = shipping.ship(reader, sink, cursor, batch=4, sleep=lambda _s: None)
        assert (progress.shipped, progress.failures) == (7, 2)
        assert [r["seq"] for r in siem.records()] == list(range(1, 8))  # each once: refused batches were not taken
        assert len(siem.bodies) == 2 and all(h["Content-Type"] == "application/x-ndjson" for h in siem.headers)
        assert {h["Authorization"] for h in siem.headers} == {"Bearer s3cret"}
        # through the CLI: the token comes from its file
        siem.bodies.clear()
        assert main(["audit", "ship", "--data", str(data), "--to", siem.url, "--token-file", str(token),
                     "--cursor", str(tmp_path / "c2.json"), "-q"]) == 0
        assert siem.headers[-1]["Authorization"] == "Bearer s3cret" and len(siem.records()) == 7
    finally:
        siem.close()


def test_an_endpoint_that_keeps_refusing_fails_the_run_and_keeps_the_cursor(data, tmp_path, capsys):
    siem = _Siem(refuse=1000, status=400)
    cursor = tmp_path / "c.json"
    try:
        t0 = time.monotonic()
        code = main(["audit", "ship", "--data", str(data), "--to", siem.url, "--cursor", str(cursor),
                     "--retries", "1"])
        assert code == 1 and time.monotonic() - t0 < 30
        assert "answered 400" in capsys.readouterr().err
        assert not cursor.exists() and siem.bodies == []
    finally:
        siem.close()


def test_an_unreachable_endpoint_fails_the_run(data, tmp_path, capsys):
    siem = _Siem()
    url = siem.url
    siem.close()  # nothing listens there now
    assert main(["audit", "ship", "--data", str(data), "--to", url, "--cursor", str(tmp_path / "c.json"),
                 "--retries", "0"]) == 1
    assert "cursor stays at 0" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_follow_ships_new_records_and_stops_cleanly_on_sigterm(data, tmp_path, make_record):
    out = tmp_path / "siem.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-m", "warden.cli", "audit", "ship", "--data", str(data), "--to",
                              str(out), "--follow", "--poll", "0.05"], env=env, cwd=REPO,
                             stderr=subprocess.PIPE, text=True)

    def shipped() -> int:
        return len(out.read_text().splitlines()) if out.exists() else 0

    try:
        deadline = time.monotonic() + 30
        while shipped() < 7 and time.monotonic() < deadline:
            time.sleep(0.05)
        _append(data, make_record, 3)
        while shipped() < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [r["seq"] for r in _lines(out)] == list(range(1, 11))
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=20) == 0
        assert "10 records shipped; cursor at 10" in child.stderr.read()
    finally:
        child.kill()
        child.wait()


def test_a_missing_log_is_an_error_and_creates_nothing(tmp_path, capsys):
    out = tmp_path / "siem.jsonl"
    assert main(["audit", "ship", "--data", str(tmp_path / "nowhere"), "--to", str(out)]) == 2
    assert "no decision log" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists() and not out.exists()


# -- records pruned before they were shipped (review of the merged rotation and shipping) ----------


def _rotate_and_prune(data: Path, before: int) -> None:
    assert main(["audit", "rotate", "--data", str(data)]) == 0
    assert main(["audit", "prune", "--data", str(data), "--before", str(before)]) == 0


def test_records_pruned_before_they_were_shipped_stop_the_ship_loudly(data, tmp_path, make_record, capsys):
    """Shipped 1..7; 8..16 are sealed and pruned before the next run: shipping on from 17 would lose
    them without a word. Refused, naming the lost seqs, and nothing is sent or moved."""
    out = tmp_path / "siem.jsonl"
    assert main(["audit", "ship", "--data", str(data), "--to", str(out), "-q"]) == 0
    _append(data, make_record, 10)  # 8..17
    _rotate_and_prune(data, 17)  # seals 1..16 (17 stays live), prunes that segment
    before = out.read_text()
    (cursor,) = (data / "ship").iterdir()
    cursor_before = cursor.read_text()
    capsys.readouterr()
    assert main(["audit", "ship", "--data", str(data), "--to", str(out)]) == 1
    err = capsys.readouterr().err
    assert "records 8..16" in err and "pruned" in err, err
    assert out.read_text() == before and cursor.read_text() == cursor_before


def test_a_follower_stops_when_a_prune_overtakes_it(data, tmp_path, make_record):
    """The same under `ship --follow`, in the loop: the prune lands while the shipper is behind."""
    out = tmp_path / "siem.jsonl"
    reader = DecisionReader(data / "decisions.db")
    cursor = shipping.Cursor(tmp_path / "cursor.json", str(out))
    shipping.ship(reader, shipping.FileSink(out), cursor, batch=3)  # 1..7
    _append(data, make_record, 10)
    _rotate_and_prune(data, 17)
    with pytest.raises(shipping.ShipError, match=r"records 8\.\.16 .*pruned"):
        shipping.ship(reader, shipping.FileSink(out), cursor, follow=True, sleep=lambda _s: None)
    assert cursor.load().seq == 7


def test_a_prune_behind_the_cursor_ships_on(data, tmp_path, make_record):
    """Pruning only what was shipped is the normal case: no error, nothing sent twice."""
    out = tmp_path / "siem.jsonl"
    reader = DecisionReader(data / "decisions.db")
    cursor = shipping.Cursor(tmp_path / "cursor.json", str(out))
    _append(data, make_record, 10)  # 1..17
    shipping.ship(reader, shipping.FileSink(out), cursor)
    _append(data, make_record, 3)  # 18..20
    _rotate_and_prune(data, 18)  # seals and prunes 1..17 (the cursor's own record included)
    shipping.ship(reader, shipping.FileSink(out), cursor)
    assert [r["seq"] for r in _lines(out)] == list(range(1, 21))


def test_a_first_ship_starts_at_the_oldest_record_kept(data, tmp_path, make_record):
    """A new destination (no cursor) after a prune starts at what retention kept: not an error."""
    _append(data, make_record, 10)
    _rotate_and_prune(data, 17)
    out = tmp_path / "siem.jsonl"
    shipping.ship(DecisionReader(data / "decisions.db"), shipping.FileSink(out),
                  shipping.Cursor(tmp_path / "cursor.json", str(out)))
    assert [r["seq"] for r in _lines(out)] == [17]


def test_a_sealed_segment_deleted_without_a_prune_stops_the_ship(data, tmp_path, make_record):
    out = tmp_path / "siem.jsonl"
    reader = DecisionReader(data / "decisions.db")
    cursor = shipping.Cursor(tmp_path / "cursor.json", str(out))
    _append(data, make_record, 10)
    assert main(["audit", "rotate", "--data", str(data), "--upto", "10"]) == 0
    assert main(["audit", "rotate", "--data", str(data)]) == 0
    segment = data / "decisions.d" / "segment-000001.db"
    segment.chmod(0o600)
    segment.unlink()  # records 1..10 gone, and no signed prune says so
    with pytest.raises(shipping.ShipError, match=r"records 1\.\.10 .*missing"):
        shipping.ship(reader, shipping.FileSink(out), cursor)
    assert not out.exists()


# -- a redirect is not delivery ------------------------------------------------------------------


class _Redirector:
    """A real HTTP endpoint that answers every POST with `status` and a Location elsewhere."""

    def __init__(self, status: int, location: str) -> None:
        self.posts = 0
        box = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                self.rfile.read(int(self.headers["Content-Length"]))
                box.posts += 1
                self.send_response(status)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ingest"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Elsewhere:
    """Another origin that takes anything (GET or POST) with 200 and notes what reached it."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        box = self

        class Handler(BaseHTTPRequestHandler):
            def _take(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                box.requests.append((self.command, dict(self.headers)))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST = do_PUT = _take  # noqa: N815 - the stdlib's names

            def log_message(self, *_args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/landing"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("where", ["elsewhere", "same origin"])
def test_a_redirect_is_not_delivery_and_the_token_stays_with_the_configured_origin(data, tmp_path, capsys,
                                                                                   status, where):
    """A 3xx to a page that answers 200 is not the SIEM taking the batch: the cursor stays, the run
    fails naming the redirect, and the bearer token never reaches the redirect's target (another
    origin, or another path of the same one: the configured address is the only one spoken to)."""
    elsewhere = _Elsewhere()
    redirector = _Redirector(status, elsewhere.url if where == "elsewhere" else "/landing")
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    cursor = tmp_path / "c.json"
    try:
        code = main(["audit", "ship", "--data", str(data), "--to", redirector.url, "--token-file", str(token),
                     "--cursor", str(cursor), "--retries", "0"])
        err = capsys.readouterr().err
        assert code == 1, err
        assert f"answered {status}" in err and "redirect" in err and "not delivery" in err, err
        assert not cursor.exists()
        assert elsewhere.requests == []
        assert redirector.posts == 1
    finally:
        redirector.close()
        elsewhere.close()


def test_the_command_says_each_refusal_it_retries(data, tmp_path, capsys):
    siem = _Siem(refuse=2, status=503)
    try:
        assert main(["audit", "ship", "--data", str(data), "--to", siem.url, "--cursor", str(tmp_path / "c.json"),
                     "--batch", "4"]) == 0
        err = capsys.readouterr().err
        tries = [line for line in err.splitlines() if "refused records 1..4" in line]
        assert len(tries) == 2 and "answered 503" in tries[0] and "try 2 in" in tries[0] and "try 3 in" in tries[1]
        assert "7 records shipped after 2 refused tries" in err and len(siem.records()) == 7
    finally:
        siem.close()
