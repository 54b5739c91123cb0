"""Node recomputes warden's record hashes and grant signatures (examples/node-client/verify.js).

The proof that the hashed bytes do not depend on who writes them: Python writes the log and the
grants, `warden audit export` prints the records (Python's `json` writes `1e-07`), and Node, with
its own twenty-line RFC 8785, gets the same hashes, for numbers like 1e-7, 1e+21, +-(2**53 - 1)
and doubles beyond 2**53, and for characters above U+FFFF in values and keys.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import rfc8785

from checkpoint.audit import DecisionLog
from warden import grants
from warden.cli import main as warden

from .conftest import REPO

VERIFY = REPO / "examples" / "node-client" / "verify.js"
# What a Node verifier must agree on: every number form where Python's `json` and RFC 8785 differ,
# the edges of the safe integers, astral characters (sorted by UTF-16 code units, not code points).
ARGUMENTS = {
    "ratio": 1e-7,
    "tiny": 5e-324,
    "big": 1e21,
    "double_beyond_2_53": 2.0**60,
    "max_safe": 2**53 - 1,
    "min_safe": -(2**53 - 1),
    "whole": 5.0,
    "half": 0.5,
    "emoji": "grinning \U0001f600, music \U0001d11e",
    "\U0001f600 key": "astral key",
    "\uffff key": "last BMP key",
    "controls": "tab\t nul\x00 quote\" backslash\\ del\x7f \u2028",
    "nested": [{"x": 1e-7, "y": [1.5e300, -0.0]}],
}


@pytest.fixture(scope="module")
def node() -> str:
    exe = shutil.which("node")
    if exe is None:
        pytest.skip("node is not installed")
    return exe


def _node(node: str, *args: str | Path) -> tuple[int, dict]:
    proc = subprocess.run([node, str(VERIFY), *map(str, args)], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_node_recomputes_every_record_hash_of_an_export(node, tmp_path, capsys):
    path = tmp_path / "data" / "decisions.db"
    log = DecisionLog(path)
    try:
        for i in range(3):
            log.append({"action": "tool_call", "verdict": "ALLOW", "tool": "t", "run_id": f"run-{i}",
                        "arguments": ARGUMENTS, "actor_chain": [{"kind": "person", "id": "\U0001f600"}],
                        "reason": "astral \U0001f600", "latency_us": 2**53 - 1})  # fmt: skip
        head = log.head()
    finally:
        log.close()
    export = tmp_path / "export.jsonl"
    assert warden(["audit", "export", "--log", str(path), "--output", str(export)]) == 0
    assert "1e-07" in export.read_text()  # Python's own form: Node must still get RFC 8785's bytes

    code, out = _node(node, "records", export)
    assert code == 0 and out == {"ok": True, "records": 3, "head_seq": head[0], "head_hash": head[1]}

    lines = export.read_text().split("\n")[:-1]  # not splitlines(): U+2028 is in a value
    tampered = json.loads(lines[1])
    tampered["arguments"]["ratio"] = 2e-7
    lines[1] = json.dumps(tampered)
    export.write_text("\n".join(lines) + "\n")
    code, out = _node(node, "records", export)
    assert code == 1 and (out["ok"], out["seq"], out["reason"]) == (False, 2, "hash_mismatch")


def test_node_verifies_a_grant_signature_and_its_arguments_hash(node, tmp_path):
    key = grants.SigningKey.generate()
    key.save(tmp_path / "grant.key")
    grant = grants.sign(key, decision_id="dec-1", run_id="run-\U0001f600", agent="recon", agent_version="recon@3",
                        tool="t", arguments=ARGUMENTS, policy_revision="rev-1")  # fmt: skip
    fields = {
        name: getattr(grant, name)
        for name in ("decision_id", "run_id", "agent", "agent_version", "tool", "arguments_sha256",
                     "policy_revision", "key_id")
    }  # fmt: skip
    fields["expires_at_ms"] = grant.expires_at.seconds * 1000 + grant.expires_at.nanos // 1_000_000
    given = tmp_path / "grant.json"
    given.write_text(json.dumps({"grant": fields | {"signature": grant.signature.hex()}, "arguments": ARGUMENTS}))

    code, out = _node(node, "grant", given, tmp_path / "grant.key")
    assert code == 0 and out["ok"] and out["signature"], out
    assert out["arguments_canonical"].encode() == rfc8785.dumps(ARGUMENTS)
    assert out["arguments_sha256"] == grant.arguments_sha256 == hashlib.sha256(rfc8785.dumps(ARGUMENTS)).hexdigest()

    # another call, or a signature over other fields: Node says so
    other = json.loads(given.read_text())
    other["arguments"]["ratio"] = 1e-6
    given.write_text(json.dumps(other))
    code, out = _node(node, "grant", given, tmp_path / "grant.key")
    assert code == 1 and out["signature"] and not out["ok"]
    other["grant"]["tool"] = "another"
    given.write_text(json.dumps(other))
    code, out = _node(node, "grant", given, tmp_path / "grant.key")
    assert code == 1 and not out["signature"]


def test_node_verifies_signed_heads_with_the_public_key(node, tmp_path, capsys):
    from checkpoint.audit.heads import HeadSigner

    path = tmp_path / "data" / "decisions.db"
    log = DecisionLog(path)
    signer = HeadSigner(log.head, path, interval=None)
    try:
        for i in range(3):
            log.append({"action": "tool_call", "verdict": "ALLOW", "arguments": {"i": i, "x": 1e-7}})
            signer.sign_now()
    finally:
        signer.close()
        log.close()
    pub, anchors = tmp_path / "audit.pub", tmp_path / "anchors.jsonl"
    assert warden(["audit", "pubkey", "--log", str(path)]) == 0
    pub.write_text(capsys.readouterr().out)
    assert warden(["audit", "anchors", "--log", str(path), "--output", str(anchors)]) == 0

    code, out = _node(node, "heads", anchors, pub)
    assert code == 0 and out["ok"] and out["heads"] == 3 and out["last_seq"] == 3, out
    lines = anchors.read_text().split("\n")
    moved = json.loads(lines[1])
    moved["seq"] = 1
    anchors.write_text("\n".join([lines[0], json.dumps(moved), *lines[2:]]))
    code, out = _node(node, "heads", anchors, pub)
    assert code == 1 and (out["anchor"], out["reason"]) == (2, "signature")


def test_verify_js_needs_no_npm_packages():
    assert "require('crypto')" in VERIFY.read_text() and "@grpc" not in VERIFY.read_text()
    assert Path(VERIFY).stat().st_size < 8000
