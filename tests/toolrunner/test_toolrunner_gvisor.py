"""`runtime: runsc`: a tool runs inside gVisor's user-space kernel, with the same hardening.

gVisor is optional for users, so without a `runsc` runtime on the engine this test says so and
skips; CI installs runsc (ensure-docker.sh registers it) and sets WARDEN_REQUIRE_RUNSC=1 once a
plain container starts under it, and then a missing runtime is a failure. Where gVisor cannot run
at all (CI's smoke test failed: WARDEN_SKIP_RUNSC holds why) it skips with that reason.
"""

from __future__ import annotations

import os

import docker
import pytest
from toolrunner_harness import Harness, session_containers


def test_a_tool_asking_for_runsc_runs_under_gvisor(harness: Harness, docker_api: docker.APIClient) -> None:
    if os.environ.get("WARDEN_SKIP_RUNSC"):
        pytest.skip(os.environ["WARDEN_SKIP_RUNSC"])
    if "runsc" not in (docker_api.info().get("Runtimes") or {}):
        message = "the Docker engine has no 'runsc' runtime (see scripts/ensure-docker.sh)"
        if os.environ.get("WARDEN_REQUIRE_RUNSC") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    receipt = harness.execute("sandboxed", {})
    assert receipt.exit_code == 0 and not receipt.code, receipt
    kernel, uid, done = receipt.output.split()
    # gVisor's sentry answers uname with its own kernel release, not the host's
    assert kernel != os.uname().release
    assert uid == "65534" and done == "sandboxed"
    assert not session_containers(docker_api)
