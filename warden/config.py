"""Flags, `WARDEN_*` environment variables and a TOML file, for every command, from one mechanism.

Nothing here knows any command: it walks the argparse tree that `warden.cli.build_parser` built and
treats every long option (`--data`, `--max-request-bytes`, a flag another module adds tomorrow) as a
setting with three more names: the file key `data` / `max_request_bytes` and the environment variable
`WARDEN_DATA` / `WARDEN_MAX_REQUEST_BYTES`. Precedence: flag > environment > file > default.

The file (`--config FILE`, else `$WARDEN_CONFIG`, else `./warden.toml` when it exists) holds keys at
the top, which apply to every command that has the flag, and tables named after commands
(`[checkpoint.serve]`, `[audit.verify]`), whose keys apply to that command and win over the top.
The whole file is checked whatever command runs: an unknown table or key, or a value a command would
refuse, is an error naming the file and line, and nothing runs (fail closed: a typo in `[checkpoint.serve]`
must not start a checkpoint with a default the operator meant to change).

Positional arguments are not settings: they say what to act on, not how. Nor are the flags a command
marks with `what_to_act_on` (the audit commands' filters and --after/--since/--until): a variable
set for one command (WARDEN_PERSON, the person at the keyboard for `warden up`) must not quietly
narrow what another reads (`audit export --person`).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ENV_PREFIX = "WARDEN_"
CONFIG_FLAG = "--config"
CONFIG_ENV = "WARDEN_CONFIG"
DEFAULT_CONFIG = Path("warden.toml")  # in the current folder, like ./policies and ./.warden

# `[store]` in the file: its `url` and `password_file` are `--store` and `--store-password-file` of
# every command (warden/store/url.py), not settings of the `warden store` commands alone
STORE_TABLE = "store"
STORE_TABLE_KEYS = {"url": "store", "password_file": "store_password_file"}

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_ACCUMULATING = (argparse._AppendAction, argparse._AppendConstAction, argparse._ExtendAction, argparse._CountAction)
_SKIPPED = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)


class ConfigError(Exception):
    """A setting that cannot be used; the message names where it came from (file:line or env NAME)."""


# Plain classes, not dataclasses: importing dataclasses (inspect, ...) would cost `warden --help`.
class Source:
    def __init__(self, kind: str, where: str = "") -> None:
        self.kind = kind  # flag, env, file, default
        self.where = where  # WARDEN_DATA, or warden.toml:3

    def __str__(self) -> str:
        return f"{self.kind} {self.where}".strip()


class Resolved:
    """What `config show` prints: each setting of one command, its value and where it came from."""

    def __init__(self, command: tuple[str, ...], config_file: Path | None, config_file_from: str) -> None:
        self.command = command
        self.config_file = config_file
        self.config_file_from = config_file_from
        self.settings: dict[str, tuple[Any, Source]] = {}  # key -> (value, source)


_ACT_ON = "_warden_act_on"


def what_to_act_on(*marked: argparse.ArgumentParser | argparse.Action) -> None:
    """Mark these options (every option of a parser given) as saying what to act on: command line only."""
    for item in marked:
        for action in item._actions if isinstance(item, argparse.ArgumentParser) else [item]:
            setattr(action, _ACT_ON, True)


def key_of(action: argparse.Action) -> str | None:
    """The file key of a flag (`--max-request-bytes` -> `max_request_bytes`); None: not a setting."""
    if isinstance(action, _SKIPPED) or not action.option_strings or getattr(action, _ACT_ON, False):
        return None
    longs = [s for s in action.option_strings if s.startswith("--")]
    if not longs or longs[0] == CONFIG_FLAG:
        return None
    return longs[0][2:].replace("-", "_")


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper()


def settings_of(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {k: a for a in parser._actions if (k := key_of(a))}


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the tree with its command words, the root first."""
    yield path, parser
    sub = _subparsers(parser)
    if sub is not None:
        seen: set[int] = set()
        for name, child in sub.choices.items():
            if id(child) not in seen:  # aliases share a parser
                seen.add(id(child))
                yield from walk(child, (*path, name))


