"""`warden inbox list|approve|reject`: a person answers the calls the hooks and the gateway asked for.

The approval is the person's own act at the checkpoint, made with their own credential
(DATA/checkpoint.token); the checkpoint records them as the approver and returns a token bound
to that one call, which this command leaves in the inbox for the adapter that asked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

DEFAULT_CHECKPOINT = "127.0.0.1:7401"


def _default_inbox() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "warden" / "approvals.db"


def register(subparsers: argparse._SubParsersAction) -> None:
    inbox = subparsers.add_parser("inbox", help="calls the hooks and the MCP gateway asked a person to approve",
                                  description=__doc__)
    sub = inbox.add_subparsers(dest="inbox_command", metavar="SUBCOMMAND")
    listing = sub.add_parser("list", help="the calls waiting for a person")
    listing.set_defaults(func=_list)
    for name in ("approve", "reject"):
        act = sub.add_parser(name, help=f"{name} a waiting call, with your own checkpoint credential")
        act.add_argument("decision_id", help="the REQUIRE_APPROVAL decision (as `warden inbox list` shows it)")
        act.add_argument("--note", default="")
        act.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT, help="checkpoint address (default %(default)s)")
        act.add_argument("--credential", metavar="FILE", required=True, help="your own checkpoint credential file")
        act.set_defaults(func=_approve if name == "approve" else _reject)
    for p in sub.choices.values():
        p.add_argument("--inbox", metavar="FILE", help="the inbox (default $XDG_STATE_HOME/warden/approvals.db)")
    inbox.set_defaults(func=lambda _a: (inbox.print_help(), 2)[1])


def _open(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from warden.client import ApprovalInbox

    return ApprovalInbox(Path(args.inbox) if args.inbox else _default_inbox())


def _list(args: argparse.Namespace) -> int:
    for asked in _open(args).waiting():
        print(f"{asked.decision_id}  run {asked.run_id}  {asked.tool} {json.dumps(asked.arguments)[:200]}")
        print(f"    {asked.reason} (asked by {asked.asked_by})")
    return 0


def _act(args: argparse.Namespace, approve: bool) -> int:
    from warden.client import CheckpointClient, ClientError
    from warden.datafolder import read_credential

    inbox = _open(args)
    asked = inbox.asked(args.decision_id)
    if asked is None:
        print(f"warden inbox: {args.decision_id!r} is not waiting (approval_not_pending)", file=sys.stderr)
        return 1
    with CheckpointClient(args.checkpoint, token=read_credential(Path(args.credential))) as client:
        try:
            # what the person decides on is the call as the checkpoint recorded it, never only what
            # the adapter that asked wrote in the inbox
            record = client.recorded(asked.run_id, asked.decision_id)
            if record is None or record["tool"] != asked.tool or record["verdict"] != "REQUIRE_APPROVAL":
                print(f"warden inbox: the checkpoint's log holds no REQUIRE_APPROVAL of {asked.tool} as "
                      f"{args.decision_id!r} in run {asked.run_id} (approval_mismatch)", file=sys.stderr)
                return 1
            print(f"the checkpoint recorded: {record['tool']} {json.dumps(record['arguments'], sort_keys=True)[:500]}")
            act = client.approve if approve else client.reject
            inbox.put(act(asked.run_id, asked.decision_id, args.note))
        except ClientError as exc:
            print(f"warden inbox: {exc}", file=sys.stderr)
            return 1
    print(f"{'approved' if approve else 'rejected'}: {asked.tool} (decision {asked.decision_id})")
    return 0


def _approve(args: argparse.Namespace) -> int:
    return _act(args, approve=True)


def _reject(args: argparse.Namespace) -> int:
    return _act(args, approve=False)
