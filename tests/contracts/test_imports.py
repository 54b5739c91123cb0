"""The shape of the code base holds: no import cycles, and the driver and the toolrunner stand on the
shared ground (warden/) and the generated contracts alone. The contracts are stated in
pyproject.toml ([tool.importlinter]) and checked with import-linter, as `lint-imports` does."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("checkpoint", "driver", "toolrunner", "warden")


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                               "sys.exit(lint_imports_command(['--no-cache']))"],
        cwd=cwd, env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
        timeout=300)


def test_every_import_contract_is_kept() -> None:
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout


def test_the_codes_module_imports_nothing_of_ours() -> None:
    """Every layer names stable codes; a code module that imported a layer would tie them all to it."""
    graph = grimp.build_graph(*OURS, include_external_packages=False)
    assert graph.find_modules_directly_imported_by("warden.codes") == set()


@pytest.mark.parametrize("addition", [
    # a cross-process import: the toolrunner reaching into the checkpoint
    ("toolrunner/argv.py", "from checkpoint.policy import model as _model  # noqa: F401\n"),
    # a cycle: the log's errors importing the log, which imports its errors
    ("checkpoint/audit/errors.py", "from checkpoint.audit import log as _log  # noqa: F401\n"),
])
def test_the_contracts_fail_when_a_cycle_or_a_cross_process_import_is_added(tmp_path: Path,
                                                                           addition: tuple[str, str]) -> None:
    """The check can fail: the same tree with one import added breaks a contract."""
    copy = tmp_path / "tree"
    for package in OURS:
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    path, line = addition
    target = copy / path
    target.write_text(target.read_text() + "\n" + textwrap.dedent(line))
    done = _lint_imports(copy)
    assert done.returncode != 0 and "BROKEN" in done.stdout, done.stdout[-3000:]
