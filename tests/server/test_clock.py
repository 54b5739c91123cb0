"""`now` in a rule is the checkpoint's clock: the service reads it, once per decision, and no
field of a request can stand in for it."""

from __future__ import annotations

from datetime import UTC, datetime

from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .helpers import tool_call

BUSINESS_HOURS = """kind: Rule
name: tasks-in-business-hours
effect: deny_if
tools: [get_task]
condition: '!(now.getHours("Europe/Berlin") >= 9 && now.getHours("Europe/Berlin") < 17)'
reason: tasks are read in Berlin business hours
"""


def test_rules_read_the_service_clock_and_not_the_caller(start, policy_dir):
    (policy_dir / "rules" / "hours.yaml").write_text(BUSINESS_HOURS)
    checkpoint = start()
    asked: list[datetime] = []

    def clock(at: datetime):
        def read() -> datetime:
            asked.append(at)
            return at
        return read

    version = checkpoint.version("recon")
    request = checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": "task-t"}))
    claimed = pb.CheckRequest()
    claimed.CopyFrom(request)
    claimed.run.inputs.update({"now": "2024-06-03T10:00:00+02:00"})  # a run's inputs are its token's
    assert checkpoint.stub().Check(claimed, timeout=5).code == "run_token_invalid"
    asked.clear()
    checkpoint.server.service.clock = clock(datetime(2024, 6, 3, 8, 0, tzinfo=UTC))  # 10:00 in Berlin
    assert checkpoint.stub().Check(request, timeout=5).verdict == pb.VERDICT_ALLOW
    checkpoint.server.service.clock = clock(datetime(2024, 6, 3, 18, 0, tzinfo=UTC))  # 20:00 in Berlin
    evening = checkpoint.stub().Check(request, timeout=5)
    assert (evening.verdict, evening.code, evening.rule) == (
        pb.VERDICT_DENY, "rule_denied", "rule:tasks-in-business-hours")
    assert len(asked) == 2  # one reading of the clock per decision
