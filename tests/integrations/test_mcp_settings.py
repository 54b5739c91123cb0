"""The settings of a streamable HTTP upstream: what is accepted, and what is refused at load rather
than at the first call (a token sent in clear, a credential in the URL, a misspelt setting)."""

from __future__ import annotations

from pathlib import Path

import pytest

from warden.mcp.settings import SettingsError, load

HEAD = 'token_file = "/t/gateway.token"\nperson = "alice"\nagent = "files"\n\n[upstreams.tickets]\n'


def loaded(tmp_path: Path, upstream: str):
    path = tmp_path / "mcp.toml"
    path.write_text(HEAD + upstream)
    return load(path)


def test_an_http_upstream_is_read_with_its_token_file_and_timeout(tmp_path):
    up = loaded(tmp_path, 'url = "https://tickets.example/mcp"\ntoken_file = "/t/tickets.token"\ntimeout = 7\n').upstreams[0]
    assert (up.name, up.url, up.token_file, up.timeout, up.command) == (
        "tickets", "https://tickets.example/mcp", Path("/t/tickets.token"), 7.0, "")
    up = loaded(tmp_path, 'url = "http://127.0.0.1:8080/mcp"\n').upstreams[0]
    assert (up.token_file, up.timeout) == (None, 30.0)
    assert loaded(tmp_path, 'url = "http://[::1]:9/mcp"\n').upstreams[0].url == "http://[::1]:9/mcp"


@pytest.mark.parametrize("upstream, says", [
    ('url = "http://tickets.example/mcp"\n', "plain http only to this host"),
    ('url = "http://127.0.0.1.example/mcp"\n', "plain http only to this host"),
    ('url = "HTTP://10.0.0.1/mcp"\n', "plain http only to this host"),
    ('url = "https://user:secret@tickets.example/mcp"\n', "no credentials in `url`"),
    ('url = "https://token@tickets.example/mcp"\n', "no credentials in `url`"),
    ('url = "ftp://tickets.example/mcp"\n', "must be an http(s) URL"),
    ('url = "https:///mcp"\n', "must be an http(s) URL"),
    ('url = "https://tickets.example:port/mcp"\n', "must be an http(s) URL"),
    ('url = 7\n', "must be an http(s) URL"),
    ('url = "https://tickets.example/mcp"\ncommand = "npx"\n', "unknown settings ['command']"),
    ('url = "https://tickets.example/mcp"\nheaders = {Authorization = "x"}\n', "unknown settings ['headers']"),
    ('url = "https://tickets.example/mcp"\ntimeout = 0\n', "`timeout` is seconds"),
    ('url = "https://tickets.example/mcp"\ntimeout = -1\n', "`timeout` is seconds"),
    ('url = "https://tickets.example/mcp"\ntimeout = true\n', "`timeout` is seconds"),
    ('url = "https://tickets.example/mcp"\ntimeout = "5"\n', "`timeout` is seconds"),
    ('url = "https://tickets.example/mcp"\ntoken_file = ""\n', "`token_file` is a path"),
    ('args = ["x"]\n', "needs a `command` (stdio) or a `url`"),
])
def test_an_http_upstream_that_would_leak_or_is_misspelt_is_refused_at_load(tmp_path, upstream, says):
    with pytest.raises(SettingsError) as refused:
        loaded(tmp_path, upstream)
    assert says in str(refused.value) and "tickets" in str(refused.value)


def _upstreams(tmp_path: Path, *names: str):
    path = tmp_path / "mcp.toml"
    path.write_text('token_file = "/t/gateway.token"\nperson = "alice"\nagent = "files"\n\n'
                    + "".join(f'[upstreams.{name}]\ncommand = "server-{name}"\n\n' for name in names))
    return load(path)


@pytest.mark.parametrize("names", [("x", "x_"), ("x_", "x"), ("x", "x__y"), ("files", "files__more")])
def test_two_upstreams_whose_shown_names_could_meet_are_refused_at_load(tmp_path, names):
    """`x` with a tool `_y` and `x_` with a tool `y` are both shown as `x___y`: were one of them down
    at a listing, the other's tool would be pinned and called under the name the policy admitted."""
    with pytest.raises(SettingsError) as refused:
        _upstreams(tmp_path, *names)
    assert "could show one tool name for two tools" in str(refused.value)


def test_upstreams_whose_shown_names_cannot_meet_are_kept(tmp_path):
    # `x_y__T` can never be `x__` + a tool: the third character differs
    assert [u.name for u in _upstreams(tmp_path, "x", "x_y", "xy", "x-", "y").upstreams] == ["x", "x_y", "xy", "x-", "y"]
