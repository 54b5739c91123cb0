"""`warden config show [COMMAND ...]`: each setting's effective value and where it came from."""

from __future__ import annotations

import argparse
import os
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    config = subparsers.add_parser(
        "config", help="show the effective settings of a command",
        description="Settings come from flags, WARDEN_* environment variables and a TOML file "
        "(see docs/operations.md).",
    )
    sub = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    show = sub.add_parser(
        "show", help="print each setting of a command, its value and its source (flag, env, file:line, default)",
        description="Print the settings COMMAND would run with, e.g. `warden config show checkpoint serve "
        "--workers 4`. Flags after COMMAND count as given; positional arguments need not be. Without COMMAND: "
        "the config file in effect and the WARDEN_* variables set. Exit codes: 0 shown, 2 the settings are "
        "bad (file:line or variable named) or COMMAND is not a command.",
    )
    show.add_argument("target", nargs=argparse.REMAINDER, metavar="COMMAND ...",
                      help="command words and flags, as you would run them")
    show.set_defaults(func=cmd_show)
    config.set_defaults(func=lambda _a: (config.print_help(), 2)[1])


def _shown(value: object, key: str = "") -> str:
    if value is None:
        return "(unset)"
    if key == "store" or key.endswith("_url"):
        from warden.store.url import shown

        return shown(str(value))  # a password written in the URL is never printed
    if isinstance(value, list):
        return ",".join(map(_shown, value)) or "(none)"
    return str(value)


def cmd_show(args: argparse.Namespace) -> int:
    from warden import config
    from warden.cli import build_parser

    root = build_parser()
    words = list(args.target)
    path, leaf = config.command_of(root, words)
    if not path:
        cfg, cfg_from = config.find_config_file(words, os.environ)
        print(f"config file: {cfg} ({cfg_from})" if cfg else f"config file: none (no --config, ${config.CONFIG_ENV} "
              f"or ./{config.DEFAULT_CONFIG})")
        known = {config.env_name(k) for _p, parser in config.walk(root) for k in config.settings_of(parser)}
        for name in sorted(n for n in os.environ if n.startswith(config.ENV_PREFIX)):
            print(f"{name}={_shown(os.environ[name], name[len(config.ENV_PREFIX):].lower())}" + ("" if name in known or name == config.CONFIG_ENV
                                                   else "  (no command has this flag)"))
        return 0
    if config._subparsers(leaf) is not None:
        print(f"warden config show: {' '.join(path)} is a group; name one of its commands", file=sys.stderr)
        return 2
    for action in leaf._actions:  # show what the command would run with, without its operands
        if not action.option_strings:
            action.required = False
            action.nargs = "*" if action.nargs in ("+", argparse.REMAINDER) else "?" if action.nargs is None else action.nargs
        action.required = False
    try:
        parsed = config.parse(root, words, os.environ)
    except config.ConfigError as exc:
        print(f"warden: config: {exc}", file=sys.stderr)
        return 2
    resolved = parsed.warden_config
    print(f"warden {' '.join(resolved.command)}")
    print(f"config file: {resolved.config_file} ({resolved.config_file_from})" if resolved.config_file
          else "config file: none")
    rows = [(f"--{key.replace('_', '-')}", _shown(value, key), str(source))
            for key, (value, source) in resolved.settings.items()]
    width = [max((len(r[i]) for r in rows), default=0) for i in range(2)]
    for flag, value, source in rows:
        print(f"  {flag:<{width[0]}}  {value:<{width[1]}}  {source}")
    return 0



