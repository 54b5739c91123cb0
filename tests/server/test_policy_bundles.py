"""A checkpoint following a signed policy bundle over HTTP: a real web server in a thread that
answers with an ETag and 304, and a real checkpoint whose decisions are recorded."""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from checkpoint.policy.bundle import build
from checkpoint.server.bundle_source import BundleSettings
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .conftest import REPO
from .helpers import tool_call

KEY = Ed25519PrivateKey.generate()
DENY_GET_TASK = """kind: Rule
name: freeze-get-task
effect: deny_if
condition: 'true'
tools: [get_task]
reason: frozen for the test
"""


class BundleServer:
    """Serves one bundle at /policy.tar.gz with a strong ETag, 304 on If-None-Match."""

    def __init__(self) -> None:
        self.body = b""
        self.requests: list[tuple[str | None, int]] = []  # (If-None-Match, status) per request
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                etag = '"' + hashlib.sha256(outer.body).hexdigest()[:32] + '"'
                asked = self.headers.get("If-None-Match")
                status = 304 if asked == etag else 200
                outer.requests.append((asked, status))
                self.send_response(status)
                self.send_header("ETag", etag)
                if status == 200:
                    self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                if status == 200:
                    self.wfile.write(outer.body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/policy.tar.gz"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def web() -> Iterator[BundleServer]:
    server = BundleServer()
    yield server
    server.close()


def _wait(predicate: Callable[[], Any], what: str = "") -> Any:
    deadline = time.monotonic() + 30
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        time.sleep(0.01)
    return value


def _follow(start, web: BundleServer, tmp_path: Path, poll: float = 0.05):
    return start(policy_dir=tmp_path / "live" / "policies",
                 bundle=BundleSettings(web.url, KEY.public_key(), poll))


def _get_task(checkpoint) -> pb.CheckResponse:
    request = checkpoint.with_run(tool_call("recon", checkpoint.version("recon"), "get_task", {"task_id": "task-1"}))
    return checkpoint.stub().Check(request, timeout=10)


def _bundle_revision(data: bytes) -> str:
    from checkpoint.policy.bundle import verify

    return verify(data, KEY.public_key()).revision


def test_the_bundle_serves_from_the_start_and_its_revision_is_in_every_record(web, start, policy_dir, tmp_path):
    web.body = build(policy_dir, KEY, 1)
    checkpoint = _follow(start, web, tmp_path)
    revision = _bundle_revision(web.body)
    assert checkpoint.server.store.current.revision == revision
    answer = _get_task(checkpoint)
    assert answer.verdict == pb.VERDICT_ALLOW and answer.policy_revision == revision
    records = checkpoint.records()
    assert answer.decision_id in {r["decision_id"] for r in records}
    assert {r["policy_revision"] for r in records} == {revision}  # the run's start and the call's decision
    assert checkpoint.server.health_details()["policy_bundle"]["serial"] == 1
    assert "warden_checkpoint_policy_bundle_serial 1.0" in checkpoint.server.service.metrics.render().decode()


def test_a_new_bundle_is_taken_within_the_poll_and_a_304_does_not_reload(web, start, policy_dir, tmp_path):
    web.body = build(policy_dir, KEY, 1)
    checkpoint = _follow(start, web, tmp_path)
    status = checkpoint.server.store.status
    _wait(lambda: any(s == 304 for _, s in web.requests), "a conditional request answered 304")
    loads = status.reloads_ok
    seen = len(web.requests)
    _wait(lambda: len(web.requests) > seen + 5, "more polls")
    assert all(asked is not None and s == 304 for asked, s in web.requests[seen:])  # If-None-Match every time
    assert status.reloads_ok == loads  # nothing fetched, nothing loaded
    assert checkpoint.server.bundle.status.not_modified >= 5

    edited = tmp_path / "edited"
    shutil.copytree(policy_dir, edited)
    (edited / "rules" / "freeze.yaml").write_text(DENY_GET_TASK)
    web.body = build(edited, KEY, 2)
    new = _bundle_revision(web.body)
    _wait(lambda: checkpoint.server.store.current.revision == new, "the new bundle in force")
    answer = _get_task(checkpoint)
    assert (answer.verdict, answer.code, answer.policy_revision) == (pb.VERDICT_DENY, "rule_denied", new)
    assert checkpoint.records()[-1]["policy_revision"] == new


@pytest.mark.parametrize("attack", ["other_key", "rollback", "tampered", "not_loading"])
def test_an_attack_is_refused_and_the_last_good_stays_in_force(web, start, policy_dir, tmp_path, attack):
    web.body = build(policy_dir, KEY, 5)
    checkpoint = _follow(start, web, tmp_path)
    good = checkpoint.server.store.current.revision
    evil = tmp_path / "evil"
    shutil.copytree(policy_dir, evil)
    (evil / "rules" / "freeze.yaml").write_text(DENY_GET_TASK)
    expected = {"other_key": codes.BUNDLE_BAD_SIGNATURE, "rollback": codes.BUNDLE_ROLLBACK,
                "tampered": codes.BUNDLE_DIGEST_MISMATCH, "not_loading": codes.BUNDLE_DOES_NOT_LOAD}[attack]
    if attack == "other_key":
        web.body = build(evil, Ed25519PrivateKey.generate(), 6)
    elif attack == "rollback":
        web.body = build(evil, KEY, 4)
    elif attack == "tampered":
        web.body = _swap_file(build(evil, KEY, 6), "policy/rules/freeze.yaml", b"kind: Rule\nname: x\n")
    else:
        (evil / "rules" / "freeze.yaml").write_text("kind: Rule\nname: [unclosed\n")
        web.body = build(evil, KEY, 6)
    status = checkpoint.server.bundle.status
    _wait(lambda: status.last_code == expected, f"refused with {expected}")
    health = checkpoint.server.health_details()
    assert health["status"] == "SERVING" and health["policy_bundle"]["last_ok"] is False
    assert health["policy_bundle"]["last_code"] == expected and health["policy_bundle"]["serial"] == 5
    metrics = checkpoint.server.service.metrics.render().decode()
    assert f'warden_checkpoint_policy_bundle_refusals_total{{code="{expected}"}} 1.0' in metrics
    assert "warden_checkpoint_policy_bundle_serial 5.0" in metrics
    assert checkpoint.server.store.current.revision == good
    assert _get_task(checkpoint).verdict == pb.VERDICT_ALLOW  # the freeze never took effect


def _swap_file(data: bytes, name: str, body: bytes) -> bytes:
    import gzip
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as src, \
            gzip.GzipFile(fileobj=out, mode="wb") as packed, tarfile.open(fileobj=packed, mode="w") as dst:
        for member in src:
            content = body if member.name == name else src.extractfile(member).read()  # type: ignore[union-attr]
            info = tarfile.TarInfo(member.name)
            info.size = len(content)
            dst.addfile(info, io.BytesIO(content))
    return out.getvalue()


def test_serve_refuses_a_bundle_without_a_public_key(tmp_path, capsys):
    from warden.cli import main

    assert main(["keys", "init", "--data", str(tmp_path)]) == 0
    code = main(["checkpoint", "serve", "--data", str(tmp_path), "--policy-bundle", "http://127.0.0.1:1/x",
                 "--address", ""])
    assert code == 2
    assert "--bundle-pubkey" in capsys.readouterr().err


assert REPO.is_dir()  # the shipped policies are what the bundles carry


def test_a_mounted_configmap_is_followed_when_kubelet_swaps_its_link(start, policy_dir, tmp_path):
    """A ConfigMap volume: the key is a link through `..data`, which the kubelet points at a new
    timestamped folder in one rename."""
    mount = tmp_path / "mount"
    (mount / "..v1").mkdir(parents=True)
    (mount / "..v1" / "policy.tar.gz").write_bytes(build(policy_dir, KEY, 1))
    (mount / "..data").symlink_to("..v1")
    (mount / "policy.tar.gz").symlink_to("..data/policy.tar.gz")
    checkpoint = start(policy_dir=tmp_path / "live" / "policies",
                       bundle=BundleSettings(str(mount / "policy.tar.gz"), KEY.public_key(), 0.05))
    edited = tmp_path / "edited"
    shutil.copytree(policy_dir, edited)
    (edited / "rules" / "freeze.yaml").write_text(DENY_GET_TASK)
    (mount / "..v2").mkdir()
    (mount / "..v2" / "policy.tar.gz").write_bytes(build(edited, KEY, 2))
    (mount / "..data_tmp").symlink_to("..v2")
    (mount / "..data_tmp").rename(mount / "..data")
    _wait(lambda: checkpoint.server.bundle.status.serial == 2, "serial 2 in force")
    assert _get_task(checkpoint).code == "rule_denied"
