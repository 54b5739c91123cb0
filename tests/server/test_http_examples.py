"""The HTTP door's examples against a real checkpoint: examples/http/check.sh (curl) and the Java
client of examples/java-client (classes generated from proto/ by protoc, compiled with javac).
Each skips, saying why, where its tools are not installed; `.ci/run` installs them and sets
WARDEN_REQUIRE_HTTP_EXAMPLES, which turns those skips into failures."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO, TOKEN

CURL_EXAMPLE = REPO / "examples" / "http" / "check.sh"
JAVA_EXAMPLE = REPO / "examples" / "java-client"
PROTOBUF_JAR = Path(os.environ.get("PROTOBUF_JAR", "/usr/share/java/protobuf.jar"))


def _skip(reason: str) -> None:
    if os.environ.get("WARDEN_REQUIRE_HTTP_EXAMPLES"):
        pytest.fail(f"WARDEN_REQUIRE_HTTP_EXAMPLES is set but {reason}")
    pytest.skip(reason)


@pytest.fixture
def door(start):
    running = start(http_address="127.0.0.1:0")
    return running


def test_the_curl_example_allows_and_denies(door):
    if shutil.which("curl") is None:
        _skip("curl is not installed")
    env = {**os.environ, "WARDEN_HTTP": f"http://127.0.0.1:{door.server.http_port}", "WARDEN_TOKEN": TOKEN}
    allowed = subprocess.run([str(CURL_EXAMPLE)], env=env, capture_output=True, text=True, timeout=60)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert '"verdict":"VERDICT_ALLOW"' in allowed.stdout.replace(" ", "")
    denied = subprocess.run([str(CURL_EXAMPLE), "cancel_task", '{"task_id":"task-1"}'], env=env,
                            capture_output=True, text=True, timeout=60)
    assert denied.returncode == 1 and '"code":"tool_not_allowed"' in denied.stdout.replace(" ", "")
    refused = subprocess.run([str(CURL_EXAMPLE)], env={**env, "WARDEN_TOKEN": "wrong-token-0123456789"},
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "HTTP 401" in refused.stderr and "unauthenticated" in refused.stderr
    codes = [r["code"] for r in door.records() if r["action"] == "tool_call"]
    assert codes == ["allowed", "tool_not_allowed"]


@pytest.fixture(scope="module")
def java_client() -> Path:
    missing = [tool for tool in ("protoc", "javac", "java") if shutil.which(tool) is None]
    if missing or not PROTOBUF_JAR.exists():
        _skip(f"the Java example needs protoc, a JDK and protobuf-java ({PROTOBUF_JAR}); missing: "
              f"{', '.join(missing) or PROTOBUF_JAR}")
    built = subprocess.run([str(JAVA_EXAMPLE / "build.sh")], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    return JAVA_EXAMPLE / "build" / "classes"


def test_the_java_client_allows_denies_and_reads_the_stable_code(java_client, door):
    def run(token: str, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["java", "-cp", f"{java_client}:{PROTOBUF_JAR}", "dev.warden.examples.Check",
             f"http://127.0.0.1:{door.server.http_port}", token, "recon", tool, *args],
            capture_output=True, text=True, timeout=120)

    allowed = run(TOKEN, "get_task", "task_id=task-1")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "VERDICT_ALLOW allowed" in allowed.stdout and "grant for get_task" in allowed.stdout
    denied = run(TOKEN, "cancel_task", "task_id=task-1")
    assert denied.returncode == 1 and "VERDICT_DENY tool_not_allowed" in denied.stdout
    refused = run("wrong-token-0123456789", "get_task")
    assert refused.returncode == 2 and "error 401 unauthenticated" in refused.stdout
    by_id = {r["decision_id"]: r for r in door.records()}
    allowed_id = allowed.stdout.split("VERDICT_ALLOW allowed ")[1].split()[0]
    assert by_id[allowed_id]["verdict"] == "ALLOW" and by_id[allowed_id]["caller"] == "driver"
