"""`warden keys add|list|revoke` and the key file they keep: tokens shown once and stored hashed,
old `NAME TOKEN` files working as before, every write whole and private."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from pathlib import Path

import pytest

from warden import keyfile
from warden.auth import KeySource, load_tokens
from warden.cli import main

OLD = "# written by hand\ndriver driver-token-0123456789abcdef\nalice alice-token-0123456789abcdef\n"


def add(data: Path, name: str, kind: str, *roles: str, capsys) -> str:
    args = ["keys", "add", name, "--kind", kind, "--data", str(data)]
    for role in roles:
        args += ["--role", role]
    assert main(args) == 0
    out = capsys.readouterr()
    token = out.out.strip()
    assert len(token) >= 40 and "\n" not in token and token not in out.err
    return token


def test_add_prints_the_token_once_and_keeps_only_its_hash(tmp_path, capsys):
    token = add(tmp_path, "bob", "person", "approver", "auditor", capsys=capsys)
    path = tmp_path / "checkpoint.tokens"
    text = path.read_text()
    assert token not in text
    assert hashlib.sha256(token.encode()).hexdigest() in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    [key] = keyfile.read(path)
    assert (key.name, key.kind, key.roles, key.identity) == ("bob", "person", ("approver", "auditor"), "person:bob")
    assert KeySource(path).credential(token).identity == "person:bob"
    assert KeySource(path).credential(token + "x") is None


def test_list_shows_names_kinds_roles_and_dates_never_a_token(tmp_path, capsys):
    path = tmp_path / "checkpoint.tokens"
    path.write_text(OLD)
    os.chmod(path, 0o600)
    token = add(tmp_path, "ci", "service", "check", capsys=capsys)
    assert main(["keys", "revoke", "alice", "--data", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["keys", "list", "--data", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    callers = out[out.index("callers"):]
    lines = {line.split()[0]: line for line in callers.splitlines()[2:]}
    assert set(lines) == {"driver", "alice", "ci"}
    assert "token (kept in clear)" in lines["driver"] and lines["driver"].rstrip().endswith("-")
    assert "service" in lines["ci"] and "check" in lines["ci"]
    assert lines["alice"].split()[-1].endswith("Z")  # its revocation time
    for secret in ("driver-token-0123456789abcdef", "alice-token", token, hashlib.sha256(token.encode()).hexdigest()):
        assert secret not in out


def test_an_old_file_keeps_working_and_keeps_its_clear_lines(tmp_path, capsys):
    """The driver reads its own token from the file: `keys add` must not take it away."""
    path = tmp_path / "checkpoint.tokens"
    path.write_text(OLD)
    os.chmod(path, 0o600)
    before = load_tokens(path, require_names=True)
    token = add(tmp_path, "bob", "person", capsys=capsys)
    text = path.read_text()
    assert "driver driver-token-0123456789abcdef" in text and "alice alice-token-0123456789abcdef" in text
    source = KeySource(path)
    assert source.credential("driver-token-0123456789abcdef").identity == "token:driver"
    assert source.credential(token).identity == "person:bob"
    assert before == {hashlib.sha256(b"driver-token-0123456789abcdef").digest(): "driver",
                      hashlib.sha256(b"alice-token-0123456789abcdef").digest(): "alice"}
    # a service that reads only `NAME TOKEN` lines says so rather than reading the file in part
    with pytest.raises(keyfile.TokenFileError, match="warden keys add"):
        load_tokens(path, require_names=True)


def test_revoking_a_clear_line_drops_its_token(tmp_path, capsys):
    path = tmp_path / "checkpoint.tokens"
    path.write_text(OLD)
    os.chmod(path, 0o600)
    source = KeySource(path)
    assert source.credential("alice-token-0123456789abcdef") is not None
    assert main(["keys", "revoke", "alice", "--data", str(tmp_path)]) == 0
    assert "alice-token-0123456789abcdef" not in path.read_text()
    assert source.credential("alice-token-0123456789abcdef") is None  # the next call, same source
    assert source.credential("driver-token-0123456789abcdef") is not None
    assert main(["keys", "revoke", "nobody", "--data", str(tmp_path)]) == 1
    assert "no key named" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["bob smith", "token:bob", "unix", "*", "a" * 129, "", "x=y", "#x"])
def test_a_name_that_would_read_as_something_else_is_refused(tmp_path, name, capsys):
    assert main(["keys", "add", name, "--kind", "person", "--data", str(tmp_path)]) != 0
    assert not (tmp_path / "checkpoint.tokens").exists() or "sha256" not in (tmp_path / "checkpoint.tokens").read_text()


def test_a_name_is_never_reused_even_revoked_and_roles_are_checked(tmp_path, capsys):
    add(tmp_path, "bob", "person", capsys=capsys)
    assert main(["keys", "revoke", "bob", "--data", str(tmp_path)]) == 0
    assert main(["keys", "add", "bob", "--kind", "person", "--data", str(tmp_path)]) == 1
    assert "exists" in capsys.readouterr().err
    assert main(["keys", "add", "carol", "--kind", "person", "--role", "superuser", "--data", str(tmp_path)]) == 1
    assert "unknown role" in capsys.readouterr().err
    assert len(keyfile.read(tmp_path / "checkpoint.tokens")) == 1


@pytest.mark.parametrize("line", [
    "bob sha256:" + "0" * 63 + " kind=person roles=* created=x",  # a hash cut short
    "bob sha256:" + "0" * 64 + " kind=admin roles=* created=x",  # a kind that does not exist
    "bob sha256:" + "0" * 64 + " kind=person roles=root created=x",
    "bob sha256:" + "0" * 64 + " kind=person kind=service roles=* created=x",  # a field twice
    "bob sha256:" + "0" * 64 + " kind=person roles=* created=x extra",
    "bob sha256:" + "0" * 64,  # a half-written line
    "bob short",
])
def test_a_line_that_does_not_read_refuses_the_whole_file(tmp_path, line):
    path = tmp_path / "keys"
    path.write_text(f"driver driver-token-0123456789abcdef\n{line}\n")
    os.chmod(path, 0o600)
    with pytest.raises(keyfile.TokenFileError):
        keyfile.read(path, require_names=True)


def test_a_running_source_lets_nobody_in_while_the_file_is_broken_or_open_to_others(tmp_path, capsys):
    token = add(tmp_path, "bob", "person", capsys=capsys)
    path = tmp_path / "checkpoint.tokens"
    source = KeySource(path)
    good = path.read_text()
    path.write_text(good + "carol sha256:abc\n")  # half written by hand
    assert source.credential(token) is None
    path.write_text(good)
    assert source.credential(token) is not None
    os.chmod(path, 0o644)  # readable by others: not trusted, whatever it says
    assert source.credential(token) is None
    os.chmod(path, 0o600)
    assert source.credential(token) is not None
    path.unlink()
    assert source.credential(token) is None


def test_adds_at_once_each_keep_their_key(tmp_path):
    path = tmp_path / "checkpoint.tokens"
    tokens: dict[str, str] = {}

    def one(name: str) -> None:
        tokens[name] = keyfile.add(path, name, "person", [])[1]

    threads = [threading.Thread(target=one, args=(f"p{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    source = KeySource(path)
    assert {source.credential(t).identity for t in tokens.values()} == {f"person:p{i}" for i in range(8)}
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
