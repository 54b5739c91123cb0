"""`warden audit`: read, follow, verify and export the decision log.

Every subcommand opens the log read-only and never creates it: pointing the CLI at the wrong
folder is an error, not an empty log.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from checkpoint.audit.moments import since
from warden.config import what_to_act_on
from warden.store.url import add_store_flags

if TYPE_CHECKING:  # imported where a command runs: `--help` stays fast (tests/contracts/test_cli_start.py)
    from checkpoint.audit.port import DecisionLogReader
    from checkpoint.audit.reader import DecisionReader
    from checkpoint.audit.store import Filters

EXIT_OK, EXIT_BROKEN, EXIT_USAGE = 0, 1, 2
DEFAULT_WEB_ADDRESS = "127.0.0.1:7405"
DEFAULT_LIMIT = 1000  # a query prints at most this many unless told otherwise (--limit, --all)


def register(subparsers: argparse._SubParsersAction) -> None:
    audit = subparsers.add_parser(
        "audit",
        help="read, follow, verify and export the decision log",
        description="The checkpoint's decision log: every decision, hash-chained. See docs/audit.md.",
    )
    audit.set_defaults(func=lambda _args: (audit.print_help(), EXIT_USAGE)[1])
    commands = audit.add_subparsers(dest="audit_command", metavar="SUBCOMMAND")

    where = argparse.ArgumentParser(add_help=False)
    group = where.add_mutually_exclusive_group()
    group.add_argument(
        "--data",
        default="./.warden",
        metavar="DIR",
        help="data folder; the log is DIR/decisions.db (default ./.warden)",
    )
    group.add_argument("--log", metavar="FILE", help="the decision log file itself")
    # the log a fleet shares on PostgreSQL (docs/fleet.md); read by tail, query, verify, head, export
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
                         "approval, rejection, pause, resume, cancel, amend, catalog, end, none")
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

    tail = commands.add_parser(
        "tail", parents=[where, shared, filters], help="the last records; --follow for new ones"
    )
    tail.add_argument(
        "-n", type=int, default=10, metavar="N", help="how many records to show first (default 10)"
    )
    tail.add_argument(
        "-f", "--follow", action="store_true", help="keep printing records as they are committed"
    )
    tail.add_argument("--format", choices=["line", "jsonl"], default="line")
    tail.set_defaults(func=_tail)

    query = commands.add_parser("query", parents=[where, shared, filters, window], help="records matching filters")
    what_to_act_on(query.add_argument("--after", type=int, default=0, metavar="SEQ", help="only records after this seq"))
    limit = query.add_mutually_exclusive_group()
    limit.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                       help=f"at most N records (default {DEFAULT_LIMIT})")
    limit.add_argument("--all", action="store_true", help="every matching record, however many")
    query.add_argument("--format", choices=["table", "jsonl", "csv"], default="table")
    query.set_defaults(func=_query)

    verify = commands.add_parser(
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
    verify.set_defaults(func=_verify)

    pubkey = commands.add_parser(
        "pubkey", parents=[where], help="print the public key the checkpoint signs heads with (PEM)"
    )
    pubkey.set_defaults(func=_pubkey)

    anchors = commands.add_parser(
        "anchors", parents=[where], help="print the signed heads (JSON lines), to keep elsewhere"
    )
    anchors.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    what_to_act_on(anchors.add_argument("--after", type=int, default=0, metavar="SEQ", help="only heads after this seq"))
    anchors.set_defaults(func=_anchors)

    head = commands.add_parser(
        "head", parents=[where, shared], help="print the last seq and hash, to keep elsewhere as an anchor"
    )
    head.set_defaults(func=_head)

    rotate = commands.add_parser(
        "rotate",
        parents=[where],
        help="seal the live file's records into a read-only segment; the chain continues",
        description="Move the live file's records (all but the newest, or up to --upto SEQ) into a new sealed, "
        "read-only segment in DIR/decisions.d/, listed in its signed manifest; the live file's chain continues "
        "from the sealed head. Safe while the checkpoint writes. See docs/audit.md, \"Retention\".",
    )
    rotate.add_argument("--upto", type=int, metavar="SEQ", help="seal records up to this seq (default: all but "
                        "the newest, which stays in the live file)")
    rotate.set_defaults(func=_rotate)

    prune = commands.add_parser(
        "prune",
        parents=[where],
        help="delete the oldest sealed segments; their sealed head stays, so the rest still verifies",
        description="Delete whole sealed segments whose records all come before SEQ or TIME, oldest first. "
        "The manifest keeps each pruned segment's signed seal line, so `verify` proves what remains from "
        "the last pruned head. The live file is never pruned: `rotate` first.",
    )
    prune.add_argument("--before", required=True, metavar="SEQ|WHEN",
                       help="a seq (segments whose last seq is below it) or a time as --since takes it "
                       "(segments whose last record is older)")
    prune.set_defaults(func=_prune)

    export = commands.add_parser(
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
    export.set_defaults(func=_export)

    from checkpoint.audit import ship_cli  # its own module: argparse only, the shipping loads when it runs

    ship_cli.register(commands, where, _reader)

    serve = commands.add_parser(
        "serve",
        parents=[where],
        help="a read-only web view of the log for auditors, behind their checkpoint credential",
        description="Serve a read-only web page and JSON API (/api/...) over the decision log: the live "
        "decision stream with filters, a run's timeline with its delegation tree, breaker trips and "
        "approvals, the chain's verification status, and each agent version's figures as a chart. An "
        "auditor logs in with their own checkpoint token (a line `NAME TOKEN` of the checkpoint's token "
        "file); the policy folder's principals (`audit.tenants`) and tenant roles (`auditor`) decide "
        "whose records they see, as for WatchDecisions. No endpoint writes. See docs/audit.md.",
    )
    serve.add_argument("--address", default=DEFAULT_WEB_ADDRESS, metavar="HOST:PORT",
                       help=f"where to listen (default {DEFAULT_WEB_ADDRESS}; port 0 picks a free one). "
                       "An address other than loopback needs --tls-cert and --tls-key: tokens travel in "
                       "every request")
    serve.add_argument("--policies", default="policies", metavar="DIR",
                       help="the checkpoint's policy folder: principals and tenant roles (default ./policies)")
    serve.add_argument("--tokens", metavar="FILE",
                       help="the checkpoint's token file, `NAME TOKEN` lines (default DATA/checkpoint.tokens)")
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
    serve.set_defaults(func=_serve)


# -- argument types -----------------------------------------------------------------------


def _anchor(text: str) -> tuple[int, str]:
    seq, _, digest = text.partition(":")
    if not seq.isdigit() or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise argparse.ArgumentTypeError("expected SEQ:HASH, e.g. 1234:9f86d0...")
    return int(seq), digest


# -- commands -----------------------------------------------------------------------------


def _reader(args: argparse.Namespace, *, manifest: bool = True) -> DecisionReader | None:
    """The log's reader, or None (after saying why) when it cannot be read. `manifest`: also refuse
    a sealed segments' manifest that cannot be read (verify reports that as a broken log instead)."""
    from checkpoint.audit import segments, store
    from checkpoint.audit.errors import AuditUnavailable
    from checkpoint.audit.reader import DecisionReader

    path = Path(args.log) if args.log else Path(args.data) / "decisions.db"
    if not path.is_file():
        print(f"warden audit: no decision log at {path}", file=sys.stderr)
        return None
    try:
        store.open_reader(path).close()
        if manifest:
            segments.read_manifest(path)
    except (AuditUnavailable, segments.ManifestError) as exc:
        print(f"warden audit: {path}: {exc} (`warden audit verify` says more)" if manifest else
              f"warden audit: {path}: {exc}", file=sys.stderr)
        return None
    return DecisionReader(path)


