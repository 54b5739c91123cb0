"""`warden policy ...` and `warden check` (`warden checkpoint serve` and `warden keys` are checkpoint/server_cli.py's)."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from warden.config import what_to_act_on
from warden.store.url import add_store_flags, store_of

if TYPE_CHECKING:  # imported where a command runs: `--help` stays fast (tests/contracts/test_cli_start.py)
    from checkpoint.policy import AgentCatalog, PolicyLoadError

# Exit codes, documented in each command's --help.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_LOAD = 0, 1, 2, 3


def register(subparsers: argparse._SubParsersAction) -> None:
    policy = subparsers.add_parser("policy", help="check, test and describe policy files")
    policy_sub = policy.add_subparsers(dest="policy_command", metavar="COMMAND", required=True)

    check = policy_sub.add_parser("check", help="load a policy folder and report every error with file:line")
    check.add_argument("directory", type=Path, help="the policy folder, e.g. policies")
    check.add_argument("--cel-engine", choices=("native", "python"), default="native")
    check.set_defaults(func=cmd_policy_check)

    apply = policy_sub.add_parser(
        "apply", help="install a policy folder as a whole: a new snapshot with a manifest, then one link switched",
        description="Copies SOURCE into a new snapshot folder beside the link (LINK.versions/TIME-REVISION), "
        "writes its manifest of digests (SHA256SUMS), loads the snapshot as the checkpoint would, and only then "
        "points LINK at it, in one atomic rename. A running checkpoint started with --policies LINK loads the new "
        "set when the link changes, whole. Exit codes: 0 applied, 2 usage (LINK is a real folder), 3 the set "
        "does not load (nothing switched).",
    )
    apply.add_argument("source", type=Path, help="the folder to install (a working copy, a checkout)")
    apply.add_argument("--policies", type=Path, required=True, metavar="LINK",
                       help="the link the checkpoint's --policies names; made on first use")
    apply.add_argument("--cel-engine", choices=("native", "python"), default="native")
    apply.set_defaults(func=cmd_policy_apply)

    from checkpoint import bundle_cli

    bundle_cli.register(policy_sub)  # `bundle` and `bundle-key`

    test = policy_sub.add_parser(
        "test", help="run the *_test.yaml cases beside the policies",
        description="Exit codes: 0 all cases pass, 1 a case failed, 3 the policies or the tests do not load.",
    )
    test.add_argument("directory", type=Path)
    test.add_argument("--cel-engine", choices=("native", "python"), default="native")
    test.add_argument("-v", "--verbose", action="store_true", help="list every case, not only failures")
    test.add_argument("--filter", metavar="TEXT", help="run only the cases whose 'suite / name' contains TEXT")
    test.add_argument("--format", choices=("text", "json", "junit"), default="text",
                      help="text (default), json (cases and coverage), junit (XML for CI)")
    test.add_argument("--output", type=Path, help="write the report here instead of stdout")
    test.set_defaults(func=cmd_policy_test)

    test_schema = policy_sub.add_parser("test-schema", help="print the JSON Schema of *_test.yaml files")
    test_schema.add_argument("--output", type=Path, help="write to this file instead of stdout")
    test_schema.set_defaults(func=cmd_policy_test_schema)

    schema = policy_sub.add_parser("schema", help="print the JSON Schema of policy files, for editors")
    schema.add_argument("--output", type=Path, help="write to this file instead of stdout")
    schema.set_defaults(func=cmd_policy_schema)

    pdiff = policy_sub.add_parser(
        "diff", help="replay recorded decisions and the policy tests against a candidate folder",
        description="List every recorded decision (and policy test) whose verdict or code the candidate folder "
        "would change, grouped by rule and agent. Counters are not recorded: a replay decides as at the start of "
        "a fresh run (breakers do not trip). Exit codes: 0 nothing would change, 1 some decision would change, "
        "2 usage (no log or export, no catalog in --data), 3 a policy folder or the tests do not load.",
    )
    pdiff.add_argument("candidate", type=Path, help="the candidate policy folder")
    pdiff.add_argument("--against", required=True, type=Path, metavar="LOG_OR_EXPORT",
                       help="a data folder (its decisions.db), a decision log file, or a `warden audit export` JSONL file")
    # What to compare against, so the command line only: WARDEN_POLICIES (which the images set for
    # every command) must not turn a comparison with the recorded answers into one with a replay.
    what_to_act_on(pdiff.add_argument("--policies", type=Path, metavar="CURRENT_DIR",
                                      help="the current folder: compare with its replay instead of the recorded answers"))
    pdiff.add_argument("--data", type=Path, help="data folder whose agent catalog resolves pinned old versions")
    add_store_flags(pdiff)  # the catalog a fleet shares, when the store setting names it
    pdiff.add_argument("--versions", choices=("current", "pinned"), default="current",
                       help="agents at the candidate's current versions (default) or at the versions records pinned")
    pdiff.add_argument("--no-tests", action="store_true", help="replay the records only, not the policy tests")
    pdiff.add_argument("--format", choices=("text", "json"), default="text")
    pdiff.add_argument("--limit", type=int, default=20, help="decisions listed per group in text (default 20)")
    pdiff.add_argument("--cel-engine", choices=("native", "python"), default="native")
    pdiff.set_defaults(func=cmd_policy_diff)

    one = subparsers.add_parser(
        "check", help="decide one request (proto3 JSON CheckRequest) and print the CheckResponse",
        description="Exit codes: 0 decided (any verdict), 1 the request is invalid, 2 usage (e.g. --data "
        "holds no agent catalog), 3 the policies do not load.",
    )
    one.add_argument("request", help="a file holding a CheckRequest in proto3 JSON, or - for stdin")
    one.add_argument("--policies", type=Path, default=Path("policies"), help="policy folder (default: policies)")
    one.add_argument("--data", type=Path, help="data folder whose agent catalog resolves pinned old versions")
    add_store_flags(one)  # the catalog a fleet shares, when the store setting names it
    one.add_argument("--explain", action="store_true", help="list every rule evaluated and its outcome")
    one.add_argument("--cel-engine", choices=("native", "python"), default="native")
    one.set_defaults(func=cmd_check)
    # `checkpoint serve` and `keys` are checkpoint/server_cli.py's (warden/cli.py lists both modules)


@contextmanager
def _catalog(args: argparse.Namespace) -> Iterator[AgentCatalog | None]:
    """The agent catalog that resolves pinned old versions, opened read-only where the store
    setting says (`--store`, WARDEN_STORE, `[store] url`): the catalog a fleet shares on PostgreSQL,
    or catalog.db in the SQLite folder named; without the setting DATA/catalog.db (`--data`), and
    None with neither. StoreError when the store cannot be opened or its schema is not current."""
    from checkpoint.policy import AgentCatalog

    if not getattr(args, "store", None):
        yield AgentCatalog(args.data / "catalog.db", read_only=True) if args.data else None
        return
    url = store_of(args, args.data or ".")
    if not url.is_postgresql:
        yield AgentCatalog(url.sqlite_file("catalog.db"), read_only=True)
        return
    from checkpoint.policy.postgresql_store import CATALOG, SCHEMA, PostgresqlStore
    from warden.store.migrations import require_current
    from warden.store.pg import Database

    # read_only: every transaction of the pool is, whatever a path of the loader would try
    with Database(url, name="check", max_size=2, read_only=True) as db:
        require_current(db, SCHEMA)
        yield AgentCatalog(store=PostgresqlStore(db, CATALOG), read_only=True)


def _catalog_shown(args: argparse.Namespace) -> str:
    """Where `_catalog` reads, as an error names it (never a password)."""
    from warden.store.errors import StoreError

    if getattr(args, "store", None):
        try:
            url = store_of(args, args.data or ".")
        except StoreError:
            return "store"
        return url.shown if url.is_postgresql else str(url.sqlite_file("catalog.db"))
    return str(args.data / "catalog.db") if args.data else "catalog"


def _print_errors(exc: PolicyLoadError) -> None:
    for error in exc.errors:
        print(error, file=sys.stderr)


def _load(directory: Path, cel_engine: str, catalog: AgentCatalog | None = None):  # noqa: ANN202
    from checkpoint.policy import PolicyLoadError, load_policy_dir

    try:
        return load_policy_dir(directory, catalog=catalog, cel_engine=cel_engine)
    except PolicyLoadError as exc:
        _print_errors(exc)
        print(f"{len(exc.errors)} error(s); nothing was loaded", file=sys.stderr)
        return None


def cmd_policy_check(args: argparse.Namespace) -> int:
    policies = _load(args.directory, args.cel_engine)
    if policies is None:
        return EXIT_FAILED
    print(
        f"ok: {len(policies.agents)} agents, {len(policies.tools)} tools, {len(policies.rules)} rules, "
        f"{len(policies.off_limits)} off-limits subjects, {len(policies.principals)} principals; "
        f"revision {policies.revision}"
    )
    for agent in sorted(policies.agents.values(), key=lambda a: a.name):
        print(f"  agent {agent.name:<12} version {agent.version}  tools: {', '.join(sorted(agent.tools)) or '(none)'}")
    from checkpoint.policylint import warnings

    for warning in warnings(policies):  # advice only: the exit status is the load's
        print(f"warning: {warning}", file=sys.stderr)
    return EXIT_OK


def cmd_policy_apply(args: argparse.Namespace) -> int:
    from checkpoint.policy import PolicyLoadError
    from checkpoint.policy.snapshot import ApplyError, apply

    try:
        applied = apply(args.source, args.policies, cel_engine=args.cel_engine)
    except ApplyError as exc:
        print(f"warden policy apply: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PolicyLoadError as exc:
        _print_errors(exc)
        print(f"{len(exc.errors)} error(s); the link was not switched: {args.policies} still serves what it did",
              file=sys.stderr)
        return EXIT_LOAD
    was = f" (was {applied.previous})" if applied.previous else ""
    print(f"applied revision {applied.revision}: {args.policies} -> {applied.snapshot}{was}")
    return EXIT_OK


def cmd_policy_test(args: argparse.Namespace) -> int:
    from checkpoint.policy import PolicyLoadError
    from checkpoint.policytest import coverage, find_test_files, load_cases, run_case, unknown_codes
    from checkpoint.policytest_report import report

    policies = _load(args.directory, args.cel_engine)
    if policies is None:
        return EXIT_LOAD
    files = find_test_files(args.directory)
    if not files:
        print(f"no *_test.yaml files under {args.directory}", file=sys.stderr)
        return EXIT_LOAD
    suites = []
    try:
        for path in files:
            suites.append((str(path), *load_cases(path, str(path))))
        problems = [e for shown, _suite, cases in suites for e in unknown_codes(policies, cases, shown)]
        if problems:
            raise PolicyLoadError(problems)
    except PolicyLoadError as exc:
        _print_errors(exc)
        return EXIT_LOAD
    wanted = (args.filter or "").lower()
    ran = [(shown, line, suite, case, run_case(policies, case))
           for shown, suite, cases in suites for line, case in cases
           if wanted in f"{suite} / {case.name}".lower()]
    if not ran:
        print(f"no case matches --filter {args.filter!r}", file=sys.stderr)
        return EXIT_LOAD
    text = report(args.format, ran, coverage(policies, [r for *_, r in ran]), policies.revision, len(suites),
                  verbose=args.verbose)
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK if all(r.ok for *_, r in ran) else EXIT_FAILED


def cmd_policy_diff(args: argparse.Namespace) -> int:
    with ExitStack() as held:  # the catalog's store, closed when the command ends
        return _policy_diff(args, held)


def _policy_diff(args: argparse.Namespace, held: ExitStack) -> int:
    from checkpoint.policy import PolicyLoadError
    from checkpoint.policytest import find_test_files, load_cases
    from checkpoint.replay import ReplaySourceError, diff, read_facts, read_records, render
    from warden.store.errors import StoreError

    try:
        catalog = held.enter_context(_catalog(args))
    except (FileNotFoundError, ValueError, sqlite3.Error, StoreError) as exc:
        code = f" [{exc.code}]" if isinstance(exc, StoreError) else ""
        print(f"warden policy diff: {_catalog_shown(args)}: {exc}{code}", file=sys.stderr)
        return EXIT_USAGE
    against = args.against / "decisions.db" if args.against.is_dir() else args.against
    if not against.is_file():
        print(f"warden policy diff: no decision log or export at {against}", file=sys.stderr)
        return EXIT_USAGE
    candidate = _load(args.candidate, args.cel_engine, catalog)
    if candidate is None:
        return EXIT_LOAD
    current = None
    if args.policies is not None:
        current = _load(args.policies, args.cel_engine, catalog)
        if current is None:
            return EXIT_LOAD
    cases = []
    if not args.no_tests:
        folders = [args.candidate] + ([args.policies] if args.policies is not None else [])
        try:
            for folder in folders:
                for path in find_test_files(folder):
                    suite, found = load_cases(path, str(path))
                    cases += [(f"{suite} / {case.name}", case) for _line, case in found]
        except PolicyLoadError as exc:
            _print_errors(exc)
            return EXIT_LOAD
        if args.policies is not None:  # a suite in both folders is replayed once
            seen: set[str] = set()
            cases = [c for c in cases if not (c[0] in seen or seen.add(c[0]))]  # type: ignore[func-returns-value]
    try:
        report = diff(read_records(against), candidate, current=current, tests=cases, versions=args.versions,
                      facts_from=read_facts(against))
    except ReplaySourceError as exc:
        print(f"warden policy diff: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "json":
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(render(report, limit=args.limit))
    return EXIT_FAILED if report.flips else EXIT_OK


def cmd_policy_test_schema(args: argparse.Namespace) -> int:
    from checkpoint.policytest import suite_json_schema

    text = json.dumps(suite_json_schema(), indent=2, sort_keys=True) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def policy_json_schema() -> dict:
    from pydantic import TypeAdapter

    from checkpoint.policy import model

    schema = TypeAdapter(model.Document).json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "warden policy document"
    return schema


def cmd_policy_schema(args: argparse.Namespace) -> int:
    text = json.dumps(policy_json_schema(), indent=2, sort_keys=True) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    with ExitStack() as held:  # the catalog's store, closed when the command ends
        return _check(args, held)


def _check(args: argparse.Namespace, held: ExitStack) -> int:
    from google.protobuf import json_format

    from checkpoint.engine import InvalidRequest, decide
    from checkpoint.policy.pinned import load as load_pinned
    from warden.checkpoint.v1 import checkpoint_pb2 as pb
    from warden.store.errors import StoreError

    try:
        catalog = held.enter_context(_catalog(args))
    except (FileNotFoundError, ValueError, sqlite3.Error, StoreError) as exc:
        code = f" [{exc.code}]" if isinstance(exc, StoreError) else ""
        print(f"warden check: {_catalog_shown(args)}: {exc}{code}", file=sys.stderr)
        return EXIT_USAGE
    policies = _load(args.policies, args.cel_engine, catalog)
    if policies is None:
        return EXIT_LOAD
    try:
        text = sys.stdin.read() if args.request == "-" else Path(args.request).read_text()
    except OSError as exc:
        print(f"invalid_request: {args.request}: {exc.strerror}", file=sys.stderr)
        return EXIT_FAILED
    request = pb.CheckRequest()
    try:
        json_format.Parse(text, request)
    except json_format.ParseError as exc:
        print(f"invalid_request: {args.request}: not a CheckRequest in proto3 JSON: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.explain:
        request.explain = True
    try:
        response = decide(policies, request, pinned=load_pinned(policies, request))
    except InvalidRequest as exc:
        print(f"{exc.code}: {exc.message}" + (f" (field {exc.field})" if exc.field else ""), file=sys.stderr)
        return EXIT_FAILED
    print(json_format.MessageToJson(response, indent=2))
    return EXIT_OK
