"""`warden policy bundle` and `bundle-key`, and the serve flags that follow a signed policy bundle
(docs/bundles.md). Imports what a command needs where it runs: `--help` stays fast."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from checkpoint.server.bundle_source import BundleSettings

EXIT_OK, EXIT_USAGE, EXIT_LOAD = 0, 2, 3


def register(policy_sub: argparse._SubParsersAction) -> None:
    bundle = policy_sub.add_parser(
        "bundle", help="pack a policy folder as a signed bundle (tar.gz) a checkpoint can follow",
        description="Loads FOLDER as the checkpoint would, then writes a tar.gz of its files with a manifest of "
        "their sha256 digests and a serial, signed with the Ed25519 KEY. A checkpoint started with "
        "--policy-bundle takes a bundle only when its signature verifies and its serial is higher than the one "
        "in force. Exit codes: 0 written, 2 usage (no key, a serial not positive), 3 the folder does not load.",
    )
    bundle.add_argument("folder", type=Path, help="the policy folder")
    bundle.add_argument("--key", type=Path, required=True, metavar="KEY.pem",
                        help="the Ed25519 private key (PEM, PKCS8), made by `warden policy bundle-key`")
    bundle.add_argument("--serial", type=int, metavar="N",
                        help="the bundle's serial, higher than every bundle before it (default: the time, in "
                        "seconds since 1970)")
    bundle.add_argument("-o", "--output", type=Path, required=True, help="the bundle file to write")
    bundle.add_argument("--cel-engine", choices=("native", "python"), default="native")
    bundle.set_defaults(func=cmd_bundle)

    key = policy_sub.add_parser(
        "bundle-key", help="make the Ed25519 key pair that signs policy bundles",
        description="Writes KEY.pem (private, mode 0600; never overwritten) and KEY.pub.pem (the public key a "
        "checkpoint's --bundle-pubkey names). Exit codes: 0 written, 2 the private key exists.",
    )
    key.add_argument("key", type=Path, metavar="KEY.pem")
    key.set_defaults(func=cmd_bundle_key)


def add_serve_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--policy-bundle", metavar="URL|PATH",
                       help="follow a signed policy bundle: an http(s) URL polled with ETag, or a file (a mounted "
                       "ConfigMap); installed behind --policies, which then names a link (docs/bundles.md)")
    serve.add_argument("--bundle-pubkey", type=Path, metavar="PEM",
                       help="the Ed25519 public key bundles must be signed with (needed with --policy-bundle)")
    serve.add_argument("--bundle-poll", type=float, default=30.0, metavar="SECONDS",
                       help="seconds between looks at the bundle (default 30)")


def bundle_settings(args: argparse.Namespace) -> BundleSettings | None:
    """The serve flags' bundle; ValueError when they do not fit together."""
    if not args.policy_bundle:
        if args.bundle_pubkey:
            raise ValueError("--bundle-pubkey is given without --policy-bundle")
        return None
    if not args.bundle_pubkey:
        raise ValueError("--policy-bundle needs --bundle-pubkey: a bundle is taken only when its signature verifies")
    if args.bundle_poll <= 0:
        raise ValueError("--bundle-poll must be a positive number of seconds")
    from checkpoint.server.bundle_source import BundleSettings
    from warden.token_keys import load_public_pem

    try:
        public = load_public_pem(args.bundle_pubkey.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--bundle-pubkey {args.bundle_pubkey}: {exc}") from exc
    return BundleSettings(args.policy_bundle, public, args.bundle_poll)


def cmd_bundle(args: argparse.Namespace) -> int:
    import time

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    from checkpoint.policy import PolicyLoadError, load_policy_dir
    from checkpoint.policy.bundle import build
    from warden.private import read_trusted

    serial = args.serial if args.serial is not None else int(time.time())
    if serial < 1:
        print("warden policy bundle: --serial must be a positive integer", file=sys.stderr)
        return EXIT_USAGE
    try:
        key = load_pem_private_key(read_trusted(args.key, "bundle signing key", secret=True), password=None)
    except (OSError, ValueError) as exc:
        print(f"warden policy bundle: {args.key}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not isinstance(key, Ed25519PrivateKey):
        print(f"warden policy bundle: {args.key}: not an Ed25519 private key", file=sys.stderr)
        return EXIT_USAGE
    try:  # a set that does not load is never signed
        policies = load_policy_dir(args.folder, cel_engine=args.cel_engine)
    except PolicyLoadError as exc:
        for error in exc.errors:
            print(error, file=sys.stderr)
        print(f"{len(exc.errors)} error(s); no bundle was written", file=sys.stderr)
        return EXIT_LOAD
    data = build(args.folder, key, serial)
    tmp = args.output.with_name(f".{args.output.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, args.output)  # a ConfigMap or web root never serves half a bundle
    print(f"bundle serial {serial}, revision {policies.revision}: {args.output} ({len(data)} bytes)")
    return EXIT_OK


def cmd_bundle_key(args: argparse.Namespace) -> int:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from warden.token_keys import public_pem

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    try:
        fd = os.open(args.key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        print(f"warden policy bundle-key: {args.key} exists; it is never overwritten", file=sys.stderr)
        return EXIT_USAGE
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub = args.key.with_name(args.key.name.removesuffix(".pem") + ".pub.pem")
    pub.write_text(public_pem(key.public_key()))
    print(f"private key {args.key} (keep it where bundles are built), public key {pub} (give it to "
          "--bundle-pubkey)")
    return EXIT_OK