def _log_reader(args: argparse.Namespace, *, manifest: bool = True) -> DecisionLogReader | None:
    """`_reader`, or the reader of the PostgreSQL log `--store` (or WARDEN_STORE) names."""
    from checkpoint.audit.errors import AuditUnavailable
    from warden.store.errors import StoreUrlInvalid
    from warden.store.url import store_of

    if not getattr(args, "store", None) or args.log:
        return _reader(args, manifest=manifest)
    try:
        url = store_of(args, args.data)
    except StoreUrlInvalid as exc:
        print(f"warden audit: {exc}", file=sys.stderr)
        return None
    if not url.is_postgresql:
        args.log = str(url.sqlite_file("decisions.db"))
        return _reader(args, manifest=manifest)
    from checkpoint.audit.backends import open_reader

    try:
        return open_reader(url)
    except AuditUnavailable as exc:
        print(f"warden audit: {exc}", file=sys.stderr)
        return None


def _filters(args: argparse.Namespace) -> Filters:
    return {
        "run_id": args.run,
        "root_run_id": args.tree,
        "agent": args.agent,
        "verdict": args.verdict,
        "code": args.code,
        "tenant": args.tenant,
        "tool": args.tool,
        "action": args.action,
        "rule": args.rule,
        "person": args.person,
        "caller": args.caller,
        "principal": args.principal,
        "approver": args.approver,
        "approval_id": args.approval_id,
        "trace_id": args.trace_id,
        "text": args.text,
        "shadow_flips": args.shadow_flips or None,
        "since": getattr(args, "since", None),  # query and export only
        "until": getattr(args, "until", None),
    }


