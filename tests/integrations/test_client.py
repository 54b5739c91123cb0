"""warden.client against a real checkpoint: runs, checks, approvals and a run's end."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.client import ApprovalInbox, CheckpointClient, CheckpointUnavailable, ClientError

from .conftest import ALICE_TOKEN, GATEWAY_TOKEN


def test_a_read_inside_the_scope_is_allowed_and_one_outside_is_denied(checkpoint):
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as client:
        run = client.start_run(person="alice", agent="files")
        assert run.run_id and run.agent == "files" and "fs__read_text_file" in run.tools
        inside = client.check(run, "fs__read_text_file", {"path": f"{checkpoint.shared}/notes.txt"})
        assert (inside.verdict, inside.code) == ("ALLOW", "allowed")
        outside = client.check(run, "fs__read_text_file", {"path": "/etc/passwd"})
        assert (outside.verdict, outside.code) == ("DENY", "subject_out_of_scope")
        climbing = client.check(run, "fs__read_text_file", {"path": f"{checkpoint.shared}/../secret"})
        assert (climbing.verdict, climbing.code) == ("DENY", "rule_denied")
    recorded = [(r["tool"], r["code"]) for r in checkpoint.records() if r["action"] == "tool_call"]
    assert recorded == [("fs__read_text_file", "allowed"), ("fs__read_text_file", "subject_out_of_scope"),
                        ("fs__read_text_file", "rule_denied")]


def test_a_person_is_vouched_for_only_when_the_principal_may(checkpoint):
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as client, pytest.raises(ClientError) as refused:
        client.start_run(person="mallory", agent="files")
    assert refused.value.code == "caller_not_permitted"


def test_a_write_waits_for_the_person_and_their_approval_allows_that_call_once(checkpoint, tmp_path):
    inbox = ApprovalInbox(tmp_path / "approvals.db")
    call = {"path": f"{checkpoint.shared}/out.txt", "content": "hello"}
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as agent, \
            CheckpointClient(checkpoint.address, token=ALICE_TOKEN) as person:
        run = agent.start_run(person="alice", agent="files")
        asked = agent.check(run, "fs__write_file", call)
        assert (asked.verdict, asked.code) == ("REQUIRE_APPROVAL", "approval_required")
        assert agent.wait_for_approval(inbox, asked, timeout=0.2) is None  # nobody answered yet
        # the person approves while the agent waits
        threading.Timer(0.3, lambda: inbox.put(person.approve(run.run_id, asked.decision_id))).start()
        outcome = agent.wait_for_approval(inbox, asked, timeout=10)
        assert outcome is not None and outcome.approved and outcome.token
        allowed = agent.check(run, "fs__write_file", call, approval=outcome)
        assert (allowed.verdict, allowed.rule) == ("ALLOW", "approval")
        again = agent.check(run, "fs__write_file", call, approval=outcome)
        assert (again.verdict, again.code) == ("DENY", "approval_invalid")
        other = agent.check(run, "fs__write_file", {**call, "content": "other"}, approval=outcome)
        assert other.verdict == "DENY"


def test_an_agents_credential_cannot_approve(checkpoint):
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as agent:
        run = agent.start_run(person="alice", agent="files")
        asked = agent.check(run, "fs__write_file", {"path": f"{checkpoint.shared}/x", "content": "x"})
        with pytest.raises(ClientError) as refused:
            agent.approve(run.run_id, asked.decision_id)
        assert refused.value.code == "caller_not_permitted"


def test_failures_in_a_row_trip_the_runs_breaker_and_an_ended_run_is_refused(checkpoint):
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as client:
        run = client.start_run(person="alice", agent="files")
        repeated = {"path": f"{checkpoint.shared}/same"}
        for _ in range(3):  # acme's repetition ceiling is 3: the same call a fourth time halts
            assert client.check(run, "fs__read_text_file", repeated).allowed
            client.report_result(run, ok=True)
        assert client.check(run, "fs__read_text_file", repeated).code == "breaker_repetition"
        run = client.start_run(person="alice", agent="files")
        for n in range(3):  # acme's failures ceiling is 3
            assert client.check(run, "fs__read_text_file", {"path": f"{checkpoint.shared}/{n}"}).allowed
            client.report_result(run, ok=False)
        tripped = client.check(run, "fs__read_text_file", {"path": f"{checkpoint.shared}/3"})
        assert (tripped.verdict, tripped.code) == ("HALT", "breaker_failures")
        # the run's counters survive a process that lives for one call (a hook)
        assert type(run).from_dict(run.to_dict()) == run
        ended = client.end_run(run, status="succeeded")
        assert ended.verdict == "ALLOW"
        after = client.check(run, "fs__list_directory", {"path": str(checkpoint.shared)})
        assert (after.verdict, after.code) == ("DENY", "run_ended")


def test_an_unreachable_checkpoint_raises_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the socket closes
    started = time.monotonic()
    with CheckpointClient(f"127.0.0.1:{port}", token=GATEWAY_TOKEN, timeout=1) as client, \
            pytest.raises(CheckpointUnavailable) as refused:
        client.start_run(person="alice", agent="files")
    assert refused.value.code == "checkpoint_unavailable" and time.monotonic() - started < 5


def test_the_async_client_makes_the_same_calls(checkpoint, tmp_path):
    import asyncio

    from warden.client import AsyncCheckpointClient

    async def scenario():
        inbox = ApprovalInbox(tmp_path / "approvals.db")
        async with AsyncCheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as agent, \
                AsyncCheckpointClient(checkpoint.address, token=ALICE_TOKEN) as person:
            run = await agent.start_run(person="alice", agent="files")
            call = {"path": f"{checkpoint.shared}/w.txt", "content": "w"}
            asked = await agent.check(run, "fs__write_file", call)
            assert asked.verdict == "REQUIRE_APPROVAL"
            waiting = asyncio.ensure_future(agent.wait_for_approval(inbox, asked, timeout=10))
            inbox.put(await person.approve(run.run_id, asked.decision_id))
            allowed = await agent.check(run, "fs__write_file", call, approval=await waiting)
            assert (allowed.verdict, allowed.rule) == ("ALLOW", "approval")
            assert (await agent.end_run(run)).verdict == "ALLOW"

    asyncio.run(scenario())


def test_checks_over_one_stream_are_decided_and_recorded_as_checks_are(checkpoint):
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN, stream=True) as client:
        run = client.start_run(person="alice", agent="files")
        got = [client.check(run, "fs__read_text_file", {"path": p}).code
               for p in (f"{checkpoint.shared}/a", "/etc/passwd", f"{checkpoint.shared}/b")]
        assert got == ["allowed", "subject_out_of_scope", "allowed"]
        forged = client.check(type(run)(run_id=run.run_id, token="not-a-run-token"), "fs__read_text_file", {"path": "/x"})
        assert (forged.verdict, forged.code) == ("DENY", "run_token_invalid")
        with pytest.raises(ClientError) as refused:  # what Check answers with an error status comes as one
            client._stream.check(cp.CheckRequest())  # type: ignore[union-attr]
        assert refused.value.code == "invalid_request"
        assert client.check(run, "fs__list_directory", {"path": f"{checkpoint.shared}/"}).allowed  # the stream goes on
    assert [r["code"] for r in checkpoint.records() if r["action"] == "tool_call"][-4:] == [
        "subject_out_of_scope", "allowed", "run_token_invalid", "allowed"]


def test_a_stream_that_ends_refuses_the_call(checkpoint):
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN, stream=True, timeout=3) as client:
        run = client.start_run(person="alice", agent="files")
        assert client.check(run, "fs__read_text_file", {"path": f"{checkpoint.shared}/a"}).allowed
        checkpoint.server.stop(grace=0.2)
        with pytest.raises(CheckpointUnavailable):
            client.check(run, "fs__read_text_file", {"path": f"{checkpoint.shared}/b"})
