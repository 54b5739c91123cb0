"""Settings from flags, WARDEN_* variables and a TOML file (warden/config.py), through the real `warden`
entry point: precedence, file errors with file:line that change nothing, and commands that ignored
WARDEN_DATA before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from warden import config
from warden.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no ./warden.toml unless a test writes one


def show(capsys, *argv: str) -> dict[str, tuple[str, str]]:
    assert main(["config", "show", *argv]) == 0, capsys.readouterr().err
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("  --"):
            flag, value, source = line.split(None, 2)
            rows[flag] = (value, source)
    return rows


def test_precedence_flag_over_env_over_file_over_default(tmp_path, monkeypatch, capsys):
    (tmp_path / "cp.toml").write_text(
        '# the checkpoint\ndata = "/from/file"\nworkers = 3\n\n[checkpoint.serve]\naddress = "127.0.0.1:1"\n'
        'policies = "/file/policies"\n')
    monkeypatch.setenv("WARDEN_ADDRESS", "127.0.0.1:2")
    monkeypatch.setenv("WARDEN_WORKERS", "5")
    rows = show(capsys, "checkpoint", "serve", "--config", "cp.toml", "--workers", "9")
    assert rows["--workers"] == ("9", "flag")
    assert rows["--address"] == ("127.0.0.1:2", "env WARDEN_ADDRESS")
    assert rows["--data"] == ("/from/file", "file cp.toml:2")
    assert rows["--policies"] == ("/file/policies", "file cp.toml:7")
    assert rows["--max-request-bytes"] == (str(1 << 20), "default")


def test_a_toml_number_reaches_a_flag_that_parses_its_own_text(tmp_path, capsys):
    """`workers = 3`, `rotate_size = 64`: a number in TOML is what an operator writes for N|auto or MB."""
    (tmp_path / "cp.toml").write_text('[checkpoint.serve]\nworkers = 3\nrotate_size = 64\n')
    rows = show(capsys, "checkpoint", "serve", "--config", "cp.toml")
    assert rows["--workers"] == ("3", "file cp.toml:2")
    assert rows["--rotate-size"] == ("64.0", "file cp.toml:3")


def test_a_command_table_wins_over_the_top_and_the_default_location_is_read(tmp_path, capsys):
    (tmp_path / "warden.toml").write_text('data = "/top"\n[audit.verify]\ndata = "/verify"\n')
    assert show(capsys, "audit", "verify")["--data"] == ("/verify", "file warden.toml:3")
    assert show(capsys, "audit", "query")["--data"] == ("/top", "file warden.toml:1")


def test_the_flag_replaces_a_list_from_the_environment(monkeypatch, capsys):
    monkeypatch.setenv("WARDEN_KEY", "a.key,b.key")
    assert show(capsys, "toolrunner", "serve")["--key"] == ("a.key,b.key", "env WARDEN_KEY")
    assert show(capsys, "toolrunner", "serve", "--key", "c.key")["--key"] == ("c.key", "flag")


@pytest.mark.parametrize(("text", "line", "says"), [
    ('data = "x"\n\n[checkpoint.serve]\nworkrs = 4\n', 4, "unknown key 'workrs'"),
    ('[checkpoint.srve]\naddress = "x"\n', 1, "unknown key 'srve'"),
    ('[checkpoint.serve]\n\nthreads = "4"\n', 3, "'4' is not an integer"),
    ('[checkpoint.serve]\n\nworkers = "many"\n', 3, "expected a number or 'auto'"),
    ('[checkpoint.serve]\nworkers = true\n', 2, "True is not a string"),
    ('[checkpoint.serve]\naddress = 5\n', 2, "5 is not a string"),
    ('verbose = "yes"\n', 1, "is not true or false"),
    ('[checkpoint.serve]\ndurability = "SOMETIMES"\n', 2, "not one of NORMAL, FULL"),
    ('[checkpoint.serve]\nworkers = 4\nworkers = 5\n', 3, "not TOML"),
])
def test_a_bad_file_is_an_error_with_file_and_line_and_changes_nothing(tmp_path, capsys, text, line, says):
    (tmp_path / "bad.toml").write_text(text)
    data = tmp_path / "data"
    assert main(["keys", "init", "--data", str(data), "--config", "bad.toml"]) == 2
    err = capsys.readouterr().err
    assert f"bad.toml:{line}:" in err and says in err, err
    assert not data.exists()  # keys init did not run


def test_every_mistake_in_the_file_is_reported_at_once(tmp_path, capsys):
    (tmp_path / "bad.toml").write_text('verbose = "yes"\n[checkpoint.serve]\nworkrs = 4\nthreads = "4"\n'
                                       '[audit.query]\nlimt = 5\n')
    data = tmp_path / "data"
    assert main(["keys", "init", "--data", str(data), "--config", "bad.toml"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[2].split(":")[0] for line in err] == ["bad.toml"] * 4, err
    assert any("bad.toml:1:" in e and "not true or false" in e for e in err)
    assert any("bad.toml:3:" in e and "unknown key 'workrs'" in e and "did you mean 'workers'?" in e for e in err)
    assert any("bad.toml:4:" in e and "'4' is not an integer" in e for e in err)
    assert any("bad.toml:6:" in e and "did you mean 'limit'?" in e for e in err)
    assert not data.exists()


def test_a_bad_environment_value_names_the_variable_and_changes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WARDEN_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("WARDEN_CALLER", "")  # a string may be empty: no error
    monkeypatch.setenv("WARDEN_VERBOSE", "maybe")
    assert main(["checkpoint", "serve"]) == 2
    assert "env WARDEN_VERBOSE: 'maybe'" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


def test_warden_data_reaches_keys_init_and_audit_which_ignored_it(tmp_path):
    """`warden keys init` and `warden audit verify` read only --data before; a real process now takes
    WARDEN_DATA, and the file from WARDEN_CONFIG."""
    data = tmp_path / "somewhere"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}
    env |= {"WARDEN_DATA": str(data), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "warden.cli", "keys", "init"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (data / "grant.key").is_file() and not (tmp_path / ".warden").exists()
    done = subprocess.run([sys.executable, "-m", "warden.cli", "audit", "verify"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert str(data / "decisions.db") in done.stdout + done.stderr
    (tmp_path / "ops.toml").write_text(f'[audit]\ndata = "{tmp_path / "elsewhere"}"\n')
    env |= {"WARDEN_CONFIG": str(tmp_path / "ops.toml")}
    del env["WARDEN_DATA"]
    done = subprocess.run([sys.executable, "-m", "warden.cli", "audit", "verify"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert str(tmp_path / "elsewhere" / "decisions.db") in done.stdout + done.stderr


def test_every_flag_of_every_command_is_a_setting(capsys):
    """A flag added anywhere (by any module) gets a key and a variable; none makes `config show` fail."""
    root = build_parser()
    leaves = [path for path, parser in config.walk(root) if path and config._subparsers(parser) is None]
    assert ("checkpoint", "serve") in leaves and ("config", "show") in leaves
    for path in leaves:
        if path == ("config", "show"):
            continue
        assert main(["config", "show", *path]) == 0, (path, capsys.readouterr().err)
        out = capsys.readouterr().out
        for key in config.settings_of(dict(config.walk(root))[path]):
            assert f"--{key.replace('_', '-')} " in out, (path, key)


def test_key_lines_follow_tables_and_dotted_keys():
    text = 'a = 1\n[x.y]\n  "b" = 2\nc.d = 3 # c\n[[z]]\ne=1\n'
    lines = config.key_lines(text)
    assert lines[("a",)] == 1 and lines[("x", "y")] == 2 and lines[("x", "y", "b")] == 3
    assert lines[("x", "y", "c", "d")] == 4 and lines[("z", "e")] == 6


def test_exclusive_flags_stay_apart(tmp_path, monkeypatch, capsys):
    """`--data` or `--log`: WARDEN_DATA set for every command gives way to `--log`, and both from the
    environment or a file are an error, not a silent pick."""
    monkeypatch.setenv("WARDEN_DATA", "/somewhere")
    rows = show(capsys, "audit", "query", "--log", "x.db")
    assert rows["--log"] == ("x.db", "flag") and rows["--data"] == ("./.warden", "default")
    monkeypatch.setenv("WARDEN_LOG", "y.db")
    assert main(["config", "show", "audit", "query"]) == 2
    err = capsys.readouterr().err
    assert "data (env WARDEN_DATA) and log (env WARDEN_LOG) cannot be used together" in err


# -- variables set for one command that changed another's answer (review of the merged features) ---


def _log_with_two_people(data: Path) -> None:
    from checkpoint.audit import DecisionLog

    def record(n: int, person: str, **more: str) -> dict:
        return {"decision_id": f"dec-{n}", "tenant": "acme", "run_id": "run-1", "root_run_id": "run-1",
                "actor_chain": [{"kind": "person", "id": person}], "accountable_person": person,
                "agent": "support", "agent_version": "v1", "action": "tool_call", "tool": "refund",
                "arguments": {}, "verdict": "ALLOW", "code": "allowed", "rule": "allowlist",
                "reason": "on the allowlist", "policy_revision": "rev-1", "latency_us": 1, **more}

    with DecisionLog(data / "decisions.db") as log:
        log.append(record(1, "alice"))
        log.append(record(2, "bob", caller="ops"))


def test_a_person_named_for_warden_up_does_not_filter_an_audit_export(tmp_path):
    """WARDEN_PERSON is documented as the person at the keyboard (`warden up`, docs/deploy.md), and
    WARDEN_CALLER names the caller `keys init` makes a token for. Both were also taken as
    `audit export --person/--caller`: an export from that shell held only that person's records,
    exit 0, nothing said. A filter says what to read, not how: it comes from the command line only."""
    data = tmp_path / "data"
    _log_with_two_people(data)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}
    env |= {"PYTHONPATH": str(REPO), "WARDEN_PERSON": "alice", "WARDEN_CALLER": "ops", "WARDEN_AFTER": "1",
            "WARDEN_SINCE": "2099-01-01"}
    done = subprocess.run([sys.executable, "-m", "warden.cli", "audit", "export", "--data", str(data)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2, done.stdout


def test_audit_filters_are_no_settings_and_a_file_key_for_one_is_refused(tmp_path, capsys):
    rows = show(capsys, "audit", "query")
    for flag in ("--person", "--caller", "--tenant", "--run", "--agent", "--after", "--since", "--shadow-flips"):
        assert flag not in rows, flag
    assert "--data" in rows
    (tmp_path / "warden.toml").write_text("[audit.query]\nperson = \"alice\"\n")
    assert main(["audit", "query", "--data", str(tmp_path / "d")]) == 2
    assert "warden.toml:2" in capsys.readouterr().err
    # a top-level key still reaches the one command whose flag is a setting
    (tmp_path / "warden.toml").write_text("person = \"carol\"\n")
    assert show(capsys, "up")["--person"] == ("carol", "file warden.toml:1")


def test_the_checkpoint_s_rotate_size_does_not_rotate_the_shipper_s_files(monkeypatch, capsys):
    """WARDEN_ROTATE_SIZE (or a top-level rotate_size) set for `checkpoint serve` (seal the log at MB)
    also made `audit ship` rotate its output at that size and delete what fell past --keep."""
    monkeypatch.setenv("WARDEN_ROTATE_SIZE", "64")
    assert show(capsys, "audit", "ship", "--to", "x")["--file-rotate-size"][1] == "default"
    assert show(capsys, "checkpoint", "serve")["--rotate-size"] == ("64.0", "env WARDEN_ROTATE_SIZE")
    monkeypatch.setenv("WARDEN_FILE_ROTATE_SIZE", "2")
    assert show(capsys, "audit", "ship", "--to", "x")["--file-rotate-size"] == ("2.0", "env WARDEN_FILE_ROTATE_SIZE")


def test_warden_policies_names_the_served_folder_but_not_policy_diff_s_comparison(monkeypatch, capsys):
    """The images set WARDEN_POLICIES for every command (docs/deploy.md). `policy diff --policies`
    says what to compare with: taken from the environment, a diff meant against the recorded
    answers became one against a replay of the current folder, exit 0, nothing said."""
    monkeypatch.setenv("WARDEN_POLICIES", "/etc/warden/policies")
    assert "--policies" not in show(capsys, "policy", "diff", "cand", "--against", "d")
    for command in (("audit", "serve"), ("check", "req.json"), ("policy", "apply", "src")):
        assert show(capsys, *command)["--policies"] == ("/etc/warden/policies", "env WARDEN_POLICIES"), command
    # a file key for it is refused like the audit filters', naming the line
    monkeypatch.delenv("WARDEN_POLICIES")
    Path("warden.toml").write_text('[policy.diff]\npolicies = "/x"\n')
    assert main(["policy", "diff", "cand", "--against", "d"]) == 2
    assert "warden.toml:2" in capsys.readouterr().err
