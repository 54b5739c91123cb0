"""`warden store migrate|status|copy`: the schema of the store every process shares, and the move
of a SQLite data folder onto PostgreSQL.

A SQLite store (the default) creates its files at first use and has nothing to migrate. A
PostgreSQL store is migrated once, by an operator or a deploy job, before any node starts: a node
that finds a schema missing or newer than it knows stops at start (docs/fleet.md).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from warden.datafolder import DEFAULT_DATA
from warden.store.url import add_store_flags, store_of

# Each store on PostgreSQL names its schema here, as "module:attribute" of a
# warden.store.migrations.Schema; imported only by these commands.
SCHEMAS: tuple[str, ...] = (
    "checkpoint.policy.postgresql_store:SCHEMA",
    "checkpoint.server.single_use_pg:SCHEMA",
    "checkpoint.server.limit_store_pg:SCHEMA",
    "toolrunner.receipts.postgresql:SCHEMA",
    "checkpoint.audit.pg_schema:SCHEMA",
    "driver.runs.postgresql:SCHEMA",
)

# Each store `warden store copy` moves from a SQLite data folder, as "module:attribute" of a
# warden.store.copy.StoreCopy, in the order they are written (docs/fleet.md, "Moving from SQLite").
COPIES: tuple[str, ...] = (
    "checkpoint.audit.pg_copy:COPY",
    "checkpoint.policy.catalog_copy:COPY",
    "checkpoint.server.single_use_copy:COPY",
    "toolrunner.receipts.copy:COPY",
    "checkpoint.server.limit_copy:COPY",
    "driver.runs.copy:COPY",
)
# Files of a data folder whose stores have no copy yet: named when SRC holds them, so that nobody
# believes them moved (a store that gains a copy above leaves this list).
NOT_COPIED: tuple[str, ...] = ()
UP_FOLDERS = ("checkpoint", "toolrunner", "driver")


def _load(refs: tuple[str, ...]) -> list:
    out = []
    for ref in refs:
        module, attr = ref.split(":")
        out.append(getattr(importlib.import_module(module), attr))
    return out


def schemas() -> list:  # list[Schema]; the type is imported lazily with the rest
    return _load(SCHEMAS)


def register(subparsers: argparse._SubParsersAction) -> None:
    store = subparsers.add_parser(
        "store", help="migrate and inspect the store (SQLite files or a shared PostgreSQL)",
        description="The store every process keeps its state in (docs/fleet.md).",
    )
    sub = store.add_subparsers(dest="store_command", metavar="SUBCOMMAND")
    for name, line, func in (
        ("migrate", "create or upgrade the schema of every component on a PostgreSQL store", cmd_migrate),
        ("status", "print each component's schema version, and the version this release knows", cmd_status),
    ):
        command = sub.add_parser(
            name, help=line,
            description=f"{line[0].upper()}{line[1:]}. Exit codes: 0 done (status: every component current), "
            "1 a component is behind or newer (status), 2 the store cannot be opened or migrated.",
        )
        add_store_flags(command)
        command.add_argument("--data", default=DEFAULT_DATA, metavar="DIR",
                             help=f"data folder, the SQLite store's folder when --store is not given (default {DEFAULT_DATA})")
        command.set_defaults(func=func)
    copy = sub.add_parser(
        "copy", help="copy a SQLite data folder's stores into an empty PostgreSQL store",
        description="Copy the stores of the SQLite data folder SRC (the decision log with its sealed segments, "
        "catalog.db and learnings.db, approvals-used.db, limits.db, toolrunner.db, driver.db) into the PostgreSQL store DST, whose schema must be current "
        "(warden store migrate). The decision log's chain is verified first and copied record for record: "
        "the same seqs and hashes, so `warden audit verify --store DST --data SRC` passes with the folder's "
        "signed heads. All or nothing, into empty tables only. Exit codes: 0 copied, 1 refused (nothing "
        "written), 2 DST cannot be opened or written.",
    )
    copy.add_argument("src", metavar="SRC", nargs="+",
                      help="the SQLite data folder, or one per process (a path, or sqlite:///path); the folder "
                      "`warden up` made stands for its checkpoint/, toolrunner/ and driver/ folders")
    copy.add_argument("dst", metavar="DST", help="the PostgreSQL store (postgresql://user@host/db)")
    copy.add_argument("--store-password-file", metavar="FILE", help="DST's password, read from this file")
    copy.set_defaults(func=cmd_copy)
    store.set_defaults(func=lambda _a: (store.print_help(), 2)[1])


def _open(args: argparse.Namespace):  # -> (StoreUrl, Database | None)
    from warden.store.pg import Database

    url = store_of(args, args.data)
    if not url.is_postgresql:
        return url, None
    # a migration may rewrite a large table: no statement timeout for an operator's one-off command
    return url, Database(url, name="store", max_size=1, statement_timeout=0).open()


def cmd_migrate(args: argparse.Namespace) -> int:
    from warden.store.errors import StoreError
    from warden.store.migrations import migrate

    try:
        url, db = _open(args)
        if db is None:
            print(f"{url.shown}: SQLite files are created at first use; nothing to migrate")
            return 0
        with db:
            for schema in schemas():
                before, after = migrate(db, schema)
                state = "current" if before == after else f"migrated from {before}"
                print(f"{schema.component:<12} version {after} ({state})")
    except StoreError as exc:
        print(f"warden store migrate: {exc} [{exc.code}]", file=sys.stderr)
        return 2
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from warden.store.errors import StoreError
    from warden.store.migrations import current_version

    try:
        url, db = _open(args)
        print(f"store: {url.shown}")
        if db is None:
            print("SQLite files are created at first use; nothing to migrate")
            return 0
        behind = False
        with db:
            for schema in schemas():
                version = current_version(db, schema.component)
                if version == schema.latest:
                    state = "current"
                elif version > schema.latest:
                    state = f"NEWER than {schema.latest}, the latest this release knows: upgrade warden"
                else:
                    state = f"behind: this release needs {schema.latest}; run warden store migrate"
                behind = behind or version != schema.latest
                print(f"{schema.component:<12} version {version} ({state})")
    except StoreError as exc:
        print(f"warden store status: {exc} [{exc.code}]", file=sys.stderr)
        return 2
    return 1 if behind else 0


def _source_folders(texts: list[str]) -> list[Path] | str:
    """The folders SRC names, or the line saying why one is no SQLite data folder."""
    from warden.store.url import parse_store_url

    folders: list[Path] = []
    for text in texts:
        src = parse_store_url(text if ":" in text else f"sqlite:{text}", default_folder=text)
        if src.is_postgresql or src.folder is None or not src.folder.is_dir():
            return f"SRC {src.shown} is no SQLite data folder"
        # `warden up` keeps each process's files in a folder of its own (warden/up.py)
        parts = [src.folder / name for name in UP_FOLDERS if (src.folder / name).is_dir()]
        folders += parts or [src.folder]
    return folders


def cmd_copy(args: argparse.Namespace) -> int:
    import psycopg

    from warden.store.copy import CopyRefused, copy_folder
    from warden.store.errors import StoreError
    from warden.store.pg import Database
    from warden.store.url import parse_store_url

    try:
        folders = _source_folders(args.src)
        if isinstance(folders, str):
            print(f"warden store copy: {folders}", file=sys.stderr)
            return 1
        dst = parse_store_url(args.dst, default_folder=".", password_file=args.store_password_file)
        if not dst.is_postgresql:
            print(f"warden store copy: DST {dst.shown} is no PostgreSQL store: a copy goes from SQLite to PostgreSQL",
                  file=sys.stderr)
            return 1
        # statements of a large copy run longer than a decision's: the default timeout is for nodes
        with Database(dst, name="store-copy", max_size=1, statement_timeout=600) as db:
            print(f"copying {', '.join(map(str, folders))} into {dst.shown}", flush=True)
            written = copy_folder(folders, db, _load(COPIES), sys.stdout)
            for folder in folders:
                for name in NOT_COPIED:
                    if (folder / name).exists():
                        print(f"note: {folder / name} is not copied by this release: it stays where it is")
    except CopyRefused as exc:
        print(f"warden store copy: refused, nothing written: {exc}", file=sys.stderr)
        return 1
    except StoreError as exc:
        print(f"warden store copy: {exc} [{exc.code}]; nothing written", file=sys.stderr)
        return 2
    except psycopg.Error as exc:  # a row DST's tables refuse: the transaction rolled back whole
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"warden store copy: DST refused a row ({detail}); nothing written", file=sys.stderr)
        return 2
    print(f"copied {written} rows; check the log with: warden audit verify --store DST --data FOLDER "
          "(the folder that held decisions.db, whose signed heads are the anchors)")
    return 0
