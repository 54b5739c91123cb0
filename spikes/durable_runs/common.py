"""What both run models share: the application's own tables on PostgreSQL (tool counter keyed by an
idempotency key, turns, kill markers) and the three step bodies, so DBOS and Temporal run the
very same work."""
import json, os, time
from pathlib import Path

import psycopg

PASSWORD = "warden-test-password"
os.environ.setdefault("PGPASSWORD", PASSWORD)
_STATE = json.loads(Path(__file__).with_name("pg.json").read_text())


def url(db: str) -> str:
    return f"postgresql://warden@127.0.0.1:{_STATE['port']}/{db}"


def conn(db: str = "app") -> psycopg.Connection:
    return psycopg.connect(url(db), password=PASSWORD, autocommit=True, connect_timeout=5)


SCHEMA = """
CREATE TABLE IF NOT EXISTS tool_runs (idem_key text PRIMARY KEY, attempts int NOT NULL, runs int NOT NULL);
CREATE TABLE IF NOT EXISTS turns (run_id text, turn int, attempts int NOT NULL, PRIMARY KEY (run_id, turn));
CREATE TABLE IF NOT EXISTS marks (run_id text, point text, executor text, at timestamptz DEFAULT now());
CREATE TABLE IF NOT EXISTS outcomes (run_id text PRIMARY KEY, outcome text, executor text);
"""


def setup(db: str = "app") -> None:
    with conn(db) as c:
        c.execute(SCHEMA)


def stall(db: str, run_id: str, point: str) -> None:
    """The kill point: on the executor started with STALL_AT=point, leave a mark and hang so the
    orchestrator can kill -9 the process exactly here. Only runs whose id names the point stall,
    and only on an executor started with STALL=1."""
    if os.environ.get("STALL") == "1" and f"-{point}" in run_id:
        with conn(db) as c:
            c.execute("INSERT INTO marks VALUES (%s, %s, %s)", (run_id, point, os.environ.get("EXECUTOR", "?")))
        time.sleep(3600)


def model_turn(db: str, run_id: str, turn: int) -> str:
    # a turn is counted once per (run, turn); attempts shows how often the step body ran
    with conn(db) as c:
        c.execute("INSERT INTO turns VALUES (%s, %s, 1) ON CONFLICT (run_id, turn) DO UPDATE "
                  "SET attempts = turns.attempts + 1", (run_id, turn))
    return f"turn {turn}: call scan"


def check(db: str, run_id: str, needs_approval: bool) -> str:
    return "REQUIRE_APPROVAL" if needs_approval else "ALLOW"


def execute_tool(db: str, run_id: str, key: str) -> str:
    """The tool's effect and its receipt commit together, keyed by the idempotency key: a re-run
    step finds the receipt and does not run the tool again. `attempts` counts step bodies."""
    stall(db, run_id, "execute_before_effect")
    with conn(db) as c, c.transaction():
        runs = c.execute("INSERT INTO tool_runs VALUES (%s, 1, 0) ON CONFLICT (idem_key) DO UPDATE "
                         "SET attempts = tool_runs.attempts + 1 RETURNING runs", (key,)).fetchone()[0]
        if runs == 0:
            c.execute("UPDATE tool_runs SET runs = runs + 1 WHERE idem_key = %s", (key,))
    stall(db, run_id, "execute_after_effect")
    return f"receipt {key}"


def record_outcome(db: str, run_id: str, outcome: str) -> None:
    with conn(db) as c:
        c.execute("INSERT INTO outcomes VALUES (%s, %s, %s) ON CONFLICT (run_id) DO UPDATE SET outcome = "
                  "excluded.outcome, executor = excluded.executor", (run_id, outcome, os.environ.get("EXECUTOR", "?")))


def counts(db: str, run_id: str) -> dict:
    with conn(db) as c:
        t = c.execute("SELECT attempts, runs FROM tool_runs WHERE idem_key LIKE %s", (run_id + ":%",)).fetchall()
        u = c.execute("SELECT turn, attempts FROM turns WHERE run_id = %s ORDER BY turn", (run_id,)).fetchall()
        o = c.execute("SELECT outcome, executor FROM outcomes WHERE run_id = %s", (run_id,)).fetchone()
    return {"tool(attempts,runs)": t, "turns(turn,attempts)": u, "outcome": o}


def wait_for(pred, timeout: float, every: float = 0.1):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(every)
    return None


def mark_seen(db: str, run_id: str, point: str) -> bool:
    with conn(db) as c:
        return c.execute("SELECT 1 FROM marks WHERE run_id = %s AND point = %s", (run_id, point)).fetchone() is not None
