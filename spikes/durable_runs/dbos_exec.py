"""One DBOS executor process (a driver): `python dbos_exec.py EXECUTOR_ID [APP_VERSION]`.

DBOS does not notice a dead executor in a self-hosted fleet, so this adds what warden would have
to build: each executor holds a session-level advisory lock named after it on its own connection;
a watcher in every executor tries the locks of the others, and a lock it can take belongs to a
process whose session is gone, so it calls recovery for that executor id. An executor that finds
its own row taken away (declared dead while it was cut off) stops at once (fencing)."""
import os, sys, threading, time

from dbos import DBOS, DBOSConfig

import common
import dbos_model  # noqa: F401  registers the workflows

EXEC_ID = sys.argv[1]
VERSION = sys.argv[2] if len(sys.argv) > 2 else "v1"
os.environ["EXECUTOR"] = EXEC_ID
WATCH_EVERY = float(os.environ.get("WATCH_EVERY", "1.0"))

WATCH_SQL = """
CREATE TABLE IF NOT EXISTS executors (id text PRIMARY KEY, version text, since timestamptz DEFAULT now());
"""


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} [{EXEC_ID}] {msg}", flush=True)


def hold_own_lock():
    c = common.conn("app")
    c.execute(WATCH_SQL)
    if not c.execute("SELECT pg_try_advisory_lock(hashtext(%s))", ("exec:" + EXEC_ID,)).fetchone()[0]:
        log("my lock is held by a recoverer: I was declared dead; exiting")
        os._exit(3)
    c.execute("INSERT INTO executors (id, version) VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET version = excluded.version",
              (EXEC_ID, VERSION))
    return c


def watch() -> None:
    own = None
    while True:
        try:
            if own is None or own.closed or own.broken:
                own = hold_own_lock()
                log("holding my liveness lock")
            own.execute("SELECT 1")
            others = own.execute("SELECT id FROM executors WHERE id <> %s", (EXEC_ID,)).fetchall()
            for (other,) in others:
                with common.conn("app") as c:
                    if not c.execute("SELECT pg_try_advisory_lock(hashtext(%s))", ("exec:" + other,)).fetchone()[0]:
                        continue  # alive
                    log(f"executor {other} is dead: recovering")
                    t0 = time.time()
                    handles = DBOS._recover_pending_workflows([other])
                    left = DBOS.list_workflows(status="PENDING", executor_id=other)
                    if not left or os.environ.get("NO_RETRY") == "1":  # keep a dead executor listed until every run of it is taken over
                        c.execute("DELETE FROM executors WHERE id = %s", (other,))
                    log(f"executor {other}: recovered {len(handles)} workflows in {time.time() - t0:.3f}s "
                        f"(my version {VERSION}); still PENDING on it: {[(w.workflow_id, w.app_version) for w in left]}")
        except Exception as e:  # the database went away: keep trying, re-take the lock when it is back
            log(f"watcher: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            try:
                own and own.close()
            except Exception:
                pass
            own = None
        time.sleep(WATCH_EVERY)


TTL = float(os.environ.get("LEASE_TTL", "5"))
LEASE_SQL = """
CREATE TABLE IF NOT EXISTS leases (id text PRIMARY KEY, version text, beat timestamptz NOT NULL DEFAULT now(),
                                   dead boolean NOT NULL DEFAULT false);
"""


def watch_leases() -> None:
    """The lease form: every executor renews its row by the database's clock; a row not renewed
    for TTL is marked dead by one judge (atomically), and a dead row can never be renewed, so an
    executor that was only cut off finds out and stops (fencing). A judge judges only after it has
    itself renewed for TTL without a break, so an outage of the database, which stops every
    renewal at once, makes nobody look dead."""
    c = None
    healthy_since = None
    while True:
        try:
            if c is None or c.closed or c.broken:
                c = common.conn("app")
                c.execute(LEASE_SQL)
                c.execute("INSERT INTO leases (id, version) VALUES (%s, %s) ON CONFLICT (id) DO NOTHING", (EXEC_ID, VERSION))
                healthy_since = None
            if c.execute("UPDATE leases SET beat = now() WHERE id = %s AND NOT dead RETURNING 1", (EXEC_ID,)).fetchone() is None:
                log("my lease was marked dead while I was cut off: stopping (fencing)")
                os._exit(3)
            healthy_since = healthy_since or time.time()
            if time.time() - healthy_since >= TTL:
                for (other,) in c.execute("UPDATE leases SET dead = true WHERE id <> %s AND NOT dead AND beat < now() - "
                                          "make_interval(secs => %s) RETURNING id", (EXEC_ID, TTL)).fetchall():
                    log(f"executor {other}: lease expired, marked dead")
            for (other,) in c.execute("SELECT id FROM leases WHERE dead").fetchall():
                t0 = time.time()
                handles = DBOS._recover_pending_workflows([other])
                left = DBOS.list_workflows(status="PENDING", executor_id=other)
                if handles or not left:
                    log(f"executor {other}: recovered {len(handles)} workflows in {time.time() - t0:.3f}s "
                        f"(my version {VERSION}); still PENDING on it: {[(w.workflow_id, w.app_version) for w in left]}")
                if not left:
                    c.execute("DELETE FROM leases WHERE id = %s AND dead", (other,))
        except Exception as e:
            log(f"watcher: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            try:
                c and c.close()
            except Exception:
                pass
            c = None
        time.sleep(WATCH_EVERY)


if __name__ == "__main__":
    common.setup()
    config: DBOSConfig = {
        "name": "warden-driver",
        "system_database_url": os.environ.get("SYS_DB") or common.url("dbos_sys").replace("postgresql://warden@", f"postgresql://warden:{common.PASSWORD}@"),
        "executor_id": EXEC_ID,
        "application_version": VERSION,
        "notification_listener_polling_interval_sec": 0.1,
        "log_level": "INFO",
    }
    DBOS(config=config)
    DBOS.launch()
    DBOS.register_queue("runs", polling_interval_sec=0.2)
    log(f"launched, version {VERSION}, pid {os.getpid()}")
    if os.environ.get("NO_WATCH") != "1":
        threading.Thread(target=watch_leases if os.environ.get("LIVENESS") == "lease" else watch, daemon=True).start()
    threading.Event().wait()