def command_of(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[tuple[str, ...], argparse.ArgumentParser]:
    """The command words in argv and the parser they select. Group parsers take no valued options,
    so the first word that is not an option at each level names the next parser."""
    path: tuple[str, ...] = ()
    for word in argv:
        if word == "--":
            break
        if word.startswith("-"):
            continue
        sub = _subparsers(parser)
        if sub is None or word not in sub.choices:
            break
        parser = sub.choices[word]
        path = (*path, word)
    return path, parser


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    """Give the command about to run (the only parser whose help can be shown) a `--config FILE`
    flag when it has settings; added there, not to all seventy, to keep every start short."""
    if _subparsers(parser) is None and settings_of(parser) and CONFIG_FLAG not in parser._option_string_actions:
        parser.add_argument(
            CONFIG_FLAG, metavar="FILE",
            help=f"TOML settings file (default ${CONFIG_ENV}, else ./{DEFAULT_CONFIG} when it exists); every "
            f"flag is also a key (--max-request-bytes: max_request_bytes) and an environment variable "
            f"({ENV_PREFIX}MAX_REQUEST_BYTES); precedence flag > env > file > default (docs/operations.md)",
        )


# ---- values ---------------------------------------------------------------------------------


def _is_list(action: argparse.Action) -> bool:
    return isinstance(action, argparse._AppendAction) or action.nargs in ("*", "+") or isinstance(action.nargs, int)


def _is_switch(action: argparse.Action) -> bool:
    return action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction)


def _convert_one(parser: argparse.ArgumentParser, action: argparse.Action, value: Any, from_text: bool) -> Any:
    kind = parser._registry_get("type", action.type, action.type)
    if not from_text:  # a TOML value: its type must be the flag's, no silent coercion of "5" or true
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{value!r} is not an integer")
        if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"{value!r} is not a number")
        if kind not in (int, float) and not isinstance(value, str):
            # a flag that parses its own text (N|auto, a size, a duration) takes a TOML number as that text
            plain = kind in (None, str, parser._registry_get("type", None, None))
            if plain or isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{value!r} is not a string")
            value = str(value)
    if kind is not None:
        try:
            value = kind(value)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
            raise ValueError(f"{value!r}: {exc}") from None
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"{value!r} is not one of {', '.join(map(str, action.choices))}")
    return value


def convert(parser: argparse.ArgumentParser, action: argparse.Action, value: Any, *, from_text: bool) -> Any:
    """`value` (TOML, or text from the environment) as the parsed flag would hold it; ValueError if
    the flag would refuse it."""
    if _is_switch(action):
        if from_text:
            low = str(value).strip().lower()
            if low not in _TRUE + _FALSE:
                raise ValueError(f"{value!r} is not one of {', '.join(_TRUE + _FALSE)}")
            on = low in _TRUE
        elif isinstance(value, bool):
            on = value
        else:
            raise ValueError(f"{value!r} is not true or false")
        if isinstance(action, argparse.BooleanOptionalAction):
            return on
        return action.const if on else action.default
    if isinstance(action, argparse._CountAction):
        return _convert_one(parser, argparse.Action([], "x", type=int), value, from_text)
    if _is_list(action):
        items = [v for v in str(value).split(",") if v.strip()] if from_text else value
        if not isinstance(items, list):
            raise ValueError(f"{value!r} is not a list")
        return [_convert_one(parser, action, item.strip() if from_text else item, from_text) for item in items]
    if not isinstance(action, argparse._StoreAction):
        raise ValueError("this flag cannot be set from a file or the environment")
    return _convert_one(parser, action, value, from_text)


# ---- the file -------------------------------------------------------------------------------


def _split_key(text: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in text.split("."))


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line of each table header and key, by its full dotted path. tomllib gives no positions;
    this reads the simple shapes a settings file has (a multi-line string could mislead it, and then
    the error points at its table instead)."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), 1):
        header = re.match(r"\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$", line)
        if header:
            table = _split_key(header.group(1))
            lines.setdefault(table, number)
            continue
        key = re.match(r"\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=", line)
        if key:
            path = (*table, *_split_key(key.group(1)))
            for i in range(len(table) + 1, len(path) + 1):
                lines.setdefault(path[:i], number)
    return lines


