"""Every off-limits refusal stays findable as evidence (the seed), a plan's step's too."""

from __future__ import annotations

from checkpoint.audit import DecisionReader
from warden.checkpoint.v1 import checkpoint_pb2 as pb


def test_a_plan_refused_for_an_off_limits_step_is_found_by_that_code_and_subject(checkpoint):
    """The seed keeps every off-limits refusal as evidence: a plan's too, not only a call's."""
    version = checkpoint.version("recon")
    request = pb.CheckRequest(run=pb.RunContext(tenant="acme", mode=pb.RUN_MODE_INTERACTIVE, actor_chain=[
        pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice"),
        pb.Actor(kind=pb.ACTOR_KIND_AGENT, id="recon", agent_version=version)]))
    request.plan.steps.add(id="list", tool="list_templates")
    scan = request.plan.steps.add(id="scan", tool="create_task_from_template")
    scan.arguments.update({"template": "web-basic", "target": "payments.lab.example.com"})
    answer = checkpoint.stub().Check(checkpoint.with_run(request), timeout=5)
    assert answer.code == "plan_step_not_allowed"
    reader = DecisionReader(checkpoint.data / "decisions.db")
    [found] = list(reader.read(code="subject_off_limits"))
    assert found["decision_id"] == answer.decision_id
    assert found["arguments"]["steps"][1]["code"] == "subject_off_limits"
    assert [r["decision_id"] for r in reader.read(text="payments.lab.example.com")] == [answer.decision_id]
