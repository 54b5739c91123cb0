"""`warden --help` and every command's `--help` start fast: building the parser imports none of the
heavy libraries (a command imports what it needs when it runs). Timing is `make bench`'s; this
test checks the cause, which does not depend on the machine's load."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("pydantic", "grpc", "sqlite_utils", "celpy", "cel_expr_python", "google.protobuf", "docker",
         "anthropic", "yaml", "jsonschema", "fastjsonschema", "rich", "watchfiles", "prometheus_client")


def imported_by(*argv: str) -> set[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "warden.cli", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 2), done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


@pytest.mark.parametrize("argv", [("--help",), ("audit", "--help"), ("agents", "--help"), ("policy", "--help"),
                                  ("learnings", "--help")])
def test_help_imports_no_heavy_library(argv):
    heavy = sorted(n for n in imported_by(*argv) if n.split(".")[0] in HEAVY or n in HEAVY)
    assert heavy == [], f"`warden {' '.join(argv)}` imports {heavy[:8]}"


def test_each_command_builds_only_its_owners_part_and_the_table_is_right():
    """`warden check` builds only checkpoint.cli's parsers: COMMAND_OWNERS must name, for every
    top-level command, the module that registers it, and name every command."""
    import argparse

    from warden import cli

    registered = {}
    for module in cli._COMMAND_MODULES:
        parser = cli.build_parser((module,))
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        registered |= dict.fromkeys(sub.choices, module)
    assert registered == cli.COMMAND_OWNERS


def test_check_does_not_import_the_driver_or_toolrunner_cli():
    names = imported_by("check", "--help")
    assert not {"driver.cli", "toolrunner.cli", "checkpoint.audit.cli"} & names