class ConfigFile:
    def __init__(self, path: Path, data: dict[str, Any], lines: dict[tuple[str, ...], int]) -> None:
        self.path = path
        self.data = data
        self.lines = lines

    def where(self, path: tuple[str, ...]) -> str:
        for i in range(len(path), 0, -1):
            if path[:i] in self.lines:
                return f"{self.path}:{self.lines[path[:i]]}"
        return f"{self.path}:1"


def read_file(path: Path) -> ConfigFile:
    import tomllib  # only when a file is there: most runs have none

    from warden.private import UntrustedFileError, read_trusted_text

    try:
        # a settings file picks keys, token files and the toolrunner's network: one that another
        # user could have written is not the operator's
        text = read_trusted_text(path, "settings file")
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    except UntrustedFileError as exc:
        raise ConfigError(str(exc)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        raise ConfigError(f"{path}:{line.group(1) if line else 1}: not TOML: {exc}") from None
    return ConfigFile(path, data, key_lines(text))


def _file_values(root: argparse.ArgumentParser, cfg: ConfigFile) -> dict[tuple[str, ...], dict[str, tuple[Any, str]]]:
    """Check the whole file against the whole tree; return, per command path, the converted value
    and file:line of every key that applies to it (deeper tables win)."""
    parsers = dict(walk(root))
    leaves = {p: parser for p, parser in parsers.items() if _subparsers(parser) is None}
    out: dict[tuple[str, ...], dict[str, tuple[Any, str]]] = {p: {} for p in leaves}

    problems: list[str] = []  # every mistake in the file at once, each with its file:line

    def apply(at: tuple[str, ...], name: str, value: Any, where: str) -> None:
        below = {p: parser for p, parser in leaves.items() if p[: len(at)] == at}
        holders = {p: settings_of(parser)[name] for p, parser in below.items() if name in settings_of(parser)}
        if not holders:
            shown = " ".join(at) or "any command"
            import difflib  # only on a mistake: `warden --help` stays fast

            known = sorted({key for parser in below.values() for key in settings_of(parser)})
            near = difflib.get_close_matches(name, known, n=1)
            meant = f"; did you mean {near[0]!r}?" if near else ""
            problems.append(f"{where}: unknown key {name!r}: no flag --{name.replace('_', '-')} in {shown}{meant}")
            return
        for p, action in holders.items():
            try:
                converted = convert(leaves[p], action, value, from_text=False)
            except ValueError as exc:
                problems.append(f"{where}: {name} (for warden {' '.join(p)}): {exc}")
                return
            out[p][name] = (converted, where)

    def visit(table: dict[str, Any], at: tuple[str, ...]) -> None:
        # keys first, then tables: a command's own table is applied after, and so wins
        for name, value in table.items():
            if not (isinstance(value, dict) and (*at, name) in parsers):
                apply(at, name, value, cfg.where((*at, name)))
        for name, value in table.items():
            if isinstance(value, dict) and (*at, name) in parsers:
                visit(value, (*at, name))

    data = dict(cfg.data)
    store = data.get(STORE_TABLE)
    if isinstance(store, dict):
        # `[store] url` is the store of every process: a key of the top, not of `warden store`'s table
        store = dict(store)
        for key, setting in STORE_TABLE_KEYS.items():
            if key in store:
                apply((), setting, store.pop(key), cfg.where((STORE_TABLE, key)))
        data[STORE_TABLE] = store
    visit(data, ())
    if problems:
        raise ConfigError("\n".join(problems))
    return out


def find_config_file(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[Path | None, str]:
    for i, word in enumerate(argv):
        if word == "--":
            break
        if word == CONFIG_FLAG and i + 1 < len(argv):
            return Path(argv[i + 1]), "flag"
        if word.startswith(CONFIG_FLAG + "="):
            return Path(word.split("=", 1)[1]), "flag"
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV]), f"env {CONFIG_ENV}"
    if DEFAULT_CONFIG.is_file():
        return DEFAULT_CONFIG, "default location"
    return None, "none"


