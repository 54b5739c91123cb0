"""Refusals cannot grow the log without bound; the stores are private files."""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

import grpc
import pytest

from checkpoint.audit import DecisionReader
from checkpoint.audit.bounded import MAX_ACTORS, MAX_CHARS, bound_refusal, cap
from checkpoint.server.ratelimit import PeerLimiter, peer_address
from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .conftest import tool_call

HUGE = "r" * 900_000  # the run id of the report: 50 refusals grew the log by 133 MB
FLOOD = 50
# Generous: a capped refusal takes about 1 KB with its indexes; 900 KB each would be 45 MB.
GROWTH_BOUND = 2 * 1024 * 1024


def _log_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in data.glob("decisions.db*"))


def _records(running) -> list[dict]:
    """The refusals: the log less the catalog records of the first load."""
    return [r for r in DecisionReader(running.data / "decisions.db").read() if r["action"] != "catalog"]


def _sample(running, name: str, code: str = "unauthenticated") -> float:
    value = running.server.service.metrics.registry.get_sample_value(name, {"code": code})
    return value or 0.0


def _huge(running, args: dict | None = None) -> pb.CheckRequest:
    """A Check whose run id is 900 KB (once: the request must stay under the 1 MiB cap)."""
    request = tool_call("recon", running.version("recon"), "get_task", args or {"task_id": "task-1"})
    request.run.run_id = HUGE
    request.run.root_run_id = request.run.actor_chain[1].run_id = ""
    return request


def _flood(running, request: pb.CheckRequest, token: str | None) -> list[grpc.StatusCode]:
    stub = running.stub(token=token)
    codes = []
    for _ in range(FLOOD):
        try:
            stub.Check(request, timeout=30)
        except grpc.RpcError as exc:
            codes.append(exc.code())
    return codes


# -- (a) every string of a refusal capped, arguments as hash and size ------------------------------


def test_a_flood_of_unauthenticated_refusals_with_a_huge_run_id_stays_small(start):
    # a limiter that lets every refusal through: this test is about the size of each record
    running = start(refusal_limiter=PeerLimiter(burst=10_000, total_burst=10_000))
    request = _huge(running, {"task_id": "t" * 50_000})
    before = _log_bytes(running.data)
    assert _flood(running, request, token=None) == [grpc.StatusCode.UNAUTHENTICATED] * FLOOD
    records = _records(running)
    assert len(records) == FLOOD
    growth = _log_bytes(running.data) - before
    assert growth < GROWTH_BOUND, f"the log grew by {growth} bytes"
    record = records[0]
    assert record["code"] == "unauthenticated"
    # a run nobody vouched for is not the record's run; the claim stays in the reason, capped
    assert record["run_id"] is None and not record["actor_chain"]
    assert "claimed run 'rrrr" in record["reason"] and len(record["reason"]) < MAX_CHARS + 120
    assert set(record["arguments"]) == {"sha256", "bytes"} and record["arguments"]["bytes"] > 50_000
    assert DecisionReader(running.data / "decisions.db").verify().ok


