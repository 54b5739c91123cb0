"""Settings, key and token files that another user owns or can write are refused, naming the file
and what to do (as ssh refuses such keys and config, and git a repository another user owns).

Each file is made as warden makes or documents it, then given to another owner (`nobody`) or made
group- or world-writable, and read through the real reader or command."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.audit.conftest import make_record
from warden.private import UntrustedFileError, read_trusted

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _spoil(path: Path, how: str) -> None:
    if how == "owned by nobody":
        os.chown(path, NOBODY, -1)
    elif how == "group-writable":
        path.chmod(stat.S_IMODE(path.stat().st_mode) | stat.S_IWGRP)
    else:
        path.chmod(stat.S_IMODE(path.stat().st_mode) | stat.S_IWOTH)


SPOILS = ["owned by nobody", "group-writable", "world-writable"]


def _refused(err: str, path: Path, how: str) -> None:
    assert str(path) in err, err
    if how == "owned by nobody":
        assert "owned by uid 65534" in err and "chown" in err, err
    else:
        assert "can be written by" in err and "chmod go-w" in err, err


# -- the settings file ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", SPOILS)
@pytest.mark.parametrize("where", ["./warden.toml", "--config", "WARDEN_CONFIG"])
def test_a_settings_file_another_user_could_write_is_refused(tmp_path, monkeypatch, capsys, how, where):
    from warden.cli import main

    path = tmp_path / ("warden.toml" if where == "./warden.toml" else "ops.toml")
    path.write_text('[toolrunner.serve]\nnetwork = "host"\n')  # what a swap would aim for
    path.chmod(0o644)
    argv = ["config", "show", "toolrunner", "serve"]
    if where == "--config":
        argv += ["--config", str(path)]
    elif where == "WARDEN_CONFIG":
        monkeypatch.setenv("WARDEN_CONFIG", str(path))
    assert main(argv) == 0, capsys.readouterr().err  # the operator's own file is read
    assert "host" in capsys.readouterr().out
    _spoil(path, how)
    assert main(argv) == 2
    captured = capsys.readouterr()
    _refused(captured.err, path if where != "./warden.toml" else Path("warden.toml"), how)
    assert "host" not in captured.out


# -- keys -------------------------------------------------------------------------------------------


def _grant_key(tmp_path: Path) -> Path:
    from warden.grants import SigningKey

    path = tmp_path / "grant.key"
    SigningKey.generate().save(path)
    return path


@pytest.mark.parametrize("how", SPOILS)
def test_a_grant_key_another_user_could_write_is_refused_by_checkpoint_and_toolrunner(tmp_path, how):
    from toolrunner.keys import KeyringError, load_keyring
    from warden.grants import SigningKey

    path = _grant_key(tmp_path)
    SigningKey.load(path)
    _spoil(path, how)
    with pytest.raises(UntrustedFileError) as caught:
        SigningKey.load(path)
    _refused(str(caught.value), path, how)
    with pytest.raises(KeyringError) as keyring:
        load_keyring([path])
    _refused(str(keyring.value), path, how)


@pytest.mark.parametrize("how", SPOILS)
def test_the_checkpoint_does_not_start_on_a_grant_key_another_user_could_write(tmp_path, how):
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "warden.cli", "keys", "init", "--data", str(data)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    key = data / "grant.key"
    _spoil(key, how)
    done = subprocess.run([sys.executable, "-m", "warden.cli", "checkpoint", "serve", "--data", str(data),
                           "--policies", str(REPO / "policies"), "--address", "127.0.0.1:0"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    _refused(done.stderr, key, how)


@pytest.mark.parametrize("how", SPOILS)
def test_a_head_signing_key_or_public_key_another_user_could_write_is_refused(tmp_path, how):
    from checkpoint.audit import DecisionLog, heads

    data = tmp_path / "data"
    log = DecisionLog(data / "decisions.db")
    log.append(make_record())
    signer = heads.HeadSigner(log.head, data / "decisions.db", interval=None)
    signer.close()
    log.close()
    key = heads.key_path(data / "decisions.db")
    pub = tmp_path / "audit.pub"
    pub.write_text(heads.public_pem(heads.load_public_key(key)))
    for path in (key, pub):
        _spoil(path, how)
        with pytest.raises(UntrustedFileError) as caught:
            heads.load_public_key(path)
        _refused(str(caught.value), path, how)
    with pytest.raises(UntrustedFileError) as caught:
        heads.load_or_create_key(key)
    _refused(str(caught.value), key, how)


# -- tokens -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", SPOILS)
def test_a_token_file_another_user_could_write_is_refused(tmp_path, how):
    from warden.auth import TokenFileError, load_tokens

    path = tmp_path / "checkpoint.tokens"
    path.write_text("ann " + "t" * 32 + "\n")
    path.chmod(0o600)
    assert load_tokens(path, require_names=True)
    _spoil(path, how)
    with pytest.raises(TokenFileError) as caught:
        load_tokens(path, require_names=True)
    _refused(str(caught.value), path, how)
    assert caught.value.code == "token_file_invalid"


@pytest.mark.parametrize("how", SPOILS)
def test_a_siem_token_file_another_user_could_write_is_refused_by_audit_ship(tmp_path, capsys, how):
    from checkpoint.audit import DecisionLog
    from warden.cli import main

    with DecisionLog(tmp_path / "data" / "decisions.db") as log:
        log.append(make_record())
    token = tmp_path / "siem.token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    _spoil(token, how)
    assert main(["audit", "ship", "--data", str(tmp_path / "data"), "--to", "http://127.0.0.1:9/x",
                 "--token-file", str(token), "--retries", "0"]) == 2
    _refused(capsys.readouterr().err, token, how)


@pytest.mark.parametrize("how", SPOILS)
def test_a_client_credential_file_another_user_could_write_is_refused(tmp_path, how):
    from warden.datafolder import ensure_operator

    data = tmp_path / "data"
    data.mkdir()
    ensure_operator(data, "ann")
    _spoil(data / "operator.token", how)
    with pytest.raises(UntrustedFileError) as caught:
        ensure_operator(data, "ann")
    _refused(str(caught.value), data / "operator.token", how)


@pytest.mark.parametrize("how", SPOILS)
def test_a_secrets_file_another_user_could_write_is_refused(tmp_path, how):
    from toolrunner.secrets import SecretsFileError, load_secrets

    path = tmp_path / "secrets.yaml"
    path.write_text("API_KEY: abc\n")
    path.chmod(0o600)
    assert load_secrets(path) == {"API_KEY": "abc"}
    _spoil(path, how)
    with pytest.raises(SecretsFileError) as caught:
        load_secrets(path)
    _refused(str(caught.value), path, how)


# -- the rule, over every mode and owner ------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mode=st.integers(0, 0o777), owner=st.sampled_from([0, NOBODY, 1000]), secret=st.booleans())
def test_a_file_is_trusted_exactly_when_only_its_user_or_root_can_have_written_it(tmp_path, mode, owner, secret):
    path = tmp_path / "f"
    path.write_bytes(b"x")
    os.chown(path, owner, -1)
    path.chmod(mode)
    trusted = (owner in (os.geteuid(), 0) and not mode & (stat.S_IWGRP | stat.S_IWOTH)
               and not (secret and mode & stat.S_IRWXO))
    read: Callable[[], bytes] = lambda: read_trusted(path, "test file", secret=secret)  # noqa: E731
    if trusted:
        assert read() == b"x"
    else:
        with pytest.raises(UntrustedFileError, match=str(path)):
            read()
    path.unlink()