# ---- putting it together --------------------------------------------------------------------


def _track_given(leaf: argparse.ArgumentParser) -> set[str]:
    """Make every option of the command record its dest when the command line uses it: that is how
    a setting is told to come from a flag even when the flag repeats the env or file value."""
    given: set[str] = set()
    for parser in (leaf,):
        for action in parser._actions:
            if action.option_strings and not isinstance(action, _SKIPPED) and not hasattr(action, "_warden_given"):
                cls = type(action)

                def call(self: Any, p: Any, ns: Any, values: Any, option_string: Any = None, _cls: Any = cls) -> None:
                    if self.dest not in self._warden_given and isinstance(self, _ACCUMULATING):
                        setattr(ns, self.dest, None)  # the flag replaces an env or file list, never adds to it
                    self._warden_given.add(self.dest)
                    _cls.__call__(self, p, ns, values, option_string)

                action.__class__ = type(cls.__name__, (cls,), {"__call__": call})
                action._warden_given = given  # type: ignore[attr-defined]
    return given


def resolve(root: argparse.ArgumentParser, argv: Sequence[str], environ: Mapping[str, str]) -> tuple[Resolved, argparse.ArgumentParser]:
    """The env and file values of the command argv names, checked; set as that parser's defaults, so
    parsing argv afterwards lets a flag win. ConfigError when any of them is bad."""
    path, leaf = command_of(root, argv)
    add_config_flag(leaf)
    cfg_path, cfg_from = find_config_file(argv, environ)
    resolved = Resolved(path, cfg_path, cfg_from)
    file_values = _file_values(root, read_file(cfg_path)).get(path, {}) if cfg_path else {}
    for key, action in settings_of(leaf).items():
        value, source = action.default, Source("default")
        if key in file_values:
            value, where = file_values[key]
            source = Source("file", where)
        name = env_name(key)
        if name in environ:
            try:
                value = convert(leaf, action, environ[name], from_text=True)
            except ValueError as exc:
                raise ConfigError(f"env {name}: {exc}") from None
            source = Source("env", name)
        if source.kind != "default":
            action.default = value
            action.required = False  # given by env or file: argparse must not ask for it again
        resolved.settings[key] = (value, source)
    return resolved, leaf


def parse(root: argparse.ArgumentParser, argv: Sequence[str], environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    """parse_args with env and file settings under the flags; the Resolved is `args.warden_config`."""
    environ = os.environ if environ is None else environ
    _path, leaf = command_of(root, argv)
    given = _track_given(leaf)
    originals = {id(a): a.default for a in leaf._actions}
    resolved, leaf = resolve(root, argv, environ)
    args = root.parse_args(list(argv))
    settings = settings_of(leaf)
    for key, action in settings.items():
        if action.dest in given:
            resolved.settings[key] = (getattr(args, action.dest), Source("flag"))
    _exclusive(leaf, settings, resolved, args, originals)
    args.warden_config = resolved
    return args


def _exclusive(leaf: argparse.ArgumentParser, settings: dict[str, argparse.Action], resolved: Resolved,
               args: argparse.Namespace, originals: dict[int, Any]) -> None:
    """Flags argparse keeps apart (`--data` or `--log`) stay apart when the environment or a file
    sets them: a flag given for one drops the others' env and file values (WARDEN_DATA set for
    every command must not fight `--log`), and two of them from env or file are an error."""
    keys = {id(a): k for k, a in settings.items()}
    for group in leaf._mutually_exclusive_groups:
        members = [(keys[id(a)], a) for a in group._group_actions if id(a) in keys]
        from_flag = [k for k, _a in members if resolved.settings[k][1].kind == "flag"]
        configured = [(k, a) for k, a in members if resolved.settings[k][1].kind in ("env", "file")]
        if from_flag:
            for key, action in configured:
                setattr(args, action.dest, originals[id(action)])
                resolved.settings[key] = (originals[id(action)], Source("default"))
        elif len(configured) > 1:
            shown = " and ".join(f"{k} ({resolved.settings[k][1]})" for k, _a in configured)
            raise ConfigError(f"{shown} cannot be used together")
