"""The Node.js example client (examples/node-client) against a real checkpoint, when node is here."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from warden import grants

from .conftest import REPO, TOKEN

CLIENT = REPO / "examples" / "node-client"


@pytest.fixture(scope="module")
def node() -> str:
    exe = shutil.which("node")
    if exe is None:
        pytest.skip("node is not installed")
    if not (CLIENT / "node_modules" / "@grpc" / "grpc-js").exists():
        npm = shutil.which("npm")
        done = npm and subprocess.run(
            [npm, "install", "--no-audit", "--no-fund"], cwd=CLIENT, capture_output=True, timeout=300
        )
        if not done or done.returncode != 0:
            pytest.skip("the client's npm packages are not installed and `npm install` failed")
    return exe


def _run(node: str, *args: str) -> tuple[int, dict]:
    proc = subprocess.run([node, "check.js", *args], cwd=CLIENT, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def test_node_client_allow_deny_and_refusal(node, checkpoint, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# for the node client\nnode {TOKEN}\n")
    target = ["--target", f"127.0.0.1:{checkpoint.port}"]

    code, out = _run(node, *target, "--token-file", str(tokens), "--args", '{"task_id": "task-7"}')
    assert code == 0 and out["verdict"] == "VERDICT_ALLOW" and out["code"] == "allowed"
    assert out["agent_version"] == checkpoint.version("recon")
    start, record = checkpoint.records()  # the client started its run with StartRun, then checked in it
    assert (start["action"], start["run_id"], start["accountable_person"]) == (
        "start_run",
        out["run_id"],
        "alice",
    )
    assert out["run_id"].startswith("run-") and out["run_token"].startswith("wrun2.")
    assert record["decision_id"] == out["decision_id"] and record["run_id"] == out["run_id"]
    # The grant the node client saw is bound to the arguments it sent.
    expected = grants.sign(
        checkpoint.key, decision_id="x", run_id=out["run_id"], agent="recon", agent_version=out["agent_version"],
        tool="get_task", arguments={"task_id": "task-7"}, policy_revision="r",
    )  # fmt: skip
    assert out["grant"]["arguments_sha256"] == expected.arguments_sha256
    run_id, run_token = out["run_id"], out["run_token"]

    # --run-token goes on in the same run (no new StartRun); --run must then be the token's run
    code, out = _run(node, *target, "--token-file", str(tokens), "--run-token", run_token, "--run", run_id)
    assert code == 0 and out["verdict"] == "VERDICT_ALLOW" and out["run_id"] == run_id
    records = checkpoint.records()
    assert (
        len(records) == 3
        and records[-1]["run_id"] == run_id
        and records[-1]["decision_id"] == out["decision_id"]
    )
    code, out = _run(
        node, *target, "--token-file", str(tokens), "--run-token", run_token, "--run", "run-other"
    )
    assert code == 1 and out["verdict"] == "VERDICT_DENY" and out["code"] == "run_token_invalid"
    code, out = _run(node, *target, "--token-file", str(tokens), "--run-token", run_token + "x")
    assert code == 1 and out["code"] == "run_token_invalid"

    # --mode and --agent-version go to StartRun
    version = checkpoint.version("recon")
    code, out = _run(
        node, *target, "--token-file", str(tokens), "--mode", "background", "--agent-version", version
    )
    assert code == 0 and out["agent_version"] == version
    start = next(
        r for r in checkpoint.records() if r["run_id"] == out["run_id"] and r["action"] == "start_run"
    )
    assert start["arguments"]["mode"] == "background"
    # a run id cannot be chosen: --run alone is a usage error
    proc = subprocess.run([node, "check.js", *target, "--run", "run-node"], cwd=CLIENT, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "--run-token" in proc.stderr

    # a refused StartRun is a recorded DENY, printed as an answer
    code, out = _run(node, *target, "--token-file", str(tokens), "--agent", "nobody")
    assert code == 1 and out["verdict"] == "VERDICT_DENY" and out["code"] == "unknown_agent"
    assert checkpoint.records()[-1]["decision_id"] == out["decision_id"]

    code, out = _run(node, *target, "--token-file", str(tokens), "--tool", "cancel_task")
    assert code == 1 and out["verdict"] == "VERDICT_DENY" and out["code"] == "tool_not_allowed"

    code, out = _run(node, *target)  # no token
    assert code == 2 and out["error"] == "UNAUTHENTICATED" and out["code"] == "unauthenticated"

    code, out = _run(node, "--target", f"unix://{checkpoint.server.uds_path}")  # the socket needs none
    assert code == 0 and out["verdict"] == "VERDICT_ALLOW"
    assert (checkpoint.records()[-1]["caller"], checkpoint.records()[-1]["run_id"]) == ("unix", out["run_id"])
