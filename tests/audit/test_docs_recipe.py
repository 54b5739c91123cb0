"""The re-verification script in docs/audit.md works, with tools that know nothing of warden."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "audit.md"


def _script() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("```bash\n#!/usr/bin/env bash\n# Re-verify a warden decision log") + len("```bash\n")
    return text[start : text.index("```", start)]


@pytest.mark.skipif(
    not all(shutil.which(t) for t in ("bash", "jq", "sqlite3", "sha256sum")),
    reason="needs bash, jq, sqlite3, sha256sum",
)
def test_documented_shell_recipe_verifies_and_catches_an_edit(log, log_path, make_record, tmp_path):
    log.append(make_record(reason='quote " backslash \\ newline \n tab \t ctrl \x01\x1f ü € 😀 \u2028'))
    for _ in range(4):
        log.append(make_record())
    script = tmp_path / "verify.sh"
    script.write_text(_script())
    ok = subprocess.run(["bash", str(script), str(log_path)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.strip() == f"ok: 5 records, head {log.head()[1]}"

    conn = sqlite3.connect(log_path)
    with conn:
        conn.execute("UPDATE decisions SET code = 'allowed_honest' WHERE seq = 3")
    conn.close()
    bad = subprocess.run(["bash", str(script), str(log_path)], capture_output=True, text=True)
    assert bad.returncode == 1 and "hash mismatch at seq 3" in bad.stdout
