"""Helpers for the toolrunner tests: the test tools, a real gRPC server on port 0, grants."""

from __future__ import annotations

import hashlib
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import grpc

from toolrunner.container import LABEL, LABEL_RUNNER
from toolrunner.runner import RunnerConfig
from toolrunner.server import create_server
from warden import grants
from warden.store.url import StoreUrl
from warden.toolrunner.v1 import toolrunner_pb2 as pb
from warden.toolrunner.v1 import toolrunner_pb2_grpc as pb_grpc
from warden.tools import Tool

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "warden-tools:local"
SESSION = "test-" + uuid.uuid4().hex[:8]
# The driver's token for Cancel and GetReceipt, as load_tokens keeps it (sha256 -> caller).
OPERATOR_TOKEN = "tr-test-token-" + uuid.uuid4().hex
AUTH = (("authorization", f"Bearer {OPERATOR_TOKEN}"),)
SECRETS = {"DB_PASSWORD": "hunter2-Sup3r/Secret+Value=", "API_TOKEN": "tok_9fA7qZ2xK4mN8pR1"}


def _tool(
    name: str, command: list[str], schema_props: dict[str, Any] | None = None, image: str = IMAGE, **run: Any
) -> Tool:
    props = schema_props or {}
    return Tool.model_validate(
        {
            "kind": "Tool",
            "name": name,
            "access": "read",
            "input_schema": {
                "type": "object",
                "properties": props,
                "required": sorted(props),
                "additionalProperties": False,
            },
            "run": {"image": image, "command": command, **run},
        }
    )


STR = {"type": "string"}
NUM = {"type": "number"}


def make_tools() -> dict[str, Tool]:
    sh = "/bin/sh"
    tools = [
        _tool("get_task", [sh, "/tools/get_task.sh", "{task_id}"], {"task_id": STR}),
        _tool("list_templates", [sh, "/tools/list_templates.sh"]),
        _tool(
            "create_task_from_template",
            [sh, "/tools/create_task_from_template.sh", "{template}", "{target}", "{node}"],
            {"template": STR, "target": STR, "node": STR},
        ),
        _tool("lookup_order", [sh, "/tools/lookup_order.sh", "{order_id}"], {"order_id": STR}),
        _tool(
            "issue_refund",
            [sh, "/tools/issue_refund.sh", "{order_id}", "{amount}", "{reason}"],
            {"order_id": STR, "amount": NUM, "reason": STR},
        ),
        _tool("run_shell", [sh, "/tools/run_shell.sh", "{argv}"], {"argv": {"type": "array", "items": STR}}),
        _tool("echo_args", [sh, "/tools/test/echo_args.sh", "{a}", "x-{b}-y"], {"a": STR, "b": STR}),
        _tool("sleeper", [sh, "/tools/test/sleep.sh", "{seconds}"], {"seconds": NUM}, timeout_seconds=2),
        _tool("long_sleeper", [sh, "/tools/test/sleep.sh", "{seconds}"], {"seconds": NUM}, timeout_seconds=60),
        _tool("env", [sh, "/tools/test/env.sh", "{name}"], {"name": STR}, env={"GREETING": "hello"}),
        _tool("leak", [sh, "/tools/test/leak.sh", "DB_PASSWORD"], secrets=["DB_PASSWORD"]),
        _tool("env_base64", [sh, "/tools/test/env_base64.sh"], secrets=["API_TOKEN", "DB_PASSWORD"]),
        _tool("split_secret", [sh, "/tools/test/split_secret.sh", "API_TOKEN"], secrets=["API_TOKEN"]),
        # a script with both secrets in its environment: how the boundary tests make a tool print
        # what a careless (or steered) tool might
        _tool("sh_secret", [sh, "-c", "{script}"], {"script": STR}, secrets=["API_TOKEN", "DB_PASSWORD"],
              timeout_seconds=30),
        _tool("needs_missing_secret", [sh, "/tools/test/env.sh", "NOPE"], secrets=["NOT_IN_FILE"]),
        _tool("forkbomb", [sh, "/tools/test/forkbomb.sh"], timeout_seconds=4),
        _tool("spawn", [sh, "/tools/test/spawn.sh", "{n}"], {"n": NUM}, limits={"pids": 32}),
        _tool("memhog", [sh, "/tools/test/memhog.sh", "{mb}"], {"mb": NUM}, limits={"memory_mb": 64}),
        _tool(
            "huge_writer",
            [sh, "/tools/test/huge_writer.sh", "{mb}"],
            {"mb": NUM},
            output_cap_bytes=4096,
            timeout_seconds=60,
        ),
        _tool("big_file", [sh, "/tools/test/big_file.sh", "{mb}"], {"mb": NUM}, limits={"fsize_mb": 2, "tmpfs_mb": 8}),
        _tool("net_probe", [sh, "/tools/test/net_probe.sh"]),
        _tool("net_probe_networked", [sh, "/tools/test/net_probe.sh"], network=True),
        _tool("resolv_networked", [sh, "-c", "cat /etc/resolv.conf"], network=True),
        _tool("write_root", [sh, "/tools/test/write_root.sh"]),
        _tool("whoami", [sh, "/tools/test/whoami.sh"]),
        # a user the image does not default to: only the definition can make the tool run as it
        _tool("own_user", [sh, "-c", "echo uid=$(id -u) gid=$(id -g)"], user="4321:4322"),
        _tool("absent_image", [sh, "-c", "true"], image="warden-absent:never"),
        _tool("gvisor", [sh, "/tools/list_templates.sh"], runtime="runsc-not-installed"),
        _tool("sandboxed", [sh, "-c", "uname -r; id -u; echo sandboxed"], runtime="runsc"),
    ]
    return {t.name: t for t in tools}


