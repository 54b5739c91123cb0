"""`warden keys add|revoke` and the callers' half of `warden keys list`: people's and services'
keys in the checkpoint's key file (DATA/checkpoint.tokens, warden/keyfile.py).

`add` prints the token once, on standard output alone (a script can take it), and keeps only its
hash; a running checkpoint and audit page take the change at their next call. The file is meant
to be one per checkpoint data folder: on a fleet, every replica's folder needs the same file (a
mounted secret), since keys do not live in the shared PostgreSQL store.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from warden.config import what_to_act_on

TOKENS_FILE = "checkpoint.tokens"


def register(key_commands: argparse._SubParsersAction, default_data: str) -> None:
    add = key_commands.add_parser(
        "add", help="add a person's or a service's key; prints its token once",
        description="Add a key to the checkpoint's key file (DATA/checkpoint.tokens): a new random token, "
        "printed once on standard output, of which only the SHA-256 is kept. A person's key is the identity "
        "person:NAME, a service's service:NAME, as a Principal's identities list them. Running checkpoints "
        "take it at their next call (docs/checkpoint-service.md, 'People and services').")
    add.add_argument("name", help="the person's or the service's name (as the tenant roles name a person)")
    kind = add.add_argument("--kind", required=True, choices=["person", "service"], help="who holds the key")
    role = add.add_argument(
        "--role", action="append", default=[], metavar="ROLE",
        help="what the key may be used for: check, operator, approver, auditor, admin; repeat for more. "
        "Without it, whatever the policy gives its principal. The policy must give the role too")
    what_to_act_on(kind, role)
    revoke = key_commands.add_parser(
        "revoke", help="revoke a person's or a service's key",
        description="Mark a key revoked: its token is refused (unauthenticated) from the next call on, with no "
        "restart. The line stays, so `keys list` says whose key it was and the name is not reused.")
    revoke.add_argument("name", help="the key's name (`warden keys list`)")
    for command, func in ((add, _add), (revoke, _revoke)):
        command.add_argument("--data", default=default_data, metavar="DIR", help=f"data folder (default {default_data})")
        command.add_argument("--tokens", metavar="FILE", help=f"key file (default DATA/{TOKENS_FILE})")
        command.set_defaults(func=func)


def key_file(args: argparse.Namespace) -> Path:
    given = getattr(args, "tokens", None)
    return Path(given) if given else Path(args.data) / TOKENS_FILE


def _add(args: argparse.Namespace) -> int:
    from warden import keyfile

    path = key_file(args)
    try:
        key, token = keyfile.add(path, args.name, args.kind, args.role)
    except (OSError, keyfile.TokenFileError) as exc:
        print(f"warden: {exc}", file=sys.stderr)
        return 1
    print(f"added {key.kind} {key.name!r} ({key.identity}, roles {','.join(key.roles)}) to {path}. Its token "
          f"follows, shown this once: give it to them; clients send `authorization: Bearer <token>`",
          file=sys.stderr)
    print(token)
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from warden import keyfile

    path = key_file(args)
    try:
        key = keyfile.revoke(path, args.name)
    except (OSError, keyfile.TokenFileError) as exc:
        print(f"warden: {exc}", file=sys.stderr)
        return 1
    print(f"revoked {key.name!r} at {key.revoked}: its token is refused from the next call on")
    return 0


def print_callers(path: Path) -> None:
    """The callers' keys of `path`, one line each: name, kind, roles, created, revoked. Never a
    token, nor its hash."""
    from warden import keyfile

    if not path.exists():
        return
    keys = keyfile.read(path)
    print(f"\ncallers ({path}):")
    rows = [("NAME", "KIND", "ROLES", "CREATED", "REVOKED")]
    for key in keys:
        kind = "token (kept in clear)" if key.kind == keyfile.LEGACY else key.kind
        rows.append((key.name, kind, ",".join(key.roles), key.created or "-", key.revoked or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
