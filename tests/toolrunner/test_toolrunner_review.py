"""Key rotation (repeatable --key), tokens on Cancel/GetReceipt, policy revision reloads, key repr."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import docker
import grpc
import pytest
from toolrunner_harness import ROOT, SESSION, Harness, detail_code, error_code

from checkpoint.policy.loader import load_policy_dir
from toolrunner.keys import KeyringError, load_keyring
from toolrunner.runner import RunnerConfig
from toolrunner.server import create_server
from warden import grants
from warden.cli import build_parser
from warden.toolrunner.v1 import toolrunner_pb2 as pb
from warden.toolrunner.v1 import toolrunner_pb2_grpc as pb_grpc


def test_a_signing_key_never_prints_its_secret() -> None:
    key = grants.SigningKey.generate()
    shown = repr(key) + str(key) + f"{key}"
    assert key.key_id in shown
    assert key.secret.hex() not in shown and repr(key.secret) not in shown


def test_key_is_repeatable_and_both_keys_of_a_rotation_verify(tmp_path: Path) -> None:
    old, new = grants.SigningKey.generate(), grants.SigningKey.generate()
    old.save(tmp_path / "old.key")
    new.save(tmp_path / "new.key")
    args = build_parser().parse_args(
        ["toolrunner", "serve", "--key", str(tmp_path / "old.key"), "--key", str(tmp_path / "new.key")]
    )
    keyring = load_keyring(args.key)
    assert sorted(keyring) == sorted([old.key_id, new.key_id])
    for key in (old, new):
        grant = grants.sign(key, decision_id="d", run_id="r", agent="a", agent_version="a@1", tool="t",
                            arguments={}, policy_revision="x")
        grants.verify(keyring, grant, run_id="r", agent_version="a@1", tool="t", arguments={})
    stranger = grants.sign(grants.SigningKey.generate(), decision_id="d", run_id="r", agent="a",
                           agent_version="a@1", tool="t", arguments={}, policy_revision="x")
    with pytest.raises(grants.GrantError) as info:
        grants.verify(keyring, stranger, run_id="r", agent_version="a@1", tool="t", arguments={})
    assert info.value.code == "grant_invalid"


def test_two_key_files_claiming_one_key_id_are_refused(tmp_path: Path) -> None:
    a = grants.SigningKey.generate()
    a.save(tmp_path / "a.key")
    grants.SigningKey(key_id=a.key_id, secret=b"x" * 32).save(tmp_path / "b.key")
    with pytest.raises(KeyringError, match="both claim key id"):
        load_keyring([tmp_path / "a.key", tmp_path / "b.key"])


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer not-the-token-at-all"),)])
def test_cancel_and_get_receipt_refuse_callers_without_the_token(harness: Harness, metadata: tuple) -> None:
    for call in (
        lambda: harness.stub.Cancel(pb.CancelRequest(run_id="run-1"), metadata=metadata, timeout=10),
        lambda: harness.stub.GetReceipt(pb.GetReceiptRequest(decision_id="d-1"), metadata=metadata, timeout=10),
    ):
        with pytest.raises(grpc.RpcError) as info:
            call()
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert detail_code(info.value) == "unauthenticated" and error_code(info.value) == "unauthenticated"


def test_without_a_token_file_cancel_and_get_receipt_are_refused_for_everyone(
    docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path: Path
) -> None:
    running, port = create_server("127.0.0.1:0", tools={}, policy_revision="rev-1", keys=signing_key, data_dir=tmp_path, api=docker_api,
                                  config=RunnerConfig(runner_id=f"{SESSION}-notok"))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ToolRunnerServiceStub(channel)
            with pytest.raises(grpc.RpcError) as info:
                stub.Cancel(pb.CancelRequest(run_id="r"), metadata=(("authorization", "Bearer anything-goes-here"),))
            assert detail_code(info.value) == "unauthenticated"
    finally:
        running.stop(grace=None)


def _edit_list_templates(policy_dir: Path, command: list[str]) -> None:
    path = policy_dir / "tools" / "list_templates.yaml"
    lines = [
        f"  command: {command!r}".replace("'", '"') if line.strip().startswith("command:") else line
        for line in path.read_text().splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")


def test_a_grant_of_a_newer_policy_revision_reloads_the_folder_once(
    docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path: Path
) -> None:
    policy_dir = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policy_dir)
    first_revision = load_policy_dir(policy_dir).revision
    token = "tr-review-token-0123456789"
    running, port = create_server(
        "127.0.0.1:0", policy_dir=policy_dir, keys=signing_key, data_dir=tmp_path / "data", api=docker_api,
        config=RunnerConfig(runner_id=f"{SESSION}-rev"), tokens={hashlib.sha256(token.encode()).digest(): "d"},
    )
    h = Harness(running, port, signing_key)
    try:
        before = h.execute("list_templates", {}, policy_revision=first_revision)
        assert before.exit_code == 0 and "argc" not in before.output

        _edit_list_templates(policy_dir, ["/bin/sh", "/tools/test/echo_args.sh", "edited-command"])
        second_revision = load_policy_dir(policy_dir).revision
        assert second_revision != first_revision
        after = h.execute("list_templates", {}, policy_revision=second_revision)
        assert after.exit_code == 0 and "[edited-command]" in after.output  # the new definition ran
        assert running.runner.policy_revision == second_revision

        # A grant of a revision the folder does not hold (an older one, or a forged name) is refused.
        for stale in (first_revision, "0000000000000000"):
            with pytest.raises(grpc.RpcError) as info:
                h.execute("list_templates", {}, policy_revision=stale)
            assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert detail_code(info.value) == "policy_revision_mismatch"
    finally:
        h.close()


def test_a_broken_policy_edit_keeps_the_last_good_set_and_refuses_the_new_revision(
    docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path: Path
) -> None:
    policy_dir = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policy_dir)
    revision = load_policy_dir(policy_dir).revision
    running, port = create_server("127.0.0.1:0", policy_dir=policy_dir, keys=signing_key, data_dir=tmp_path / "d",
                                  api=docker_api, config=RunnerConfig(runner_id=f"{SESSION}-broken"))
    h = Harness(running, port, signing_key)
    try:
        (policy_dir / "tools" / "broken.yaml").write_text("kind: Tool\nname: [not, a, name]\n")
        with pytest.raises(grpc.RpcError) as info:
            h.execute("list_templates", {}, policy_revision="1111111111111111")
        assert detail_code(info.value) == "policy_revision_mismatch" and "does not load" in info.value.details()
        assert running.runner.policy_revision == revision
        assert h.execute("list_templates", {}, policy_revision=revision).exit_code == 0
    finally:
        h.close()


def test_a_call_that_names_no_agent_or_another_matches_no_grant(harness: Harness) -> None:
    for agent in ("", "someone-else"):
        request = harness.request("list_templates")
        request.agent = agent
        with pytest.raises(grpc.RpcError) as info:
            harness.stub.Execute(request, timeout=30)
        assert detail_code(info.value) == "grant_mismatch", agent


def test_a_grant_of_no_revision_or_another_is_refused_and_tools_need_their_revision(
    harness: Harness, docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path: Path
) -> None:
    for revision in ("", "rev-0"):
        with pytest.raises(grpc.RpcError) as info:
            harness.stub.Execute(harness.request("list_templates", policy_revision=revision), timeout=30)
        assert detail_code(info.value) == "policy_revision_mismatch", revision
    # tools handed over without the revision grants are bound to: no runner at all
    with pytest.raises(ValueError, match="policy revision is required"):
        create_server("127.0.0.1:0", tools={}, keys=signing_key, data_dir=tmp_path, api=docker_api,
                      config=RunnerConfig(runner_id=f"{SESSION}-norev"))


def test_only_an_expired_grant_gets_its_stored_receipt_back_never_one_that_does_not_verify(harness: Harness) -> None:
    """A stored receipt is handed back to its own authentic grant once it expired; a grant that fails
    for any other reason is refused even when it names a decision that ran (the receipt holds
    another call's output)."""
    request = harness.request("list_templates")
    ran = harness.stub.Execute(request, timeout=60).receipt
    assert ran.decision_id == request.grant.decision_id and not ran.replayed
    other_tool = pb.ExecuteRequest()
    other_tool.CopyFrom(request)
    other_tool.tool = "sleeper"
    stranger = pb.ExecuteRequest()
    stranger.CopyFrom(request)
    stranger.grant.CopyFrom(grants.sign(grants.SigningKey.generate(), decision_id=request.grant.decision_id,
                                        run_id="run-1", agent="tester", agent_version="tester@v1",
                                        tool="list_templates", arguments={}, policy_revision="rev-1"))
    for refused, code in ((other_tool, "grant_mismatch"), (stranger, "grant_invalid")):
        with pytest.raises(grpc.RpcError) as info:
            harness.stub.Execute(refused, timeout=30)
        assert detail_code(info.value) == code


def test_a_reload_that_lands_after_a_grants_revision_check_does_not_change_what_that_call_runs(
    docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path: Path
) -> None:
    """Two calls at once: one with a grant of revision 1, checked; then, before it reads its tool,
    another call's grant of revision 2 reloads the folder. The first call still runs revision 1's
    command, the one the checkpoint decided it under (the runner used to read the tools afresh)."""
    policy_dir = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policy_dir)
    first_revision = load_policy_dir(policy_dir).revision
    token = "tr-race-token-0123456789"
    running, port = create_server(
        "127.0.0.1:0", policy_dir=policy_dir, keys=signing_key, data_dir=tmp_path / "data", api=docker_api,
        config=RunnerConfig(runner_id=f"{SESSION}-race"), tokens={hashlib.sha256(token.encode()).digest(): "d"},
    )
    h = Harness(running, port, signing_key)
    runner = running.runner
    real_check = runner._check_revision
    try:
        _edit_list_templates(policy_dir, ["/bin/sh", "/tools/test/echo_args.sh", "revision-two"])
        second_revision = load_policy_dir(policy_dir).revision

        def check_then_another_call_reloads(wanted: str):  # type: ignore[no-untyped-def]
            held = real_check(wanted)
            real_check(second_revision)  # the other call's grant: the folder is reloaded now
            return held

        runner._check_revision = check_then_another_call_reloads  # type: ignore[method-assign]
        ran = h.execute("list_templates", {}, policy_revision=first_revision)
        assert ran.exit_code == 0 and "revision-two" not in ran.output
        assert runner.policy_revision == second_revision  # the reload did land
    finally:
        h.close()
