"""The secrets file: secret name -> value, read by the toolrunner alone.

JSON or YAML, one mapping at the top level; names as in a tool's ``run.secrets``
(``[A-Z][A-Z0-9_]*``). The driver and the model never see this file: the runner injects a value
as an environment variable into the one container whose tool names it, and masks it (in every
common encoding) in everything that container prints.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path

import yaml

from warden.private import UntrustedFileError, read_trusted_text

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


class SecretsFileError(ValueError):
    pass


def load_secrets(path: str | Path | None) -> dict[str, str]:
    if path is None:
        return {}
    path = Path(path)
    try:
        # values reach tool containers as credentials: one another user could have written is refused
        text = read_trusted_text(path, "secrets file")
    except OSError as exc:
        raise SecretsFileError(f"{path}: cannot read the secrets file: {exc.strerror}") from None
    except UntrustedFileError as exc:
        raise SecretsFileError(str(exc)) from None
    mode = os.stat(path).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s: the secrets file is readable by others; chmod 600 it", path)
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise SecretsFileError(f"{path}: not JSON or YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SecretsFileError(f"{path}: the top level must be a mapping of name to value")
    secrets: dict[str, str] = {}
    errors = []
    for name, value in data.items():
        if not isinstance(name, str) or not _NAME.match(name):
            errors.append(f"{name!r} is not a secret name ([A-Z][A-Z0-9_]*)")
        elif not isinstance(value, (str, int, float)) or isinstance(value, bool) or value == "":
            errors.append(f"{name}: the value must be a non-empty string")
        else:
            secrets[name] = str(value)
    if errors:
        raise SecretsFileError(f"{path}: " + "; ".join(sorted(errors)))
    return secrets
