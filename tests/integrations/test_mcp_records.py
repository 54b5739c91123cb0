"""The gateway's own decisions on the checkpoint's log: each tools/list it filtered and each call it
refused by itself, with the principal, the client and the upstream, read back with `warden audit
query`; and a gateway act the checkpoint must not take."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("mcp", reason="the gateway's extra: pip install 'warden[mcp]'")

import anyio  # noqa: E402

from warden.client import CheckpointClient, ClientError  # noqa: E402

from .conftest import ALICE_TOKEN, GATEWAY_TOKEN, REPO  # noqa: E402
from .test_mcp_gateway import gateway, refused  # noqa: E402, F401 - the fixture


def audit(checkpoint, *filters: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "warden.cli", "audit", "query", "--data", str(checkpoint.data),
                           "--format", "jsonl", *filters], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_list_filtering_and_the_gateways_refusals_are_on_the_log(gateway, checkpoint):  # noqa: F811
    (checkpoint.shared / "big.txt").write_text("x" * 50_000)

    async def admitted():
        async with gateway(max_result_bytes=10_000) as client:
            assert len((await client.list_tools()).tools) == 3
            big = refused(await client.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/big.txt"}))
            assert big["code"] == "result_too_large" and big["decision_id"]

    async def changed():
        async with gateway(variant="changed") as client:
            result = refused(await client.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/x"}))
            assert result["code"] == "upstream_tool_changed" and result["decision_id"]

    async def narrow():  # the policy allows list_directory, this upstream does not serve it
        async with gateway(variant="narrow") as client:
            result = refused(await client.call_tool("fs__list_directory", {"path": f"{checkpoint.shared}/"}))
            assert result["code"] == "unknown_tool" and result["decision_id"]

    anyio.run(admitted)
    anyio.run(changed)
    anyio.run(narrow)

    listed = audit(checkpoint, "--action", "gateway", "--verdict", "ALLOW")
    assert len(listed) == 1
    details = listed[0]["arguments"]["details"]
    assert details == {"event": "listed", "client": "stdio", "hidden": ["fs__delete_file"],
                       "shown": ["fs__list_directory", "fs__read_text_file", "fs__write_file"]}
    assert (listed[0]["principal"], listed[0]["accountable_person"]) == ("mcp-gateway", "alice")

    refusals = audit(checkpoint, "--action", "gateway", "--verdict", "DENY")
    assert [(r["tool"], r["code"], r["rule"]) for r in refusals] == [
        ("fs__read_text_file", "result_too_large", "gateway"),
        ("fs__read_text_file", "upstream_tool_changed", "gateway"),
        ("fs__list_directory", "unknown_tool", "gateway")]
    for record in refusals:
        assert (record["principal"], record["accountable_person"], record["agent"]) == ("mcp-gateway", "alice", "files")
        assert record["arguments"]["details"]["client"] == "stdio"
    assert [r["arguments"]["details"]["upstream"] for r in refusals] == ["fs", "fs", ""]
    # the auditor's filters find them as they find the checkpoint's own denials
    assert [r["decision_id"] for r in audit(checkpoint, "--code", "upstream_tool_changed")] == [refusals[1]["decision_id"]]
    assert len(audit(checkpoint, "--tool", "fs__list_directory", "--action", "gateway")) == 1


@pytest.mark.parametrize("details, code", [
    # a gateway cannot put a checkpoint verdict on the log in its name
    ({"event": "refused", "client": "stdio", "tool": "fs__write_file", "code": "approved"}, "invalid_request"),
    ({"event": "refused", "client": "stdio", "tool": "fs__write_file", "code": "allowed"}, "invalid_request"),
    ({"event": "approved", "client": "stdio"}, "invalid_request"),
    ({"event": "refused", "client": "", "tool": "fs__write_file", "code": "unknown_tool"}, "invalid_request"),
    ({"event": "listed", "client": "stdio", "shown": "fs__write_file"}, "invalid_request"),
    ({"event": "listed", "client": "stdio", "shown": [], "verdict": "ALLOW"}, "invalid_request"),
])
def test_a_gateway_act_the_checkpoint_must_not_take_is_refused_on_the_record(checkpoint, details, code):
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as client:
        run = client.start_run(person="alice", agent="files")
        with pytest.raises(ClientError) as refusal:
            client.record_gateway(run, details)
    assert refusal.value.code == code
    acts = [r for r in checkpoint.records() if r["action"] == "gateway"]
    assert [(r["verdict"], r["code"]) for r in acts] == [("DENY", code)]  # refused, and on the record


def test_only_the_runs_own_principal_records_a_gateway_act(checkpoint):
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as gateway_client:
        run = gateway_client.start_run(person="alice", agent="files")
    with CheckpointClient(checkpoint.address, token=ALICE_TOKEN) as other, pytest.raises(ClientError) as refusal:
        other.record_gateway(run, {"event": "listed", "client": "stdio", "shown": [], "hidden": []})
    assert refusal.value.code in {"caller_not_permitted", "run_token_invalid", "unauthenticated"}, refusal.value.code
    assert not [r for r in checkpoint.records() if r["action"] == "gateway" and r["verdict"] == "ALLOW"]
