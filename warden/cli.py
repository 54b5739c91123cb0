"""The one `warden` command. Each process package contributes its own subcommands.

A package registers subcommands through a ``register(subparsers)`` function in its
``cli`` module; the modules are imported lazily so that `warden --help` stays fast
and a broken optional part never hides the others.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

# (module, what it adds). Order is the order shown in --help.
_COMMAND_MODULES = (
    "checkpoint.cli",  # policy check/test, check
    "checkpoint.server_cli",  # checkpoint serve, keys
    "checkpoint.audit.cli",  # audit tail/query/verify/export
    "toolrunner.cli",  # toolrunner serve
    "warden.up_cli",  # up
    "driver.cli",  # driver serve, run, runs, watch, approve, reject, pause, resume, cancel, amend
    "driver.agents_cli",  # agents list/show/history/diff/propose/review/approve/reject/retire/rollback
    "driver.entries_cli",  # skills and templates: list/show/history/propose|save/approve/reject/retire
    "driver.learnings_cli",  # learnings list/show/promote/review/reject/retire
    "warden.config_cli",  # config show
    "warden.store_cli",  # store migrate/status
    "warden.hooks.cli",  # hook claude-code
    "warden.client.inbox_cli",  # inbox list/approve/reject
    "warden.mcp.cli",  # mcp serve, mcp pins
)

# Each top-level command: the module that registers it, and its line in `warden --help`, in that
# order. A command builds only its own module's part of the parser, and `warden --help` only this
# list: building every parser is most of a start. tests/contracts/test_cli_start.py holds this
# table to what the modules register, and the short --help to the one the whole tree prints.
COMMANDS: dict[str, tuple[str, str]] = {
    "policy": ("checkpoint.cli", "check, test and describe policy files"),
    "check": ("checkpoint.cli", "decide one request (proto3 JSON CheckRequest) and print the CheckResponse"),
    "checkpoint": ("checkpoint.server_cli", "run the checkpoint (the policy decision point)"),
    "keys": ("checkpoint.server_cli", "create key material"),
    "audit": ("checkpoint.audit.cli", "read, follow, verify and export the decision log"),
    "toolrunner": ("toolrunner.cli", "run granted tool calls in hardened containers"),
    "up": ("warden.up_cli", "start checkpoint, toolrunner and driver on loopback"),
    "driver": ("driver.cli", "the run driver (model loop)"),
    "run": ("driver.cli", "start a run of an agent on a goal"),
    "runs": ("driver.cli", "list runs, or show one"),
    "watch": ("driver.cli", "stream a run's events"),
    "approve": ("driver.cli", "approve a call waiting for a person"),
    "reject": ("driver.cli", "reject a call waiting for a person"),
    "pause": ("driver.cli", "pause a run and its active child runs"),
    "resume": ("driver.cli", "resume a paused run"),
    "cancel": ("driver.cli", "cancel a run"),
    "amend": ("driver.cli", "amend a run's goal (a new goal version)"),
    "agents": ("driver.agents_cli", "the agent catalog: versions, proposals, reviews, retirement"),
    "skills": ("driver.entries_cli", "skills: playbooks an agent's model may load by name, as data"),
    "templates": ("driver.entries_cli", "templates: task specs with a TARGET placeholder, served by list_templates"),
    "learnings": ("driver.learnings_cli", "learnings: advice from failures and breakers, reviewed by a person"),
    "config": ("warden.config_cli", "show the effective settings of a command"),
    "store": ("warden.store_cli", "migrate and inspect the store (SQLite files or a shared PostgreSQL)"),
    "hook": ("warden.hooks.cli", "permission hooks for agents warden does not host"),
    "inbox": ("warden.client.inbox_cli", "calls the hooks and the MCP gateway asked a person to approve"),
    "mcp": ("warden.mcp.cli", "a governing MCP gateway in front of MCP servers"),
}
COMMAND_OWNERS = {name: owner for name, (owner, _help) in COMMANDS.items()}
_HELP_FLAGS = ("-h", "--help")


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


def _root() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(
        prog="warden",
        description="warden governs AI agents: every step of the loop is a decision code takes, and is recorded.",
    )
    return parser, parser.add_subparsers(dest="command", metavar="COMMAND")


def build_command_list() -> argparse.ArgumentParser:
    """The parser `warden --help` prints: every command's name and line, none of their own parsers."""
    parser, subparsers = _root()
    for name, (_owner, line) in COMMANDS.items():
        subparsers.add_parser(name, help=line, add_help=False)
    return parser


def build_parser(modules: tuple[str, ...] = _COMMAND_MODULES) -> argparse.ArgumentParser:
    parser, subparsers = _root()
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
        configured = find_config_file(argv, os.environ)[0] is not None
        if not configured and (not argv or argv[0] in _HELP_FLAGS):
            # `warden` and `warden --help` print the command list: no command's own parser is needed
            build_command_list().print_help()
            return 0 if argv else 2
        whole = owner is None or configured
        parser = build_parser() if whole else build_parser((owner,))  # type: ignore[arg-type]
        # flags over WARDEN_* variables over the TOML file over defaults, for every command
        args = parse(parser, argv)
    except ConfigError as exc:
        for line in str(exc).splitlines():  # a settings file's mistakes, every one of them
            print(f"warden: config: {line}", file=sys.stderr)
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


# Commands whose whole work is to read files and print one answer, in a process of their own. The
# cyclic collector would only walk, again and again, the objects their imports and policy load
# create, and free nothing (~5% of warden check; peak memory unchanged, 50.5 MiB); the
# interpreter's teardown (closing files, finalizing the ~360 modules a policy load imports) is
# about an eighth of it. run() runs them without the one and leaves with os._exit once their output
# is flushed; main() called in-process is untouched by either.
QUICK_EXIT = frozenset({"check"})


def run() -> NoReturn:
    """The `warden` program: main(), then exit with its code."""
    argv = sys.argv[1:]
    quick = bool(argv) and argv[0] in QUICK_EXIT
    if quick:
        gc.disable()
    code = main(argv)
    if quick:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (BrokenPipeError, ValueError):  # a reader that stopped reading, or a closed stream
                pass
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
