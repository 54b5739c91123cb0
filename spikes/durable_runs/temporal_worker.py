"""One Temporal worker process (a driver): `python temporal_worker.py WORKER_ID`. Nothing here
watches other workers: the Temporal server notices a dead worker by its timeouts."""
import asyncio, os, sys, time
from datetime import timedelta
from concurrent.futures import ThreadPoolExecutor

from temporalio.client import Client
from temporalio.worker import Worker

import common
import temporal_acts as acts
from temporal_model import Run, Steps

WORKER_ID = sys.argv[1]
os.environ["EXECUTOR"] = WORKER_ID
ADDR = f"127.0.0.1:{open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'temporal.port')).read().strip()}"


async def main() -> None:
    common.setup("temporal_app")
    client = await Client.connect(ADDR, identity=WORKER_ID)
    worker = Worker(client, task_queue="runs", workflows=[Run, Steps],
                    activities=[acts.model_turn, acts.check, acts.execute_tool, acts.record, acts.noop],
                    activity_executor=ThreadPoolExecutor(32), identity=WORKER_ID,
                    # how long a task waits on a dead worker's sticky queue before any worker may take it
                    sticky_queue_schedule_to_start_timeout=timedelta(seconds=float(os.environ.get("STICKY", "10"))))
    print(f"{time.strftime('%H:%M:%S')} [{WORKER_ID}] launched, pid {os.getpid()}", flush=True)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
