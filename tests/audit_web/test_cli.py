"""`warden audit serve` as an operator starts it: a real process on a real port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.terminal import ctrl_c_as_at_a_terminal

from .world import TOKENS

REPO = Path(__file__).resolve().parents[2]


def _warden(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "warden.cli", "audit", *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_as_at_a_terminal,
                            **kwargs)


def test_help_names_what_it_serves_and_how_an_auditor_logs_in():
    out = subprocess.run([sys.executable, "-m", "warden.cli", "audit", "serve", "--help"], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO, check=True).stdout
    for word in ("--address", "--policies", "--tokens", "--verify-interval", "auditor", "127.0.0.1:7405"):
        assert word in out, word


def test_it_serves_the_log_to_an_auditor_and_stops_on_interrupt(shared_world):
    data = shared_world.checkpoint.data
    proc = _warden("serve", "--data", str(data), "--policies", str(shared_world.policies),
                   "--tokens", str(shared_world.tokens), "--address", "127.0.0.1:0")
    try:
        line = proc.stderr.readline()
        assert "http://127.0.0.1:" in line, line
        url = line.split()[3]
        request = urllib.request.Request(url + "api/me", headers={"Authorization": f"Bearer {TOKENS['carol']}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.loads(answer.read())["tenants"] == ["acme"]
    finally:
        proc.send_signal(2)  # Ctrl-C
        assert proc.wait(timeout=20) == 0


def test_it_refuses_to_start_without_what_it_needs(shared_world, tmp_path):
    data, policies, tokens = shared_world.checkpoint.data, shared_world.policies, shared_world.tokens
    broken = tmp_path / "policies"
    broken.mkdir()
    (broken / "broken.yaml").write_text("kind: Tenant\nname: [unclosed\n")
    cases = [
        (["--data", str(tmp_path), "--address", "127.0.0.1:0"], "no decision log"),
        (["--data", str(data), "--policies", str(policies), "--tokens", str(tmp_path / "none"),
          "--address", "127.0.0.1:0"], "No such file"),
        (["--data", str(data), "--policies", str(broken), "--tokens", str(tokens),
          "--address", "127.0.0.1:0"], "broken.yaml"),
        # tokens would cross the network in the clear
        (["--data", str(data), "--policies", str(policies), "--tokens", str(tokens), "--address", "0.0.0.0:0"],
         "not a loopback address"),
        (["--data", str(data), "--policies", str(policies), "--tokens", str(tokens), "--tls-cert", "x",
          "--address", "127.0.0.1:0"],
         "go together"),
    ]
    for args, said in cases:
        proc = _warden("serve", *args)
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()  # a server that started after all must not outlive the test
        assert proc.returncode == 2, (args, err)
        assert said in err, (args, err)
