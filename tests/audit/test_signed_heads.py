"""Signed heads: the checkpoint signs the log's head (Ed25519); `verify --anchors` catches a
truncated log and a rewritten one, naming the anchor that caught it."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path

import pytest

from checkpoint.audit import DecisionLog
from checkpoint.audit import heads as heads_mod
from checkpoint.audit.heads import HeadSigner, SignedHead, read_heads
from checkpoint.audit.record import HASHED_FIELDS, record_hash
from warden.cli import main


@pytest.fixture
def signed(tmp_path, make_record):
    """A log of 10 records with signed heads at seq 4 and seq 10, the anchors exported, and the
    public key exported: what an auditor keeps."""
    data = tmp_path / ".warden"
    path = data / "decisions.db"
    log = DecisionLog(path)
    signer = HeadSigner(log.head, path, interval=None)
    for _ in range(4):
        log.append(make_record())
    assert signer.sign_now() is not None
    assert signer.sign_now() is None  # the head did not move: nothing new to sign
    for _ in range(6):
        log.append(make_record())
    signer.close()  # signs the last head
    log.close()
    return data


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["audit", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _keep(capsys, data: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The auditor's copies: the anchors and the public key, outside the data folder."""
    code, pem, err = _cli(capsys, "pubkey", "--data", str(data))
    assert code == 0 and pem.startswith("-----BEGIN PUBLIC KEY-----") and "key_id" in err
    pub = tmp_path / "audit.pub"
    pub.write_text(pem)
    anchors = tmp_path / "anchors.jsonl"
    code, _, _ = _cli(capsys, "anchors", "--data", str(data), "--output", str(anchors))
    assert code == 0
    return anchors, pub


def test_heads_are_signed_and_kept_private(signed, tmp_path):
    key, kept = signed / "audit-head.key", signed / "decisions.heads.jsonl"
    for path in (key, kept):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    heads = read_heads(kept)
    assert [h.seq for h in heads] == [4, 10]
    with DecisionLog(signed / "decisions.db") as log:
        assert (heads[-1].seq, heads[-1].hash) == log.head()
    public = heads_mod.load_public_key(key)
    assert all(h.verifies(public) for h in heads)
    forged = SignedHead(3, heads[0].hash, heads[0].time, heads[0].key_id, heads[0].signature)
    assert not forged.verifies(public)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    assert not heads[0].verifies(Ed25519PrivateKey.generate().public_key())
    # a restart keeps the key and does not sign the same head again
    with DecisionLog(signed / "decisions.db") as log:
        again = HeadSigner(log.head, signed / "decisions.db", interval=None)
        assert again.sign_now() is None and heads_mod.key_id(again.public_key) == heads[0].key_id


def test_verify_with_anchors_passes_on_a_whole_log(signed, tmp_path, capsys):
    anchors, pub = _keep(capsys, signed, tmp_path)
    code, out, _ = _cli(capsys, "verify", "--data", str(signed), "--anchors", str(anchors), "--pubkey", str(pub))
    assert code == 0 and "ok: 10 records" in out and "2 signed anchor(s) hold, the last at seq 10" in out


def test_a_truncated_log_is_caught_naming_the_anchor(signed, tmp_path, capsys):
    anchors, pub = _keep(capsys, signed, tmp_path)
    conn = sqlite3.connect(signed / "decisions.db")
    with conn:
        conn.execute("DELETE FROM decisions WHERE seq > 7")  # the chain left is whole
    conn.close()
    # the chain alone cannot tell; plain verify checks the data folder's signed heads too
    assert _cli(capsys, "verify", "--data", str(signed))[0] == 1
    code, _, err = _cli(capsys, "verify", "--data", str(signed), "--anchors", str(anchors), "--pubkey", str(pub))
    assert code == 1
    assert "BROKEN at seq 8: truncated" in err and f"anchor 2 of {anchors} (seq 10, signed " in err
    assert "the log ends at seq 7" in err


