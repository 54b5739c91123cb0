"""`warden checkpoint serve` and `warden keys` (init, the token-signing keys; callers' keys in
warden/keys_cli.py).

`register(subparsers)` is called from `checkpoint/cli.py`. Defaults keep everything under one
data folder (`./.warden`): the decision log `decisions.db`, the agent catalog `catalog.db`, the
learnings `learnings.db`, the grant key `grant.key`, caller tokens `checkpoint.tokens`, and the
socket `checkpoint.sock`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import math
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from checkpoint.bundle_cli import add_serve_flags as add_bundle_flags
from checkpoint.bundle_cli import bundle_settings
from checkpoint.server.notify_settings import add_notify_flags, notify_settings
from warden import keys_cli, observability
from warden.cli import add_grace_flag, help_only, optional_file
from warden.oidc_flags import add_oidc_flags, oidc_verifier
from warden.store.url import add_store_flags, store_of

DEFAULT_DATA = "./.warden"
DEFAULT_ADDRESS = "127.0.0.1:7401"
KEY_FILE = "grant.key"
TOKENS_FILE = "checkpoint.tokens"
SOCKET_FILE = "checkpoint.sock"


def register(subparsers: argparse._SubParsersAction) -> None:
    checkpoint = subparsers.add_parser(
        "checkpoint",
        help="run the checkpoint (the policy decision point)",
        description="The checkpoint sidecar.",
    )
    checkpoint.set_defaults(func=help_only(checkpoint))
    commands = checkpoint.add_subparsers(dest="checkpoint_command", metavar="SUBCOMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve Check() over gRPC on TCP and a Unix socket",
        description="Serve CheckpointService, health and reflection; reload policies on change. "
        "See docs/checkpoint-service.md.",
    )
    serve.add_argument(
        "--address", default=DEFAULT_ADDRESS, help=f"TCP host:port (default {DEFAULT_ADDRESS}); '' for none"
    )
    serve.add_argument(
        "--socket", metavar="PATH", help=f"Unix socket (default DATA/{SOCKET_FILE}); '' for none"
    )
    serve.add_argument(
        "--socket-mode", default="0600", choices=["0600", "0660"], help="socket permissions (default 0600)"
    )
    serve.add_argument(
        "--policies", default="policies", metavar="DIR", help="policy folder (default ./policies)"
    )
    serve.add_argument(
        "--data", default=DEFAULT_DATA, metavar="DIR", help=f"data folder (default {DEFAULT_DATA})"
    )
    serve.add_argument(
        "--key", metavar="FILE", help=f"grant signing key (default DATA/{KEY_FILE}; see `warden keys init`)"
    )
    serve.add_argument(
        "--tokens",
        metavar="FILE",
        help=f"bearer tokens for TCP callers (default DATA/{TOKENS_FILE} when it exists)",
    )
    serve.add_argument("--tls-cert", metavar="FILE", help="server certificate (PEM) for mTLS on TCP")
    serve.add_argument("--tls-key", metavar="FILE", help="server private key (PEM)")
    serve.add_argument("--tls-client-ca", metavar="FILE", help="CA that client certificates must chain to")
    serve.add_argument(
        "--metrics-address", metavar="HOST:PORT", help="serve /metrics and /healthz here (default off)"
    )
    serve.add_argument(
        "--http-address", metavar="HOST:PORT",
        help="also serve the checkpoint's methods as JSON over HTTP (the Connect protocol) here, with the same "
        "tokens or mTLS, codes, records and limits, e.g. 127.0.0.1:7402 (default off; docs/checkpoint-service.md, "
        "'HTTP and JSON')",
    )
    serve.add_argument(
        "--max-request-bytes", type=int, default=1 << 20, help="largest request accepted (default 1 MiB)"
    )
    serve.add_argument(
        "--workers", type=_workers, default="1", metavar="N|auto",
        help="checkpoint processes serving the one TCP port (SO_REUSEPORT), each with its own gRPC threads, "
        "sharing the data folder and the decision log; 'auto': one per CPU (default 1). A supervisor restarts "
        "a worker that dies and stops them all on SIGTERM. Worker i serves metrics on the metrics port + i; "
        "the Unix socket is worker 0's (docs/checkpoint-service.md, 'Workers')",
    )
    serve.add_argument(
        "--pin-cpus", nargs="?", const="on", default="auto", type=_pin_mode, metavar="auto|on|off",
        help="run each checkpoint process on one CPU, the one other work leaves most free, its threads SCHED_BATCH, "
        "and move it when other work crowds that CPU: its threads then hand the GIL over on one core, which costs "
        "less CPU per call. 'auto' (the default) pins when every worker can have a CPU of its own; a bare "
        "--pin-cpus is 'on' (docs/checkpoint-service.md, 'Workers')",
    )
    serve.add_argument(
        "--rebalance-interval", type=_seconds_or_never, default=2.0, metavar="SECONDS",
        help="with pinned processes, seconds between looks at how busy other work keeps each CPU (default 2; "
        "0: place once, never move)",
    )
    serve.add_argument(
        "--threads", type=int, default=32,
        help="gRPC threads per worker (default 32; up to 16 of them may hold WatchDecisions streams)",
    )
    serve.add_argument(
        "--reload-interval", type=float, default=5.0,
        help="seconds between policy folder content checks when no file event comes (default 5); 0 disables hot reload",
    )
    serve.add_argument(
        "--reload-settle", type=float, default=1.0,
        help="an edit is loaded once the policy files have not changed for this many seconds (default 1)",
    )
    serve.add_argument(
        "--reload-polling", action="store_true",
        help="poll the policy folder instead of file events (network filesystems that raise none)",
    )
    serve.add_argument("--durability", choices=["NORMAL", "FULL"], default="NORMAL",
                       help="log commits survive a killed process (NORMAL) or also power loss (FULL, fsync per batch)")  # fmt: skip
    serve.add_argument("--head-interval", type=float, default=60.0, metavar="SECONDS",
                       help="sign the decision log's head this often when it moved, and at shutdown; 0: only at "
                       "shutdown (docs/audit.md, 'Signed heads')")  # fmt: skip
    add_grace_flag(serve)
    serve.add_argument("--rotate-size", type=_megabytes, metavar="MB",
                       help="seal the decision log into a read-only segment when its live file's records use this "
                       "many megabytes; the chain continues (docs/audit.md, 'Retention')")
    serve.add_argument("--rotate-age", type=_duration, metavar="AGE",
                       help="seal the decision log when its oldest live record is this old: seconds, or 30m, 12h, 7d")
    serve.add_argument("--run-token-ttl", type=_duration, default=7 * 86400, metavar="AGE",
                       help="how long a run token lives: seconds, or 30m, 12h, 7d (default 7d)")
    serve.add_argument("--approval-token-ttl", type=_duration, default=3600, metavar="AGE",
                       help="how long an approval token lives (default 1h)")
    add_store_flags(serve)
    add_oidc_flags(serve)
    add_notify_flags(serve)
    add_bundle_flags(serve)
    serve.add_argument("-v", "--verbose", action="store_true")
    observability.add_arguments(serve)
    serve.set_defaults(func=_serve)

    keys = subparsers.add_parser(
        "keys", help="create key material", description="Key material for grants and callers."
    )
    keys.set_defaults(func=help_only(keys))
    key_commands = keys.add_subparsers(dest="keys_command", metavar="SUBCOMMAND")
    init = key_commands.add_parser(
        "init",
        help="create the grant signing key and a caller token",
        description="Create DATA/grant.key (HMAC-SHA256 key shared by checkpoint and toolrunner, mode 0600) "
        "and DATA/checkpoint.tokens (a bearer token for TCP callers, mode 0600). Existing files are kept.",
    )
    init.add_argument(
        "--data", default=DEFAULT_DATA, metavar="DIR", help=f"data folder (default {DEFAULT_DATA})"
    )
    init.add_argument("--key", metavar="FILE", help=f"key file (default DATA/{KEY_FILE})")
    init.add_argument("--tokens", metavar="FILE", help=f"token file (default DATA/{TOKENS_FILE})")
    init.add_argument(
        "--caller", default="driver", help="name of the caller the token is for (default driver)"
    )
    init.set_defaults(func=_keys_init)
    for name, text, description in (
        ("list", "show the token-signing keys and the callers' keys",
         "Show the Ed25519 keys in DATA/token-keys/ that sign and verify run and approval tokens (key id, "
         "whether it signs new tokens, the public key), then the callers' keys of DATA/checkpoint.tokens "
         "(name, kind, roles, created, revoked; never a token)."),
        ("rotate", "make a new token-signing key the one that signs",
         "Add an Ed25519 key to DATA/token-keys/ and make it sign new run and approval tokens. The older "
         "keys still verify the tokens they signed; running checkpoints pick the change up at their "
         "next token, with no restart."),
        ("retire", "remove a token-signing key",
         "Remove a key from DATA/token-keys/: every token it signed is refused from the next check on "
         "(run_token_invalid). The active key cannot be retired; rotate first."),
    ):
        command = key_commands.add_parser(name, help=text, description=description)
        command.add_argument("--data", default=DEFAULT_DATA, metavar="DIR",
                             help=f"data folder (default {DEFAULT_DATA})")
        if name == "retire":
            command.add_argument("key_id", help="the key id (`warden keys list`)")
        command.set_defaults(func=functools.partial(_token_keys, name))
        if name == "list":
            command.add_argument("--tokens", metavar="FILE", help=f"callers' key file (default DATA/{TOKENS_FILE})")
    keys_cli.register(key_commands, DEFAULT_DATA)


def _duration(text: str) -> float:
    """Seconds: a plain number, or a number with s, m, h or d."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = text.strip().lower()
    scale = units.get(text[-1:], None)
    number = text[:-1] if scale else text
    try:
        seconds = float(number) * (scale or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration (seconds, or 30m, 12h, 7d): {text!r}") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"a duration above zero, got {text!r}")
    return seconds


def _seconds_or_never(text: str) -> float:
    """Seconds from 0 (never) up, finite."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(seconds) and seconds >= 0):
        raise argparse.ArgumentTypeError(f"expected 0 or more seconds, got {text!r}")
    return seconds


PIN_WORDS = {"auto": "auto", "on": "on", "off": "off",
             # --pin-cpus was a switch: settings written for it (WARDEN_PIN_CPUS=true) keep their meaning
             "true": "on", "yes": "on", "1": "on", "false": "off", "no": "off", "0": "off"}


def _pin_mode(text: str) -> str:
    mode = PIN_WORDS.get(text.strip().lower())
    if mode is None:
        raise argparse.ArgumentTypeError(f"expected auto, on or off, got {text!r}")
    return mode


def _workers(text: str) -> str:
    from checkpoint.server.workers import worker_count

    try:
        worker_count(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--workers: ")) from None
    return text


def _megabytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of megabytes: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a size above zero, got {text!r}")
    return value


def _data_file(given: str | None, data: Path, name: str) -> Path:
    """The file a flag names, else DATA/name."""
    return Path(given) if given else data / name


def _keys_init(args: argparse.Namespace) -> int:
    from warden.grants import SigningKey
    from warden.private import private_folder

    data = Path(args.data)
    key_path = _data_file(args.key, data, KEY_FILE)
    tokens_path = _data_file(args.tokens, data, TOKENS_FILE)
    if key_path.exists():
        try:
            kept = SigningKey.load(key_path)
        except (ValueError, KeyError) as exc:
            print(f"warden: bad grant key {key_path}: {exc}", file=sys.stderr)
            return 2
        print(f"kept existing key {key_path} (id {kept.key_id})")
    else:
        key = SigningKey.generate()
        key.save(key_path)
        print(
            f"created grant key {key_path} (id {key.key_id}); give it to the toolrunner, never to the driver"
        )
    if tokens_path.exists():
        print(f"kept existing tokens {tokens_path}")
    else:
        private_folder(tokens_path.parent)
        fd = os.open(tokens_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("# caller-name token; one per line. Clients send `authorization: Bearer <token>`.\n")
            f.write(f"{args.caller} {secrets.token_urlsafe(32)}\n")
        print(f"created caller token for {args.caller!r} in {tokens_path}")
    return 0


def _token_keys(command: str, args: argparse.Namespace) -> int:
    from warden import token_keys

    folder = Path(args.data) / token_keys.FOLDER
    try:
        if command == "rotate":
            print(f"key {token_keys.rotate(folder)} signs new tokens; the older keys still verify theirs")
        elif command == "retire":
            token_keys.retire(folder, args.key_id)
            print(f"retired key {args.key_id}: the tokens it signed are refused from the next check on")
        for key in token_keys.KeySet(folder).published():
            print(f"{key.key_id} {'active' if key.active else 'verifies'}")
            print(key.pem, end="")
        if command == "list":
            keys_cli.print_callers(keys_cli.key_file(args))
    except (OSError, ValueError) as exc:
        print(f"warden: {exc}", file=sys.stderr)
        return 1
    return 0


def _serve(args: argparse.Namespace) -> int:
    from checkpoint.server.workers import worker_count
    from warden import tracing

    try:
        forks = worker_count(args.workers) > 1
    except ValueError:
        forks = False  # _serve_configured says why
    # Workers are forked, and a process that forks must not run gRPC (grpcio's rule): the OTLP
    # exporter is a gRPC channel, so each worker starts its own tracing, not the supervisor.
    problem = observability.start(args, "warden-checkpoint", level=logging.DEBUG if args.verbose else logging.INFO,
                                  trace=not forks)
    if problem:
        print(f"warden: {problem}", file=sys.stderr)
        return 2
    try:
        return _serve_configured(args)
    finally:
        tracing.shutdown()  # the spans still buffered go out before the process ends


@contextlib.contextmanager
def _worker_tracing(endpoint: str | None) -> Iterator[None]:
    """Tracing for one worker of `serve --workers N`, from its start to its end."""
    from warden import tracing

    tracing.configure("warden-checkpoint", endpoint)
    try:
        yield
    finally:
        tracing.shutdown()


def _serve_configured(args: argparse.Namespace) -> int:
    from checkpoint.audit import AuditUnavailable
    from checkpoint.server import AuthPolicy, TlsConfig, serve
    from checkpoint.server.cpu_placement import should_pin
    from checkpoint.server.workers import serve_workers, worker_count
    from warden.auth import KeySource, TokenFileError
    from warden.grants import SigningKey
    from warden.store.errors import StoreError

    try:
        workers = worker_count(args.workers)
    except ValueError as exc:
        print(f"warden: {exc}", file=sys.stderr)
        return 2
    data = Path(args.data)
    try:
        store = store_of(args, data)
    except StoreError as exc:
        print(f"warden: cannot start the checkpoint: {exc} [{exc.code}]", file=sys.stderr)
        return 2
    key_path = _data_file(args.key, data, KEY_FILE)
    try:
        key = SigningKey.load(key_path)
    except FileNotFoundError:
        print(f"warden: no grant key at {key_path}; run `warden keys init --data {data}`", file=sys.stderr)
        return 2
    except (ValueError, KeyError) as exc:
        print(f"warden: bad grant key {key_path}: {exc}", file=sys.stderr)
        return 2

    tokens_path = optional_file(args.tokens, data / TOKENS_FILE)
    try:
        # every line names its caller: the name is the identity a principal lists; the file is
        # followed, so `warden keys add|revoke` count from the next call
        keys = KeySource(tokens_path) if tokens_path else None
        oidc = oidc_verifier(args)
    except (OSError, TokenFileError, ValueError) as exc:
        print(f"warden: {exc}", file=sys.stderr)
        return 2
    tls_args = (args.tls_cert, args.tls_key, args.tls_client_ca)
    if any(tls_args) and not all(tls_args):
        print("warden: mTLS needs --tls-cert, --tls-key and --tls-client-ca together", file=sys.stderr)
        return 2
    tls = (
        TlsConfig(Path(args.tls_cert), Path(args.tls_key), Path(args.tls_client_ca))
        if all(tls_args)
        else None
    )
    auth = AuthPolicy(keys=keys, oidc=oidc, mtls=tls is not None)
    try:
        notify = notify_settings(args)
        bundle = bundle_settings(args)
        if bundle is not None and workers > 1:
            raise ValueError("--policy-bundle is followed by one process: serve it with --workers 1")
    except (ValueError, OSError) as exc:
        print(f"warden: cannot start the checkpoint: {exc}", file=sys.stderr)
        return 2
    socket = args.socket if args.socket is not None else str(data / SOCKET_FILE)
    run: Any = serve
    pin = should_pin(args.pin_cpus, workers)
    if workers > 1:
        run = functools.partial(serve_workers, workers, pin_cpus=pin, rebalance_interval=args.rebalance_interval,
                                worker_context=functools.partial(_worker_tracing, args.otlp_endpoint))
    elif pin:
        from checkpoint.server.cpu_placement import pin_this_process

        pin_this_process(args.rebalance_interval, args.pin_cpus)
    try:
        return run(
            address=args.address or None,
            uds_path=socket or None,
            uds_mode=int(args.socket_mode, 8),
            policy_dir=args.policies,
            data_dir=data,
            key=key,
            auth=auth,
            tls=tls,
            metrics_address=args.metrics_address,
            http_address=args.http_address or None,
            watch_interval=args.reload_interval or None,
            settle=args.reload_settle,
            reload_polling=args.reload_polling,
            max_request_bytes=args.max_request_bytes,
            max_workers=args.threads,
            log_synchronous=args.durability,
            head_interval=args.head_interval or None,
            grace=args.grace,
            rotate_bytes=int(args.rotate_size * 1_000_000) if args.rotate_size else None,
            rotate_age=args.rotate_age,
            run_token_ttl=args.run_token_ttl,
            approval_token_ttl=args.approval_token_ttl,
            store=store,
            notify=notify,
            bundle=bundle,
        )
    except StoreError as exc:
        print(f"warden: cannot start the checkpoint: {exc} [{exc.code}]", file=sys.stderr)
        return 2
    except (ValueError, OSError, RuntimeError, AuditUnavailable) as exc:
        print(f"warden: cannot start the checkpoint: {exc}", file=sys.stderr)
        return 2
