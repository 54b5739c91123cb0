"""What a Check encodes once and reuses: the arguments' canonical text (the grant's hash and the
record's column), the run's actor chain (once per run token), the grant written into the answer.
Each reuse must store and sign exactly what encoding again would."""

from __future__ import annotations

import hashlib

import pytest

from checkpoint.audit import DecisionReader
from checkpoint.audit.errors import InvalidAuditRecord
from checkpoint.audit.record import CanonicalJson, json_column, to_row
from warden import canonical, grants
from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .helpers import tool_call


def _allowed(checkpoint, run_token: str, task: str) -> pb.CheckResponse:
    version = checkpoint.version("recon")
    req = tool_call("recon", version, "get_task", {"task_id": task})
    req.run.CopyFrom(pb.RunContext(run_token=run_token))
    resp = checkpoint.stub().Check(req, timeout=5)
    assert resp.verdict == pb.VERDICT_ALLOW and resp.HasField("grant"), resp
    return resp


def test_the_grant_and_the_record_cover_the_same_arguments_and_the_chain_is_the_runs(checkpoint):
    started = checkpoint.start_run("recon", checkpoint.version("recon"))
    answers = [_allowed(checkpoint, started.run_token, f"task-{n}") for n in range(3)]
    records = {r["decision_id"]: r for r in checkpoint.records()}
    start = records[started.decision.decision_id]
    for n, resp in enumerate(answers):
        record = records[resp.decision_id]
        assert record["arguments"] == {"task_id": f"task-{n}"}
        assert resp.grant.arguments_sha256 == canonical.sha256_hex({"task_id": f"task-{n}"})
        grants.verify(checkpoint.key, resp.grant, run_id=record["run_id"], agent_version=record["agent_version"],
                      tool="get_task", arguments={"task_id": f"task-{n}"})
        # the chain StartRun recorded, on every call of the run (encoded once, kept by the run)
        assert record["actor_chain"] == start["actor_chain"]
        assert [a["kind"] for a in record["actor_chain"]] == ["person", "agent"]
        assert record["accountable_person"] == "alice" and record["agent"] == "recon"
    assert DecisionReader(checkpoint.data / "decisions.db").verify().ok


def test_an_allowed_call_to_a_masking_tool_records_the_masked_arguments_not_the_signed_ones(start, policy_dir):
    tool = policy_dir / "tools" / "get_task.yaml"
    tool.write_text(tool.read_text() + "audit:\n  hash: [task_id]\n")
    checkpoint = start()
    started = checkpoint.start_run("recon", checkpoint.version("recon"))
    resp = _allowed(checkpoint, started.run_token, "task-secret7")
    assert resp.grant.arguments_sha256 == canonical.sha256_hex({"task_id": "task-secret7"})  # signed unmasked
    record = next(r for r in checkpoint.records() if r["decision_id"] == resp.decision_id)
    assert record["arguments"]["task_id"].startswith("hmac-sha256:")
    assert "secret7" not in str(record["arguments"])


def _record(**fields):
    return {"verdict": "ALLOW", "action": "tool_call", **fields}


def test_a_column_encoded_ahead_is_stored_as_encoding_it_again_would():
    args = {"b": [1, "x\u2028"], "a": {"z": None, "é": True}}
    chain = [{"kind": "person", "id": "alice"}]
    fresh = to_row(_record(decision_id="d", time="2026-01-01T00:00:00.000000Z", arguments=args, actor_chain=chain))
    ahead = to_row(_record(decision_id="d", time="2026-01-01T00:00:00.000000Z",
                           arguments=json_column("arguments", args), actor_chain=json_column("actor_chain", chain)))
    assert fresh == ahead
    assert type(json_column("arguments", args)) is CanonicalJson


@pytest.mark.parametrize("name, value", [("arguments", '{"a":1}'), ("actor_chain", "[]")])
def test_plain_text_is_no_json_column(name, value):
    # only json_column's own output skips encoding: a string a caller hands in is refused as before
    with pytest.raises(InvalidAuditRecord):
        to_row(_record(**{name: value}))


@pytest.mark.parametrize("name, value", [("arguments", {"n": float("nan")}), ("arguments", ["not", "a", "map"]),
                                         ("actor_chain", {"not": "a list"})])
def test_json_column_refuses_what_the_log_would(name, value):
    with pytest.raises(InvalidAuditRecord):
        json_column(name, value)


def test_a_grant_signed_into_an_answer_is_the_grant_sign_makes():
    key = grants.SigningKey.generate()
    fields = dict(decision_id="d-1", run_id="run-1", agent="recon", agent_version="v1", tool="get_task",
                  policy_revision="rev", ttl_seconds=120, now=1_700_000_000.25)
    made = grants.sign(key, arguments={"task_id": "task-1"}, **fields)
    answer = pb.CheckResponse()
    grants.sign_into(answer.grant, key, arguments_sha256=hashlib.sha256(b'{"task_id":"task-1"}').hexdigest(),
                     **fields)
    assert answer.grant == made
    grants.verify(key, answer.grant, run_id="run-1", agent_version="v1", tool="get_task",
                  arguments={"task_id": "task-1"}, now=1_700_000_001)
    answer.grant.tool = "cancel_task"  # the signature covers each field
    with pytest.raises(grants.GrantError):
        grants.verify(key, answer.grant, run_id="run-1", agent_version="v1", tool="cancel_task",
                      arguments={"task_id": "task-1"}, now=1_700_000_001)
