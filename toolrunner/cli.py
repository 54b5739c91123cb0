"""`warden toolrunner serve`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from warden import observability
from warden.cli import add_grace_flag, add_metrics_flag, help_only, optional_file
from warden.store.url import add_store_flags, store_of

TOKENS_FILE = "toolrunner.tokens"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("toolrunner", help="run granted tool calls in hardened containers")
    sub = parser.add_subparsers(dest="toolrunner_command", metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="serve ToolRunnerService over gRPC",
        description="Serve ToolRunnerService: verify each call's grant, run it in a locked-down "
        "container, return a scrubbed receipt. Needs a Docker engine and the tool images "
        "(scripts/ensure-docker.sh, scripts/build-images.sh).",
    )
    serve.add_argument("--address", default="127.0.0.1:7402", help="host:port to listen on (default %(default)s)")
    serve.add_argument("--data", default=".warden", type=Path,
                       help="data folder: the grant key, tokens, the instance name and, without --store, "
                       "toolrunner.db (default %(default)s)")
    add_store_flags(serve)
    serve.add_argument(
        "--instance", metavar="NAME",
        help="this toolrunner's name in the receipt store, the same across its restarts (on a shared store: "
        "one per toolrunner; default: a name made at the first start and kept in DATA/toolrunner.instance)",
    )
    serve.add_argument("--policies", default="policies", type=Path, help="policy folder with the tool definitions")
    serve.add_argument(
        "--key",
        action="append",
        default=None,
        type=Path,
        help="grant key file shared with the checkpoint (default DATA/grant.key); repeat it during a key "
        "rotation so grants signed by either key verify",
    )
    serve.add_argument(
        "--tokens",
        default=None,
        type=Path,
        help="bearer tokens ('caller token' per line, 0600) admitted to Cancel and GetReceipt "
        "(default DATA/toolrunner.tokens when it exists; without one those two calls are refused)",
    )
    serve.add_argument("--secrets", default=None, type=Path, help="secrets file (JSON or YAML: NAME: value)")
    serve.add_argument("--max-concurrency", type=int, default=4, help="calls at once; more are refused with runner_busy")
    serve.add_argument("--network", default="bridge", help="Docker network for tools with run.network (default %(default)s)")
    serve.add_argument("--runtime", default=None, help="default OCI runtime for every tool, e.g. runsc")
    serve.add_argument("--reap-interval", type=float, default=30.0, help="seconds between leftover sweeps")
    add_metrics_flag(serve)
    add_grace_flag(serve)
    observability.add_arguments(serve)
    serve.set_defaults(func=_serve)
    parser.set_defaults(func=help_only(parser))


def _serve(args: argparse.Namespace) -> int:
    from warden import tracing

    problem = observability.start(args, "warden-toolrunner")
    if problem:
        print(f"warden toolrunner: {problem}", file=sys.stderr)
        return 2
    try:
        return _serve_configured(args)
    finally:
        tracing.shutdown()  # the spans still buffered go out before the process ends


def _serve_configured(args: argparse.Namespace) -> int:
    from toolrunner.errors import RunnerError
    from toolrunner.instance import InstanceNameError
    from toolrunner.keys import KeyringError, load_keyring
    from toolrunner.runner import RunnerConfig
    from toolrunner.secrets import SecretsFileError, load_secrets
    from toolrunner.server import serve
    from warden.auth import TokenFileError, load_tokens
    from warden.metrics import MetricsAddressUnavailable
    from warden.store.errors import StoreError
    from warden.tools import ToolReadError

    try:
        store = store_of(args, args.data)
    except StoreError as exc:
        print(f"warden toolrunner: {exc} [{exc.code}]", file=sys.stderr)
        return 2
    try:
        keys = load_keyring(args.key or [args.data / "grant.key"])
    except KeyringError as exc:
        print(f"warden toolrunner: {exc}", file=sys.stderr)
        return 2
    tokens_path = optional_file(args.tokens, args.data / TOKENS_FILE)
    try:
        tokens = load_tokens(tokens_path) if tokens_path else {}
    except (OSError, TokenFileError) as exc:
        print(f"warden toolrunner: {exc}", file=sys.stderr)
        return 2
    try:
        secrets = load_secrets(args.secrets)
    except SecretsFileError as exc:
        print(f"warden toolrunner: {exc}", file=sys.stderr)
        return 2
    config = RunnerConfig(
        max_concurrency=args.max_concurrency, network_name=args.network, default_runtime=args.runtime
    )
    try:
        return serve(
            args.address,
            policy_dir=args.policies,
            keys=keys,
            tokens=tokens,
            data_dir=args.data,
            store=store,
            instance=args.instance,
            secrets=secrets,
            config=config,
            reap_interval_seconds=args.reap_interval,
            metrics_address=args.metrics_address,
            grace=args.grace,
        )
    except ToolReadError as exc:  # raised before anything binds: every error at file:line
        print(f"warden toolrunner: policies in {args.policies} do not load:\n{exc}", file=sys.stderr)
        return 2
    except MetricsAddressUnavailable as exc:  # bound first: one line, nothing else opened or started
        print(f"warden toolrunner: {exc}", file=sys.stderr)
        return 2
    except (StoreError, InstanceNameError) as exc:  # before anything binds: one line, nothing half-started
        print(f"warden toolrunner: {exc} [{exc.code}]", file=sys.stderr)
        return 2
    except RunnerError as exc:
        print(f"warden toolrunner: {exc}", file=sys.stderr)
        return 1
