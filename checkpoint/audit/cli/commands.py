"""What each `warden audit` subcommand does: open the log read-only, run, say what happened, and
return the exit code (0 done, 1 the log is broken, 2 it cannot be read or the call is wrong)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from checkpoint.audit.cli.output import print_stream, print_table, write_csv, write_jsonl
from checkpoint.audit.moments import since

if TYPE_CHECKING:  # imported where a command runs: `--help` stays fast (tests/contracts/test_cli_start.py)
    from checkpoint.audit.port import DecisionLogReader
    from checkpoint.audit.reader import DecisionReader
    from checkpoint.audit.store import Filters

EXIT_OK, EXIT_BROKEN, EXIT_USAGE = 0, 1, 2


def log_reader(args: argparse.Namespace, *, manifest: bool = True) -> DecisionReader | None:
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


def any_log_reader(args: argparse.Namespace, *, manifest: bool = True) -> DecisionLogReader | None:
    """`log_reader`, or the reader of the PostgreSQL log `--store` (or WARDEN_STORE) names."""
    from checkpoint.audit.errors import AuditUnavailable
    from warden.store.errors import StoreUrlInvalid
    from warden.store.url import store_of

    if not getattr(args, "store", None) or args.log:
        return log_reader(args, manifest=manifest)
    try:
        url = store_of(args, args.data)
    except StoreUrlInvalid as exc:
        print(f"warden audit: {exc}", file=sys.stderr)
        return None
    if not url.is_postgresql:
        args.log = str(url.sqlite_file("decisions.db"))
        return log_reader(args, manifest=manifest)
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


def tail_command(args: argparse.Namespace) -> int:
    reader = any_log_reader(args)
    if reader is None:
        return EXIT_USAGE
    records = reader.tail(max(args.n, 0), **_filters(args)) if args.n > 0 else []
    print_stream(records, args.format, sys.stdout)
    if not args.follow:
        return EXIT_OK
    after = records[-1]["seq"] if records else (reader.head() or (0, ""))[0]
    try:
        print_stream(reader.follow(after, **_filters(args)), args.format, sys.stdout)
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def query_command(args: argparse.Namespace) -> int:
    reader = any_log_reader(args)
    if reader is None:
        return EXIT_USAGE
    limit = None if args.all else max(args.limit, 0)
    # one more than shown: whether the limit cut anything off is said, never guessed
    records = list(reader.read(args.after, limit=None if limit is None else limit + 1, **_filters(args)))
    cut = limit is not None and len(records) > limit
    records = records[:limit] if cut else records
    if args.format == "jsonl":
        write_jsonl(records, sys.stdout)
    elif args.format == "csv":
        write_csv(records, sys.stdout)
    else:
        print_table(records, shadow=args.shadow_flips)
    if cut:
        print(f"warden audit query: showing the first {limit} records; more match (--limit N, --all, "
              f"or --after {records[-1]['seq']} for the next page)", file=sys.stderr)
    if not records and args.code:
        _name_the_code_meant(args.code)
    return EXIT_OK


def _name_the_code_meant(code: str) -> None:
    """An empty answer to a code warden never gives is most often a typo: name the code meant. A
    rule's own code (`code:` in a rule) is matched as written, so this only says, never refuses."""
    import difflib

    from warden.codes import DECISION_CODES

    if code in DECISION_CODES:
        return
    near = [c for c in DECISION_CODES if c == code.lower()] or difflib.get_close_matches(code.lower(),
                                                                                        DECISION_CODES, n=1)
    meant = f"; did you mean '{near[0]}'?" if near else " (docs/codes.md lists them)"
    print(f"warden audit query: '{code}' is not one of warden's codes{meant} A rule's own code is matched "
          "as written.", file=sys.stderr)


def DecisionReaderType() -> type:  # noqa: N802 - imported late: `--help` stays fast
    from checkpoint.audit.reader import DecisionReader

    return DecisionReader


def _log_path(args: argparse.Namespace) -> Path:
    return Path(args.log) if args.log else Path(args.data) / "decisions.db"


