"""What the decision function gives back is not believed blindly: an answer with no verdict, or one
the wire does not know, leaves the checkpoint as a recorded DENY with no grant (a
mutation run found nothing held this path).
"""

from __future__ import annotations

from checkpoint.engine import decide as real_decide
from checkpoint.server import service
from warden.checkpoint.v1 import checkpoint_pb2 as pb


def test_a_decision_with_no_verdict_or_an_unknown_one_is_a_recorded_deny_without_a_grant(checkpoint, monkeypatch):
    version = checkpoint.version("recon")
    run = checkpoint.start_run("recon", version)
    req = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token), tool_call=pb.ToolCall(tool="get_task"))
    req.tool_call.arguments.update({"task_id": "task-1"})
    assert checkpoint.stub().Check(req, timeout=5).HasField("grant")  # the same call, decided: a grant

    for verdict in (pb.VERDICT_UNSPECIFIED, 42):
        def no_verdict(policies, request, *, verdict=verdict, **given):  # approver, approved_rules, now
            got = real_decide(policies, request, **given)
            assert got.verdict == pb.VERDICT_ALLOW and got.code == "allowed"
            got.verdict = verdict  # everything else says ALLOW
            return got

        monkeypatch.setattr(service, "decide", no_verdict)
        resp = checkpoint.stub().Check(req, timeout=5)
        assert (resp.verdict, resp.code, resp.rule) == (pb.VERDICT_DENY, "policy_error", "engine"), verdict
        assert resp.reason == "the decision function gave no verdict"
        assert not resp.HasField("grant")
        # the context stays: the answer still names the agent, its version and the policy revision
        assert (resp.agent, resp.agent_version) == ("recon", version)
        assert resp.policy_revision == checkpoint.server.store.current.revision
        record = checkpoint.records()[-1]
        assert record["decision_id"] == resp.decision_id
        assert (record["verdict"], record["code"], record["rule"]) == ("DENY", "policy_error", "engine")