def test_an_invalid_request_with_a_huge_tool_name_is_recorded_capped(start):
    running = start()
    request = running.with_run(tool_call("recon", running.version("recon"), "t" * 900_000, {"task_id": "task-1"}))
    request.counters.wall_clock_seconds = math.nan
    with pytest.raises(grpc.RpcError) as info:
        running.stub().Check(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    record = _records(running)[-1]
    assert record["code"] == "invalid_request" and record["run_id"]  # an established run: kept
    assert len(record["tool"]) < MAX_CHARS + 120 and "900000 characters" in record["tool"]
    assert set(record["arguments"]) == {"sha256", "bytes"}


def test_bound_refusal_caps_every_string_and_the_chain():
    long = "x" * 5000
    record = {
        "decision_id": "d", "tenant": long, "run_id": long, "agent": long, "reason": long,
        "actor_chain": [{"kind": "agent", "id": long, "run_id": long}] * 50,
        "arguments": {"secret": "hunter2", "blob": long}, "action": "tool_call", "verdict": "DENY",
    }
    out = bound_refusal(record)
    assert out["decision_id"] == "d" and out["action"] == "tool_call"
    for name in ("tenant", "run_id", "agent", "reason"):
        assert out[name] == cap(long) and len(out[name]) < MAX_CHARS + 120
    assert len(out["actor_chain"]) == MAX_ACTORS + 1 and out["actor_chain"][-1]["kind"] == "capped"
    assert all(len(v) < MAX_CHARS + 120 for a in out["actor_chain"] for v in a.values() if isinstance(v, str))
    assert set(out["arguments"]) == {"sha256", "bytes"} and "hunter2" not in str(out)
    assert cap("short") == "short" and cap(long) != cap(long[:-1] + "y")  # the marker tells them apart


# -- (b) unauthenticated refusals rate-limited per peer, the overflow counted -------------------


def test_a_flood_is_recorded_up_to_the_burst_and_the_rest_counted(start):
    running = start(refusal_limiter=PeerLimiter(rate=0.001, burst=20, total_rate=0.001, total_burst=200))
    request = _huge(running)
    before = _log_bytes(running.data)
    assert _flood(running, request, token="wrong-token-0123456789") == [grpc.StatusCode.UNAUTHENTICATED] * FLOOD
    assert len(_records(running)) == 20
    assert _sample(running, "warden_checkpoint_refusals_unrecorded_total") == FLOOD - 20
    assert _sample(running, "warden_checkpoint_refusals_total") == FLOOD  # nothing silently lost
    assert _log_bytes(running.data) - before < GROWTH_BOUND
    # an authenticated caller is not limited by it
    assert running.stub().Check(running.with_run(tool_call("recon", running.version("recon"), "get_task",
                                                           {"task_id": "task-1"})), timeout=10).code == "allowed"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_per_peer_refills_and_ignores_the_port():
    clock = Clock()
    limiter = PeerLimiter(rate=10, burst=20, total_rate=1000, total_burst=1000, clock=clock)
    assert sum(limiter.admit(f"ipv4:10.0.0.1:{port}") for port in range(1000, 1030)) == 20
    assert limiter.admit("ipv6:[::1]:5000")  # another peer has its own bucket
    clock.now += 0.5
    assert sum(limiter.admit("ipv4:10.0.0.1:999") for _ in range(10)) == 5
    assert not limiter.admit("ipv4:10.0.0.2:1", cost=21)


def test_all_peers_together_are_bounded_and_few_are_tracked():
    clock = Clock()
    limiter = PeerLimiter(rate=10, burst=20, total_rate=100, total_burst=200, max_peers=64, clock=clock)
    admitted = sum(limiter.admit(f"ipv4:10.0.{i // 256}.{i % 256}:1") for i in range(5000))
    assert admitted == 200 and limiter.tracked() == 64


def test_peer_address():
    assert peer_address("ipv4:127.0.0.1:5555") == "ipv4:127.0.0.1"
    assert peer_address("ipv6:[::1]:5555") == "ipv6:[::1]"
    assert peer_address("unix:/tmp/s.sock") == "unix:/tmp/s.sock"


# -- (c) the stores are created 0600 in folders made 0700 -------------------------------------------


@pytest.fixture
def open_umask():
    old = os.umask(0)  # the widest a careless service manager could leave it
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_checkpoint_data_folder_and_its_databases_are_private(start, tmp_path, open_umask):
    data = tmp_path / "fresh" / "data"
    running = start(data_dir=data)
    running.stub().Check(tool_call("recon", running.version("recon"), "get_task", {"task_id": "task-1"}), timeout=10)
    assert _mode(data) == 0o700 and _mode(data.parent) == 0o700
    files = sorted(data.glob("*.db*"))
    names = {p.name for p in files}
    assert {"decisions.db", "decisions.db-wal", "decisions.db-shm", "catalog.db", "learnings.db"} <= names, names
    assert {p.name: oct(_mode(p)) for p in files} == {p.name: oct(0o600) for p in files}


def test_an_existing_log_with_wide_modes_is_tightened(tmp_path, open_umask):
    from checkpoint.audit import DecisionLog

    path = tmp_path / "decisions.db"
    DecisionLog(path).close()
    os.chmod(path, 0o644)
    log = DecisionLog(path)
    try:
        assert _mode(path) == 0o600
    finally:
        log.close()


def test_the_toolrunner_and_driver_stores_are_private(tmp_path, open_umask):
    from driver.runs.sqlite import SqliteRunStore
    from toolrunner.receipts.sqlite import SqliteReceipts

    for cls, path in ((SqliteReceipts, tmp_path / "tr" / "receipts.db"), (SqliteRunStore, tmp_path / "dr" / "runs.db")):
        store = cls(path)
        try:
            assert _mode(path.parent) == 0o700
            for p in path.parent.glob("*.db*"):
                assert _mode(p) == 0o600, p
        finally:
            store.close()


def test_an_act_s_details_are_recorded_whole_only_when_small(checkpoint):
    """A person's act is recorded with what it changes; a caller cannot make that record as large as
    a request: past 4 KiB the record keeps the details' hash and size."""
    started = checkpoint.start_run("recon", person="alice")
    small, large = pb.RecordActRequest(run=pb.RunContext(run_token=started.run_token), act="amend", person="alice"), \
        pb.RecordActRequest(run=pb.RunContext(run_token=started.run_token), act="amend", person="alice")
    small.details.update({"goal_version": 2})
    large.details.update({"padding": "x" * 50_000})
    for request in (small, large):
        assert checkpoint.stub().RecordAct(request, timeout=5).decision.code == "recorded"
    acts = [r for r in checkpoint.records() if r["action"] == "amend"]
    assert acts[0]["arguments"]["details"] == {"goal_version": 2}
    assert set(acts[1]["arguments"]["details"]) == {"sha256", "bytes"} and acts[1]["arguments"]["details"]["bytes"] > 50_000
