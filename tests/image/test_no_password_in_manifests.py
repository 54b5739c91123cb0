"""No password in any file under deploy/ nor in what docker-compose makes of the compose files:
a database password reaches a process as a file (a volume or a Secret), never as a manifest's
value, an environment variable's value or part of a URL."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from image_harness import compose_command

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SECRET_NAME = re.compile(r"pass(word|wd)?|secret", re.IGNORECASE)
URL_PASSWORD = re.compile(r"\b[a-z][a-z0-9+.-]*://[^/@:\s]+:[^/@\s]+@", re.IGNORECASE)
PARAM_PASSWORD = re.compile(r"(?<![A-Za-z_])(password|PGPASSWORD)=(?!\s|$|'?\.?/)", re.IGNORECASE)


def _leaves(node: object, key: str = "") -> Iterator[tuple[str, object]]:
    """(the key a value sits under, the value) for every scalar; an env entry {name, value} as one."""
    if isinstance(node, dict):
        if set(node) >= {"name", "value"} and isinstance(node["name"], str):
            yield node["name"], node["value"]
        for k, v in node.items():
            yield from _leaves(v, str(k))
    elif isinstance(node, list):
        for v in node:
            if isinstance(v, str) and "=" in v and key in ("environment", "env"):
                name, _, value = v.partition("=")
                yield name, value
            else:
                yield from _leaves(v, key)
    else:
        yield key, node


def problems(doc: object, text: str) -> list[str]:
    """What in one manifest (parsed, and as text) looks like a password written into it."""
    found = []
    for key, value in _leaves(doc):
        if not isinstance(value, str) or not value:
            continue
        if SECRET_NAME.search(key) and not value.startswith("/") and key not in ("secretName",):
            found.append(f"{key}: a value, not a file")
    if isinstance(doc, dict) and doc.get("kind") == "Secret" and (doc.get("data") or doc.get("stringData")):
        found.append("a Secret with its data in the manifest")
    found += [f"a URL with a password: {m.group(0)}" for m in URL_PASSWORD.finditer(text)]
    found += [f"a password parameter: {m.group(0)}" for m in PARAM_PASSWORD.finditer(text)]
    return found


def _manifests() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.is_file())


@pytest.mark.parametrize("path", _manifests(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_file_under_deploy_holds_a_password(path):
    text = path.read_text()
    docs = list(yaml.safe_load_all(text)) if path.suffix in (".yaml", ".yml") else [None]
    assert not [p for d in docs for p in problems(d, text)], path


@pytest.mark.parametrize("compose", ["compose.yaml", "compose.fleet.yaml"])
def test_what_compose_makes_of_the_file_holds_no_password(compose):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")} | {"DOCKER_GID": "4242"}
    done = subprocess.run([*compose_command(), "-f", str(DEPLOY / compose), "config"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert problems(yaml.safe_load(done.stdout), done.stdout) == []


@pytest.mark.parametrize("planted", [
    {"services": {"db": {"environment": {"POSTGRES_PASSWORD": "hunter2"}}}},
    {"services": {"db": {"environment": ["WARDEN_STORE_PASSWORD=hunter2"]}}},
    {"spec": {"containers": [{"env": [{"name": "PGPASSWORD", "value": "hunter2"}]}]}},
    {"env": {"WARDEN_STORE": "postgresql://warden:hunter2@db/warden"}},
    {"env": {"WARDEN_STORE": "host=db dbname=warden password=hunter2"}},
    {"kind": "Secret", "stringData": {"password": "hunter2"}},
])
def test_a_password_planted_in_a_manifest_is_found(planted):
    assert problems(planted, yaml.safe_dump(planted))


def test_a_password_file_is_not_a_password():
    fine = {"environment": {"WARDEN_STORE_PASSWORD_FILE": "/run/warden-store/password",
                            "WARDEN_STORE": "postgresql://warden@postgres:5432/warden"},
            "volumes": [{"secret": {"secretName": "warden-store"}}]}
    assert problems(fine, yaml.safe_dump(fine)) == []