def _tail(args: argparse.Namespace) -> int:
    reader = _log_reader(args)
    if reader is None:
        return EXIT_USAGE
    records = reader.tail(max(args.n, 0), **_filters(args)) if args.n > 0 else []
    _print_stream(records, args.format, sys.stdout)
    if not args.follow:
        return EXIT_OK
    after = records[-1]["seq"] if records else (reader.head() or (0, ""))[0]
    try:
        _print_stream(reader.follow(after, **_filters(args)), args.format, sys.stdout)
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def _query(args: argparse.Namespace) -> int:
    reader = _log_reader(args)
    if reader is None:
        return EXIT_USAGE
    limit = None if args.all else max(args.limit, 0)
    # one more than shown: whether the limit cut anything off is said, never guessed
    records = list(reader.read(args.after, limit=None if limit is None else limit + 1, **_filters(args)))
    cut = limit is not None and len(records) > limit
    records = records[:limit] if cut else records
    if args.format == "jsonl":
        _write_jsonl(records, sys.stdout)
    elif args.format == "csv":
        _write_csv(records, sys.stdout)
    else:
        _print_table(records, shadow=args.shadow_flips)
    if cut:
        print(f"warden audit query: showing the first {limit} records; more match (--limit N, --all, "
              f"or --after {records[-1]['seq']} for the next page)", file=sys.stderr)
    return EXIT_OK


def _log_path(args: argparse.Namespace) -> Path:
    return Path(args.log) if args.log else Path(args.data) / "decisions.db"


def _verify(args: argparse.Namespace) -> int:
    reader = _log_reader(args, manifest=False)
    if reader is None:
        return EXIT_USAGE
    from checkpoint.audit import heads

    # Without --anchors the data folder's own signed heads are the anchors: the chain alone cannot
    # show records deleted from the end, or a tail rewritten and rehashed, and the heads can. They
    # are read before the log, so a head signed meanwhile never lies beyond what is read.
    own = not args.anchors
    source = heads.heads_path(_log_path(args)) if own else Path(args.anchors)
    key_file = Path(args.pubkey) if args.pubkey else heads.key_path(_log_path(args))
    signed: list[heads.SignedHead] = []
    public = None
    try:
        if not own or source.exists():
            signed = heads.read_heads(source)
        if args.pubkey:  # the auditor's own copy: for the anchors and the manifest's seals
            public = heads.load_public_key(key_file)
        if signed and public is None:
            public = heads.load_public_key(key_file)
    except (OSError, ValueError) as exc:
        if not own:
            print(f"warden audit verify: {exc}", file=sys.stderr)
            return EXIT_USAGE
        # the folder's own heads are part of what is verified: one that cannot be read or checked
        # is a log that does not verify, not a reason to verify without them
        print(f"BROKEN: the data folder's signed heads {source} cannot be checked ({exc}); pass your own "
              "copies with --anchors and --pubkey", file=sys.stderr)
        return EXIT_BROKEN
    anchors = []
    for number, head in enumerate(signed, 1):
        assert public is not None
        name = f"anchor {number} of {source}"
        if not head.verifies(public):
            print(f"BROKEN: {name} (seq {head.seq}, signed {head.time}): its signature does not verify with "
                  f"key {heads.key_id(public)} (the anchor was altered, or another key signed it)",
                  file=sys.stderr)
            return EXIT_BROKEN
        anchors.append(head.anchor(name))
    if anchors and not args.pubkey:
        what = f"the data folder's signed heads ({source})" if own else "the anchors"
        print(f"warden audit verify: checking {what} with the data folder's own key; whoever can rewrite the "
              "log may have replaced both: pass your own copies with --anchors and --pubkey", file=sys.stderr)
    elif own and not signed:
        print(f"warden audit verify: WARNING: no signed heads in {source}: records deleted from the end of this "
              "log, or a tail rewritten and rehashed, would not show. The checkpoint signs its head every "
              "minute and when it stops; check against copies kept elsewhere with --anchors and --pubkey",
              file=sys.stderr)
    report = reader.verify(expect_head=args.expect_head, anchors=anchors, public_key=public)
    summary = report.summary()
    if report.ok and anchors:
        summary += f"; {len(anchors)} signed anchor(s) hold, the last at seq {max(a.seq for a in anchors)}"
    print(summary, file=sys.stdout if report.ok else sys.stderr)
    return EXIT_OK if report.ok else EXIT_BROKEN


