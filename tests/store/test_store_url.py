"""The store setting (warden/store/url.py and `[store]` in the settings file): what each form
opens, what is refused with which code, and that a password is never shown."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from warden.cli import main
from warden.codes import STORE_URL_INVALID
from warden.store.errors import StoreUrlInvalid
from warden.store.url import POSTGRESQL, SQLITE, parse_store_url, shown


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_unset_is_sqlite_in_the_data_folder(tmp_path):
    for text in (None, "", "  "):
        url = parse_store_url(text, default_folder=tmp_path / "data")
        assert (url.scheme, url.folder) == (SQLITE, tmp_path / "data")
        assert url.sqlite_file("decisions.db") == tmp_path / "data" / "decisions.db"


@pytest.mark.parametrize(("text", "folder"), [
    ("sqlite:///var/lib/warden", Path("/var/lib/warden")),
    ("sqlite:.warden", Path(".warden")),
    ("sqlite://rel/folder", Path("rel/folder")),
])
def test_sqlite_forms(text, folder):
    url = parse_store_url(text, default_folder="/unused")
    assert (url.scheme, url.folder, url.is_postgresql) == (SQLITE, folder, False)


@pytest.mark.parametrize("text", ["postgresql://warden@db:5432/warden", "postgres://warden@db/warden?sslmode=require",
                                  "postgresql://warden@/warden?host=/run/postgresql"])
def test_postgresql_forms(text):
    url = parse_store_url(text, default_folder="/unused")
    assert (url.scheme, url.conninfo, url.is_postgresql) == (POSTGRESQL, text, True)


@pytest.mark.parametrize(("text", "says"), [
    ("mysql://warden@db/warden", "unknown scheme 'mysql'"),
    ("redis:", "unknown scheme 'redis'"),
    ("/var/lib/warden", "unknown scheme"),
    ("sqlite:", "no folder"),
    ("sqlite://", "no folder"),
    ("postgresql://warden@db", "no database"),
    ("postgresql://warden@db:notaport/warden", "store postgresql://warden@db:notaport/warden"),
])
def test_what_cannot_be_opened_is_refused_with_its_code(text, says):
    with pytest.raises(StoreUrlInvalid) as caught:
        parse_store_url(text, default_folder="/unused")
    assert says in str(caught.value)
    assert caught.value.code == STORE_URL_INVALID


@pytest.mark.parametrize(("text", "expected"), [
    ("postgresql://warden:s3cret@db/warden", "postgresql://warden:***@db/warden"),
    ("postgresql://warden:s3cret@db/warden?password=again", "postgresql://warden:***@db/warden?password=***"),
    ("postgresql://warden@db/warden?sslmode=require&password=s3cret", "postgresql://warden@db/warden?sslmode=require&password=***"),
    ("host=db password=s3cret dbname=warden", "host=db password=*** dbname=warden"),
    ("postgresql://warden@db/warden", "postgresql://warden@db/warden"),
])
def test_a_password_is_never_shown(text, expected):
    assert shown(text) == expected
    if text.startswith("postgresql"):
        url = parse_store_url(text, default_folder="/unused")
        assert url.shown == expected and "s3cret" not in repr(url)


@pytest.mark.parametrize("text", ["postgresql://u:123/s3cret@t@h/db", "postgresql://u:s3cret@[h/db",
                                  "postgresql://u:s3%zzcret@h/db", "postgresql://u@h/db?password=s3cret%zz"])
def test_no_spelling_of_a_password_reaches_a_message(text):
    """A password holding `/` or `@`, or one libpq cannot read and would quote in its error."""
    try:
        url = parse_store_url(text, default_folder="/unused")
        said = url.shown + repr(url)
    except StoreUrlInvalid as exc:
        said = str(exc)
    assert "s3" not in said and "cret" not in said, said
    assert "x postgresql://u:***@h/db y" == shown("x postgresql://u:s3cret@h/db y")  # inside a text too


def test_an_unknown_scheme_with_a_password_does_not_print_it():
    with pytest.raises(StoreUrlInvalid) as caught:
        parse_store_url("mysql://root:s3cret@db/warden", default_folder="/unused")
    assert "s3cret" not in str(caught.value)


def test_the_password_file_is_read_and_must_be_private(tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    url = parse_store_url("postgresql://warden@db/warden", default_folder="/unused", password_file=secret)
    assert url.password == "s3cret" and "s3cret" not in url.shown + repr(url)
    secret.chmod(0o644)  # others may read it: not the operator's secret any more
    with pytest.raises(StoreUrlInvalid):
        parse_store_url("postgresql://warden@db/warden", default_folder="/unused", password_file=secret)
    with pytest.raises(StoreUrlInvalid, match="No such file"):
        parse_store_url("postgresql://warden@db/warden", default_folder="/unused", password_file=tmp_path / "none")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(StoreUrlInvalid, match="empty"):
        parse_store_url("postgresql://warden@db/warden", default_folder="/unused", password_file=empty)
    with pytest.raises(StoreUrlInvalid, match="not sqlite"):
        parse_store_url("sqlite:///x", default_folder="/unused", password_file=secret)


def _show(capsys, *argv):
    assert main(["config", "show", *argv]) == 0, capsys.readouterr().err
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("  --"):
            flag, value, source = line.split(None, 2)
            rows[flag] = (value, source)
    return rows


def test_the_store_table_of_the_settings_file_is_the_store_of_every_command(tmp_path, capsys):
    (tmp_path / "w.toml").write_text('data = "/d"\n\n[store]\nurl = "postgresql://warden:s3cret@db/warden"\n'
                                     'password_file = "/etc/warden/pg"\n')
    rows = _show(capsys, "store", "status", "--config", "w.toml")
    assert rows["--store"] == ("postgresql://warden:***@db/warden", "file w.toml:4")
    assert rows["--store-password-file"] == ("/etc/warden/pg", "file w.toml:5")
    assert rows["--data"] == ("/d", "file w.toml:1")


def test_an_unknown_key_in_the_store_table_names_its_line(tmp_path, capsys):
    (tmp_path / "w.toml").write_text('[store]\nurl = "sqlite:///x"\nurll = "typo"\n')
    assert main(["config", "show", "store", "status", "--config", "w.toml"]) == 2
    assert "w.toml:3: unknown key 'urll'" in capsys.readouterr().err


def test_the_environment_wins_over_the_file_and_is_shown_without_its_password(tmp_path, capsys, monkeypatch):
    (tmp_path / "w.toml").write_text('[store]\nurl = "sqlite:///x"\n')
    monkeypatch.setenv("WARDEN_STORE", "postgresql://warden:s3cret@db/warden")
    rows = _show(capsys, "store", "migrate", "--config", "w.toml")
    assert rows["--store"] == ("postgresql://warden:***@db/warden", "env WARDEN_STORE")
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert "WARDEN_STORE=postgresql://warden:***@db/warden" in out and "s3cret" not in out