def verify_command(args: argparse.Namespace) -> int:
    reader = any_log_reader(args, manifest=False)
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
    if public is None and not isinstance(reader, DecisionReaderType()):
        # the PostgreSQL log's pruned partitions are proved from seals signed with this key
        with contextlib.suppress(OSError, ValueError):
            public = heads.load_public_key(key_file)
    report = reader.verify(expect_head=args.expect_head, anchors=anchors, public_key=public)
    summary = report.summary()
    if report.ok and anchors:
        summary += f"; {len(anchors)} signed anchor(s) hold, the last at seq {max(a.seq for a in anchors)}"
    print(summary, file=sys.stdout if report.ok else sys.stderr)
    return EXIT_OK if report.ok else EXIT_BROKEN


def _retention_store(args: argparse.Namespace, command: str) -> object:
    """The PostgreSQL store a rotate or prune acts on, None for a SQLite log, or False (said why)."""
    from checkpoint.audit.cli.pg_retention import pg_store
    from warden.store.errors import StoreUrlInvalid

    try:
        return pg_store(args)
    except StoreUrlInvalid as exc:
        print(f"warden audit {command}: {exc}", file=sys.stderr)
        return False


def rotate_command(args: argparse.Namespace) -> int:
    from checkpoint.audit.cli import pg_retention
    from checkpoint.audit.rotate import RotateError, rotate
    from checkpoint.audit.segments import ManifestError

    url = _retention_store(args, "rotate")
    if url is False:
        return EXIT_USAGE
    if url is not None:
        return pg_retention.rotate(args, url)
    if log_reader(args) is None:
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


def prune_command(args: argparse.Namespace) -> int:
    from checkpoint.audit.cli import pg_retention
    from checkpoint.audit.rotate import prune
    from checkpoint.audit.segments import ManifestError

    url = _retention_store(args, "prune")
    if url is False:
        return EXIT_USAGE
    if url is not None:
        return pg_retention.prune(args, url)
    if args.detach:
        print("warden audit prune: --detach is for a log on PostgreSQL (--store)", file=sys.stderr)
        return EXIT_USAGE
    if log_reader(args) is None:
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


def pubkey_command(args: argparse.Namespace) -> int:
    from checkpoint.audit import heads

    if any_log_reader(args) is None:  # a wrong folder is an error, whatever the command reads
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


def anchors_command(args: argparse.Namespace) -> int:
    from checkpoint.audit import heads

    if any_log_reader(args) is None:  # a wrong folder is an error, whatever the command reads
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


def head_command(args: argparse.Namespace) -> int:
    reader = any_log_reader(args)
    if reader is None:
        return EXIT_USAGE
    seq, digest = reader.head() or (0, "0" * 64)
    print(f"{seq}:{digest}")
    return EXIT_OK


def export_command(args: argparse.Namespace) -> int:
    from checkpoint.audit.reader import DecisionReader

    reader = any_log_reader(args)
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
            count = write_jsonl(records, out)
        print(f"exported {count} records to {args.output}", file=sys.stderr)
    else:
        write_jsonl(records, sys.stdout)
    return EXIT_OK


def serve_command(args: argparse.Namespace) -> int:
    import ipaddress
    import logging
    import ssl

    from checkpoint.audit.web.access import Gate
    from checkpoint.audit.web.server import make_server
    from checkpoint.audit.web.views import DecisionViews
    from checkpoint.policy.errors import PolicyLoadError
    from warden.auth import TokenFileError
    from warden.oidc_flags import oidc_verifier

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    reader = any_log_reader(args)
    if reader is None:
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
    tokens: Path | None = Path(args.tokens) if args.tokens else log_path.parent / "checkpoint.tokens"
    try:
        oidc = oidc_verifier(args)
        if oidc is not None and not args.tokens and tokens is not None and not tokens.exists():
            tokens = None  # auditors sign in with identity tokens alone
        gate = Gate(tokens, Path(args.policies), reload_interval=args.reload_interval, oidc=oidc)
    except (OSError, TokenFileError, PolicyLoadError, ValueError) as exc:
        print(f"warden audit serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from checkpoint.audit.pg_reader import PgDecisionReader

    views = DecisionViews(log_path, verify_interval=args.verify_interval,
                          anchors_path=Path(args.anchors) if args.anchors else None,
                          pubkey_path=Path(args.pubkey) if args.pubkey else None,
                          shared=reader if isinstance(reader, PgDecisionReader) else None)
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
