"""The tools shipped in policies/ run in the image scripts/build-images.sh builds."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest
from toolrunner_harness import ROOT, SESSION, Harness

from checkpoint.policy import load_policy_dir
from toolrunner.runner import RunnerConfig
from toolrunner.server import create_server
from warden import grants

CALLS = {
    # the checkpoint fills `templates` with the tenant's reviewed ones (docs/skills.md); the script prints them
    "list_templates": ({"templates": [{"name": "web-basic", "spec": {"command": ["nmap", "TARGET"]}}]},
                       lambda out: isinstance(out, list) and out[0]["name"] == "web-basic"),
    "get_task": ({"task_id": "task-abc123"}, lambda out: out["status"] == "succeeded"),
    "create_task_from_template": (
        {"template": "nginx-restart", "target": "web-1.lab.example.com"},
        lambda out: out["task_id"].startswith("task-") and out["status"] == "queued",
    ),
    "propose_refund": (
        {"invoice_id": "inv-1", "payment_id": "pay_7", "customer": "customer:acme-1", "amount_usd": 12.5, "reason": "x"},
        lambda out: out["status"] == "issued" and out["amount"] == 12.5,
    ),
    "run_shell": ({"program": "echo", "arg": "a b; $(id)"}, lambda out: out == "a b; $(id)\n"),
    "lookup_order": ({"order_id": "ord-42", "customer": "customer:acme-1"}, lambda out: out["order_id"] == "ord-42"),
}


@pytest.fixture(scope="module")
def shipped(docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path_factory) -> Harness:
    tools = load_policy_dir(ROOT / "policies").tools
    running, port = create_server(
        "127.0.0.1:0",
        tools=dict(tools),
        policy_revision="rev-1",
        keys=signing_key,
        data_dir=tmp_path_factory.mktemp("shipped"),
        config=RunnerConfig(runner_id=f"{SESSION}-shipped"),
        api=docker_api,
    )
    h = Harness(running, port, signing_key)
    yield h
    h.close()


@pytest.mark.parametrize("tool", sorted(CALLS))
def test_a_shipped_tool_runs_and_prints_json(shipped: Harness, tool: str) -> None:
    arguments, check = CALLS[tool]
    receipt = shipped.execute(tool, arguments)
    assert receipt.exit_code == 0 and receipt.code == "", receipt.output
    assert check(receipt.output if tool == "run_shell" else json.loads(receipt.output))


def test_every_shipped_tool_with_a_run_section_names_a_present_image(shipped: Harness) -> None:
    runnable = {name: t for name, t in shipped.runner.tools.items() if t.run}
    assert runnable, "no shipped tool has a run section"
    for name, tool in runnable.items():
        assert shipped.runner.pinned.get(tool.run.image), f"{name}: image {tool.run.image} is not built"  # type: ignore[union-attr]
        for element in tool.run.command:  # type: ignore[union-attr]
            if element.startswith("/tools/"):
                assert (ROOT / "toolrunner/images/tools/rootfs" / element.lstrip("/")).is_file(), element


def test_the_tool_scripts_are_plain_files_in_the_image_inputs() -> None:
    scripts = sorted(p.name for p in (ROOT / "toolrunner/images/tools/rootfs/tools").glob("*.sh"))
    assert {"create_task_from_template.sh", "get_task.sh", "list_templates.sh", "lookup_order.sh",
            "issue_refund.sh", "run_shell.sh"} <= set(scripts)  # fmt: skip
    assert Path(ROOT / "scripts/build-images.sh").stat().st_mode & 0o111
