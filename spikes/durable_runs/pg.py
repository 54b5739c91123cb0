"""Throwaway PostgreSQL for the spike: `python pg.py start|stop|restart|down|up|url`.

Uses warden's own test server (tests/pgserver.py, imported with PYTHONPATH=/work/main) and keeps
its folder/port in pg.json so later commands find the same cluster.
"""
import json, sys
from pathlib import Path

sys.path.insert(0, "/work/main")
from tests.pgserver import PASSWORD, USER, PgServer, binaries  # noqa: E402

STATE = Path(__file__).with_name("pg.json")


def _load() -> PgServer:
    s = json.loads(STATE.read_text())
    srv = PgServer.__new__(PgServer)
    srv.bindir, srv.root, srv.data = Path(s["bindir"]), Path(s["root"]), Path(s["root"]) / "data"
    srv.port, srv.log = s["port"], Path(s["root"]) / "server.log"
    srv._as_user = s["as_user"]
    return srv


def main(cmd: str) -> None:
    if cmd == "start":
        srv = PgServer(binaries())
        STATE.write_text(json.dumps({"bindir": str(srv.bindir), "root": str(srv.root), "port": srv.port,
                                     "as_user": srv._as_user}))
        for db in ("dbos_sys", "app", "temporal_app"):
            srv.create_database(db)
        print(srv.url())
    elif cmd == "url":
        print(_load().url(sys.argv[2] if len(sys.argv) > 2 else "postgres"))
    elif cmd == "down":
        _load().stop("immediate")
    elif cmd == "up":
        _load().start()
    elif cmd == "stop":
        _load().close()
        STATE.unlink()
    print(f"pg {cmd} ok (user {USER}, password {PASSWORD!r} for PGPASSWORD)", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
