"""Orchestrates the Temporal scenarios: `python temporal_spike.py takeover|version|restart|pause`.
Needs the dev server started (see README.md): two worker processes, kill -9 one, count tool runs."""
import asyncio, os, signal, subprocess, sys, time

from temporalio.client import Client, WorkflowHandle

import common

PY = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
PORT = open(f"{HERE}/temporal.port").read().strip()
DB = "temporal_app"
procs: list[subprocess.Popen] = []


def t() -> str:
    return time.strftime("%H:%M:%S") + f".{int(time.time() * 1000) % 1000:03d}"


def start(wid: str, stall: bool = False, **env) -> subprocess.Popen:
    path = f"{HERE}/logs/temporal-{wid}.log"
    p = subprocess.Popen([PY, "temporal_worker.py", wid], cwd=HERE, stdout=open(path, "w"), stderr=subprocess.STDOUT,
                         env={**os.environ, "STALL": "1" if stall else "0", **env})
    procs.append(p)
    common.wait_for(lambda: "launched" in open(path).read(), 60)
    print(f"{t()} started worker {wid} pid {p.pid} stall={stall} {env or ''}")
    return p


def kill9(p: subprocess.Popen, name: str) -> float:
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    print(f"{t()} kill -9 worker {name} (pid {p.pid})")
    return time.time()


async def begin(c: Client, run_id: str, needs_approval=False, timeout=60.0, turn_seconds=0.0) -> WorkflowHandle:
    return await c.start_workflow("Run", args=[run_id, needs_approval, timeout, turn_seconds], id=run_id, task_queue="runs")


async def wait_state(h: WorkflowHandle, want: str, timeout: float = 60) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        try:
            if await h.query("status") == want:
                return True
        except Exception:
            pass
        await asyncio.sleep(0.2)
    return False


async def finish(c: Client, ids: list[str], since: float, timeout: float = 120) -> None:
    for rid in ids:
        h = c.get_workflow_handle(rid)
        try:
            res = await asyncio.wait_for(h.result(), timeout)
        except Exception as e:
            res = f"{type(e).__name__}"
        d = await h.describe()
        took = d.close_time.timestamp() - since if d.close_time else float("nan")
        print(f"  {rid}: {d.status.name} -> {res}, closed {took:.2f}s after the kill; {common.counts(DB, rid)}")


async def takeover(tag: str) -> None:
    c = await Client.connect(f"127.0.0.1:{PORT}")
    a = start(f"A{tag}", stall=True)
    ids = [f"{tag}-execute_before_effect", f"{tag}-execute_after_effect", f"{tag}-approval", f"{tag}-approvaltimeout"]
    await begin(c, ids[0]); await begin(c, ids[1])
    await begin(c, ids[2], True, 60)
    t_start = time.time()
    await begin(c, ids[3], True, 15)
    assert common.wait_for(lambda: common.mark_seen(DB, ids[0], "execute_before_effect")
                           and common.mark_seen(DB, ids[1], "execute_after_effect"), 60)
    assert await wait_state(c.get_workflow_handle(ids[2]), "awaiting_approval")
    assert await wait_state(c.get_workflow_handle(ids[3]), "awaiting_approval")
    print(f"{t()} A holds: 2 runs stalled in execute (before/after the effect), 2 in approval waits")
    start(f"B{tag}")
    killed = kill9(a, f"A{tag}")
    await c.get_workflow_handle(ids[2]).signal("approval", "approve")
    print(f"{t()} approval signalled to {ids[2]} while its worker is dead")
    await finish(c, ids, killed)
    print(f"  approval-timeout run: started {time.time() - t_start:.1f}s ago, wait was 15s")


async def version() -> None:
    c = await Client.connect(f"127.0.0.1:{PORT}")
    a = start("Av", stall=True)
    h = await begin(c, "tver-approval", True, 120)
    assert await wait_state(h, "awaiting_approval")
    start("Cv2", RUN_MODEL="v2-changed")
    killed = kill9(a, "Av")
    await h.signal("approval", "approve")
    await asyncio.sleep(12)
    d = await h.describe()
    print(f"{t()} after 12s with only a changed-code worker: {d.status.name}; worker log says: "
          f"{[l.strip()[:160] for l in open(f'{HERE}/logs/temporal-Cv2.log') if 'nondetermin' in l.lower()][:1]}")
    start("Bv1")
    await finish(c, ["tver-approval"], killed)


