"""Toolrunner refusal codes reaching the driver, runner_busy as a pause, amend vs turns_total, goal
and script errors at file:line, and `warden up`'s folders and preflight."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from pathlib import Path

import docker
import pytest
from driver_harness import PLAN, TOOLRUNNER_TOKEN, call, goal, kinds

from checkpoint.policy import load_policy_dir
from driver.clients import ToolRunnerClient
from driver.errors import DriverError, GoalError, RunStateError
from driver.goal import load_goal
from driver.providers.scripted import ScriptError, load_script
from toolrunner.container import LABEL_DECISION
from toolrunner.runner import RunnerConfig
from toolrunner.server import create_server
from warden import grants
from warden.datafolder import GRANT_KEY_FILE
from warden.structs import to_struct
from warden.toolrunner.v1 import toolrunner_pb2 as tr
from warden.tools import Tool
from warden.up import PreflightError, Stack, preflight

LIST = call("list_templates")


def _tool(name: str, command: list[str], image: str = "warden-tools:local", **run) -> Tool:
    return Tool.model_validate({"kind": "Tool", "name": name, "access": "read",
                                "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
                                "run": {"image": image, "command": command, **run}})


@pytest.fixture()
def busy_runner(tmp_path, policy_dir, grant_key, tool_images):
    """A toolrunner with one slot, the shipped tools, a long `hold` call and an absent image."""
    loaded = load_policy_dir(policy_dir)
    assert loaded.revision == REVISION  # the grants below are signed for the shipped policies' revision
    tools = {n: getattr(t, "spec", t) for n, t in loaded.tools.items()}
    tools["hold"] = _tool("hold", ["/bin/sh", "/tools/test/sleep.sh", "60"], timeout_seconds=90)
    tools["absent"] = _tool("absent", ["/bin/true"], image="warden-absent:never")
    running, port = create_server("127.0.0.1:0", tools=tools, policy_revision=loaded.revision, keys=grant_key,
                                  data_dir=tmp_path / "busy",
                                  config=RunnerConfig(max_concurrency=1), reap_interval_seconds=3600,
                                  tokens={hashlib.sha256(TOOLRUNNER_TOKEN.encode()).digest(): "driver"})
    running.address = f"127.0.0.1:{port}"
    yield running
    running.runner.cancel(run_id="run-hold")
    running.stop(0)


REVISION = load_policy_dir(Path(__file__).resolve().parents[2] / "policies").revision


def _request(key, tool: str, *, run_id: str = "run-x", ttl: float = 60, revision: str = "") -> tr.ExecuteRequest:
    g = grants.sign(key, decision_id="d-" + uuid.uuid4().hex, run_id=run_id, agent="recon", agent_version="recon@1",
                    tool=tool, arguments={}, policy_revision=revision or REVISION, ttl_seconds=ttl)
    return tr.ExecuteRequest(run_id=run_id, agent="recon", agent_version="recon@1", tool=tool,
                             arguments=to_struct({}), grant=g)


def _hold(busy_runner, grant_key) -> threading.Thread:
    """Start the `hold` call and return once its container runs its sleep: it holds the only slot
    then, and a Cancel reaches a started container (the call is "running" from before it takes
    the slot and before its container starts)."""
    client = ToolRunnerClient(busy_runner.address, timeout=120)
    request = _request(grant_key, "hold", run_id="run-hold")
    t = threading.Thread(target=lambda: client.execute(request), daemon=True)
    t.start()
    api, label = busy_runner.runner.api, f"{LABEL_DECISION}={request.grant.decision_id}"
    deadline = time.monotonic() + 120
    while not any(_runs(api, c["Id"], "sleep") for c in api.containers(filters={"label": label})):
        assert time.monotonic() < deadline, "the hold call never started its sleep"
        time.sleep(0.05)
    return t


def _runs(api, container_id: str, name: str) -> bool:
    """Whether the container runs a process called `name` (false once it has stopped)."""
    try:
        processes = api.top(container_id).get("Processes") or []
    except docker.errors.APIError:
        return False
    return any(p[-1].split()[0].rsplit("/", 1)[-1] == name for p in processes if p and p[-1])


def test_toolrunner_refusal_codes_reach_the_driver(busy_runner, grant_key):
    client = ToolRunnerClient(busy_runner.address, timeout=60, token=TOOLRUNNER_TOKEN)
    with pytest.raises(DriverError) as info:
        client.execute(_request(grant_key, "list_templates", ttl=-1))
    assert info.value.code == "grant_expired"
    with pytest.raises(DriverError) as info:
        client.execute(_request(grant_key, "absent"))
    assert info.value.code == "image_not_allowed"
    t = _hold(busy_runner, grant_key)
    with pytest.raises(DriverError) as info:
        client.execute(_request(grant_key, "list_templates"))
    assert info.value.code == "runner_busy"
    assert client.cancel("run-hold") == 1  # the driver's token opens Cancel
    t.join(60)


def test_cancel_without_the_driver_token_is_refused(busy_runner):
    with pytest.raises(DriverError) as info:
        ToolRunnerClient(busy_runner.address, timeout=10).cancel("run-hold")
    assert info.value.code == "unauthenticated"


def test_a_busy_runner_pauses_the_run_without_a_failure_and_resume_runs_the_call(stack, busy_runner, grant_key):
    d = stack.driver(toolrunner=busy_runner.address)
    d.runner_busy_retries, d.runner_busy_backoff_seconds = 2, 0.01
    t = _hold(busy_runner, grant_key)
    started = d.start_run("recon", goal(), owner="alice", provider="scripted",
                          provider_options={"script": [PLAN, LIST]}, spawn=False)
    run = d.run_until_stopped(started.run_id)
    assert (run.status, run.code) == ("paused", "runner_busy"), run.reason
    assert run.consecutive_failures == 0
    assert kinds(d, run.run_id).count("runner_busy_retry") == 2 and "tool_refused" not in kinds(d, run.run_id)
    [open_call] = [c for c in d.store.calls(run.run_id, run.turn) if c["tool"] == "list_templates"]
    assert open_call["status"] == "executing" and open_call["grant"]  # kept for the resume

    busy_runner.runner.cancel(run_id="run-hold")
    t.join(60)
    assert not t.is_alive(), "the cancelled hold call did not end"
    d.resume(run.run_id, "alice", spawn=False)
    d.run_until_stopped(run.run_id)
    receipts = [e.data for e in d.store.events(run.run_id) if e.kind == "tool_receipt"]
    assert [(r["tool"], r["exit_code"]) for r in receipts] == [("list_templates", 0)]


def test_amending_the_goal_cannot_raise_turns_total(stack):
    d = stack.driver()
    run = d.start_run("recon", goal(turns_total=5), owner="alice", provider="scripted",
                      provider_options={"script": [PLAN]}, spawn=False)
    with pytest.raises(RunStateError) as info:
        d.amend_goal(run.run_id, goal(turns_total=50), "alice")
    assert info.value.code == "turns_total_fixed"
    assert d.store.run(run.run_id).budget["turns_total"] == 5
    assert d.amend_goal(run.run_id, goal(turns_total=3, turns=7), "alice") == 2  # lowering is fine
    assert d.store.run(run.run_id).budget == {"turns_total": 3, "turns": 7}


def test_goal_file_errors_name_file_and_line_for_each(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("objective: scan\ncriteria: []\nbudget:\n  turns: -1\n  bogus: 3\n")
    with pytest.raises(GoalError) as info:
        load_goal(path)
    assert info.value.message.splitlines() == [
        f"{path}:2: criteria: List should have at least 1 item after validation, not 0",
        f"{path}:4: budget.turns: Input should be greater than or equal to 0",
        f"{path}:5: budget.bogus: Extra inputs are not permitted",
    ]
    path.write_text("objective: a\nobjective: b\n")
    with pytest.raises(GoalError, match=r"g\.yaml:2:1: duplicate key 'objective' \(first at line 1\)"):
        load_goal(path)


def test_script_file_errors_name_file_and_line_for_each(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("responses:\n  - {action: final}\n  - txt: typo\n  - error: nope\n")
    with pytest.raises(ScriptError) as info:
        load_script(path)
    assert str(info.value).splitlines() == [
        f"{path}:3: response 1 has unknown keys ['txt']",
        f"{path}:4: response 2: unknown error 'nope'",
    ]


def test_up_gives_each_process_its_own_folder_and_the_driver_no_key(tmp_path, policy_dir):
    stack = Stack(tmp_path / "data", policy_dir)
    stack.prepare()
    by_name = {c.name: c.argv for c in stack.plan()}

    def flag(argv: list[str], name: str) -> str:
        return argv[argv.index(name) + 1]

    assert flag(by_name["checkpoint"], "--data") == str(tmp_path / "data" / "checkpoint")
    assert flag(by_name["toolrunner"], "--data") == str(tmp_path / "data" / "toolrunner")
    assert flag(by_name["driver"], "--data") == str(tmp_path / "data" / "driver")
    assert flag(by_name["toolrunner"], "--key") == str(tmp_path / "data" / "checkpoint" / GRANT_KEY_FILE)
    assert "--key" not in by_name["driver"]
    assert (stack.checkpoint_data / GRANT_KEY_FILE).exists()
    assert not list((tmp_path / "data").glob(GRANT_KEY_FILE))  # not in the shared top folder
    key = grants.SigningKey.load(stack.checkpoint_data / GRANT_KEY_FILE)
    for path in stack.driver_data.rglob("*"):
        assert key.secret.hex() not in path.read_text(), path  # the driver's folder holds no key
    # The driver's token lines are its own, and match what the checkpoint and toolrunner accept.
    from warden.auth import load_tokens

    for mine, theirs in (("checkpoint.tokens", stack.checkpoint_data / "checkpoint.tokens"),
                         ("toolrunner.tokens", stack.toolrunner_data / "toolrunner.tokens")):
        token = (stack.driver_data / mine).read_text().split()[1]
        assert load_tokens(theirs)[hashlib.sha256(token.encode()).digest()] == "driver"
    stack.prepare()  # a second `warden up` keeps what exists
    assert grants.SigningKey.load(stack.checkpoint_data / GRANT_KEY_FILE).key_id == key.key_id


def test_up_preflight_names_a_missing_tool_image_and_what_to_run(policy_dir: Path, tool_images):
    tool = policy_dir / "tools" / "list_templates.yaml"
    tool.write_text(tool.read_text().replace("warden-tools:local", "warden-absent:never"))
    with pytest.raises(PreflightError) as info:
        preflight(policy_dir)
    assert "warden-absent:never" in str(info.value) and "scripts/build-images.sh" in str(info.value)


def test_an_operators_file_line_must_name_its_person(tmp_path):
    from driver.service import load_operators
    from warden.auth import TokenFileError

    path = tmp_path / "operators"
    path.write_text("s3cr3t-token-0123456789\n")
    path.chmod(0o600)
    with pytest.raises(TokenFileError, match="expected 'person token'"):
        load_operators(path)
    path.write_text("alice s3cr3t-token-0123456789\n")
    assert list(load_operators(path).values()) == ["alice"]
