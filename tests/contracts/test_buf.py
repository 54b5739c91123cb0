"""`buf lint` and `buf breaking` against main's protos pass (buf.yaml says which rules, and which
documented exceptions). buf comes from npm (`npm install` in tools/buf). Skipped, saying why, where
npm cannot install it or no main branch is at hand; `.ci/run` sets WARDEN_REQUIRE_BUF, which turns
those skips into failures."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tools" / "buf"
BUF = TOOLS / "node_modules" / ".bin" / "buf"
# the protos a change is checked against: main's, or the ref this variable names (a release tag)
AGAINST = os.environ.get("WARDEN_BUF_AGAINST", "main")


def _skip(reason: str) -> None:
    if os.environ.get("WARDEN_REQUIRE_BUF"):
        pytest.fail(f"WARDEN_REQUIRE_BUF is set but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def buf() -> Path:
    if not BUF.exists():
        npm = shutil.which("npm")
        if npm is None:
            _skip("npm is not installed, so buf (npm @bufbuild/buf) cannot be")
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund"], cwd=TOOLS, capture_output=True,
                              timeout=300)
        if done.returncode != 0 or not BUF.exists():
            _skip(f"`npm install` in tools/buf failed: {done.stderr.decode(errors='replace')[-300:]}")
    return BUF


def _run(buf: Path, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(buf), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_buf_lint_passes(buf: Path):
    done = _run(buf, "lint")
    assert done.returncode == 0, done.stdout + done.stderr


def _protos_of(ref: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "proto"], capture_output=True, timeout=60)
    if archive.returncode != 0:
        _skip(f"no git ref {ref!r} to check the protos against: {archive.stderr.decode(errors='replace')[:200]}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    shutil.copy(REPO / "buf.yaml", into / "buf.yaml")  # the module layout; an older tree may have none
    return into


def test_buf_breaking_against_main_passes(buf: Path, tmp_path: Path):
    against = _protos_of(AGAINST, tmp_path / "against")
    done = _run(buf, "breaking", "--against", str(against))
    assert done.returncode == 0, done.stdout + done.stderr


def test_buf_breaking_catches_a_renamed_field(buf: Path, tmp_path: Path):
    """The check that passes above can fail: the same protos with one field renamed and one removed."""
    changed = tmp_path / "changed"
    shutil.copytree(REPO / "proto", changed / "proto")
    shutil.copy(REPO / "buf.yaml", changed / "buf.yaml")
    proto = changed / "proto" / "warden" / "checkpoint" / "v1" / "checkpoint.proto"
    text = proto.read_text()
    assert "  string decision_id = 1;\n  Verdict verdict = 2;" in text
    proto.write_text(text.replace("  string decision_id = 1;\n  Verdict verdict = 2;",
                                  "  string decision = 1;\n", 1))
    done = _run(buf, "breaking", "--against", str(REPO), cwd=changed)
    assert done.returncode != 0
    assert "decision_id" in done.stdout and "verdict" in done.stdout
