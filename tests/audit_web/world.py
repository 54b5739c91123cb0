"""A real checkpoint writes a real decision log; the auditor's web view serves it.

The policies are the shipped ones plus a second tenant, `globex`, with its own agent and its own
auditor (erin), so that each tenant's auditor has the other's records to not see.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from checkpoint.audit.web.access import Gate
from checkpoint.audit.web.server import AuditWebServer, make_server
from checkpoint.audit.web.views import DecisionViews
from checkpoint.server import AuthPolicy, CheckpointServer, create_server
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
from warden.grants import SigningKey

REPO = Path(__file__).resolve().parents[2]
TOKENS = {
    "driver": "driver-token-0123456789abcdef",  # the driver principal: no audit right
    "carol": "carol-token-0123456789abcdef",  # an auditor of acme
    "erin": "erin-token-0123456789abcdef",  # an auditor of globex
    "mallory": "mallory-token-0123456789abcdef",  # a person of the `people` principal, no role in acme
}
# A tool argument an attacker chose: it must reach the page as text, never as markup.
XSS = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'

GLOBEX = {
    "tenants/globex.yaml": """kind: Tenant
name: globex
roles:
  admin: [gina]
  auditor: [erin]
""",
    "principals/globex.yaml": """kind: Principal
name: globex-people
identities: ["token:erin", "token:gina"]
audit:
  tenants: [globex]
""",
    "agents/helpdesk.yaml": """kind: Agent
name: helpdesk
tenant: globex
persona: You look up tasks for the globex help desk.
allowlist: [get_task]
scope:
  access: [read]
""",
}


def policy_copy(target: Path) -> Path:
    shutil.copytree(REPO / "policies", target)
    for name, text in GLOBEX.items():
        (target / name).write_text(text)
    return target


class BearerAuth(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, token: str):
        self.token = token

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = list(details.metadata or []) + [("authorization", f"Bearer {self.token}")]
        return continuation(details._replace(metadata=metadata), request)


@dataclass
class Checkpoint:
    server: CheckpointServer
    port: int
    data: Path
    channels: list[grpc.Channel] = field(default_factory=list)
    stopped: bool = False

    @property
    def log_path(self) -> Path:
        return self.data / "decisions.db"

    def stub(self, who: str = "driver") -> pb_grpc.CheckpointServiceStub:
        channel = grpc.intercept_channel(grpc.insecure_channel(f"127.0.0.1:{self.port}"), BearerAuth(TOKENS[who]))
        self.channels.append(channel)
        return pb_grpc.CheckpointServiceStub(channel)

    def start_run(self, agent: str, person: str = "alice", tenant: str = "") -> pb.StartRunResponse:
        got = self.stub().StartRun(pb.StartRunRequest(agent=agent, person=person, tenant=tenant,
                                                      mode=pb.RUN_MODE_INTERACTIVE), timeout=5)
        assert got.decision.verdict == pb.VERDICT_ALLOW, got.decision
        return got

    def call(self, token: str, tool: str, args: dict[str, Any], **counters: int) -> pb.CheckResponse:
        req = pb.CheckRequest(run=pb.RunContext(run_token=token), tool_call=pb.ToolCall(tool=tool))
        req.tool_call.arguments.update(args)
        for name, value in counters.items():
            setattr(req.counters, name, value)
        return self.stub().Check(req, timeout=5)

    def end(self, token: str, status: str, code: str, tokens: int) -> None:
        act = pb.RecordActRequest(run=pb.RunContext(run_token=token), act="end", note="done")
        act.details.update({"status": status, "code": code, "tokens": tokens, "turns": 1})
        got = self.stub().RecordAct(act, timeout=5)
        assert got.decision.code == "recorded", got.decision

    def stop(self) -> None:
        """Stops the checkpoint, which signs the log's head as it goes; once."""
        if self.stopped:
            return
        self.stopped = True
        for channel in self.channels:
            channel.close()
        self.server.stop(grace=0.5)


def start_checkpoint(tmp: Path, policies: Path) -> Checkpoint:
    data = tmp / "data"
    auth = AuthPolicy(tokens={hashlib.sha256(token.encode()).digest(): name for name, token in TOKENS.items()})
    server, port = create_server("127.0.0.1:0", uds_path=None, policy_dir=policies, data_dir=data,
                                 key=SigningKey.generate(), auth=auth, watch_interval=None)
    server.start()
    return Checkpoint(server, port, data)


def write_tokens(path: Path) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(f"{name} {token}\n" for name, token in TOKENS.items())
    return path


@dataclass
class Story:
    """What `tell` recorded: the ids a test looks for."""

    parent: str
    child: str
    globex_run: str
    xss_decision: str
    asked: str


def tell(cp: Checkpoint) -> Story:
    """A recon run that calls a tool with a hostile argument, delegates to triage (whose run trips
    its token breaker), asks for an approval that carol gives, and succeeds; and a globex run."""
    parent = cp.start_run("recon")
    xss = cp.call(parent.run_token, "get_task", {"task_id": XSS})
    ok = cp.call(parent.run_token, "get_task", {"task_id": "task-1"})
    assert ok.verdict == pb.VERDICT_ALLOW, ok
    child = cp.stub().Check(pb.CheckRequest(run=pb.RunContext(run_token=parent.run_token, budget=pb.Budget(tokens=5000)),
                                            delegation=pb.Delegation(agent="triage")), timeout=5)
    assert child.verdict == pb.VERDICT_ALLOW and child.child_run_token, child
    assert cp.call(child.child_run_token, "get_task", {"task_id": "task-2"}).verdict == pb.VERDICT_ALLOW
    halt = cp.call(child.child_run_token, "get_task", {"task_id": "task-3"}, stretch_tokens=6000)
    assert (halt.verdict, halt.code) == (pb.VERDICT_HALT, "breaker_tokens"), halt
    cp.end(child.child_run_token, "paused", "breaker_tokens", 6000)
    asked = cp.call(parent.run_token, "create_task_from_template", {"template": "web", "target": "10.20.0.0/24"})
    assert asked.verdict == pb.VERDICT_REQUIRE_APPROVAL, asked
    approval = cp.stub("carol").Approve(pb.ApproveRequest(run_id=parent.run_id, decision_id=asked.decision_id,
                                                          note="fine"), timeout=5)
    assert approval.decision.code == "approved", approval.decision
    cp.end(parent.run_token, "succeeded", "succeeded", 1200)
    globex = cp.start_run("helpdesk", person="gina", tenant="globex")
    assert cp.call(globex.run_token, "get_task", {"task_id": "task-9"}).verdict == pb.VERDICT_ALLOW
    return Story(parent.run_id, child.child_run_id, globex.run_id, xss.decision_id, asked.decision_id)


@dataclass
class Web:
    server: AuditWebServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def get(self, path: str, who: str | None = "carol", *, token: str | None = None,
            method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of a real HTTP request."""
        request = urllib.request.Request(self.url + path, method=method)
        bearer = token if token is not None else (TOKENS[who] if who else None)
        if bearer is not None:
            request.add_header("Authorization", f"Bearer {bearer}")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def json(self, path: str, who: str = "carol") -> Any:
        import json

        status, _, body = self.get(path, who)
        assert status == 200, (status, body)
        return json.loads(body)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(log_path: Path, tokens: Path, policies: Path, *, verify_interval: float = 0.0) -> Web:
    gate = Gate(tokens, policies, reload_interval=0.1)
    server = make_server("127.0.0.1", 0, gate, DecisionViews(log_path, verify_interval=verify_interval))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return Web(server, thread)
