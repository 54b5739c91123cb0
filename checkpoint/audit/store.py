"""The SQLite side of the decision log: schema, connections, queries.

sqlite-utils owns the schema (table, indexes, WAL). The hot path uses the plain connection with
one prepared INSERT, because building SQL per call would cost more than the write itself.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TypedDict, Unpack
from urllib.parse import quote

import sqlite_utils

from checkpoint.audit.errors import AuditUnavailable
from checkpoint.audit.record import COLUMNS, SCHEMA_COLUMNS, SCHEMA_HASHED

TABLE = "decisions"
# 2: principal, caller, call_digest, approval_rules; 3: shadow_verdict, shadow_code, shadow_rule;
# 4: approver, approval_id, trace_id
SCHEMA_VERSION = 4
_SCHEMA_OF = {columns: version for version, columns in SCHEMA_COLUMNS.items()}
# A record whose seq is not beyond the head is refused inside the INSERT itself. A primary key
# collision already catches a writer that missed another's append, but once sealing has moved old
# records out of this file (docs/audit.md, "Retention"), a writer in another process holding a
# stale head could otherwise insert a seq that is free again. Created by the first seal, before it
# deletes anything (checkpoint/audit/rotate.py): a log that is never sealed does not pay its ~2 us
# per append. max(seq) is the rightmost leaf of the table's B-tree, the page every append writes.
APPEND_ONLY_SQL = (f"CREATE TRIGGER IF NOT EXISTS {TABLE}_beyond_head BEFORE INSERT ON {TABLE} "
                f"WHEN NEW.seq <= (SELECT max(seq) FROM {TABLE}) "
                "BEGIN SELECT RAISE(ABORT, 'seq is not beyond the head'); END")
# Each index is one more B-tree page written per commit. run_id and agent pick out few records of
# many; verdict (four values) and code (a few dozen) would not narrow a search much, so queries
# on those walk the table in seq order instead (logs made before kept their old indexes).
INDEXED = ("run_id", "agent")
Synchronous = Literal["NORMAL", "FULL"]

_TYPES: dict[str, type] = {name: str for name in COLUMNS} | {"seq": int, "latency_us": int}
_NOT_NULL = ("decision_id", "time", "action", "verdict", "prev_hash", "hash")
INSERT_SQL = f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
HEAD_SQL = f"SELECT seq, hash FROM {TABLE} ORDER BY seq DESC LIMIT 1"


class Filters(TypedDict, total=False):
    """What a query may ask of a record; None (or absent) asks nothing. Every reader takes these
    as keywords and hands them through to `select`: a new filter is a field here and its clause
    there."""

    decision_id: str | None  # one record (pair it with run_id: only run_id is indexed)
    run_id: str | None
    root_run_id: str | None  # a whole delegation tree
    agent: str | None
    verdict: str | None
    code: str | None  # the record's code, or the code of a refused step of a recorded plan
    since: str | None  # RFC 3339 UTC with microseconds, as stored: text order is time order
    until: str | None  # records before this time (exclusive), in the same form
    tenants: list[str] | None  # only records of these tenants (an auditor's right may be narrower)
    tenant: str | None
    tool: str | None
    action: str | None
    rule: str | None  # as recorded: `allowlist`, `rule:NAME`, `approval`, ...
    person: str | None  # the accountable person
    caller: str | None  # the credential's own name (a person acting with their own, or a process)
    principal: str | None
    approver: str | None  # approvals and rejections this person made, and the calls their approvals let through
    approval_id: str | None  # the approval record's decision id, and the call that spent it
    trace_id: str | None  # the W3C trace id the request carried
    text: str | None  # a substring of the arguments or the reason (a subject, a host, an id)
    shadow_flips: bool | None  # only records whose shadow answer (verdict or code) differs from the enforced one


FILTER_NAMES = frozenset(Filters.__optional_keys__)


def open_writer(path: Path, synchronous: Synchronous, busy_timeout_ms: int) -> sqlite3.Connection:
    """A connection for the one writer thread, schema ensured.

    isolation_level=None: the writer issues BEGIN IMMEDIATE / COMMIT itself, so a batch is one
    transaction and nothing else opens one behind its back.
    """
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        db = sqlite_utils.Database(conn, execute_plugins=False)
        db.enable_wal()
        # WAL + NORMAL: a commit is in the OS before COMMIT returns, so it survives the process
        # being killed; FULL also fsyncs the WAL on every commit, for power loss.
        conn.execute(f"PRAGMA synchronous={'FULL' if synchronous == 'FULL' else 'NORMAL'}")
        # The writer only appends: the right edge of a few B-trees stays hot. A small page cache
        # keeps the sidecar's memory flat as the log grows (SQLite's default is 2 MB).
        conn.execute("PRAGMA cache_size=-256")
        _ensure_schema(db)
    except BaseException:
        conn.close()
        raise
    return conn


def _ensure_schema(db: sqlite_utils.Database) -> None:
    table = db.table(TABLE)
    if not table.exists():
        table.create(
            {name: _TYPES[name] for name in COLUMNS},
            pk="seq",
            not_null=_NOT_NULL,
            if_not_exists=True,
            # STRICT: a column holds only its declared type, so a value cannot change meaning
            # (text "7" vs integer 7) between the writer and an auditor's reader.
            strict=True,
        )
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    _check_columns(tuple(c.name for c in table.columns))
    for column in INDEXED:
        table.create_index([column], if_not_exists=True)


def _check_columns(columns: tuple[str, ...]) -> None:
    if columns != COLUMNS:
        older = _SCHEMA_OF.get(columns)
        raise AuditUnavailable(
            f"decision log schema mismatch: columns {columns}, expected {COLUMNS} (" + (
                f"a log of schema {older}, written by an older warden: this version reads and verifies it but "
                "does not append to it; move it aside and start a new one" if older else
                "not a warden decision log of any known schema: move it aside and start a new one") + ")"
        )


def schema_of(conn: sqlite3.Connection) -> int:
    """The schema version of a log (or sealed segment) by its columns; AuditUnavailable for one no
    warden wrote. 0 for a file whose table is not created yet."""
    columns = tuple(row[1] for row in conn.execute(f"PRAGMA table_info({TABLE})"))
    if not columns:
        return 0
    version = _SCHEMA_OF.get(columns)
    if version is None:
        raise AuditUnavailable(
            f"decision log schema mismatch: columns {columns} are no warden schema's (expected {COLUMNS}): "
            "move it aside and start a new one"
        )
    return version


def hashed_fields(version: int) -> tuple[str, ...]:
    """What a record of that schema version hashes (0, a table not made yet: this version's)."""
    return SCHEMA_HASHED[version or SCHEMA_VERSION]


def open_reader(path: Path, *, immutable: bool = False) -> sqlite3.Connection:
    """A read-only connection. Never creates the file: a missing log is an error, not an empty one;
    a log of an older schema is read as it is (its records verify with the fields they have), one
    of no known schema is refused with what to do (AuditUnavailable). `immutable`: a sealed
    segment, which nothing writes, is read without locks."""
    if not path.exists():
        raise FileNotFoundError(f"no decision log at {path}")
    mode = "mode=ro&immutable=1" if immutable else "mode=ro"
    conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?{mode}", uri=True, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        schema_of(conn)  # a log being created has no table yet: readers wait for its first record
    except BaseException:
        conn.close()
        raise
    return conn


def head(conn: sqlite3.Connection) -> tuple[int, str] | None:
    row = conn.execute(HEAD_SQL).fetchone()
    return (row[0], row[1]) if row else None


def select(
    conn: sqlite3.Connection,
    *,
    after_seq: int = 0,
    upto_seq: int | None = None,
    limit: int | None = None,
    newest_first: bool = False,
    **filters: Unpack[Filters],
) -> Iterator[dict[str, Any]]:
    """Stored rows as dicts of column values (JSON columns still text), by seq.

    `root_run_id` picks a whole delegation tree (the root run records itself as its root). It is
    not indexed, to keep commits cheap: such a query walks the log in seq order."""
    if not filters.keys() <= FILTER_NAMES:  # a misspelt filter must not widen the query silently
        raise TypeError(f"unknown filter(s): {', '.join(sorted(filters.keys() - FILTER_NAMES))}")
    version = schema_of(conn)
    current = version in (0, SCHEMA_VERSION)
    if current:
        source = TABLE
    else:  # an older schema's file: the columns it lacks read as null
        have = SCHEMA_COLUMNS[version]
        source = f"(SELECT {', '.join(c if c in have else f'NULL AS {c}' for c in COLUMNS)} FROM {TABLE})"
    where = ["seq > ?"]
    params: list[Any] = [after_seq]
    if upto_seq is not None:
        where.append("seq <= ?")
        params.append(upto_seq)
    root_run_id = filters.get("root_run_id")
    if root_run_id is not None:
        # A root recorded before roots were normalised (no root_run_id) is still its own tree's root.
        where.append("(root_run_id = ? OR (root_run_id IS NULL AND run_id = ?))")
        params += [root_run_id, root_run_id]
    for column in ("decision_id", "run_id", "agent", "verdict", "tenant", "tool", "action", "rule", "caller", "principal",
                   "approval_id", "trace_id"):
        value = filters.get(column)
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    code = filters.get("code")
    if code is not None:  # a plan refused for one step's sake is found by that step's code too
        where.append("(code = ? OR (action = 'plan' AND EXISTS (SELECT 1 FROM json_each(arguments, '$.steps') "
                     "WHERE json_extract(value, '$.code') = ?)))")
        params += [code, code]
    person = filters.get("person")
    if person is not None:
        where.append("accountable_person = ?")
        params.append(person)
    approver = filters.get("approver")
    if approver is not None:
        if current or "approver" in SCHEMA_COLUMNS[version]:
            where.append("approver = ?")
        else:  # before schema 4 the approver was only the caller of an approval or rejection
            where.append("action IN ('approval', 'rejection') AND caller = ?")
        params.append(approver)
    text = filters.get("text")
    if text is not None:
        where.append("(instr(arguments, ?) > 0 OR instr(reason, ?) > 0)")
        params += [text, text]
    if filters.get("shadow_flips"):
        where.append("shadow_verdict IS NOT NULL AND (shadow_verdict != verdict OR shadow_code IS NOT code)")
    tenants = filters.get("tenants")
    if tenants is not None:
        where.append(f"tenant IN ({', '.join('?' * len(tenants))})" if tenants else "0")
        params += list(tenants)
    since = filters.get("since")
    if since is not None:  # fixed-width UTC text: text order is time order
        where.append("time >= ?")
        params.append(since)
    until = filters.get("until")
    if until is not None:
        where.append("time < ?")
        params.append(until)
    sql = f"SELECT {', '.join(COLUMNS)} FROM {source} WHERE {' AND '.join(where)} ORDER BY seq"
    if newest_first:
        sql += " DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(int(limit))
    for row in conn.execute(sql, params):
        yield dict(zip(COLUMNS, row, strict=True))
