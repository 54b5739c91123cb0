"""A Check whose arguments hold a NUL (in a value, in a key) is decided and recorded like any other,
on the data folder's SQLite log and on a fleet's PostgreSQL log: the record stores U+FFFD, its
chain verifies, and the NUL changes no verdict it should not."""

from __future__ import annotations

import pytest

from checkpoint.server.stores import store_url
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store_cli import schemas

NUL, FFFD = "\x00", "\ufffd"


@pytest.fixture(params=["sqlite", "postgresql"])
def running(request, start, tmp_path):
    if request.param == "sqlite":
        return start()
    pg_url = request.getfixturevalue("pg_url")
    with Database(store_url(pg_url, tmp_path), name="test", max_size=1) as db:
        for schema in schemas():
            migrate(db, schema)
    return start(store=pg_url, watch_interval=None)


def _get_task(token: str, arguments: dict) -> pb.CheckRequest:
    request = pb.CheckRequest(run=pb.RunContext(run_token=token), tool_call=pb.ToolCall(tool="get_task"))
    request.tool_call.arguments.update(arguments)
    return request


def test_a_call_with_nul_in_a_value_and_a_key_is_recorded_with_u_fffd_and_the_chain_verifies(running):
    run = running.start_run("recon")
    assert run.run_token, run.decision
    clean = running.stub().Check(_get_task(run.run_token, {"task_id": "task-1"}), timeout=5)
    in_value = running.stub().Check(_get_task(run.run_token, {"task_id": f"task-1{NUL}"}), timeout=5)
    in_key = running.stub().Check(_get_task(run.run_token, {"task_id": "task-1", f"x{NUL}": "y"}), timeout=5)
    assert clean.verdict == pb.VERDICT_ALLOW
    # a NUL never passes the tool's schema: the same refusal as any other character it does not allow
    for answer in (in_value, in_key):
        assert (answer.verdict, answer.code) == (pb.VERDICT_DENY, "invalid_arguments"), answer
        assert not answer.HasField("grant")
    by_id = {r["decision_id"]: r for r in running.records()}
    assert set(by_id) >= {clean.decision_id, in_value.decision_id, in_key.decision_id}  # each on the record
    assert by_id[in_value.decision_id]["arguments"] == {"task_id": f"task-1{FFFD}"}
    assert by_id[in_key.decision_id]["arguments"] == {"task_id": "task-1", f"x{FFFD}": "y"}
    report = running.server.log.verify()
    assert report.ok and report.checked >= 4, report
