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

    code, out = _run(
        node, *target, "--token-file", str(tokens), "--run", "run-node", "--args", '{"task_id": "task-7"}'
    )
    assert code == 0 and out["verdict"] == "VERDICT_ALLOW" and out["code"] == "allowed"
    assert out["agent_version"] == checkpoint.version("recon")
    [record] = checkpoint.records()
    assert record["decision_id"] == out["decision_id"] and record["run_id"] == "run-node"
    # The grant the node client saw is bound to the arguments it sent.
    expected = grants.sign(
        checkpoint.key, decision_id="x", run_id="run-node", agent="recon", agent_version=out["agent_version"],
        tool="get_task", arguments={"task_id": "task-7"}, policy_revision="r",
    )  # fmt: skip
    assert out["grant"]["arguments_sha256"] == expected.arguments_sha256

    code, out = _run(node, *target, "--token-file", str(tokens), "--tool", "cancel_task")
    assert code == 1 and out["verdict"] == "VERDICT_DENY" and out["code"] == "tool_not_allowed"

    code, out = _run(node, *target)  # no token
    assert code == 2 and out["error"] == "UNAUTHENTICATED" and out["code"] == "unauthenticated"

    code, out = _run(node, "--target", f"unix://{checkpoint.server.uds_path}")  # the socket needs none
    assert code == 0 and out["verdict"] == "VERDICT_ALLOW"
