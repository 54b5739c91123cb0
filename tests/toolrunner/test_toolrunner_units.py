"""argv templates, the secrets file, and what happens without Docker."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from toolrunner.argv import fill
from toolrunner.errors import DockerUnavailable, InvalidArguments
from toolrunner.secrets import SecretsFileError, load_secrets
from toolrunner.server import connect_docker

ROOT = Path(__file__).resolve().parents[2]


def test_argv_is_filled_element_by_element_never_split_or_expanded() -> None:
    argv = fill(["/bin/sh", "/tools/x.sh", "{a}", "--n={n}", "{{literal}}"], {"a": "x; rm -rf / $(id)", "n": 3})
    assert argv == ["/bin/sh", "/tools/x.sh", "x; rm -rf / $(id)", "--n=3", "{literal}"]


def test_argv_expands_a_list_and_drops_an_absent_optional_argument() -> None:
    assert fill(["run", "{argv}", "{opt}"], {"argv": ["ls", "-la", "/"]}) == ["run", "ls", "-la", "/"]


@pytest.mark.parametrize(
    ("template", "args"),
    [(["x-{missing}"], {}), (["{a.__class__}"], {"a": "v"}), (["{a"], {"a": "v"}), (["{a}"], {"a": "nul\x00"})],
)
def test_argv_refuses_what_it_cannot_fill_exactly(template: list[str], args: dict) -> None:
    with pytest.raises(InvalidArguments):
        fill(template, args)


def test_secrets_file_json_and_yaml(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text('{"DB_PASSWORD": "pw-1", "PORT": 5432}')
    (tmp_path / "s.yaml").write_text("API_TOKEN: tok\n")
    assert load_secrets(tmp_path / "s.json") == {"DB_PASSWORD": "pw-1", "PORT": "5432"}
    assert load_secrets(tmp_path / "s.yaml") == {"API_TOKEN": "tok"}
    (tmp_path / "bad.yaml").write_text("lower: x\nEMPTY: ''\n")
    with pytest.raises(SecretsFileError) as info:
        load_secrets(tmp_path / "bad.yaml")
    assert "'lower' is not a secret name" in str(info.value) and "EMPTY" in str(info.value)


def test_without_an_engine_the_error_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(DockerUnavailable) as info:
        connect_docker(timeout=2)
    assert info.value.code == "docker_unavailable"
    assert "scripts/ensure-docker.sh" in str(info.value) and "docker.io" in str(info.value)


def test_ensure_docker_exits_nonzero_with_instructions_when_no_engine_answers(tmp_path: Path) -> None:
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "WAIT_SECONDS": "1"}
    done = subprocess.run([str(ROOT / "scripts" / "ensure-docker.sh")], env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "apt-get install -y docker.io" in done.stderr and "dockerd" in done.stderr
