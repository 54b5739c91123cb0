"""The decision log's queries in PostgreSQL's SQL: the same filters as the SQLite log (store.Filters),
the same rows (JSON columns as their stored text), in seq order."""

from __future__ import annotations

from typing import Any, Unpack

from checkpoint.audit.pg_schema import TABLE
from checkpoint.audit.record import COLUMNS
from checkpoint.audit.store import FILTER_NAMES, Filters

SELECT_COLUMNS = ", ".join(COLUMNS)
HEAD_SQL = f"SELECT seq, hash FROM {TABLE} ORDER BY seq DESC LIMIT 1"
INSERT_SQL = f"INSERT INTO {TABLE} ({SELECT_COLUMNS}) VALUES ({', '.join(['%s'] * len(COLUMNS))})"
_EQUAL = ("decision_id", "run_id", "agent", "verdict", "tenant", "tool", "action", "rule", "caller", "principal", "approval_id",
          "trace_id", "approver")
# a plan refused for one step's sake is found by that step's code too
_STEP_CODE = ("(code = %s OR (action = 'plan' AND EXISTS (SELECT 1 FROM jsonb_array_elements("
              "CASE WHEN jsonb_typeof(arguments::jsonb -> 'steps') = 'array' THEN arguments::jsonb -> 'steps' END) "
              "AS step WHERE step ->> 'code' = %s)))")


def select_sql(
    *,
    after_seq: int = 0,
    upto_seq: int | None = None,
    limit: int | None = None,
    newest_first: bool = False,
    **filters: Unpack[Filters],
) -> tuple[str, list[Any]]:
    """The statement and its parameters for the rows `filters` pick, by seq."""
    if not filters.keys() <= FILTER_NAMES:  # a misspelt filter must not widen the query silently
        raise TypeError(f"unknown filter(s): {', '.join(sorted(filters.keys() - FILTER_NAMES))}")
    where = ["seq > %s"]
    params: list[Any] = [after_seq]
    if upto_seq is not None:
        where.append("seq <= %s")
        params.append(upto_seq)
    root_run_id = filters.get("root_run_id")
    if root_run_id is not None:
        where.append("(root_run_id = %s OR (root_run_id IS NULL AND run_id = %s))")
        params += [root_run_id, root_run_id]
    for column in _EQUAL:
        value = filters.get(column)
        if value is not None:
            where.append(f"{column} = %s")
            params.append(value)
    code = filters.get("code")
    if code is not None:
        where.append(_STEP_CODE)
        params += [code, code]
    person = filters.get("person")
    if person is not None:
        where.append("accountable_person = %s")
        params.append(person)
    text = filters.get("text")
    if text is not None:
        where.append("(strpos(arguments, %s) > 0 OR strpos(reason, %s) > 0)")
        params += [text, text]
    if filters.get("shadow_flips"):
        where.append("shadow_verdict IS NOT NULL AND (shadow_verdict <> verdict OR shadow_code IS DISTINCT FROM code)")
    tenants = filters.get("tenants")
    if tenants is not None:
        where.append("tenant = ANY(%s)" if tenants else "false")
        if tenants:
            params.append(list(tenants))
    since = filters.get("since")
    if since is not None:  # fixed-width UTC text: text order is time order (COLLATE "C": byte order)
        where.append('time COLLATE "C" >= %s')
        params.append(since)
    until = filters.get("until")
    if until is not None:
        where.append('time COLLATE "C" < %s')
        params.append(until)
    sql = f"SELECT {SELECT_COLUMNS} FROM {TABLE} WHERE {' AND '.join(where)} ORDER BY seq"
    if newest_first:
        sql += " DESC"
    if limit is not None:
        sql += " LIMIT %s"
        params.append(int(limit))
    return sql, params
