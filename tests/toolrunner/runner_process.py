"""A toolrunner in a process of its own, for tests that kill it (SIGKILL) mid-call.

    python runner_process.py DATA_DIR KEY_FILE RUNNER_ID

Serves the test tools (toolrunner_harness.make_tools) on a loopback port, prints `port N`, and
waits until it is killed. The operator token comes from WARDEN_TEST_OPERATOR_TOKEN.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from toolrunner_harness import SECRETS, make_tools  # noqa: E402

from toolrunner.runner import RunnerConfig  # noqa: E402
from toolrunner.server import create_server  # noqa: E402
from warden import grants  # noqa: E402


def main(data_dir: str, key_file: str, runner_id: str) -> None:
    token = os.environ["WARDEN_TEST_OPERATOR_TOKEN"]
    running, port = create_server(
        "127.0.0.1:0", tools=make_tools(), policy_revision="rev-1", keys=grants.SigningKey.load(Path(key_file)),
        data_dir=data_dir, secrets=SECRETS, config=RunnerConfig(runner_id=runner_id),
        tokens={hashlib.sha256(token.encode()).digest(): "driver"}, reap_interval_seconds=3600)
    print(f"port {port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(*sys.argv[1:])
