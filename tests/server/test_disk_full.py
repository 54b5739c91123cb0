"""The disk under the decision log fills up, then has room again: a real tmpfs of a few MB.

Every decision is refused `audit_unavailable` while the log cannot take its record, and health
says NOT_SERVING for exactly that long: a load balancer moves traffic away, and brings it back
when the checkpoint is SERVING again, with no restart and no call needed to find out."""

from __future__ import annotations

import contextlib
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .helpers import tool_call

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(where)],
                             capture_output=True, text=True, timeout=30)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def _fill(disk: Path) -> Path:
    """Take every free byte of the disk; the file that holds them."""
    filler = disk / "filler"
    # unbuffered, and the error suppressed around the close too: a buffered file's close flushes
    # what is left, and that flush fails on the full disk after the suppress has ended
    with contextlib.suppress(OSError), filler.open("wb", buffering=0) as f:
        while True:
            f.write(b"\xff" * 65536)
    assert _full(disk)
    return filler


def _full(disk: Path) -> bool:
    try:
        with (disk / "one-more-byte").open("wb") as f:
            f.write(b"x" * 4096)
            f.flush()
    except OSError as exc:
        return exc.errno == errno.ENOSPC
    finally:
        (disk / "one-more-byte").unlink(missing_ok=True)
    return False


def test_health_is_not_serving_while_the_log_cannot_be_written_and_serving_again_without_a_restart(start, small_disk):
    checkpoint = start(data_dir=small_disk / "data")
    channel = checkpoint.tcp()
    health = health_pb2_grpc.HealthStub(channel)
    watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=120)
    assert next(watch).status == SERVING
    stub = checkpoint.stub()
    version = checkpoint.version("recon")
    token = checkpoint.start_run("recon", version).run_token

    def check(n: int) -> pb.CheckResponse:
        request = tool_call("recon", version, "get_task", {"task_id": f"task-{n}"})
        request.run.CopyFrom(pb.RunContext(run_token=token))
        return stub.Check(request, timeout=30)

    assert check(0).verdict == pb.VERDICT_ALLOW
    filler = _fill(small_disk)
    # the log's file may still have room for a record or two: the disk is full once one is refused
    answers = [check(n) for n in range(1, 40)]
    refused = [a for a in answers if a.code == "audit_unavailable"]
    assert refused and all(a.verdict == pb.VERDICT_DENY for a in refused), [a.code for a in answers]
    assert answers[-1].code == "audit_unavailable"
    # the refusal was answered after health changed: no wait, no clock
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == NOT_SERVING
    assert health.Check(health_pb2.HealthCheckRequest(service="warden.checkpoint.v1.CheckpointService"),
                        timeout=10).status == NOT_SERVING
    assert next(watch).status == NOT_SERVING
    details = checkpoint.server.health_details()
    assert details["status"] == "NOT_SERVING" and details["decision_log"]["writable"] is False

    filler.unlink()  # room again; no call is sent: the checkpoint finds out by itself
    assert next(watch).status == SERVING
    assert checkpoint.server.health_details()["decision_log"]["writable"] is True
    after = check(99)
    assert (after.verdict, after.code) == (pb.VERDICT_ALLOW, "allowed")
    assert after.decision_id in {r["decision_id"] for r in checkpoint.records()}
    assert checkpoint.server.log.verify().ok
    watch.cancel()


def test_a_disk_full_at_the_start_is_refused_with_audit_unavailable_and_health_follows(start, small_disk):
    """Another order: the disk is full before the first decision of the checkpoint."""
    checkpoint = start(data_dir=small_disk / "data")
    filler = _fill(small_disk)
    stub = checkpoint.stub()
    health = health_pb2_grpc.HealthStub(checkpoint.tcp())
    codes = set()
    for _ in range(40):
        try:
            codes.add(checkpoint.start_run("recon", checkpoint.version("recon")).decision.code)
        except grpc.RpcError as exc:  # a refusal the log could not take either
            codes.add(exc.code().name)
        if health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == NOT_SERVING:
            break
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == NOT_SERVING, codes
    filler.unlink()
    watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=120)
    while next(watch).status != SERVING:
        pass
    assert stub.ResolveAgent(pb.ResolveAgentRequest(agent="recon"), timeout=10).agent_version
    watch.cancel()
