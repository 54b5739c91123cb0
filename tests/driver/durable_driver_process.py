"""A durable driver (PostgreSQL store, runs as DBOS workflows, lease watch) in a process of its
own, for tests that kill it (SIGKILL) or freeze it (SIGSTOP) at a named point.

    python durable_driver_process.py <store_url> <policy_dir> <checkpoint> <toolrunner> <stall> <ttl>

It prints `executor <id>` and `port <n>` (its DriverService, person token of driver_harness), then
serves. `stall` is `none`, `before_execute` (the first call the checkpoint allowed is about to go
to the toolrunner: the check is done) or `after_execute` (the toolrunner ran it and answered; the
driver has not stored the receipt) or `in_turn` (the model replied and the turn's first call is
about to be stored): there the process prints `at <stall>` and waits forever.
Credentials come from the environment (WARDEN_TEST_CHECKPOINT_TOKEN, WARDEN_TEST_TOOLRUNNER_TOKEN);
WARDEN_TEST_APPROVAL_TIMEOUT sets the approval timeout in seconds, WARDEN_TEST_RUN_MODEL_VERSION the
run model version (as a driver of another release); with WARDEN_TEST_METRICS set it serves
/metrics on a free port and prints `metrics <n>` after the port.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from pathlib import Path
from typing import Any

from driver.clients import CheckpointClient, ToolRunnerClient
from driver.durable import workflow
from driver.durable.leases import new_executor_id
from driver.durable.workflow import DurableRuns
from driver.loop import Driver
from driver.pricing import Prices
from driver.providers import make_provider
from driver.runs.postgresql import open_postgresql
from driver.service import create_server
from warden.store.url import parse_store_url

PERSON_TOKEN = "bob-operator-token-0123456789"


def main(argv: list[str]) -> None:
    url, policy_dir, checkpoint, toolrunner, stall, ttl = argv
    executor_id = new_executor_id()
    store = open_postgresql(parse_store_url(url, default_folder="."), name=f"driver:{executor_id}")
    d = Driver(store,
               CheckpointClient(checkpoint, timeout=30, token=os.environ["WARDEN_TEST_CHECKPOINT_TOKEN"]),
               ToolRunnerClient(toolrunner, timeout=60, token=os.environ["WARDEN_TEST_TOOLRUNNER_TOKEN"]),
               lambda name, model, options: make_provider(name, **options),
               prices=Prices.from_policy_dir(Path(policy_dir)), provider_backoff_seconds=0)
    real = d.toolrunner.execute
    stalled = threading.Event()

    def execute(req: Any, output: Any) -> Any:
        if stall == "before_execute" and not stalled.is_set():
            stalled.set()
            print(f"at {stall}", flush=True)
            threading.Event().wait()
        got = real(req, output)
        if stall == "after_execute" and not stalled.is_set():
            stalled.set()
            print(f"at {stall}", flush=True)
            threading.Event().wait()
        return got

    d.toolrunner.execute = execute  # type: ignore[method-assign]
    real_add_call = store.add_call

    def add_call(*args: Any, **kwargs: Any) -> Any:
        if stall == "in_turn" and not stalled.is_set():  # the model replied; its calls are being stored
            stalled.set()
            print(f"at {stall}", flush=True)
            threading.Event().wait()
        return real_add_call(*args, **kwargs)

    store.add_call = add_call  # type: ignore[method-assign]
    timeout = float(os.environ.get("WARDEN_TEST_APPROVAL_TIMEOUT", "3600"))
    if os.environ.get("WARDEN_TEST_RUN_MODEL_VERSION"):  # a driver of another release's run model
        workflow.RUN_MODEL_VERSION = os.environ["WARDEN_TEST_RUN_MODEL_VERSION"]
    DurableRuns(d, store.db, executor_id=executor_id, lease_ttl_seconds=float(ttl),
                approval_timeout_seconds=timeout).launch()
    metrics = "127.0.0.1:0" if os.environ.get("WARDEN_TEST_METRICS") else None
    running, port = create_server("127.0.0.1:0", d, {hashlib.sha256(PERSON_TOKEN.encode()).digest(): "bob"},
                                  metrics_address=metrics)
    print(f"executor {executor_id}", flush=True)
    print(f"port {port}", flush=True)
    if running.metrics_server is not None:
        print(f"metrics {running.metrics_server.port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
