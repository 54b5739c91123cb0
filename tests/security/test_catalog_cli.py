"""`warden agents ...` against a real checkpoint, with a person's own credential file."""

from __future__ import annotations

import pytest

from security.test_catalog_lifecycle import PEOPLE, edit_triage, live
from security.test_catalog_lifecycle import running as running  # noqa: F401  (the fixture)
from warden.cli import main


def agents(capsys, running, person: str, *argv: str) -> tuple[int, str]:
    data = running.data.parent / f"cli-{person}"
    data.mkdir(exist_ok=True)
    (data / "checkpoint.token").write_text(PEOPLE[person] + "\n")
    code = main(["agents", *argv, "--checkpoint", f"127.0.0.1:{running.port}", "--data", str(data)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_propose_review_approve_and_history_from_the_command_line(running, capsys, tmp_path):
    before = live(running)
    proposal = tmp_path / "triage.yaml"
    proposal.write_text("kind: Agent\nname: triage\ntenant: acme\npersona: Reads tasks.\n"
                        "allowlist: [get_task, list_templates, create_task_from_template]\n"
                        "scope: {access: [read, write], subjects: ['*.lab.example.com']}\n")
    code, out = agents(capsys, running, "erin", "propose", "triage", "--file", str(proposal), "--note", "to create")
    assert code == 0 and "proposed: triage" in out and "is pending" in out
    assert "tools added: create_task_from_template" in out and "+ tool: create_task_from_template" in out
    version = out.split("triage ", 1)[1].split()[0]
    code, out = agents(capsys, running, "erin", "list")
    assert code == 0 and f"live {before}" in out and f"pending: {version}" in out
    code, out = agents(capsys, running, "carol", "review", "triage", version)
    assert code == 0 and "widens: " in out and "~ persona" in out
    code, out = agents(capsys, running, "erin", "approve", "triage", version)
    assert code == 1 and "role_required" in out and "not an admin" in out
    code, out = agents(capsys, running, "carol", "approve", "triage", version, "--note", "fine")
    assert code == 0 and f"catalog_changed: triage {version} is live" in out
    assert live(running) == version
    code, out = agents(capsys, running, "erin", "history", "triage")
    assert code == 0 and f"{before}  superseded" in out and f"{version}  live" in out and "by carol" in out
    code, out = agents(capsys, running, "erin", "show", "triage")
    assert code == 0 and '"create_task_from_template"' in out
    code, out = agents(capsys, running, "erin", "diff", "triage", before, "--from", version)
    assert code == 0 and "- tool: create_task_from_template" in out and "widens: persona changed" in out


def test_rollback_and_retire_from_the_command_line(running, capsys):
    old = live(running)
    edit_triage(running, "allowlist: [get_task, list_templates]", "allowlist: [get_task]")
    code, out = agents(capsys, running, "erin", "rollback", "triage", old)
    assert code == 0 and f"proposed: triage {old} is pending" in out
    code, out = agents(capsys, running, "dave", "reject", "triage", old)
    assert code == 0 and "is rejected" in out
    code, out = agents(capsys, running, "dave", "retire", "triage", old, "--note", "never again")
    assert code == 0 and "is retired" in out
    code, out = agents(capsys, running, "dave", "retire", "triage", live(running))
    assert code == 1 and "version_live" in out


def test_without_a_credential_file_the_command_says_where_it_looked(running, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main(["agents", "list", "--data", str(tmp_path / "nowhere")])
    assert "no checkpoint credential of yours" in str(exit_.value.code)


def test_a_comparison_with_a_version_the_agent_never_had_is_refused(running, capsys):
    with pytest.raises(SystemExit) as refused:
        agents(capsys, running, "erin", "diff", "triage", live(running), "--from", "0000000000000000")
    assert "unknown_agent_version: no version '0000000000000000' of agent 'triage'" in str(refused.value)
