"""What a store raises. Each error carries the stable code the caller answers with (warden/codes.py)."""

from __future__ import annotations

from warden.codes import STORE_HALF_MIGRATED, STORE_SCHEMA, STORE_UNAVAILABLE, STORE_URL_INVALID


class StoreError(Exception):
    """A store could not do what was asked; `code` is the stable code to answer with."""

    code = STORE_UNAVAILABLE


class StoreUnavailable(StoreError):
    """The database is down, slow past its statement timeout, or every pooled connection is busy.
    Nothing was changed that the caller can rely on: it refuses (fail closed) and tries again later."""

    code = STORE_UNAVAILABLE


class StoreUrlInvalid(StoreError, ValueError):
    """The store setting names no store warden can open (unknown scheme, no path, a bad password file)."""

    code = STORE_URL_INVALID


class StoreSchemaMismatch(StoreError):
    """The database's schema is not the one this binary knows: missing (run `warden store migrate`)
    or newer (written by a newer release: this one must not touch it)."""

    code = STORE_SCHEMA


class StoreHalfMigrated(StoreError):
    """A catalog file found between two shapes (the old tables and the new, or the new version
    stamped on the old tables): neither shape's reading of it can be trusted, so it is refused."""

    code = STORE_HALF_MIGRATED