def test_a_rewritten_and_rehashed_log_is_caught_naming_the_anchor(signed, tmp_path, capsys):
    anchors, pub = _keep(capsys, signed, tmp_path)
    conn = sqlite3.connect(signed / "decisions.db")
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT * FROM decisions ORDER BY seq")]
    rows[2]["verdict"], rows[2]["code"] = "DENY", "tool_not_allowed"  # seq 3 rewritten...
    prev = rows[1]["hash"]
    with conn:
        for row in rows[2:]:  # ...and every hash after it recomputed: a whole chain again
            row["prev_hash"] = prev
            row["hash"] = prev = record_hash(prev, tuple(row[name] for name in HASHED_FIELDS))
            conn.execute("UPDATE decisions SET verdict = ?, code = ?, prev_hash = ?, hash = ? WHERE seq = ?",
                         (row["verdict"], row["code"], row["prev_hash"], row["hash"], row["seq"]))  # fmt: skip
    conn.close()
    # the chain alone cannot tell; plain verify checks the data folder's signed heads too
    assert _cli(capsys, "verify", "--data", str(signed))[0] == 1
    code, _, err = _cli(capsys, "verify", "--data", str(signed), "--anchors", str(anchors), "--pubkey", str(pub))
    assert code == 1
    assert "BROKEN at seq 4: head_mismatch" in err and f"anchor 1 of {anchors} (seq 4, signed " in err


def test_an_edited_record_is_caught_before_the_anchors(signed, tmp_path, capsys):
    anchors, pub = _keep(capsys, signed, tmp_path)
    conn = sqlite3.connect(signed / "decisions.db")
    with conn:
        conn.execute("UPDATE decisions SET reason = 'nothing to see' WHERE seq = 6")
    conn.close()
    code, _, err = _cli(capsys, "verify", "--data", str(signed), "--anchors", str(anchors), "--pubkey", str(pub))
    assert code == 1 and "BROKEN at seq 6: hash_mismatch" in err


def test_an_altered_anchor_or_another_key_is_refused(signed, tmp_path, capsys):
    anchors, pub = _keep(capsys, signed, tmp_path)
    lines = anchors.read_text().splitlines()
    first = json.loads(lines[0])
    first["seq"] = 3  # an anchor moved back to hide what came after
    anchors.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    code, _, err = _cli(capsys, "verify", "--data", str(signed), "--anchors", str(anchors), "--pubkey", str(pub))
    assert code == 1 and f"anchor 1 of {anchors} (seq 3," in err and "signature does not verify" in err

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    other = tmp_path / "other.pub"
    other.write_text(heads_mod.public_pem(Ed25519PrivateKey.generate().public_key()))
    anchors.write_text("\n".join(lines) + "\n")
    code, _, err = _cli(capsys, "verify", "--data", str(signed), "--anchors", str(anchors), "--pubkey", str(other))
    assert code == 1 and "signature does not verify" in err
    # without --pubkey the data folder's key is used, and the command says so
    code, _, err = _cli(capsys, "verify", "--data", str(signed), "--anchors", str(anchors))
    assert code == 0 and "--pubkey" in err


def test_no_key_or_no_heads_yet_is_a_usage_error(tmp_path, make_record, capsys):
    data = tmp_path / ".warden"
    with DecisionLog(data / "decisions.db") as log:
        log.append(make_record())
    assert _cli(capsys, "pubkey", "--data", str(data))[0] == 2
    assert _cli(capsys, "anchors", "--data", str(data))[0] == 2
    bad = tmp_path / "anchors.jsonl"
    bad.write_text('{"seq": "x"}\n')
    code, _, err = _cli(capsys, "verify", "--data", str(data), "--anchors", str(bad), "--pubkey", str(bad))
    assert code == 2 and f"{bad}:1" in err


