"""Small parts on their own: decision ids, `warden keys init`, the policy folder fingerprint."""

from __future__ import annotations

import os
import stat
import uuid

from checkpoint.server.ids import new_decision_id
from checkpoint.server.reload import fingerprint
from warden.cli import main
from warden.grants import SigningKey


def test_decision_ids_are_uuid7_unique_and_increasing():
    ids = [new_decision_id() for _ in range(20_000)]  # many share a millisecond
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    parsed = uuid.UUID(ids[0])
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122


def test_keys_init_creates_owner_only_files_and_keeps_them(tmp_path, capsys):
    assert main(["keys", "init", "--data", str(tmp_path)]) == 0
    key_file, tokens = tmp_path / "grant.key", tmp_path / "checkpoint.tokens"
    for path in (key_file, tokens):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    key = SigningKey.load(key_file)
    token_line = [line for line in tokens.read_text().splitlines() if not line.startswith("#")]
    assert token_line[0].startswith("driver ") and len(token_line[0].split()[1]) >= 32
    assert key.secret.hex() not in capsys.readouterr().out  # never printed
    assert main(["keys", "init", "--data", str(tmp_path)]) == 0
    assert SigningKey.load(key_file) == key  # not overwritten


def test_keys_init_makes_a_new_data_folder_owner_only(tmp_path):
    """`keys init` is the first command run on a new host: the data folder it makes holds the grant
    key and, later, the decision log, and a folder that exists keeps its mode (warden/private.py),
    so a 0755 made here stayed 0755 for good."""
    data = tmp_path / "new" / "data"
    assert main(["keys", "init", "--data", str(data)]) == 0
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(data.parent).st_mode) == 0o700


def test_serve_without_key_explains_what_to_run(tmp_path, capsys):
    assert main(["checkpoint", "serve", "--data", str(tmp_path), "--address", ""]) == 2
    assert "warden keys init" in capsys.readouterr().err


def test_fingerprint_ignores_editor_and_hidden_files(tmp_path):
    (tmp_path / "a.yaml").write_text("x")
    before = fingerprint(tmp_path)
    (tmp_path / ".a.yaml.swp").write_text("x")
    (tmp_path / "a.yaml~").write_text("x")
    (tmp_path / ".a.yaml").write_text("being written")
    (tmp_path / ".edit").mkdir()
    (tmp_path / ".edit" / "b.yaml").write_text("being written")
    assert fingerprint(tmp_path) == before
    (tmp_path / "a.yaml").write_text("y")
    assert fingerprint(tmp_path) != before


def test_keys_rotate_list_and_retire_the_token_keys(tmp_path, capsys):
    """`warden keys rotate` adds a key that signs, the older ones still listed (they verify);
    `retire` removes one that no longer signs, never the active one. Key files are owner only."""
    from warden import token_keys

    assert main(["keys", "list", "--data", str(tmp_path)]) == 0  # the first use makes one key
    first = capsys.readouterr().out.split()[0]
    assert main(["keys", "rotate", "--data", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{first} verifies" in out and "active" in out and "PRIVATE" not in out
    second = token_keys.KeySet(tmp_path / token_keys.FOLDER).signing_key()[0]
    assert second != first
    for path in (tmp_path / token_keys.FOLDER).iterdir():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    assert main(["keys", "retire", "--data", str(tmp_path), second]) == 1  # the active key
    assert "rotate first" in capsys.readouterr().err
    assert main(["keys", "retire", "--data", str(tmp_path), first]) == 0
    capsys.readouterr()
    assert [k.key_id for k in token_keys.KeySet(tmp_path / token_keys.FOLDER).published()] == [second]
