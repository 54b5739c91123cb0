"""`warden skills ...` and `warden templates ...` against a real checkpoint, with a person's own
credential file (docs/skills.md). Saving from a run's call goes through `warden up`:
tests/driver/test_driver_entries_cli.py."""

from __future__ import annotations

import pytest

from warden.cli import main

from .entries_helpers import PEOPLE, live, reviewed

ASSET = """\
kind: Template
name: asset-scan
tenant: acme
description: find the open ports of one lab host
spec: {image: "recon/nmap:7.94", command: [nmap, -Pn, TARGET]}
"""


@pytest.fixture
def running(start, policy_dir):
    return reviewed(start, policy_dir)


def warden(capsys, running, person: str, *argv: str) -> tuple[int, str]:
    data = running.data.parent / f"cli-{person}"
    data.mkdir(exist_ok=True)
    (data / "checkpoint.token").write_text(PEOPLE[person] + "\n")
    code = main([*argv, "--checkpoint", f"127.0.0.1:{running.port}", "--data", str(data)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_save_review_approve_and_history_of_a_template_from_the_command_line(running, capsys, tmp_path):
    saved = tmp_path / "asset.yaml"
    saved.write_text(ASSET)
    code, out = warden(capsys, running, "erin", "templates", "save", "asset-scan", "--file", str(saved),
                       "--note", "worked on web-3")
    assert code == 0 and "proposed: template acme/asset-scan" in out and "is pending" in out, out
    version = out.split("asset-scan ", 1)[1].split()[0]
    code, out = warden(capsys, running, "erin", "templates", "list")
    assert code == 0 and "web-basic" in out and f"asset-scan             acme       live (none yet)  pending: {version}" in out
    code, out = warden(capsys, running, "carol", "templates", "show", "asset-scan", version)
    assert code == 0 and '"TARGET"' in out and "(pending)" in out
    code, out = warden(capsys, running, "erin", "templates", "approve", "asset-scan", version)
    assert code == 1 and "role_required" in out
    code, out = warden(capsys, running, "carol", "templates", "approve", "asset-scan", version, "--note", "fine")
    assert code == 0 and f"catalog_changed: template acme/asset-scan {version} is live" in out
    assert live(running, "template", "asset-scan").version == version
    code, out = warden(capsys, running, "erin", "templates", "history", "asset-scan")
    assert code == 0 and f"{version}  live" in out and "saved by erin" in out and "by carol" in out
    code, out = warden(capsys, running, "dave", "templates", "retire", "asset-scan", version)
    assert code == 0 and "is retired" in out


def test_skills_from_the_command_line(running, capsys, tmp_path):
    code, out = warden(capsys, running, "erin", "skills", "list")
    assert code == 0 and "web-scan" in out and "scan one lab web host" in out
    code, out = warden(capsys, running, "erin", "skills", "show", "web-scan")
    assert code == 0 and "Call list_templates" in out and "(live)" in out
    edited = tmp_path / "skill.yaml"
    edited.write_text((running.policies / "skills" / "web-scan.yaml").read_text().replace("1. Call", "1. First call"))
    code, out = warden(capsys, running, "erin", "skills", "propose", "web-scan", "--file", str(edited))
    assert code == 0 and "is pending" in out
    version = out.split("web-scan ", 1)[1].split()[0]
    code, out = warden(capsys, running, "dave", "skills", "reject", "web-scan", version, "--note", "no")
    assert code == 0 and "is rejected" in out
    code, out = warden(capsys, running, "frank", "skills", "propose", "web-scan", "--file", str(edited))
    assert code == 1 and "role_required" in out
    with pytest.raises(SystemExit) as unknown:
        warden(capsys, running, "erin", "skills", "show", "nope")
    assert "no skill 'nope' you may see" in str(unknown.value)