def session_containers(api: docker.APIClient) -> list[dict]:
    return [
        c
        for c in api.containers(all=True, filters={"label": LABEL})
        if (c.get("Labels") or {}).get(LABEL_RUNNER, "").startswith(SESSION)
    ]


def wait_for_process(api: docker.APIClient, label: str, name: str, timeout: float = 120.0) -> str:
    """The id of the running container labelled `label` once it runs a process called `name`.

    A tool that prints and then starts `name` (sleep.sh: "started", then sleep) has printed by
    then, so a Cancel sent afterwards keeps that output. Waits for the state, never for a time:
    the bound is only there so a broken runner fails instead of hanging.
    """
    deadline = time.monotonic() + timeout
    while True:
        for c in api.containers(filters={"label": label}):  # running ones only
            try:
                processes = api.top(c["Id"]).get("Processes") or []
            except docker.errors.APIError:
                continue  # it stopped between the listing and top
            if any(p[-1].split()[0].rsplit("/", 1)[-1] == name for p in processes if p and p[-1]):
                return str(c["Id"])
        assert time.monotonic() < deadline, f"no running container labelled {label} ran {name!r}"
        time.sleep(0.05)


class Harness:
    def __init__(self, running: Any, port: int, key: grants.SigningKey):
        self.running = running
        self.port = port
        self.key = key
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.ToolRunnerServiceStub(self.channel)
        self.runner = running.runner

    def request(
        self, tool: str, arguments: dict[str, Any] | None = None, *, decision_id: str | None = None, **grant_kw: Any
    ) -> pb.ExecuteRequest:
        arguments = arguments or {}
        run_id = grant_kw.pop("run_id", "run-1")
        fields = dict(
            decision_id=decision_id or "d-" + uuid.uuid4().hex,
            run_id=run_id,
            agent="tester",
            agent_version="tester@v1",
            tool=tool,
            arguments=arguments,
            policy_revision="rev-1",
        )
        fields.update(grant_kw)
        grant = grants.sign(self.key, **fields)
        req = pb.ExecuteRequest(run_id=run_id, agent="tester", agent_version="tester@v1", tool=tool, grant=grant)
        req.arguments.update(arguments)
        return req

    def execute(self, tool: str, arguments: dict[str, Any] | None = None, **kw: Any) -> pb.Receipt:
        return self.stub.Execute(self.request(tool, arguments, **kw), timeout=120).receipt

    def close(self) -> None:
        self.channel.close()
        self.running.stop(grace=None)


def start_harness(api: docker.APIClient, key: grants.SigningKey, data_dir: Path, *, store: StoreUrl | None = None,
                  instance: str | None = None, **config: Any) -> Harness:
    """A runner on port 0 with the test tools; receipts in `store` (None: SQLite in `data_dir`)."""
    cfg = RunnerConfig(runner_id=f"{SESSION}-{uuid.uuid4().hex[:6]}", **config)
    running, port = create_server(
        "127.0.0.1:0",
        tools=make_tools(),
        policy_revision="rev-1",
        keys=key,
        data_dir=data_dir,
        store=store,
        instance=instance,
        secrets=SECRETS,
        config=cfg,
        api=api,
        tokens={hashlib.sha256(OPERATOR_TOKEN.encode()).digest(): "driver"},
    )
    return Harness(running, port, key)


def error_code(err: grpc.RpcError) -> str:
    for key, value in err.trailing_metadata() or ():
        if key == "warden-code":
            return value
    return ""


def detail_code(err: grpc.RpcError) -> str:
    """The code in the standard status details (what every gRPC client reads)."""
    from warden.errors import error_detail_of

    detail = error_detail_of(err)
    return detail.code if detail else ""
