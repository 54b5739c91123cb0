"""The gateway's settings file (TOML): the checkpoint, the identity it checks for, its upstreams.

    checkpoint = "127.0.0.1:7401"
    token_file = "~/.config/warden/mcp-gateway.token"   # the gateway's checkpoint credential
    person = "alice"                                    # the accountable person of its runs
    agent = "files"                                     # the policy's agent for the client
    tenant = "acme"                                     # optional
    state = "~/.local/state/warden"                     # optional: pins and the approval inbox

    [upstreams.fs]
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/shared"]
    env = {}

    [upstreams.tickets]                                 # a streamable HTTP upstream
    url = "https://tickets.internal.example/mcp"
    token_file = "~/.config/warden/tickets.token"       # optional: the bearer token it is sent
    timeout = 20                                        # optional: seconds per list or call

Over streamable HTTP each client is a principal of its own: a token line `NAME TOKEN` of
`clients_file`, and its person and agent under `[clients.NAME]`. `person` and `agent` at the top
are the stdio launcher's identity.

    clients_file = "~/.config/warden/mcp-clients.tokens"
    [clients.alice-laptop]
    person = "alice"
    agent = "files"
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

UPSTREAM_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")
_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


class SettingsError(Exception):
    pass


@dataclass(frozen=True)
class Upstream:
    name: str
    command: str  # a stdio upstream's program ("" for an HTTP upstream)
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""  # a streamable HTTP upstream's endpoint
    token_file: Path | None = None  # the bearer token sent to it (the gateway's, never a client's)
    timeout: float = 30.0  # seconds for one listing or call of an HTTP upstream


@dataclass(frozen=True)
class Client:
    """Who a client of the gateway acts for: never taken from what the client says of itself."""

    name: str
    person: str
    agent: str
    tenant: str = ""


@dataclass(frozen=True)
class Settings:
    checkpoint: str
    token_file: Path
    person: str  # the stdio launcher's identity ("" when the gateway serves HTTP clients only)
    agent: str
    upstreams: tuple[Upstream, ...]
    state: Path
    tenant: str = ""
    clients_file: Path | None = None
    clients: tuple[Client, ...] = ()
    timeout: float = 10.0
    max_result_bytes: int = 1024 * 1024


def _path(value: Any) -> Path:
    return Path(os.path.expanduser(str(value)))


def _http_upstream(path: Path, name: str, spec: dict[str, Any]) -> Upstream:
    """A streamable HTTP upstream. Its bearer token goes over https only, or to this host: a token
    sent in clear across a network is a token given away. Credentials belong in `token_file`,
    never in the URL, where logs and error messages would carry them."""
    if unknown := sorted(set(spec) - {"url", "token_file", "timeout"}):
        raise SettingsError(f"{path}: upstream {name!r}: unknown settings {unknown} for a `url` upstream")
    url = spec["url"]
    try:
        parsed = urlsplit(url) if isinstance(url, str) else None
        _ = parsed and parsed.port  # a port that is not a number is refused here, not at the first call
    except ValueError:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise SettingsError(f"{path}: upstream {name!r}: `url` must be an http(s) URL")
    if parsed.username is not None or parsed.password is not None:
        raise SettingsError(f"{path}: upstream {name!r}: no credentials in `url`; put the token in `token_file`")
    if parsed.scheme == "http" and parsed.hostname not in _LOOPBACK:
        raise SettingsError(f"{path}: upstream {name!r}: plain http only to this host (127.0.0.1, ::1, "
                            "localhost); use https")
    token_file = spec.get("token_file")
    if token_file is not None and (not isinstance(token_file, str) or not token_file):
        raise SettingsError(f"{path}: upstream {name!r}: `token_file` is a path")
    timeout = spec.get("timeout", 30.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600:
        raise SettingsError(f"{path}: upstream {name!r}: `timeout` is seconds, more than 0 and at most 3600")
    return Upstream(name, "", url=url, token_file=_path(token_file) if token_file else None, timeout=float(timeout))


def load(path: Path, *, state: Path | None = None) -> Settings:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"{path}: {exc}") from None
    known = {"checkpoint", "token_file", "person", "agent", "tenant", "state", "upstreams", "timeout",
             "max_result_bytes", "clients_file", "clients"}
    if unknown := sorted(set(data) - known):
        raise SettingsError(f"{path}: unknown settings {unknown}")
    if not isinstance(data.get("token_file"), str) or not data["token_file"]:
        raise SettingsError(f"{path}: `token_file` is required")
    for name in ("person", "agent"):
        if not isinstance(data.get(name, ""), str):
            raise SettingsError(f"{path}: `{name}` is a string")
    clients = []
    for name, spec in dict(data.get("clients", {})).items():
        if not isinstance(spec, dict) or not all(isinstance(spec.get(k), str) and spec[k] for k in ("person", "agent")):
            raise SettingsError(f"{path}: client {name!r} needs a `person` and an `agent`")
        clients.append(Client(name, spec["person"], spec["agent"], str(spec.get("tenant", ""))))
    if clients and not isinstance(data.get("clients_file"), str):
        raise SettingsError(f"{path}: [clients.NAME] need a `clients_file` holding their tokens")
    upstreams = []
    for name, spec in dict(data.get("upstreams", {})).items():
        if not UPSTREAM_NAME.match(name):
            raise SettingsError(f"{path}: upstream name {name!r} must match {UPSTREAM_NAME.pattern}")
        if isinstance(spec, dict) and "url" in spec:
            upstreams.append(_http_upstream(path, name, spec))
            continue
        if not isinstance(spec, dict) or not isinstance(spec.get("command"), str):
            raise SettingsError(f"{path}: upstream {name!r} needs a `command` (stdio) or a `url` (streamable HTTP)")
        upstreams.append(Upstream(name, spec["command"], tuple(str(a) for a in spec.get("args", ())),
                                  {str(k): str(v) for k, v in dict(spec.get("env", {})).items()}))
    if not upstreams:
        raise SettingsError(f"{path}: no [upstreams.NAME] to front")
    _refuse_names_that_could_collide(path, [u.name for u in upstreams])
    default_state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "warden"
    return Settings(
        checkpoint=str(data.get("checkpoint", "127.0.0.1:7401")), token_file=_path(data["token_file"]),
        person=data.get("person", ""), agent=data.get("agent", ""), tenant=str(data.get("tenant", "")),
        clients_file=_path(data["clients_file"]) if "clients_file" in data else None, clients=tuple(clients),
        upstreams=tuple(upstreams), state=state or (_path(data["state"]) if "state" in data else default_state),
        timeout=float(data.get("timeout", 10.0)), max_result_bytes=int(data.get("max_result_bytes", 1024 * 1024)),
    )


def _refuse_names_that_could_collide(path: Path, names: list[str]) -> None:
    """A tool is shown as `UPSTREAM__TOOL`, so `x` with a tool `_y` and `x_` with a tool `y` would both
    be `x___y`. The gateway refuses a name two listed tools share, but an upstream that fails to list
    would hide the collision, and the other's tool would be pinned and called under the name the
    policy admitted. Two upstreams can share a shown name only when one's name is the other's
    followed by `_` or by `__` and more: such a pair is refused here, so every shown name belongs to
    one upstream."""
    for short in names:
        for long in names:
            if long == short + "_" or long.startswith(short + "__"):
                raise SettingsError(f"{path}: upstreams {short!r} and {long!r} could show one tool name for two "
                                    f"tools ({long}__TOOL is also {short}__ and a tool named after the rest); "
                                    "rename one")

