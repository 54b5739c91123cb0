"""Only store modules open a database: every module of warden's packages that imports sqlite3,
sqlite_utils, psycopg or psycopg_pool (at the top or inside a function) is a store module by its
name (holding `sqlite`, `postgresql`, `store`, `pg` or `copy` as a word: `limit_store_pg`,
`sqlite_records`, the copies of `warden store copy`), or is under warden/store/, or is named below
with the reason it may. A new module that opens a database itself fails here: put the SQL behind
the store it belongs to."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("checkpoint", "toolrunner", "driver", "warden")
DATABASE_MODULES = {"sqlite3", "sqlite_utils", "psycopg", "psycopg_pool"}

# a store module by its name: one of these words, whole, between underscores (limit_store_pg, sqlite_records)
STORE_NAME = re.compile(r"(^|_)(sqlite|postgresql|store|pg|copy)(_|$)")

# modules that are not named as a store and still may, each with its reason
ALLOWED: dict[str, str] = {
    # the decision log's SQLite modules (docs/audit.md): the log, its reader, sealed segments, and the
    # readers of spans and statistics that page through a log and its segments
    "checkpoint/audit/log.py": "the decision log's SQLite file",
    "checkpoint/audit/reader.py": "reads the decision log's SQLite file and its segments",
    "checkpoint/audit/rotate.py": "seals the decision log's SQLite segments",
    "checkpoint/audit/spans.py": "pages through the decision log's SQLite segments",
    "checkpoint/audit/stats.py": "reads the decision log's SQLite file for the statistics",
    "checkpoint/server/single_use.py": "the single-use store's SQLite file (approvals-used.db)",
    # the error a read-only SQLite catalog raises for a file that is no database, caught to say so
    "checkpoint/cli.py": "catches sqlite3.Error from the read-only catalog (warden check, policy diff)",
    # an adapter's own file on the agent's machine, never warden's store: the store setting does not
    # apply to it (a person's approval token waiting for the hook or gateway that asked)
    "warden/client/approvals.py": "the approval inbox an adapter shares with the person's command",
    "warden/hooks/sessions.py": "a hook's runs between its calls, on the agent's machine",
    # the durable workflows' engine (DBOS) is given a connection factory to the runs' database
    "driver/durable/workflow.py": "hands DBOS a connection to the runs' PostgreSQL store",
    # the error class a copy's transaction raises, caught to say nothing was written
    "warden/store_cli.py": "catches psycopg.Error from `warden store copy`",
}


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found & DATABASE_MODULES


def _openers() -> dict[str, set[str]]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            used = _imports(path)
            if used:
                out[path.relative_to(ROOT).as_posix()] = used
    return out


def _is_store(name: str) -> bool:
    return name.startswith("warden/store/") or bool(STORE_NAME.search(Path(name).stem))


def test_only_store_modules_open_a_database():
    strays = {name: sorted(used) for name, used in _openers().items() if not _is_store(name) and name not in ALLOWED}
    assert not strays, (f"modules that open a database but are no store module: {strays}; put the SQL behind the "
                        "store it belongs to (or, for a reason, name the module in ALLOWED)")


def test_every_module_allowed_by_name_still_opens_one():
    # a stale entry would let the module it names grow a database again unnoticed
    openers = _openers()
    stale = sorted(name for name in ALLOWED if name not in openers)
    assert not stale, f"ALLOWED names modules that no longer import a database module: {stale}"


def test_the_check_sees_a_lazy_import_inside_a_function(tmp_path):
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def f():\n    import psycopg.rows\n    from sqlite3 import connect\n")
    assert _imports(sneaky) == {"psycopg", "sqlite3"}
    assert not _is_store("checkpoint/server/sneaky.py") and _is_store("checkpoint/server/limit_store_pg.py")
    assert _is_store("driver/runs/copy.py") and _is_store("warden/store/pg.py") and _is_store("checkpoint/audit/store.py")
    assert not _is_store("checkpoint/server/restore_point.py")  # a name that only holds the word
