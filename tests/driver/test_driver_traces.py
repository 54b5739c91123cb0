"""One trace across the three real processes, sent to a real OTLP/gRPC receiver; JSON logs.

The receiver is the OTLP TraceService from the opentelemetry-proto package's generated code,
served on loopback; `warden up`'s Stack starts the checkpoint, toolrunner and driver exporting to
it with `--otlp-endpoint` and `--log-format json`, and a scripted run makes a real tool call.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from driver_harness import PLAN, call
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from warden.up import Stack, free_port

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT_SERVICE = "warden.checkpoint.v1.CheckpointService"
TOOLRUNNER_SERVICE = "warden.toolrunner.v1.ToolRunnerService"
SERVER, CLIENT = 2, 3  # opentelemetry.proto.trace.v1.Span.SpanKind


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """Keeps every exported span as a dict: service, name, kind, ids in hex, attributes."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        with self.lock:
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append({
                            "service": resource.get("service.name"), "name": span.name, "kind": span.kind,
                            "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(), "attributes": _attributes(span.attributes)})
        return trace_service_pb2.ExportTraceServiceResponse()


def _attributes(pairs: Any) -> dict[str, Any]:
    out = {}
    for kv in pairs:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which) if which else None
    return out


@pytest.fixture()
def receiver():
    got = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(got, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    got.endpoint = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    yield got
    server.stop(0)


def test_a_run_is_one_trace_from_driver_through_checkpoint_to_toolrunner(tmp_path, policy_dir, tool_images,
                                                                         receiver, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # the children export within 0.1 s of a span's end
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    stack = Stack(tmp_path / "data", policy_dir, free_port(), free_port(), free_port(),
                  serve_args=["--log-format", "json", "--otlp-endpoint", receiver.endpoint])
    stack.start(timeout=90)
    try:
        script = tmp_path / "script.yaml"
        script.write_text(yaml.safe_dump({"responses": [
            PLAN, call("get_task", task_id="task-abc123"), {"action": "handoff", "reason": "read it"}]}))
        env = {**os.environ, "WARDEN_DRIVER": stack.driver_address, "WARDEN_DATA": str(stack.data)}
        out = subprocess.run([sys.executable, "-m", "warden.cli", "run", "recon", "--goal",
                              str(ROOT / "goals" / "recon-lab-scan.yaml"), "--script", str(script), "--follow"],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
        assert out.returncode == 0, out.stderr
        assert "receipt get_task: exit 0" in out.stdout
    finally:
        stack.stop()
    assert [c.proc.returncode for c in stack.children] == [0, 0, 0]  # flushed and stopped on SIGTERM

    # A stopped process has sent all it had; the receiver may still be storing the last batch.
    deadline = time.monotonic() + 10
    while not any(s["name"] == "toolrunner.container.run" for s in receiver.spans) and time.monotonic() < deadline:
        time.sleep(0.1)
    spans = list(receiver.spans)
    by_id = {s["span_id"]: s for s in spans}

    container = next(s for s in spans if s["name"] == "toolrunner.container.run")
    trace_id = container["trace_id"]
    trace = [s for s in spans if s["trace_id"] == trace_id]
    assert {s["service"] for s in trace} == {"warden-driver", "warden-checkpoint", "warden-toolrunner"}
    assert container["attributes"]["warden.tool"] == "get_task" and container["attributes"]["warden.exit_code"] == 0

    def chain(span: dict[str, Any]) -> list[str]:
        names = []
        while span is not None:
            names.append(f"{span['service']}:{span['name']}")
            span = by_id.get(span["parent"])
        return names

    # container <- toolrunner server span <- driver client span <- tool call <- step <- run (the root)
    assert chain(container) == [
        "warden-toolrunner:toolrunner.container.run",
        f"warden-toolrunner:{TOOLRUNNER_SERVICE}/ExecuteStream",
        f"warden-driver:{TOOLRUNNER_SERVICE}/ExecuteStream",
        "warden-driver:warden.tool.call",
        "warden-driver:warden.run.step",
        "warden-driver:warden.run",
    ]
    root = by_id[by_id[container["parent"]]["parent"]]
    assert root["kind"] == CLIENT and by_id[container["parent"]]["kind"] == SERVER
    assert by_id[chain_ids(container, by_id)[-1]]["parent"] == ""  # the run span starts the trace

    # The Check that granted this call: a checkpoint server span under the same tool call span.
    tool_call = by_id[root["parent"]]
    granted = [s for s in trace if s["service"] == "warden-checkpoint" and s["name"] == f"{CHECKPOINT_SERVICE}/Check"
               and s["attributes"].get("warden.decision_id") == container["attributes"]["warden.decision_id"]]
    assert len(granted) == 1
    check = granted[0]
    assert check["kind"] == SERVER and check["attributes"]["warden.verdict"] == "VERDICT_ALLOW"
    assert by_id[check["parent"]]["service"] == "warden-driver"
    assert by_id[check["parent"]]["name"] == f"{CHECKPOINT_SERVICE}/Check"
    assert by_id[check["parent"]]["parent"] == tool_call["span_id"]

    # The model call sits in its own step of the same run span.
    model_calls = [s for s in trace if s["name"] == "warden.model.call"]
    assert model_calls and all(by_id[s["parent"]]["name"] == "warden.run.step" for s in model_calls)

    # Every checkpoint RPC the driver made carried its traceparent: each server span's parent is the
    # driver's client span of the same method (the decision record's trace id column reads this).
    served = [s for s in spans if s["service"] == "warden-checkpoint" and s["kind"] == SERVER]
    methods = {s["name"].rsplit("/", 1)[1] for s in served}
    assert {"StartRun", "Check", "RecordAct"} <= methods, methods
    for s in served:
        parent = by_id.get(s["parent"])
        assert parent is not None and parent["service"] == "warden-driver" and parent["kind"] == CLIENT, s
        assert parent["name"] == s["name"] and parent["trace_id"] == s["trace_id"]
    assert not any(s["name"].startswith("grpc.health") for s in spans)  # probes are not traced

    # JSON logs: every line an object (but the two 'listening on' banners printed to stdout), and the
    # toolrunner's event for the call names the trace and the span it happened in.
    events = {}
    for child in stack.children:
        lines = child.log_path.read_text().splitlines()
        parsed = [json.loads(line) for line in lines if not re.fullmatch(r"(driver|toolrunner) listening on \S+", line)]
        assert parsed and all({"time", "level", "logger", "message"} <= e.keys() for e in parsed), child.name
        events[child.name] = parsed
    ran = [e for e in events["toolrunner"] if e.get("decision_id") == container["attributes"]["warden.decision_id"]]
    assert len(ran) == 1
    assert ran[0]["trace_id"] == trace_id and ran[0]["span_id"] == container["span_id"]
    assert ran[0]["tool"] == "get_task" and ran[0]["exit_code"] == 0 and ran[0]["level"] == "INFO"
    assert any("exporting traces" in e["message"] for e in events["checkpoint"])


def chain_ids(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[str]:
    ids = []
    while span is not None:
        ids.append(span["span_id"])
        span = by_id.get(span["parent"])
    return ids


def test_the_driver_sends_traceparent_on_every_checkpoint_rpc_even_when_it_exports_nothing(
        tmp_path, policy_dir, tool_images, receiver, monkeypatch):
    """Only the checkpoint exports here: each of its server spans still continues a trace the
    driver started (a remote parent), which is what the decision record's trace id reads."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SERVICE_NAME"):
        monkeypatch.delenv(name, raising=False)

    class CheckpointExportsOnly(Stack):
        def plan(self):  # type: ignore[no-untyped-def]
            children = super().plan()
            children[0].argv += ["--otlp-endpoint", receiver.endpoint]
            return children

    stack = CheckpointExportsOnly(tmp_path / "data", policy_dir, free_port(), free_port(), free_port())
    stack.start(timeout=90)
    try:
        script = tmp_path / "script.yaml"
        script.write_text(yaml.safe_dump({"responses": [
            PLAN, call("get_task", task_id="task-abc123"), {"action": "handoff", "reason": "read it"}]}))
        env = {**os.environ, "WARDEN_DRIVER": stack.driver_address, "WARDEN_DATA": str(stack.data)}
        out = subprocess.run([sys.executable, "-m", "warden.cli", "run", "recon", "--goal",
                              str(ROOT / "goals" / "recon-lab-scan.yaml"), "--script", str(script), "--follow"],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
        assert out.returncode == 0, out.stderr
    finally:
        stack.stop()
    assert [c.proc.returncode for c in stack.children] == [0, 0, 0]
    spans = list(receiver.spans)
    assert {s["service"] for s in spans} == {"warden-checkpoint"}  # the others exported nothing
    served = [s for s in spans if s["kind"] == SERVER]
    assert {"StartRun", "Check", "RecordAct"} <= {s["name"].rsplit("/", 1)[1] for s in served}
    own = {s["span_id"] for s in spans}
    for s in served:
        assert s["parent"] and s["parent"] not in own, s  # continued from the driver's context
    # the run's checks share the trace of their run span; the StartRun before it has its own
    checks = [s for s in served if s["name"].endswith("/Check")]
    assert len({s["trace_id"] for s in checks}) == 1
    start = next(s for s in served if s["name"].endswith("/StartRun"))
    assert start["trace_id"] != checks[0]["trace_id"]
    # the decision records carry the trace their RPC continued (the log's trace_id column)
    from checkpoint.audit.reader import DecisionReader

    records = list(DecisionReader(stack.data / "checkpoint" / "decisions.db").read())
    by_decision = {s["attributes"].get("warden.decision_id"): s["trace_id"] for s in checks}
    calls = [r for r in records if r["action"] == "tool_call"]
    assert calls and all(r["trace_id"] == by_decision[r["decision_id"]] for r in calls)
    assert next(r for r in records if r["action"] == "start_run")["trace_id"] == start["trace_id"]


def test_a_caller_of_the_driver_that_sends_traceparent_gets_the_run_start_in_its_trace(
        tmp_path, policy_dir, tool_images, receiver, monkeypatch):
    import grpc

    from driver.cli import _goal_proto
    from warden.driver.v1 import driver_pb2 as dpb
    from warden.driver.v1 import driver_pb2_grpc as dpb_grpc

    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    stack = Stack(tmp_path / "data", policy_dir, free_port(), free_port(), free_port(),
                  serve_args=["--otlp-endpoint", receiver.endpoint])
    stack.start(timeout=90)
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    try:
        operator = (stack.data / "operator.token").read_text().strip()
        stub = dpb_grpc.DriverServiceStub(grpc.insecure_channel(stack.driver_address))
        request = dpb.StartRunRequest(agent="recon", provider="scripted", goal=_goal_proto(
            ROOT / "goals" / "recon-lab-scan.yaml"), script_yaml=yaml.safe_dump(
            {"responses": [{"action": "handoff", "reason": "stop here"}]}))
        stub.StartRun(request, metadata=[("authorization", f"Bearer {operator}"),
                                         ("traceparent", f"00-{caller_trace}-{caller_span}-01")], timeout=60)
    finally:
        stack.stop()
    spans = [s for s in receiver.spans if s["trace_id"] == caller_trace]
    by_id = {s["span_id"]: s for s in spans}
    served = next(s for s in spans if s["name"] == "warden.driver.v1.DriverService/StartRun")
    assert served["service"] == "warden-driver" and served["kind"] == SERVER and served["parent"] == caller_span
    checkpoint_start = next(s for s in spans if s["service"] == "warden-checkpoint"
                            and s["name"] == f"{CHECKPOINT_SERVICE}/StartRun")
    client = by_id[checkpoint_start["parent"]]
    assert by_id[client["parent"]]["name"] == "warden.run.start"
    assert by_id[client["parent"]]["parent"] == served["span_id"]