async def restart() -> None:
    """kill -9 a worker and the Temporal server together; bring the server back after 5s."""
    c = await Client.connect(f"127.0.0.1:{PORT}")
    a = start("Ar", stall=True)
    ids = [f"tr{i}-approval" for i in range(int(os.environ.get("N", "40")))] + ["tr-execute_after_effect"]
    for rid in ids[:-1]:
        await begin(c, rid, True, 300)
    await begin(c, ids[-1])
    for rid in ids[:-1]:
        assert await wait_state(c.get_workflow_handle(rid), "awaiting_approval")
    assert common.wait_for(lambda: common.mark_seen(DB, ids[-1], "execute_after_effect"), 60)
    start("Br")
    killed = kill9(a, "Ar")
    spid = int(open(f"{HERE}/temporal.pid").read())
    os.kill(spid, signal.SIGKILL)
    print(f"{t()} kill -9 Temporal server (pid {spid})")
    await asyncio.sleep(5)
    sp = subprocess.Popen([f"{HERE}/.venv/bin/temporal", "server", "start-dev", "--headless", "--ip", "127.0.0.1",
                           "--port", PORT, "--http-port", "0", "--metrics-port", "0", "--db-filename",
                           f"{HERE}/temporal.db", "--log-level", "warn"], stdout=open(f"{HERE}/logs/temporal-server2.log", "w"),
                          stderr=subprocess.STDOUT, start_new_session=True)
    open(f"{HERE}/temporal.pid", "w").write(str(sp.pid))
    print(f"{t()} Temporal server started again (pid {sp.pid})")
    for _ in range(100):
        try:
            c = await Client.connect(f"127.0.0.1:{PORT}")
            break
        except Exception:
            await asyncio.sleep(0.3)
    for rid in ids[:-1]:
        await c.get_workflow_handle(rid).signal("approval", "approve")
    await finish(c, ids[:2] + ids[-2:], killed)
    for rid in ids:  # the rest too, before this script stops the worker
        await asyncio.wait_for(c.get_workflow_handle(rid).result(), 120)
    with common.conn(DB) as db:
        print(f"{t()} tool calls (keys, runs, attempts) = "
              f"{db.execute('SELECT count(*), sum(runs), sum(attempts) FROM tool_runs WHERE idem_key LIKE %s', ('tr%',)).fetchone()}")


async def freeze() -> None:
    """A live worker stops answering (SIGSTOP) with runs in approval waits and one mid-execute; the
    approvals come while it is frozen; then it comes back (SIGCONT)."""
    c = await Client.connect(f"127.0.0.1:{PORT}")
    a = start("Af", stall=True)
    ids = [f"tf{i}-approval" for i in range(5)] + ["tf-execute_after_effect"]
    for rid in ids[:-1]:
        await begin(c, rid, True, 300)
    await begin(c, ids[-1])
    for rid in ids[:-1]:
        assert await wait_state(c.get_workflow_handle(rid), "awaiting_approval")
    assert common.wait_for(lambda: common.mark_seen(DB, ids[-1], "execute_after_effect"), 60)
    start("Bf")
    os.kill(a.pid, signal.SIGSTOP)
    frozen = time.time()
    print(f"{t()} SIGSTOP worker Af")
    for rid in ids[:-1]:
        await c.get_workflow_handle(rid).signal("approval", "approve")
    await finish(c, ids, frozen)
    os.kill(a.pid, signal.SIGCONT)
    await asyncio.sleep(8)
    print(f"{t()} 8s after SIGCONT of Af: {[common.counts(DB, r)['tool(attempts,runs)'] for r in ids]}")


async def pause() -> None:
    c = await Client.connect(f"127.0.0.1:{PORT}")
    start("Aq"); start("Bq")
    hc = await begin(c, "tq-cancel", turn_seconds=4)
    hp = await begin(c, "tq-pause", turn_seconds=4)
    await asyncio.sleep(1.5)
    t0 = time.time(); await hc.cancel(); await hp.signal("pause")
    print(f"{t()} cancel and pause sent mid-turn ({1000 * (time.time() - t0):.1f} ms)")
    await asyncio.sleep(5)
    print(f"  tq-cancel: {(await hc.describe()).status.name}; {common.counts(DB, 'tq-cancel')}")
    print(f"  tq-pause: {await hp.query('status')}; {common.counts(DB, 'tq-pause')}")
    t0 = time.time(); await hp.signal("resume")
    await finish(c, ["tq-pause"], t0, 30)


if __name__ == "__main__":
    os.makedirs(f"{HERE}/logs", exist_ok=True)
    common.setup(DB)
    try:
        which = sys.argv[1]
        asyncio.run(takeover(sys.argv[2] if len(sys.argv) > 2 else "tt1") if which == "takeover" else globals()[which]())
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(10)
