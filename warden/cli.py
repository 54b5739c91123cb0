"""The one `warden` command. Each process package contributes its own subcommands.

A package registers subcommands through a ``register(subparsers)`` function in its
``cli`` module; the modules are imported lazily so that `warden --help` stays fast
and a broken optional part never hides the others.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

# (module, what it adds). Order is the order shown in --help.
_COMMAND_MODULES = (
    "checkpoint.cli",  # policy check/test, check, checkpoint serve, keys
    "checkpoint.audit.cli",  # audit tail/query/verify/export
    "toolrunner.cli",  # toolrunner serve
    "driver.cli",  # driver serve, up, run, runs, watch, approve, reject, pause, resume, cancel, amend
    "driver.agents_cli",  # agents list/show/history/diff/propose/review/approve/reject/retire/rollback
    "driver.entries_cli",  # skills and templates: list/show/history/propose|save/approve/reject/retire
    "driver.learnings_cli",  # learnings list/show/promote/review/reject/retire
    "warden.config_cli",  # config show
)


# Which module registers each top-level command: a command builds only its own part of the parser
# (tens of milliseconds of every start). tests/contracts/test_cli_start.py holds this table to
# what the modules register.
COMMAND_OWNERS = {
    **dict.fromkeys(("policy", "check", "checkpoint", "keys"), "checkpoint.cli"),
    "audit": "checkpoint.audit.cli",
    "toolrunner": "toolrunner.cli",
    **dict.fromkeys(("driver", "up", "run", "runs", "watch", "approve", "reject", "pause", "resume", "cancel",
                     "amend"), "driver.cli"),
    "agents": "driver.agents_cli",
    **dict.fromkeys(("skills", "templates"), "driver.entries_cli"),
    "learnings": "driver.learnings_cli",
    "config": "warden.config_cli",
}


def help_only(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """The `func` of a command group run without its subcommand: print the group's help, exit 2."""

    def show_help(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return show_help


def optional_file(given: str | Path | None, default: Path) -> Path | None:
    """The file a flag names; without the flag, `default` when that file exists; else None."""
    if given:
        return Path(given)
    return default if default.exists() else None


DEFAULT_GRACE = 30.0  # seconds; Kubernetes' default terminationGracePeriodSeconds is 30 too
STOP_MARGIN = 5.0  # after the grace: a stopping server closes its log; a supervisor waits this long more


def add_grace_flag(parser: argparse.ArgumentParser) -> None:
    """`--grace` of every server: how a SIGTERM drains (docs/operations.md)."""
    parser.add_argument(
        "--grace", type=float, default=DEFAULT_GRACE, metavar="SECONDS",
        help=f"on SIGTERM: health goes NOT_SERVING, new calls are refused, calls in flight get this long to "
        f"finish (default {DEFAULT_GRACE:g}), then the rest are cancelled and the log closes",
    )


def add_metrics_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-address", metavar="HOST:PORT",
                        help="serve Prometheus /metrics and /healthz over HTTP here (default off)")


def build_parser(modules: tuple[str, ...] = _COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="warden",
        description="warden governs AI agents: every step of the loop is a decision code takes, and is recorded.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that part is not built yet
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    # warden uses no pydantic plugins, and discovering them reads every installed package's
    # metadata on the first model class: tens of milliseconds of every command's start
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from warden.config import ConfigError, find_config_file, parse

    argv = sys.argv[1:] if argv is None else argv
    owner = COMMAND_OWNERS.get(argv[0]) if argv else None
    try:
        # a config file is checked against every command, so it needs the whole tree
        whole = owner is None or find_config_file(argv, os.environ)[0] is not None
        parser = build_parser() if whole else build_parser((owner,))  # type: ignore[arg-type]
        # flags over WARDEN_* variables over the TOML file over defaults, for every command
        args = parse(parser, argv)
    except ConfigError as exc:
        print(f"warden: config: {exc}", file=sys.stderr)
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # `warden ... | head`: a reader that stops reading is not an error. stdout is gone; point
        # it at /dev/null so the interpreter's final flush stays quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
