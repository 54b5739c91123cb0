"""Fixtures every test package may use: a real PostgreSQL for the stores' second backend."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from tests.pgserver import PASSWORD, PgServer, binaries

_databases = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One throwaway cluster for the whole run; PGPASSWORD set, so every client and every command
    the tests start finds the password as an operator's would (never in a URL)."""
    bindir = binaries()
    if bindir is None:
        reason = "PostgreSQL's server binaries are not installed (apt-get install postgresql)"
        if os.environ.get("WARDEN_REQUIRE_POSTGRES"):
            pytest.fail(f"WARDEN_REQUIRE_POSTGRES is set but {reason}")
        pytest.skip(reason)
    server = PgServer(bindir)
    before = os.environ.get("PGPASSWORD")
    os.environ["PGPASSWORD"] = PASSWORD
    try:
        yield server
    finally:
        if before is None:
            os.environ.pop("PGPASSWORD", None)
        else:
            os.environ["PGPASSWORD"] = before
        server.close()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A store URL of a new, empty database of its own, for one test."""
    return pg_server.create_database(f"t{os.getpid()}_{next(_databases)}")
