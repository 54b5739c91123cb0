"""A driver in a process of its own, for tests that kill it (SIGKILL) at a named point.

    python driver_process.py pause <db> <policy_dir> <checkpoint> <toolrunner> <run_id> <stop_at>
    python driver_process.py recover <db> <policy_dir> <checkpoint> <toolrunner>

`pause` pauses the run. Its checkpoint client is the real one, wrapped so that the process prints
`at <stop_at>` and then waits forever when it gets there: `before:<run_id>` (a pause act of that
run is about to be sent), `after:<run_id>` (the checkpoint recorded it and answered, and the driver
has not used the answer yet), or `returned` (the pause returned). The test kills it then.
`recover` starts again on the same store, prints `recovered` once recover() returned, and waits.
The credentials come from the environment (WARDEN_TEST_CHECKPOINT_TOKEN, WARDEN_TEST_TOOLRUNNER_TOKEN).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from driver.clients import CheckpointClient, ToolRunnerClient
from driver.loop import Driver
from driver.pricing import Prices
from driver.providers import make_provider
from driver.runs.sqlite import SqliteRunStore


def _stop(point: str) -> None:
    print(f"at {point}", flush=True)
    threading.Event().wait()


def main(argv: list[str]) -> None:
    command, db, policy_dir, checkpoint, toolrunner, *rest = argv
    store = SqliteRunStore(db)
    d = Driver(store,
               CheckpointClient(checkpoint, timeout=30, token=os.environ["WARDEN_TEST_CHECKPOINT_TOKEN"]),
               ToolRunnerClient(toolrunner, timeout=60, token=os.environ["WARDEN_TEST_TOOLRUNNER_TOKEN"]),
               lambda name, model, options: make_provider(name, **options),
               prices=Prices.from_policy_dir(Path(policy_dir)), provider_backoff_seconds=0)
    if command == "recover":
        d.recover()
        print("recovered", flush=True)
        threading.Event().wait()
    run_id, stop_at = rest
    runs = {r.run_token: r.run_id for r in store.runs(root_run_id=run_id, limit=100)}
    real = d.checkpoint.record_act_answer  # every act the driver records goes through it

    def record_act(request: Any) -> Any:
        of = runs.get(request.run.run_token, "")
        if request.act == "pause" and stop_at == f"before:{of}":
            _stop(stop_at)
        answer = real(request)
        if request.act == "pause" and stop_at == f"after:{of}":
            _stop(stop_at)
        return answer

    d.checkpoint.record_act_answer = record_act  # type: ignore[method-assign]
    d.pause(run_id, "bob", "hold everything")
    _stop("returned")


if __name__ == "__main__":
    main(sys.argv[1:])
