"""Orchestrates the DBOS scenarios: `python dbos_spike.py takeover|version|pgrestart|pause`.
Starts executor processes (dbos_exec.py), kills them with SIGKILL, and prints what the shared
tables say: how often each tool call really ran and each turn was counted."""
import os, signal, subprocess, sys, time

from dbos import DBOSClient

import common

PY = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
procs: list[subprocess.Popen] = []


def t() -> str:
    return time.strftime("%H:%M:%S") + f".{int(time.time() * 1000) % 1000:03d}"


def start(exec_id: str, version: str = "v1", stall: bool = False, **env) -> subprocess.Popen:
    log = open(f"{HERE}/logs/dbos-{exec_id}.log", "w")
    p = subprocess.Popen([PY, "dbos_exec.py", exec_id, version], cwd=HERE, stdout=log, stderr=subprocess.STDOUT,
                         env={**os.environ, "STALL": "1" if stall else "0", **env})
    procs.append(p)
    common.wait_for(lambda: "launched" in open(f"{HERE}/logs/dbos-{exec_id}.log").read(), 60)
    print(f"{t()} started executor {exec_id} version {version} pid {p.pid} stall={stall}")
    return p


def kill9(p: subprocess.Popen, name: str) -> float:
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    print(f"{t()} kill -9 executor {name} (pid {p.pid})")
    return time.time()


def client() -> DBOSClient:
    return DBOSClient(system_database_url=os.environ.get("SYS_DB") or common.url("dbos_sys").replace("warden@", f"warden:{common.PASSWORD}@"),
                      application_name="warden-driver")


def enqueue(c: DBOSClient, run_id: str, needs_approval=False, timeout=60.0, turn_seconds=0.0, version="v1"):
    return c.enqueue({"queue_name": "runs", "workflow_name": "run", "workflow_id": run_id, "app_version": version},
                     run_id, needs_approval, timeout, turn_seconds)


def state(c: DBOSClient, run_id: str):
    return c.retrieve_workflow(run_id).get_status()


def finish(c: DBOSClient, ids: list[str], since: float, timeout: float = 90) -> None:
    for rid in ids:
        ok = common.wait_for(lambda: state(c, rid).status in ("SUCCESS", "ERROR", "CANCELLED"), timeout, 0.05)
        st = state(c, rid)
        print(f"  {rid}: {st.status} on executor {st.executor_id} after {time.time() - since:.2f}s"
              f"{'' if ok else ' (NOT FINISHED)'}; {common.counts('app', rid)}")


def takeover(tag: str) -> None:
    c = client()
    a = start(f"A{tag}", stall=True)
    ids = [f"{tag}-execute_before_effect", f"{tag}-execute_after_effect", f"{tag}-approval", f"{tag}-approvaltimeout"]
    enqueue(c, ids[0]); enqueue(c, ids[1])
    enqueue(c, ids[2], needs_approval=True, timeout=60)
    t_enq = time.time()
    enqueue(c, ids[3], needs_approval=True, timeout=15)
    assert common.wait_for(lambda: common.mark_seen("app", ids[0], "execute_before_effect")
                           and common.mark_seen("app", ids[1], "execute_after_effect"), 60)
    assert common.wait_for(lambda: c.get_event(ids[2], "state", 0) and c.get_event(ids[3], "state", 0), 60)
    print(f"{t()} A holds: 2 runs stalled in execute (before/after the effect), 2 in approval waits")
    start(f"B{tag}")
    killed = kill9(a, f"A{tag}")
    c.send(ids[2], "approve", "approval")  # given while no executor runs it
    print(f"{t()} approval sent to {ids[2]} while its executor is dead")
    finish(c, ids, killed)
    print(f"  approval-timeout run: enqueued {time.time() - t_enq:.1f}s ago, wait was 15s")
    c.destroy()


def version() -> None:
    c = client()
    a = start("Av", stall=True)
    enqueue(c, "ver-approval", needs_approval=True, timeout=120)
    assert common.wait_for(lambda: c.get_event("ver-approval", "state", 0), 60)
    start("Cv2", version="v2")
    killed = kill9(a, "Av")
    c.send("ver-approval", "approve", "approval")
    time.sleep(6)
    st = state(c, "ver-approval")
    print(f"{t()} after 6s with only a v2 executor alive: {st.status} executor {st.executor_id} version {st.app_version}")
    start("Bv1", version="v1")
    finish(c, ["ver-approval"], killed)
    c.destroy()