def _rotate(args: argparse.Namespace) -> int:
    from checkpoint.audit.rotate import RotateError, rotate
    from checkpoint.audit.segments import ManifestError

    if _reader(args) is None:
        return EXIT_USAGE
    try:
        seal = rotate(_log_path(args), upto=args.upto)
    except (RotateError, ManifestError) as exc:
        print(f"warden audit rotate: {exc}", file=sys.stderr)
        return EXIT_BROKEN
    if seal is None:
        print("nothing to seal (the newest record always stays in the live file)", file=sys.stderr)
        return EXIT_OK
    print(f"sealed seqs {seal.first_seq}..{seal.last_seq} ({seal.records} records) into {seal.file}, "
          f"head {seal.last_seq}:{seal.last_hash}")
    return EXIT_OK


def _prune(args: argparse.Namespace) -> int:
    from checkpoint.audit.rotate import prune
    from checkpoint.audit.segments import ManifestError

    if _reader(args) is None:
        return EXIT_USAGE
    before_seq = int(args.before) if args.before.isdigit() else None
    try:
        before_time = None if before_seq is not None else since(args.before)
    except argparse.ArgumentTypeError as exc:
        print(f"warden audit prune: --before: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        done = prune(_log_path(args), before_seq=before_seq, before_time=before_time)
    except ManifestError as exc:
        print(f"warden audit prune: {exc}", file=sys.stderr)
        return EXIT_BROKEN
    for seal in done:
        print(f"pruned {seal.file}: seqs {seal.first_seq}..{seal.last_seq}, sealed head {seal.last_seq}:{seal.last_hash}")
    if not done:
        print("nothing to prune", file=sys.stderr)
    return EXIT_OK


def _pubkey(args: argparse.Namespace) -> int:
    from checkpoint.audit import heads

    if _reader(args) is None:  # a wrong folder is an error, whatever the command reads
        return EXIT_USAGE

    path = heads.key_path(_log_path(args))
    try:
        public = heads.load_public_key(path)
    except (OSError, ValueError) as exc:
        print(f"warden audit pubkey: no head-signing key ({exc}); the checkpoint makes one when it starts",
              file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(heads.public_pem(public))
    print(f"key_id {heads.key_id(public)}", file=sys.stderr)
    return EXIT_OK


def _anchors(args: argparse.Namespace) -> int:
    from checkpoint.audit import heads

    if _reader(args) is None:  # a wrong folder is an error, whatever the command reads
        return EXIT_USAGE

    path = heads.heads_path(_log_path(args))
    try:
        found = [h for h in heads.read_heads(path) if h.seq > args.after]
    except (OSError, ValueError) as exc:
        print(f"warden audit anchors: no signed heads ({exc}); the checkpoint signs its head every minute "
              "and when it stops", file=sys.stderr)
        return EXIT_USAGE
    text = "".join(head.line() + "\n" for head in found)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {len(found)} signed heads to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _head(args: argparse.Namespace) -> int:
    reader = _log_reader(args)
    if reader is None:
        return EXIT_USAGE
    seq, digest = reader.head() or (0, "0" * 64)
    print(f"{seq}:{digest}")
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    from checkpoint.audit.reader import DecisionReader

    reader = _log_reader(args)
    if reader is None:
        return EXIT_USAGE
    if args.after > 0 and isinstance(reader, DecisionReader):  # only the SQLite log prunes
        from checkpoint.audit import segments

        start = segments.read_manifest(reader.path).start[0]
        if args.after < start:
            # an incremental export resumes where the last one stopped: the records between were
            # pruned before it ran, and reading on past them would hide that they ever existed
            print(f"warden audit export: records {args.after + 1}..{start} were pruned before this export; the log "
                  f"now starts after seq {start}. Nothing written: to accept the loss, export --after {start}",
                  file=sys.stderr)
            return EXIT_BROKEN
    records = reader.read(args.after, **_filters(args))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            count = _write_jsonl(records, out)
        print(f"exported {count} records to {args.output}", file=sys.stderr)
    else:
        _write_jsonl(records, sys.stdout)
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    import ipaddress
    import logging
    import ssl

    from checkpoint.audit.web.access import Gate
    from checkpoint.audit.web.server import make_server
    from checkpoint.audit.web.views import DecisionViews
    from checkpoint.policy.errors import PolicyLoadError
    from warden.auth import TokenFileError

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if _reader(args) is None:
        return EXIT_USAGE
    host, _, port_text = args.address.rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit():
        print(f"warden audit serve: --address is HOST:PORT, not {args.address!r}", file=sys.stderr)
        return EXIT_USAGE
    tls = (args.tls_cert, args.tls_key)
    if any(tls) and not all(tls):
        print("warden audit serve: --tls-cert and --tls-key go together", file=sys.stderr)
        return EXIT_USAGE
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not all(tls):
        print(f"warden audit serve: {host} is not a loopback address: auditors' tokens would cross the network "
              "in the clear; give --tls-cert and --tls-key", file=sys.stderr)
        return EXIT_USAGE
    log_path = _log_path(args)
    tokens = Path(args.tokens) if args.tokens else log_path.parent / "checkpoint.tokens"
    try:
        gate = Gate(tokens, Path(args.policies), reload_interval=args.reload_interval)
    except (OSError, TokenFileError, PolicyLoadError) as exc:
        print(f"warden audit serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    views = DecisionViews(log_path, verify_interval=args.verify_interval,
                          anchors_path=Path(args.anchors) if args.anchors else None,
                          pubkey_path=Path(args.pubkey) if args.pubkey else None)
    try:
        server = make_server(host, int(port_text), gate, views)
    except OSError as exc:
        print(f"warden audit serve: cannot listen on {args.address}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    scheme = "http"
    if all(tls):
        try:
            server.use_tls(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError, ValueError) as exc:
            print(f"warden audit serve: {exc}", file=sys.stderr)
            server.server_close()
            return EXIT_USAGE
        scheme = "https"
    shown = f"[{host}]" if ":" in host else host
    print(f"warden audit serve: {scheme}://{shown}:{server.port}/ (log {log_path}, policies {args.policies}, "
          f"tokens {tokens}); Ctrl-C stops", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return EXIT_OK


# -- output -------------------------------------------------------------------------------


def _write_csv(records: Iterable[dict[str, Any]], out: IO[str]) -> int:
    import csv

    from checkpoint.audit.record import COLUMNS

    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    count = 0
    for record in records:
        writer.writerow([_csv_cell(record.get(name)) for name in COLUMNS])
        count += 1
    return count


def _csv_cell(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return "" if value is None else value


def _write_jsonl(records: Iterable[dict[str, Any]], out: IO[str]) -> int:
    count = 0
    for record in records:
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        count += 1
    return count


def _line(record: dict[str, Any]) -> str:
    parts = [
        f"{record['seq']:>7}",
        record["time"],
        f"{record['verdict']:<16}",
        f"{record['code'] or '-':<24}",
    ]
    parts.append(f"{record['action']}")
    for label, name in (("tool", "tool"), ("agent", "agent"), ("run", "run_id"), ("rule", "rule")):
        if record.get(name):
            parts.append(f"{label}={record[name]}")
    shadow = record.get("shadow_verdict")
    if shadow and (shadow, record.get("shadow_code")) != (record["verdict"], record["code"]):
        parts.append(f"shadow={shadow}/{record.get('shadow_code')}/{record.get('shadow_rule')}")
    return " ".join(parts)


def _print_stream(records: Iterable[dict[str, Any]], fmt: str, out: IO[str]) -> None:
    for record in records:
        if fmt == "jsonl":
            out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        else:
            out.write(_line(record) + "\n")
        out.flush()  # a follower is read live, often through a pipe


def _print_table(records: Iterable[dict[str, Any]], *, shadow: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False, header_style="bold")
    columns = ["seq", "time", "verdict", "code", "action", "tool", "agent", "run", "rule", "reason"]
    if shadow:  # --shadow-flips: the shadow answer beside the enforced one
        columns[4:4] = ["shadow verdict", "shadow code", "shadow rule"]
    for name in columns:
        table.add_column(name, overflow="fold", justify="right" if name == "seq" else "left")
    count = 0
    for r in records:
        cells = [
            str(r["seq"]),
            r["time"],
            r["verdict"],
            r["code"] or "",
            r["action"],
            r["tool"] or "",
            r["agent"] or "",
            r["run_id"] or "",
            r["rule"] or "",
            r["reason"] or "",
        ]
        if shadow:
            cells[4:4] = [r.get("shadow_verdict") or "", r.get("shadow_code") or "", r.get("shadow_rule") or ""]
        table.add_row(*cells)
        count += 1
    # Piped output gets a wide fixed width, so a grep of the table does not see folded cells.
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200)
    console.print(table)
    console.print(f"{count} record(s)")
