"""`warden audit rotate|prune --store postgresql://...`: retention of the fleet's decision log
(checkpoint/audit/pg_retention.py). Exit 0 done, 1 the log does not hold (a broken chain), 2 refused
(a stable code says why) or the store cannot be reached."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK, EXIT_BROKEN, EXIT_USAGE = 0, 1, 2


def pg_store(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The PostgreSQL store `--store` (or WARDEN_STORE) names, or None (a SQLite log)."""
    from warden.store.url import store_of

    if not getattr(args, "store", None) or getattr(args, "log", None):
        return None
    url = store_of(args, args.data)
    return url if url.is_postgresql else None


def _open(args: argparse.Namespace, url):  # type: ignore[no-untyped-def]
    from checkpoint.audit.heads import key_path, load_or_create_key
    from checkpoint.audit.pg_schema import SCHEMA
    from warden.store.migrations import require_current
    from warden.store.pg import Database

    db = Database(url, name="audit-retention", max_size=1).open()
    try:
        require_current(db, SCHEMA)
    except BaseException:
        db.close()
        raise
    return db, load_or_create_key(key_path(Path(args.data) / "decisions.db"))


def rotate(args: argparse.Namespace, url) -> int:  # type: ignore[no-untyped-def]
    from checkpoint.audit.pg_retention import RetentionError, rotate
    from checkpoint.audit.segments import ManifestError
    from warden.store.errors import StoreError

    archive = Path(args.to) if args.to else Path(args.data) / "decisions-archive"
    try:
        db, key = _open(args, url)
    except (StoreError, OSError, ValueError) as exc:
        print(f"warden audit rotate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        seals = rotate(db, archive, key)
    except (RetentionError, ManifestError) as exc:
        print(f"warden audit rotate: {exc}", file=sys.stderr)
        return EXIT_BROKEN
    except StoreError as exc:
        print(f"warden audit rotate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        db.close()
    for seal in seals:
        print(f"sealed partition {seal.number - 1}: seqs {seal.first_seq}..{seal.last_seq} ({seal.records} records) "
              f"into {archive / 'decisions.d' / seal.file}, head {seal.last_seq}:{seal.last_hash}")
    if not seals:
        print("nothing to seal (only closed partitions are sealed: the head's partition is still written to)",
              file=sys.stderr)
    return EXIT_OK


def prune(args: argparse.Namespace, url) -> int:  # type: ignore[no-untyped-def]
    from checkpoint.audit.pg_retention import RetentionError, check_cutoff, prune
    from warden.store.errors import StoreError

    try:
        cutoff = check_cutoff(args.before)
    except RetentionError as exc:
        print(f"warden audit prune: --before: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        db, key = _open(args, url)
    except (StoreError, OSError, ValueError) as exc:
        print(f"warden audit prune: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        removed = prune(db, key, before_time=cutoff, detach=args.detach)
    except (RetentionError, StoreError) as exc:
        print(f"warden audit prune: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        db.close()
    for row in removed:
        print(f"{row['removed']} partition {row['number']}: seqs {row['first_seq']}..{row['last_seq']} "
              f"({row['first_time']} .. {row['last_time']}), sealed head {row['last_seq']}:{row['last_hash']}")
    if not removed:
        print("nothing to prune", file=sys.stderr)
    return EXIT_OK
