"""The arguments of `warden audit` and its subcommands: parsing only; each subcommand runs a
function of `commands`."""

from __future__ import annotations

import argparse
import re

from checkpoint.audit.cli import commands
from checkpoint.audit.cli.commands import EXIT_USAGE
from checkpoint.audit.moments import since
from warden.config import what_to_act_on
from warden.oidc_flags import add_oidc_flags
from warden.store.url import add_store_flags

DEFAULT_WEB_ADDRESS = "127.0.0.1:7405"
DEFAULT_LIMIT = 1000  # a query prints at most this many unless told otherwise (--limit, --all)


def register(subparsers: argparse._SubParsersAction) -> None:
    audit = subparsers.add_parser(
        "audit",
        help="read, follow, verify and export the decision log",
        description="The checkpoint's decision log: every decision, hash-chained. See docs/audit.md.",
    )
    audit.set_defaults(func=lambda _args: (audit.print_help(), EXIT_USAGE)[1])
    subcommands = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND")

    where = argparse.ArgumentParser(add_help=False)
    group = where.add_mutually_exclusive_group()
    group.add_argument(
        "--data",
        default="./.warden",
        metavar="DIR",
        help="data folder; the log is DIR/decisions.db (default ./.warden)",
    )
    group.add_argument("--log", metavar="FILE", help="the decision log file itself")
    # the log a fleet shares on PostgreSQL (docs/fleet.md); read by tail, query, verify, head, export, ship, serve,
    # and checked to exist by pubkey and anchors (which print the data folder's key and signed heads)
    shared = argparse.ArgumentParser(add_help=False)
    add_store_flags(shared)

    window = argparse.ArgumentParser(add_help=False)
    window.add_argument("--since", type=since, metavar="WHEN",
                        help="from this time: RFC 3339, a date, today, yesterday, or an age like 15m, 2h, 7d")
    window.add_argument("--until", type=since, metavar="WHEN",
                        help="before this time (same forms): --since yesterday --until today is yesterday")

    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument("--run", metavar="RUN_ID", help="only this run")
    filters.add_argument(
        "--tree",
        metavar="ROOT_RUN_ID",
        help="only the delegation tree whose root run this is: the root and every run below it",
    )
    filters.add_argument("--agent", help="only this agent")
    filters.add_argument(
        "--verdict",
        type=str.upper,
        choices=["ALLOW", "DENY", "REQUIRE_APPROVAL", "HALT"],
        help="only this verdict",
    )
    filters.add_argument("--code", help="only this stable code (e.g. tool_not_allowed; a plan refused for a "
                         "step's sake is found by that step's code too)")
    filters.add_argument("--tenant", help="only this tenant")
    filters.add_argument("--tool", help="only calls of this tool")
    filters.add_argument("--action", help="only this action: tool_call, model_call, delegation, plan, start_run, "
                         "approval, rejection, pause, resume, cancel, amend, catalog, end, gateway, none")
    filters.add_argument("--rule", help="only records decided by this rule, as recorded (rule:NAME, allowlist, ...)")
    filters.add_argument("--person", help="only runs this person is accountable for")
    filters.add_argument("--caller", help="only requests made with this credential (its name)")
    filters.add_argument("--principal", help="only requests of this principal")
    filters.add_argument("--approver", help="only the approvals and rejections this person made, and the calls "
                         "their approvals let through")
    filters.add_argument("--approval-id", metavar="DECISION_ID",
                         help="only the approval record with this decision id and the call that spent it")
    filters.add_argument("--trace-id", metavar="HEX32",
                         help="only requests that carried this W3C trace id (traceparent), 32 lowercase hex digits")
    filters.add_argument("--subject", "--text", dest="text", metavar="TEXT",
                         help="only records whose arguments or reason contain TEXT (a subject, a host, an id)")
    filters.add_argument("--shadow-flips", action="store_true",
                         help="only records whose shadow answer (`mode: shadow` rules enforced) differs from the "
                         "enforced one, in verdict or code")

    # what to read, never how: a WARDEN_PERSON meant for `warden up` must not narrow an export
    what_to_act_on(filters, window)

    tail = subcommands.add_parser(
        "tail", parents=[where, shared, filters], help="the last records; --follow for new ones"
    )
    tail.add_argument(
        "-n", type=int, default=10, metavar="N", help="how many records to show first (default 10)"
    )
    tail.add_argument(
        "-f", "--follow", action="store_true", help="keep printing records as they are committed"
    )
    tail.add_argument("--format", choices=["line", "jsonl"], default="line")
    tail.set_defaults(func=commands.tail_command)

    query = subcommands.add_parser("query", parents=[where, shared, filters, window], help="records matching filters")
    what_to_act_on(query.add_argument("--after", type=int, default=0, metavar="SEQ", help="only records after this seq"))
    limit = query.add_mutually_exclusive_group()
    limit.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                       help=f"at most N records (default {DEFAULT_LIMIT})")
    limit.add_argument("--all", action="store_true", help="every matching record, however many")
    query.add_argument("--format", choices=["table", "jsonl", "csv"], default="table")
    query.set_defaults(func=commands.query_command)

    verify = subcommands.add_parser(
        "verify",
        parents=[where, shared],
        help="check the hash chain; exit 1 naming the first broken record",
        description="Recompute every record's hash and link, across the sealed segments (each file as sealed, "
        "each manifest line signed) and the live file; a log whose oldest segments were pruned is proved from "
        "the last pruned head. Exit 0 when the chain is whole, 1 when it is "
        "broken (the first broken record is named), 2 when the log cannot be read. Records deleted "
        "from the end leave a shorter whole chain: the data folder's signed heads are checked as anchors "
        "(a log without any is verified on its chain alone, with a warning); pass signed heads kept "
        "elsewhere with --anchors (`warden audit anchors`), or a head recorded earlier with --expect-head.",
    )
    verify.add_argument(
        "--expect-head",
        type=_anchor,
        metavar="SEQ:HASH",
        help="a head from `warden audit head`, kept elsewhere",
    )
    verify.add_argument(
        "--anchors",
        metavar="FILE",
        help="signed heads from `warden audit anchors`, kept elsewhere: each signature is checked, then "
        "that the log still holds each anchored record (no rewrite, no truncation since); default: the "
        "data folder's decisions.heads.jsonl",
    )
    verify.add_argument(
        "--pubkey",
        metavar="PEM",
        help="the head-signing public key (`warden audit pubkey`), your own copy, for the anchors and the "
        "sealed segments' manifest; default: the data folder's key, which whoever can rewrite the log may "
        "have replaced",
    )
    verify.set_defaults(func=commands.verify_command)

    pubkey = subcommands.add_parser(
        "pubkey", parents=[where, shared], help="print the public key the checkpoint signs heads with (PEM)"
    )
    pubkey.set_defaults(func=commands.pubkey_command)

    anchors = subcommands.add_parser(
        "anchors", parents=[where, shared], help="print the signed heads (JSON lines), to keep elsewhere"
    )
    anchors.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    what_to_act_on(anchors.add_argument("--after", type=int, default=0, metavar="SEQ", help="only heads after this seq"))
    anchors.set_defaults(func=commands.anchors_command)

    head = subcommands.add_parser(
        "head", parents=[where, shared], help="print the last seq and hash, to keep elsewhere as an anchor"
    )
    head.set_defaults(func=commands.head_command)

    rotate = subcommands.add_parser(
        "rotate",
        parents=[where, shared],
        help="seal the live file's records into a read-only segment; the chain continues",
        description="Move the live file's records (all but the newest, or up to --upto SEQ) into a new sealed, "
        "read-only segment in DIR/decisions.d/, listed in its signed manifest; the live file's chain continues "
        "from the sealed head. Safe while the checkpoint writes. See docs/audit.md, \"Retention\". With --store "
        "(a fleet's log on PostgreSQL): export each closed partition into the archive folder --to, seal it, and "
        "record its seal in the database (docs/fleet.md, \"Retention of the fleet's decision log\").",
    )
    rotate.add_argument("--to", metavar="DIR", help="with --store: the archive folder (default DIR/decisions-archive); "
                        "verify it with `warden audit verify --log ARCHIVE/decisions.db --pubkey KEY`")
    rotate.add_argument("--upto", type=int, metavar="SEQ", help="seal records up to this seq (default: all but "
                        "the newest, which stays in the live file)")
    rotate.set_defaults(func=commands.rotate_command)

    prune = subcommands.add_parser(
        "prune",
        parents=[where, shared],
        help="delete the oldest sealed segments; their sealed head stays, so the rest still verifies",
        description="Delete whole sealed segments whose records all come before SEQ or TIME, oldest first. "
        "The manifest keeps each pruned segment's signed seal line, so `verify` proves what remains from "
        "the last pruned head. The live file is never pruned: `rotate` first.",
    )
    prune.add_argument("--before", required=True, metavar="SEQ|WHEN",
                       help="a seq (segments whose last seq is below it) or a time as --since takes it "
                       "(segments whose last record is older)")
    prune.add_argument("--detach", action="store_true", help="with --store: detach the partitions (kept as tables "
                       "of their own, outside the log) instead of dropping them")
    prune.set_defaults(func=commands.prune_command)

    export = subcommands.add_parser(
        "export", parents=[where, shared, filters, window], help="JSON lines for a SIEM, with hashes"
    )
    export.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    what_to_act_on(export.add_argument(
        "--after",
        type=int,
        default=0,
        metavar="SEQ",
        help="only records after this seq (incremental shipping)",
    ))
    export.set_defaults(func=commands.export_command)

    from checkpoint.audit import ship_cli  # its own module: argparse only, the shipping loads when it runs

    ship_cli.register(subcommands, where, commands.any_log_reader, shared)

    serve = subcommands.add_parser(
        "serve",
        parents=[where, shared],
        help="a read-only web view of the log for auditors, behind their checkpoint credential",
        description="Serve a read-only web page and JSON API (/api/...) over the decision log: the live "
        "decision stream with filters, a run's timeline with its delegation tree, breaker trips and "
        "approvals, the chain's verification status, and each agent version's figures as a chart. An "
        "auditor logs in with their own checkpoint key (`warden keys add`, or a line `NAME TOKEN` of the "
        "checkpoint's key file) or, with the --oidc-* settings, an identity token of the organisation's provider; the policy folder's principals (`audit.tenants`) and tenant roles (`auditor`) decide "
        "whose records they see, as for WatchDecisions. No endpoint writes. See docs/audit.md.",
    )
    serve.add_argument("--address", default=DEFAULT_WEB_ADDRESS, metavar="HOST:PORT",
                       help=f"where to listen (default {DEFAULT_WEB_ADDRESS}; port 0 picks a free one). "
                       "An address other than loopback needs --tls-cert and --tls-key: tokens travel in "
                       "every request")
    serve.add_argument("--policies", default="policies", metavar="DIR",
                       help="the checkpoint's policy folder: principals and tenant roles (default ./policies)")
    serve.add_argument("--tokens", metavar="FILE",
                       help="the checkpoint's key file (default DATA/checkpoint.tokens)")
    add_oidc_flags(serve)
    serve.add_argument("--anchors", metavar="FILE",
                       help="signed heads kept elsewhere to verify against (default: the data folder's "
                       "decisions.heads.jsonl when it exists)")
    serve.add_argument("--pubkey", metavar="PEM",
                       help="your copy of the head-signing public key (default: the data folder's key)")
    serve.add_argument("--verify-interval", type=float, default=5.0, metavar="SECONDS",
                       help="walk the chain again at most this often; readers share the result (default 5)")
    serve.add_argument("--reload-interval", type=float, default=5.0, metavar="SECONDS",
                       help="look for policy edits this often (default 5); the token file is looked at "
                       "on every request")
    serve.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    serve.add_argument("--tls-key", metavar="FILE", help="and this private key (PEM)")
    serve.add_argument("-v", "--verbose", action="store_true", help="log every request")
    serve.set_defaults(func=commands.serve_command)


def _anchor(text: str) -> tuple[int, str]:
    seq, _, digest = text.partition(":")
    if not seq.isdigit() or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise argparse.ArgumentTypeError("expected SEQ:HASH, e.g. 1234:9f86d0...")
    return int(seq), digest