def pg_ctl(*args: str) -> None:
    st = common._STATE
    subprocess.run([*st["as_user"], st["bindir"] + "/pg_ctl", "-D", st["root"] + "/data", "-w", *args],
                   check=True, capture_output=True)


P = os.environ.get("P", "pg")


def pgrestart(n: int = int(os.environ.get("N", "150"))) -> None:
    c = client()
    a = start(f"A{P}", stall=True)
    ids = [f"{P}{i}-approval" for i in range(n)]
    for rid in ids:
        enqueue(c, rid, needs_approval=True, timeout=300)
    assert common.wait_for(lambda: all(c.get_event(r, "state", 0) for r in ids), 120)
    start(f"B{P}", NO_RETRY=os.environ.get("NO_RETRY", "0"))
    log = f"{HERE}/logs/dbos-B{P}.log"
    killed = kill9(a, f"A{P}")
    common.wait_for(lambda: "is dead: recovering" in open(log).read(), 30, 0.005)
    pg_ctl("stop", "-m", "immediate")
    print(f"{t()} PostgreSQL stopped (immediate) as B began recovering")
    time.sleep(5)
    pg_ctl("start", "-l", common._STATE["root"] + "/server.log")
    print(f"{t()} PostgreSQL started again")
    time.sleep(8)
    with common.conn("dbos_sys") as db:
        rows = db.execute("SELECT status, executor_id, count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE %s "
                          "GROUP BY 1, 2 ORDER BY 1, 2", (P + "%",)).fetchall()
    print(f"{t()} runs by status/executor 8s after restart: {rows}")
    for rid in ids:
        c.send(rid, "approve", "approval")
    finish(c, ids[:3] + ids[-1:], killed, 120)
    for rid in ids:  # the rest too, before this script stops the executor
        common.wait_for(lambda: state(c, rid).status == "SUCCESS", 60, 0.05)
    with common.conn("dbos_sys") as db:
        rows = db.execute("SELECT status, executor_id, count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE %s "
                          "GROUP BY 1, 2 ORDER BY 1, 2", (P + "%",)).fetchall()
        runs = common.conn("app").execute("SELECT count(*), sum(runs), sum(attempts) FROM tool_runs WHERE idem_key LIKE %s", (P + "%",)).fetchone()
    print(f"{t()} final: {rows}; tool calls (keys, runs, attempts) = {runs}")
    c.destroy()


def nowatch() -> None:
    """DBOS alone, without warden's watcher: does a live executor take over a dead one's runs?"""
    c = client()
    a = start("An", stall=True, NO_WATCH="1")
    enqueue(c, "n-execute_before_effect")
    enqueue(c, "n-approval", needs_approval=True, timeout=120)
    assert common.wait_for(lambda: common.mark_seen("app", "n-execute_before_effect", "execute_before_effect"), 60)
    assert common.wait_for(lambda: c.get_event("n-approval", "state", 0), 60)
    start("Bn", NO_WATCH="1")
    killed = kill9(a, "An")
    c.send("n-approval", "approve", "approval")
    time.sleep(15)
    for rid in ("n-execute_before_effect", "n-approval"):
        st = state(c, rid)
        print(f"{t()} 15s after the kill, B alive: {rid} {st.status} on {st.executor_id}")
    start("An", NO_WATCH="1")  # the same executor id again: DBOS's own launch-time recovery
    finish(c, ["n-execute_before_effect", "n-approval"], killed)
    c.destroy()


def blip() -> None:
    """Both executors alive; PostgreSQL restarts (every session and advisory lock is gone). Does a
    watcher declare the live peer dead and take its runs while it still runs them?"""
    c = client()
    tag = os.environ.get("P", "bl")
    start(f"A{tag}"); start(f"B{tag}")
    ids = [f"{tag}{i}-approval" for i in range(20)]
    for rid in ids:
        enqueue(c, rid, needs_approval=True, timeout=300)
    assert common.wait_for(lambda: all(c.get_event(r, "state", 0) for r in ids), 60)
    with common.conn("dbos_sys") as db:
        print(f"{t()} runs by executor before: {db.execute('SELECT executor_id, count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE %s GROUP BY 1', (tag + '%',)).fetchall()}")
    pg_ctl("stop", "-m", "immediate")
    print(f"{t()} PostgreSQL stopped (immediate), both executors alive")
    time.sleep(3)
    pg_ctl("start", "-l", common._STATE["root"] + "/server.log")
    print(f"{t()} PostgreSQL started again")
    time.sleep(6)
    for rid in ids:
        c.send(rid, "approve", "approval")
    finish(c, ids[:2], time.time(), 60)
    time.sleep(3)
    with common.conn("dbos_sys") as db:
        rows = db.execute("SELECT status, executor_id, count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE %s "
                          "GROUP BY 1, 2 ORDER BY 1, 2", (tag + "%",)).fetchall()
        runs = common.conn("app").execute("SELECT count(*), sum(runs), sum(attempts) FROM tool_runs WHERE idem_key LIKE %s", (tag + "%",)).fetchone()
        turns = common.conn("app").execute("SELECT count(*), sum(attempts) FROM turns WHERE run_id LIKE %s", (tag + "%",)).fetchone()
    print(f"{t()} final: {rows}; tool calls (keys, runs, attempts) = {runs}; turns (count, attempts) = {turns}")
    for name in (f"A{tag}", f"B{tag}"):
        print(f"  {name}:", [l.strip()[:150] for l in open(f"{HERE}/logs/dbos-{name}.log") if f"[{name}]" in l and "watcher:" not in l][-3:])
    c.destroy()