def test_the_timer_signs_while_the_log_grows(tmp_path, make_record):
    path = tmp_path / "data" / "decisions.db"
    log = DecisionLog(path)
    signer = HeadSigner(log.head, path, interval=0.01).start()
    try:
        log.append(make_record())
        for _ in range(500):
            if heads_mod.heads_path(path).exists() and read_heads(heads_mod.heads_path(path)):
                break
            import time

            time.sleep(0.01)
        assert [h.seq for h in read_heads(heads_mod.heads_path(path))] == [1]
    finally:
        signer.close()
        log.close()


# -- plain `verify` checks the data folder's signed heads -----------------------------------------


def _truncate(data: Path, after: int) -> None:
    conn = sqlite3.connect(data / "decisions.db")
    with conn:
        conn.execute("DELETE FROM decisions WHERE seq > ?", (after,))  # the chain left is whole
    conn.close()


@pytest.mark.parametrize("after", [0, 1, 3, 4, 7, 9])
def test_plain_verify_catches_a_truncated_log_with_the_folders_signed_heads(signed, capsys, after):
    """No --anchors: the heads the checkpoint signed in the data folder are the anchors. Any cut
    below the newest head (seq 10) is caught, naming the heads file."""
    _truncate(signed, after)
    code, _, err = _cli(capsys, "verify", "--data", str(signed))
    assert code == 1, err
    assert f"BROKEN at seq {after + 1}: truncated" in err and "decisions.heads.jsonl" in err


def test_plain_verify_catches_a_rewritten_log_with_the_folders_signed_heads(signed, capsys):
    conn = sqlite3.connect(signed / "decisions.db")
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT * FROM decisions ORDER BY seq")]
    prev = rows[5]["hash"]
    with conn:
        for row in rows[6:]:
            row["reason"] = "rewritten"
            row["prev_hash"] = prev
            row["hash"] = prev = record_hash(prev, tuple(row[name] for name in HASHED_FIELDS))
            conn.execute("UPDATE decisions SET reason = ?, prev_hash = ?, hash = ? WHERE seq = ?",
                         (row["reason"], row["prev_hash"], row["hash"], row["seq"]))  # fmt: skip
    conn.close()
    code, _, err = _cli(capsys, "verify", "--data", str(signed))
    assert code == 1 and "BROKEN at seq 10: head_mismatch" in err


def test_plain_verify_on_a_whole_log_says_which_heads_it_used(signed, capsys):
    code, out, err = _cli(capsys, "verify", "--data", str(signed))
    assert code == 0 and "ok: 10 records" in out and "2 signed anchor(s) hold, the last at seq 10" in out
    assert "the data folder's own key" in err and "--pubkey" in err


def test_plain_verify_says_loudly_when_a_log_has_no_signed_heads(signed, capsys):
    (signed / "decisions.heads.jsonl").unlink()
    _truncate(signed, 7)
    code, out, err = _cli(capsys, "verify", "--data", str(signed))
    assert code == 0 and "ok: 7 records" in out
    assert "WARNING" in err and "no signed heads" in err and "deleted from the end" in err


@pytest.mark.parametrize("damage", ["altered", "not json", "another key"])
def test_plain_verify_refuses_signed_heads_that_do_not_hold(signed, capsys, damage):
    kept = signed / "decisions.heads.jsonl"
    lines = kept.read_text().splitlines()
    if damage == "altered":
        head = json.loads(lines[1])
        head["seq"] = 7  # moved back to cover a cut after 7
        lines[1] = json.dumps(head)
        _truncate(signed, 7)
    elif damage == "not json":
        lines[1] = lines[1][:20]
    else:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        (signed / "audit-head.key").write_bytes(Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    kept.write_text("\n".join(lines) + "\n")
    code, _, err = _cli(capsys, "verify", "--data", str(signed))
    assert code == 1, err
    assert "BROKEN" in err and "decisions.heads.jsonl" in err
