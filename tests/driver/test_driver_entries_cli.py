"""`warden templates save --run --decision` as a person uses it, through `warden up`: the spec of a
call that worked, saved with TARGET where its target was; it waits for an admin (docs/skills.md)."""

from __future__ import annotations

import re

import grpc
import yaml
from driver_harness import PLAN, call
from test_driver_cli import ROOT, up, warden  # noqa: F401  (the fixture)

from warden.driver.v1 import driver_pb2 as dpb
from warden.driver.v1 import driver_pb2_grpc


def receipts(stack, run_id: str) -> list[dict]:
    token = (stack.data / "operator.token").read_text().strip()
    with grpc.insecure_channel(stack.driver_address) as channel:
        events = driver_pb2_grpc.DriverServiceStub(channel).WatchRun(
            dpb.WatchRunRequest(run_id=run_id, no_follow=True), metadata=[("authorization", f"Bearer {token}")],
            timeout=30)
        return [dict(e.event.data) for e in events if e.event.kind == "tool_receipt"]


def test_a_person_saves_a_call_that_worked_as_a_template(up, tmp_path):  # noqa: F811
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"responses": [
        PLAN, call("create_task_from_template", template="web-basic", target="web.lab.example.com"),
        call("get_task", task_id="task-abc123"), {"action": "handoff", "reason": "done for now"}]}))
    out = warden(up, "run", "recon", "--goal", str(ROOT / "goals" / "recon-lab-scan.yaml"), "--script", str(script),
                 "--follow")
    assert out.returncode == 0, out.stderr
    run_id = re.search(r"\brun-[0-9a-f-]+", out.stdout).group(0)
    scan, task = receipts(up, run_id)
    saved = warden(up, "templates", "save", "web-quick", "--run", run_id, "--decision", scan["decision_id"],
                   "--description", "the nmap scan that worked on web", "--note", "found the web servers")
    assert saved.returncode == 0, saved.stderr
    assert "proposed: template acme/web-quick" in saved.stdout and "is pending" in saved.stdout
    shown = warden(up, "templates", "show", "web-quick", saved.stdout.split("web-quick ", 1)[1].split()[0])
    assert '"TARGET"' in shown.stdout and "web.lab.example.com" not in shown.stdout
    listed = warden(up, "templates", "list")
    assert "web-quick" in listed.stdout and "(none yet)" in listed.stdout  # not served until approved
    # a call that is not a template task is no spec to save
    refused = warden(up, "templates", "save", "nope", "--run", run_id, "--decision", task["decision_id"])
    assert refused.returncode == 1 and "invalid_request" in refused.stderr
    missing = warden(up, "templates", "save", "nope", "--run", run_id, "--decision", "d-none")
    assert missing.returncode != 0 and "has no receipt" in missing.stderr
