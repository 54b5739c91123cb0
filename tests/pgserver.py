"""A throwaway PostgreSQL cluster for the tests: Debian's server binaries, `initdb` into a temporary
folder, listening on a free loopback port with password authentication. No mock database.

Where the binaries are missing the tests that need it skip, saying why; `.ci/run` installs them
and sets WARDEN_REQUIRE_POSTGRES=1, which turns that skip into a failure.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg

USER = "warden"
PASSWORD = "warden-test-password"


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin folder, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One cluster. `url(db)` names a database in it; `stop`/`start` take it away and bring it back
    on the same port (tests of a database that goes down)."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="warden-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.log = self.root / "server.log"
        self._as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root: run the server as Debian's `postgres`
            pwd.getpwnam("postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres")
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self._as_user:
            shutil.chown(pwfile, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", USER, f"--pwfile={pwfile}", "--auth-host=scram-sha-256",
                  "--auth-local=trust", "-E", "UTF8", "--no-sync")
        pwfile.unlink()
        # a test cluster: durability is not what these tests measure, start and write speed is
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.root}'\n"
                       "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 300\n")
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self._as_user, str(self.bindir / tool), *args], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def url(self, dbname: str = "postgres") -> str:
        """A store URL without its password (tests pass it as PGPASSWORD, as an operator would)."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), password=PASSWORD, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def close(self) -> None:
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)
