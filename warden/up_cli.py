"""`warden up`: the command that starts the three processes on loopback (warden/up.py does it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from warden import observability
from warden.cli import STOP_MARGIN
from warden.datafolder import DEFAULT_DATA
from warden.store.url import add_store_flags

UP_GRACE = 10.0  # a stack on a laptop: Ctrl-C should not take 30 s


def register(subparsers: argparse._SubParsersAction) -> None:
    up = subparsers.add_parser("up", help="start checkpoint, toolrunner and driver on loopback",
                               description="Start the three processes with embedded defaults, wait until all "
                                           "are healthy, stop them cleanly on Ctrl-C.")
    up.add_argument("--data", default=DEFAULT_DATA, type=Path, help="data folder (default %(default)s)")
    up.add_argument("--policies", default="policies", type=Path, help="policy folder (default %(default)s)")
    up.add_argument("--ports", default="7401,7402,7403", help="checkpoint,toolrunner,driver ports (default %(default)s)")
    up.add_argument("--provider", default="anthropic", choices=("scripted", "anthropic"),
                    help="provider of runs that name none (default %(default)s)")
    up.add_argument("--person", default=None,
                    help="the person at the keyboard, when DATA has no operators file yet (default: env "
                         "WARDEN_PERSON, else alice, the sample tenant's admin); they need a role in the tenant")
    up.add_argument("--metrics-address", metavar="HOST:PORT",
                    help="serve each process's Prometheus /metrics and /healthz on a port of its own: checkpoint "
                         "on PORT, toolrunner on PORT+1, driver on PORT+2 (port 0: each a free one; default off)")
    observability.add_arguments(up, passed_on=True)
    add_store_flags(up)
    up.add_argument("--migrate", action="store_true",
                    help="run `warden store migrate` on the store first (a PostgreSQL store's schema must be current "
                         "before the processes start; nothing to do on SQLite)")
    up.add_argument("--grace", type=float, default=UP_GRACE, metavar="SECONDS",
                    help=f"passed on to all three: on Ctrl-C or SIGTERM calls in flight get this long to finish "
                         f"(default {UP_GRACE:g}; a served process alone defaults to 30); a child still running "
                         f"{STOP_MARGIN:g} s after that is killed")
    up.add_argument("--prepare-only", action="store_true",
                    help="create the key material under DATA (checkpoint/, toolrunner/ with its own copy of the "
                         "grant key, driver/) and exit without starting anything: for a container per process "
                         "(deploy/compose.yaml, docs/deploy.md)")
    up.set_defaults(func=_up)


def _up(args: argparse.Namespace) -> int:
    from warden.store.errors import StoreError
    from warden.up import Stack, metrics_addresses, run_up

    try:
        cp, tr, dr = (int(p) for p in args.ports.split(","))
    except ValueError:
        print("warden up: --ports takes three ports, e.g. 7401,7402,7403", file=sys.stderr)
        return 2
    serve_args = ["--log-format", args.log_format, "--grace", f"{args.grace:g}"]
    serve_args += ["--otlp-endpoint", args.otlp_endpoint] if args.otlp_endpoint else []
    try:
        metrics = metrics_addresses(args.metrics_address)
    except ValueError as exc:
        print(f"warden up: {exc}", file=sys.stderr)
        return 2
    try:
        store_env = _store_env(args)
    except StoreError as exc:
        print(f"warden up: {exc} [{exc.code}]", file=sys.stderr)
        return 2
    stack = Stack(args.data, args.policies, cp, tr, dr, driver_args=["--provider", args.provider],
                  person=args.person, serve_args=serve_args, grace=args.grace, metrics=metrics,
                  store_env=store_env, migrate=args.migrate)
    if args.prepare_only:
        from warden.up import prepare_only

        return prepare_only(stack)
    return run_up(stack)


def _store_env(args: argparse.Namespace) -> dict[str, str]:
    """The store setting every child is given (warden/up.py), checked here first so that a URL that
    cannot be used stops `warden up` before anything starts; {} when none is set."""
    from warden.store.url import store_of

    if not args.store:
        return {}
    url = store_of(args, args.data)  # StoreUrlInvalid for a URL, or a password file, that cannot be used
    print(f"warden up: store {url.shown} for all three", flush=True)
    env = {"WARDEN_STORE": args.store}
    if args.store_password_file:
        env["WARDEN_STORE_PASSWORD_FILE"] = str(Path(args.store_password_file).resolve())
    return env