def freeze() -> None:
    """A live executor stops answering (SIGSTOP: a frozen VM, a long pause, a partition) for longer
    than the lease, then comes back (SIGCONT). Its runs must move to B, and A must not go on."""
    c = client()
    a = start("Af", stall=True)
    ids = [f"f{i}-approval" for i in range(5)]
    for rid in ids:
        enqueue(c, rid, needs_approval=True, timeout=300)
    assert common.wait_for(lambda: all(c.get_event(r, "state", 0) for r in ids), 60)
    start("Bf")
    time.sleep(6)  # B renews for a full TTL before it may judge
    os.kill(a.pid, signal.SIGSTOP)
    frozen = time.time()
    print(f"{t()} SIGSTOP executor Af")
    common.wait_for(lambda: all(state(c, r).executor_id == "Bf" for r in ids), 30, 0.1)
    print(f"{t()} all runs on Bf {time.time() - frozen:.1f}s after the freeze")
    for rid in ids:
        c.send(rid, "approve", "approval")
    os.kill(a.pid, signal.SIGCONT)
    print(f"{t()} approvals sent, SIGCONT executor Af")
    finish(c, ids, frozen, 60)
    a.wait(15)
    print(f"{t()} Af exit code {a.returncode}; its last words: "
          f"{[l.strip()[:120] for l in open(f'{HERE}/logs/dbos-Af.log') if '[Af]' in l][-1:]}")
    c.destroy()


def sqlite() -> None:
    """One machine, DBOS on a SQLite file (warden's embedded default): kill -9 the only driver in an
    approval wait and mid-execute, start it again with the same executor id."""
    os.environ["SYS_DB"] = f"sqlite:///{HERE}/dbos-sys.sqlite"
    a = start("S1", stall=True, NO_WATCH="1")
    c = client()
    enqueue(c, "s-execute_after_effect")
    enqueue(c, "s-approval", needs_approval=True, timeout=120)
    assert common.wait_for(lambda: common.mark_seen("app", "s-execute_after_effect", "execute_after_effect"), 60)
    assert common.wait_for(lambda: c.get_event("s-approval", "state", 0), 60)
    killed = kill9(a, "S1")
    c.send("s-approval", "approve", "approval")
    start("S1", NO_WATCH="1")
    finish(c, ["s-execute_after_effect", "s-approval"], killed)
    c.destroy()


def pause() -> None:
    c = client()
    start("Aq"); start("Bq")
    enqueue(c, "q-cancel", turn_seconds=4)
    enqueue(c, "q-pause", turn_seconds=4)
    time.sleep(1.5)
    t0 = time.time(); c.cancel_workflow("q-cancel"); c.cancel_workflow("q-pause")
    print(f"{t()} cancelled both mid-turn (cancel took {1000 * (time.time() - t0):.1f} ms)")
    time.sleep(5)
    for rid in ("q-cancel", "q-pause"):
        print(f"  {rid}: {state(c, rid).status}; {common.counts('app', rid)}")
    t0 = time.time(); c.resume_workflow("q-pause")
    print(f"{t()} resumed q-pause (pause = cancel + resume)")
    finish(c, ["q-pause", "q-cancel"], t0, 30)
    c.destroy()


if __name__ == "__main__":
    os.makedirs(f"{HERE}/logs", exist_ok=True)
    common.setup()
    try:
        which = sys.argv[1]
        if which == "takeover":
            takeover(sys.argv[2] if len(sys.argv) > 2 else "t1")
        else:
            globals()[which]()
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(10)
