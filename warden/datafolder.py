"""The files of a warden data folder that more than one command reads: who the person at the
keyboard is, and the callers' tokens. `warden up` lays the folder out (warden/up.py says how);
the driver and the command line read it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

DEFAULT_DATA = ".warden"  # the data folder when none is given (`--data`, WARDEN_DATA)
OPERATORS_FILE = "operators.tokens"
OPERATOR_TOKEN_FILE = "operator.token"
PERSON_CHECKPOINT_TOKEN_FILE = "checkpoint.token"
CHECKPOINT_TOKENS_FILE = "checkpoint.tokens"
TOOLRUNNER_TOKENS_FILE = "toolrunner.tokens"
GRANT_KEY_FILE = "grant.key"
# The person at the keyboard when none is named (`warden up --person`, WARDEN_PERSON): the sample
# tenant's admin in policies/tenants/acme.yaml, so the shipped setup works as it comes. A person
# must hold a role in the tenant they act in; the operating system's user name is not one.
DEFAULT_PERSON = "alice"
def write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def read_credential(token_file: Path) -> str:
    """A credential file of this user's (DATA/operator.token, DATA/checkpoint.token): one another
    user could have written would make this user act as whoever that user chose. (`warden up`
    makes them 0600; one readable by others is the owner's choice to share it, as before.)"""
    from warden.private import read_trusted_text

    return read_trusted_text(token_file, "credential file").strip()


def ensure_operator(data: Path, person: str | None = None, operators_path: Path | None = None) -> str:
    """The operator credential of the person at this keyboard (DATA/operator.token), and the line
    naming them in the driver's operators file; each created once, readable by its owner only."""
    token_file = data / OPERATOR_TOKEN_FILE
    operators_path = operators_path or data / OPERATORS_FILE
    if not token_file.exists():
        write_private(token_file, secrets.token_urlsafe(32) + "\n")
    token = read_credential(token_file)
    if not operators_path.exists():
        person = person or os.environ.get("WARDEN_PERSON") or DEFAULT_PERSON
        write_private(operators_path, f"# person token: operator credentials for DriverService\n{person} {token}\n")
    return token


def operator_name(operators_path: Path) -> str:
    """The person the operators file names first (the one at this keyboard)."""
    for line in operators_path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.lstrip().startswith("#"):
            return parts[0]
    raise RuntimeError(f"{operators_path} names no person")


def ensure_person_checkpoint_token(data: Path, person: str, checkpoint_tokens: Path) -> str:
    """The person's own checkpoint credential (DATA/checkpoint.token) and its line in the
    checkpoint's token file: a token distinct from the operator one, so the driver, which sees
    operator tokens, never holds a credential that can approve."""
    token_file = data / PERSON_CHECKPOINT_TOKEN_FILE
    if not token_file.exists():
        write_private(token_file, secrets.token_urlsafe(32) + "\n")
    token = read_credential(token_file)
    if caller_token(checkpoint_tokens, person) != token:
        kept = [line for line in checkpoint_tokens.read_text().splitlines() if line.split()[:1] != [person]]
        checkpoint_tokens.unlink()
        write_private(checkpoint_tokens, "\n".join([*kept, f"{person} {token}"]) + "\n")
    return token


def caller_line(path: Path, caller: str) -> str | None:
    """The `caller token` line for `caller` in a token file, if any."""
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == caller:
            return line.strip()
    return None


def caller_token(path: Path, caller: str) -> str | None:
    """The token of `caller` in a token file, if any."""
    line = caller_line(path, caller)
    return line.split()[1] if line else None
