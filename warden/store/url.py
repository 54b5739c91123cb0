"""The store setting: which store a process opens, and how it is shown without its password.

    sqlite:///var/lib/warden      SQLite files in that folder (an absolute path: three slashes)
    sqlite:.warden                 a folder relative to where the command runs
    (unset)                        SQLite files in the process's data folder, as on one machine
    postgresql://warden@db:5432/warden?sslmode=verify-full   one database for a whole fleet

The password of a PostgreSQL store comes from `--store-password-file` (a file only its owner can
read), or from libpq's own sources (PGPASSWORD, ~/.pgpass); a password written in the URL works but
is discouraged. Whatever its source, `shown` never includes it: it is the only form that reaches a
log, a record, an error or `warden config show`.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from warden.store.errors import StoreUrlInvalid

SQLITE = "sqlite"
POSTGRESQL = "postgresql"
_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# anywhere in a text (a URL quoted inside an error message too); the secret runs to the last `@`
# of the URL, since a password may hold `/` and `@` that libpq still reads as the password
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^/@:\s\"']*):(?P<secret>[^\s\"']*)@")
_QUOTED = re.compile(r"\"[^\"]*\"")
_PARAM_PASSWORD = re.compile(r"(?P<head>(?:[?&]|\s|^)password=)(?P<secret>[^&\s]*)")


def shown(text: str) -> str:
    """A store URL (or a libpq connection string) with any password replaced by `***`."""
    text = _URL_PASSWORD.sub(lambda m: f"{m.group('head')}:***@", text)
    return _PARAM_PASSWORD.sub(lambda m: f"{m.group('head')}***", text)


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """Where one process keeps its state. `conninfo` may hold a password: print `shown`, never it."""

    scheme: str  # SQLITE or POSTGRESQL
    folder: Path | None = None  # SQLite: the folder each store keeps its file in
    conninfo: str = ""  # PostgreSQL: the URL as given
    password: str | None = None  # PostgreSQL: from the password file, kept out of conninfo

    @property
    def is_postgresql(self) -> bool:
        return self.scheme == POSTGRESQL

    @property
    def shown(self) -> str:
        if self.scheme == SQLITE:
            return f"sqlite://{self.folder}" if self.folder and self.folder.is_absolute() else f"sqlite:{self.folder}"
        return shown(self.conninfo)

    def sqlite_file(self, name: str) -> Path:
        """The file of one SQLite store (`decisions.db`) in this store's folder."""
        if self.folder is None:
            raise StoreUrlInvalid(f"store {self.shown}: not a SQLite store")
        return self.folder / name

    def __repr__(self) -> str:  # a traceback or a debug print must not carry the password either
        return f"StoreUrl({self.shown!r})"


def sqlite_in(folder: str | Path) -> StoreUrl:
    """The embedded default: SQLite files in the process's data folder."""
    return StoreUrl(SQLITE, folder=Path(folder))


def parse_store_url(text: str | None, *, default_folder: str | Path, password_file: str | Path | None = None) -> StoreUrl:
    """The store a setting names; unset or empty: SQLite in `default_folder`. StoreUrlInvalid, with
    a message that names the setting without its password, when it names nothing warden can open."""
    text = (text or "").strip()
    if not text:
        return sqlite_in(default_folder)
    if text.startswith(SQLITE + ":"):
        if password_file:
            raise StoreUrlInvalid(f"store {text}: a password file is for a postgresql store, not sqlite")
        rest = text[len(SQLITE) + 1 :]
        path = rest[2:] if rest.startswith("//") else rest  # sqlite:///abs -> /abs; sqlite:rel -> rel
        if not path:
            raise StoreUrlInvalid(f"store {text}: no folder; write sqlite:///absolute/folder or sqlite:relative/folder")
        return StoreUrl(SQLITE, folder=Path(path))
    if text.startswith(_POSTGRES_SCHEMES):
        return StoreUrl(POSTGRESQL, conninfo=_checked_conninfo(text), password=_password(password_file))
    scheme = text.split(":", 1)[0] if ":" in text else text
    raise StoreUrlInvalid(f"store {shown(text)}: unknown scheme {shown(scheme)!r}; use sqlite:///folder or postgresql://user@host/db")


def _checked_conninfo(text: str) -> str:
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(text)
    except ProgrammingError as exc:
        # libpq quotes the part it could not read, which may be the password: never echo it
        reason = _QUOTED.sub('"..."', str(exc).strip().splitlines()[0])
        raise StoreUrlInvalid(f"store {shown(text)}: not a valid PostgreSQL URL ({shown(reason)})") from None
    ports = str(params.get("port") or "").split(",")
    if any(p and not p.isdigit() for p in ports):
        raise StoreUrlInvalid(f"store {shown(text)}: port {shown(str(params['port']))!r} is not a number")
    if not params.get("dbname"):
        raise StoreUrlInvalid(f"store {shown(text)}: no database; name it after the host: postgresql://user@host/DATABASE")
    return text


def _password(password_file: str | Path | None) -> str | None:
    if not password_file:
        return None
    from warden.private import UntrustedFileError, read_trusted_text

    try:
        password = read_trusted_text(password_file, "store password file", secret=True).strip()
    except OSError as exc:
        raise StoreUrlInvalid(f"store password file {password_file}: {exc.strerror}") from None
    except UntrustedFileError as exc:
        raise StoreUrlInvalid(str(exc)) from None
    if not password:
        raise StoreUrlInvalid(f"store password file {password_file}: empty")
    return password


def add_store_flags(parser: argparse.ArgumentParser) -> None:
    """`--store` and `--store-password-file`, the same on every command that opens a store; as
    settings they are also WARDEN_STORE, WARDEN_STORE_PASSWORD_FILE and `[store] url` in the file."""
    parser.add_argument(
        "--store", metavar="URL",
        help="where state lives: sqlite:///folder (default: SQLite files in the data folder) or "
        "postgresql://user@host/db, shared by a fleet (docs/fleet.md); also [store] url in the settings file",
    )
    parser.add_argument(
        "--store-password-file", metavar="FILE",
        help="the PostgreSQL password, read from this file (only its owner may read it); else libpq's "
        "PGPASSWORD or ~/.pgpass. Never printed",
    )


def store_of(args: argparse.Namespace, default_folder: str | Path) -> StoreUrl:
    """The store the parsed flags name (see add_store_flags)."""
    return parse_store_url(getattr(args, "store", None), default_folder=default_folder,
                           password_file=getattr(args, "store_password_file", None))
