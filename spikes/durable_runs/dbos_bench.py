"""Rough cost of DBOS durability: `python dbos_bench.py`. Times a workflow of N no-op steps
(each step = one checkpoint row in PostgreSQL) against the same calls without DBOS, and one run
of the model (3 steps + 2 turns + outcome) started directly and through a queue."""
import os, statistics, time, uuid

from dbos import DBOS

import common
import dbos_model

N = int(os.environ.get("N", "200"))

if __name__ == "__main__":
    common.setup()
    DBOS(config={"name": "warden-driver", "executor_id": "bench", "application_version": "v1",
                 "system_database_url": common.url("dbos_sys").replace("warden@", f"warden:{common.PASSWORD}@"),
                 "log_level": "WARNING"})
    DBOS.launch()
    q = DBOS.register_queue("runs", polling_interval_sec=0.2)
    t0 = time.perf_counter(); [dbos_model.noop.__wrapped__(i) if hasattr(dbos_model.noop, "__wrapped__") else i for i in range(N)]
    bare = time.perf_counter() - t0
    per = []
    for _ in range(3):
        t0 = time.perf_counter(); DBOS.start_workflow(dbos_model.steps, N).get_result(); per.append((time.perf_counter() - t0) / N)
    print(f"DBOS {N} no-op steps in one workflow: {1000 * statistics.median(per):.2f} ms/step (median of 3; bare loop {1e6 * bare / N:.1f} us/call)")
    direct, queued, plain = [], [], []
    for i in range(10):
        rid = f"bench-{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter(); dbos_model.run.__wrapped__(rid + "p", False, 1.0) if hasattr(dbos_model.run, "__wrapped__") else None; plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); DBOS.start_workflow(dbos_model.run, rid, False, 1.0).get_result(); direct.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); q.enqueue(dbos_model.run, rid + "q", False, 1.0).get_result(); queued.append(time.perf_counter() - t0)
    print(f"one run (turn, check, execute, turn, outcome): without DBOS {1000 * statistics.median(plain):.1f} ms, "
          f"started directly {1000 * statistics.median(direct):.1f} ms, through a queue {1000 * statistics.median(queued):.1f} ms (medians of 10)")
    DBOS.destroy()
