"""`warden checkpoint serve --store URL`: a checkpoint process keeps its single-use state where the
setting says, and a store it cannot use stops its start with one line, before anything listens."""

from __future__ import annotations

import signal
import subprocess
import sys

import psycopg

from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc

from .conftest import REPO
from .test_crash import _wait_serving, _warden


def _serve(data, policies, sock, *store: str) -> list[str]:
    return [sys.executable, "-m", "warden.cli", "checkpoint", "serve", "--data", str(data), "--policies",
            str(policies), "--address", "", "--socket", str(sock), "--reload-interval", "0", *store]


def test_a_store_it_cannot_use_stops_the_start_with_one_line(tmp_path, policy_dir, pg_url):
    data, sock = tmp_path / "data", tmp_path / "cp.sock"
    assert _warden("keys", "init", "--data", str(data)).returncode == 0
    for store, code in ((pg_url, "store_schema_mismatch"), ("mysql://root:s3cret@db/x", "store_url_invalid")):
        done = subprocess.run(_serve(data, policy_dir, sock, "--store", store), cwd=REPO, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        said = [line for line in done.stderr.splitlines() if line.startswith("warden:")]
        assert len(said) == 1 and f"[{code}]" in said[0], done.stderr
        assert "s3cret" not in done.stderr
        assert not sock.exists()


def test_serve_keeps_ended_runs_in_the_store_it_is_given(tmp_path, policy_dir, pg_url):
    data, sock = tmp_path / "data", tmp_path / "cp.sock"
    assert _warden("keys", "init", "--data", str(data)).returncode == 0
    migrated = _warden("store", "migrate", "--store", pg_url)
    assert migrated.returncode == 0, migrated.stderr
    proc = subprocess.Popen(_serve(data, policy_dir, sock, "--store", pg_url), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        stub = pb_grpc.CheckpointServiceStub(_wait_serving(sock, proc))
        version = stub.ResolveAgent(pb.ResolveAgentRequest(agent="recon"), timeout=5).agent_version
        run = stub.StartRun(pb.StartRunRequest(person="alice", agent="recon", agent_version=version,
                                               mode=pb.RUN_MODE_INTERACTIVE), timeout=5)
        cancel = stub.RecordAct(pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act="cancel",
                                                    person="alice"), timeout=5)
        assert cancel.decision.code == "recorded", cancel.decision
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    with psycopg.connect(pg_url) as conn:
        ended = conn.execute("SELECT run_id, how FROM checkpoint_ended_runs").fetchall()
    assert ended == [(run.run_id, "cancelled by alice")]
    assert not (data / "approvals-used.db").exists()  # nothing of it beside the process
