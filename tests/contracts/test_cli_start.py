"""`warden --help` and every command's `--help` start fast: building the parser imports none of the
heavy libraries (a command imports what it needs when it runs). Timing is `make bench`'s; this
test checks the cause, which does not depend on the machine's load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

HEAVY = ("pydantic", "grpc", "sqlite_utils", "celpy", "cel_expr_python", "google.protobuf", "docker",
         "anthropic", "yaml", "jsonschema", "fastjsonschema", "rich", "watchfiles", "prometheus_client")


def imported_by(*argv: str) -> set[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "warden.cli", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 2), done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


@pytest.mark.parametrize("argv", [("--help",), ("audit", "--help"), ("agents", "--help"), ("policy", "--help"),
                                  ("learnings", "--help")])
def test_help_imports_no_heavy_library(argv):
    heavy = sorted(n for n in imported_by(*argv) if n.split(".")[0] in HEAVY or n in HEAVY)
    assert heavy == [], f"`warden {' '.join(argv)}` imports {heavy[:8]}"


def test_each_command_builds_only_its_owners_part_and_the_table_is_right():
    """`warden check` builds only checkpoint.cli's parsers: COMMAND_OWNERS must name, for every
    top-level command, the module that registers it, and name every command."""
    import argparse

    from warden import cli

    registered = {}
    for module in cli._COMMAND_MODULES:
        parser = cli.build_parser((module,))
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        registered |= dict.fromkeys(sub.choices, module)
    assert registered == cli.COMMAND_OWNERS


def test_check_does_not_import_the_driver_or_toolrunner_cli():
    names = imported_by("check", "--help")
    assert not {"driver.cli", "toolrunner.cli", "checkpoint.audit.cli", "checkpoint.server_cli"} & names


# What deciding one request needs is the policy model, the loader, the engine and protobuf; not the
# servers, the containers, the model's SDK, nor sqlite-utils (the catalog speaks sqlite3 itself).
NOT_FOR_A_CHECK = ("grpc", "sqlite_utils", "click", "dateutil", "pluggy", "celpy", "docker", "anthropic", "rich",
                   "watchfiles", "prometheus_client", "opentelemetry", "cryptography",
                   # jsonschema words refusals only (checkpoint/policy/input_schemas.py)
                   "jsonschema", "referencing", "attrs")


def _request(tmp_path: Path) -> Path:
    """README's example, a request an operator would try: recon asks to scan an off-limits host."""
    from checkpoint.policy import load_policy_dir

    version = load_policy_dir(REPO / "policies").agents["recon"].version
    path = tmp_path / "req.json"
    path.write_text(json.dumps({
        "run": {"runId": "run-1", "mode": "RUN_MODE_INTERACTIVE",
                "actorChain": [{"kind": "ACTOR_KIND_PERSON", "id": "alice"},
                               {"kind": "ACTOR_KIND_AGENT", "id": "recon", "agentVersion": version}]},
        "toolCall": {"tool": "create_task_from_template",
                     "arguments": {"template": "web-basic", "target": "payments.lab.example.com"}}}))
    return path


def test_a_check_imports_only_what_deciding_needs(tmp_path):
    names = imported_by("check", "--policies", str(REPO / "policies"), str(_request(tmp_path)))
    assert "checkpoint.engine.decide" in names  # it did decide
    extra = sorted(n for n in names if n.split(".")[0] in NOT_FOR_A_CHECK)
    assert extra == [], f"`warden check` imports {extra[:8]}"


@pytest.mark.parametrize("argv", [("--help",), ("-h",), ()])
def test_the_command_list_is_what_the_whole_tree_prints(argv, monkeypatch):
    """`warden --help` prints COMMANDS without building any command's parser: the same text."""
    from warden import cli

    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.delenv("WARDEN_CONFIG", raising=False)
    env = {**os.environ, "COLUMNS": "100"}
    done = subprocess.run([sys.executable, "-m", "warden.cli", *argv], capture_output=True, text=True, timeout=60,
                          env=env, cwd=REPO)
    assert done.returncode == (0 if argv else 2), done.stderr
    assert done.stdout == cli.build_parser().format_help()
    assert cli.build_command_list().format_help() == cli.build_parser().format_help()


# ---- the exit of a one-shot command --------------------------------------------------------------

WITH_ATEXIT = ("import atexit, sys; atexit.register(lambda: print('interpreter torn down', file=sys.stderr)); "
               "from warden.cli import run; sys.argv = ['warden', *sys.argv[1:]]; run()")


def _program(*argv: str, code: str = WITH_ATEXIT, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60,
                          cwd=REPO, **kw)


def test_check_leaves_without_the_teardown_and_its_whole_answer_is_out(tmp_path):
    done = _program("check", "--policies", str(REPO / "policies"), str(_request(tmp_path)))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)  # flushed whole into a pipe before os._exit
    assert (answer["verdict"], answer["code"]) == ("VERDICT_DENY", "subject_off_limits")
    assert "interpreter torn down" not in done.stderr


def test_a_failed_check_keeps_its_exit_code_and_message(tmp_path):
    done = _program("check", "--policies", str(REPO / "policies"), str(tmp_path / "missing.json"))
    assert done.returncode == 1 and "invalid_request" in done.stderr and "missing.json" in done.stderr
    broken = tmp_path / "policies"
    broken.mkdir()
    (broken / "bad.yaml").write_text("kind: Agent\nname: [\n")
    done = _program("check", "--policies", str(broken), str(_request(tmp_path)))
    assert done.returncode not in (0, 1) and "bad.yaml" in done.stderr, (done.returncode, done.stderr)


def test_check_into_a_closed_pipe_ends_quietly(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WITH_ATEXIT, "check", "--policies", str(REPO / "policies"),
                             str(_request(tmp_path))], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `warden check ... | head -c 0`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err, err


def test_other_commands_and_in_process_callers_exit_as_always(tmp_path):
    done = _program("--help")
    assert done.returncode == 0 and "interpreter torn down" in done.stderr
    import gc

    from warden.cli import main

    assert main(["check", "--policies", str(REPO / "policies"), str(_request(tmp_path))]) == 0  # returns
    assert gc.isenabled()  # the collector is back on for the caller
