"""How `warden audit` prints records: a line each (tail), JSON lines, CSV, or a table."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import IO, Any


def write_csv(records: Iterable[dict[str, Any]], out: IO[str]) -> int:
    import csv

    from checkpoint.audit.record import COLUMNS

    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    count = 0
    for record in records:
        writer.writerow([_csv_cell(record.get(name)) for name in COLUMNS])
        count += 1
    return count


def _csv_cell(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return "" if value is None else value


def write_jsonl(records: Iterable[dict[str, Any]], out: IO[str]) -> int:
    count = 0
    for record in records:
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        count += 1
    return count


def record_line(record: dict[str, Any]) -> str:
    parts = [
        f"{record['seq']:>7}",
        record["time"],
        f"{record['verdict']:<16}",
        f"{record['code'] or '-':<24}",
    ]
    parts.append(f"{record['action']}")
    for label, name in (("tool", "tool"), ("agent", "agent"), ("run", "run_id"), ("rule", "rule")):
        if record.get(name):
            parts.append(f"{label}={record[name]}")
    shadow = record.get("shadow_verdict")
    if shadow and (shadow, record.get("shadow_code")) != (record["verdict"], record["code"]):
        parts.append(f"shadow={shadow}/{record.get('shadow_code')}/{record.get('shadow_rule')}")
    return " ".join(parts)


def print_stream(records: Iterable[dict[str, Any]], fmt: str, out: IO[str]) -> None:
    for record in records:
        if fmt == "jsonl":
            out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        else:
            out.write(record_line(record) + "\n")
        out.flush()  # a follower is read live, often through a pipe


_WHOLE = frozenset({"seq", "time", "verdict", "code", "run", "rule", "shadow verdict", "shadow code", "shadow rule"})


def print_table(records: Iterable[dict[str, Any]], *, shadow: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False, header_style="bold")
    columns = ["seq", "time", "verdict", "code", "action", "tool", "agent", "run", "rule", "reason"]
    if shadow:  # --shadow-flips: the shadow answer beside the enforced one
        columns[4:4] = ["shadow verdict", "shadow code", "shadow rule"]
    for name in columns:
        # ids, codes and times are looked up and copied: they keep one line, and the prose folds
        whole = name in _WHOLE
        table.add_column(name, overflow="fold", no_wrap=whole, justify="right" if name == "seq" else "left")
    count = 0
    for r in records:
        cells = [
            str(r["seq"]),
            r["time"],
            r["verdict"],
            r["code"] or "",
            r["action"],
            r["tool"] or "",
            r["agent"] or "",
            r["run_id"] or "",
            r["rule"] or "",
            r["reason"] or "",
        ]
        if shadow:
            cells[4:4] = [r.get("shadow_verdict") or "", r.get("shadow_code") or "", r.get("shadow_rule") or ""]
        table.add_row(*cells)
        count += 1
    # Piped output gets a wide fixed width, so a grep of the table does not see folded cells.
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200)
    console.print(table)
    console.print(f"{count} record(s)")
