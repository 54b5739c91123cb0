"""JSON logs are one line per event whatever happens; tracing that is not configured is not there.

(The trace across the three processes is tests/driver/test_driver_traces.py.)
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

from warden.logsetup import JsonFormatter

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**clean, **env})


def test_a_traceback_and_structured_fields_are_one_json_line():
    try:
        raise ValueError("bad\nvalue")  # a newline in the message too
    except ValueError:
        record = logging.LogRecord("warden.x", logging.ERROR, __file__, 1, "failed %s", ("twice\nover",),
                                   sys.exc_info())
    record.decision_id = "dec-1"  # what extra={...} sets
    record.path = Path("/tmp/a")  # no JSON type: written as text, the event kept
    line = JsonFormatter().format(record)
    assert "\n" not in line
    event = json.loads(line)
    assert event["level"] == "ERROR" and event["logger"] == "warden.x" and event["message"] == "failed twice\nover"
    assert event["exception"].startswith("Traceback") and "ValueError: bad\nvalue" in event["exception"]
    assert event["decision_id"] == "dec-1" and event["path"] == "/tmp/a"
    assert event["time"].endswith("Z") and "trace_id" not in event  # no span, no ids
    assert "args" not in event and "exc_info" not in event and "msg" not in event  # no LogRecord internals


def test_json_mode_turns_uncaught_exceptions_and_warnings_into_single_lines():
    code = """
import logging, threading, warnings
from warden.logsetup import setup_logging
setup_logging("json")
logging.getLogger("warden.demo").info("hello %s", "there", extra={"run_id": "run-1", "n": 3})
warnings.warn("old thing")
t = threading.Thread(target=lambda: 1 / 0, name="worker-1"); t.start(); t.join()
raise RuntimeError("the end")
"""
    out = _run(code)
    assert out.returncode == 1
    events = [json.loads(line) for line in out.stderr.splitlines()]  # fails on any line that is not JSON
    assert [e["level"] for e in events] == ["INFO", "WARNING", "CRITICAL", "CRITICAL"]
    assert events[0]["message"] == "hello there" and events[0]["run_id"] == "run-1" and events[0]["n"] == 3
    assert "old thing" in events[1]["message"]
    assert "ZeroDivisionError" in events[2]["exception"] and events[2]["thread_name"] == "worker-1"
    assert "RuntimeError: the end" in events[3]["exception"]


def test_text_stays_the_default_format():
    out = _run("import logging\nfrom warden.logsetup import setup_logging\nsetup_logging()\n"
               "logging.getLogger('warden.demo').info('hello')")
    assert out.stderr.strip().endswith("INFO warden.demo: hello") and not out.stderr.startswith("{")


def test_a_checkpoint_without_an_endpoint_never_imports_opentelemetry(tmp_path):
    """Off means off: no interceptor on the server and no OpenTelemetry module loaded."""
    code = f"""
import sys
from checkpoint.server.app import create_server
from warden import tracing
from warden.grants import SigningKey
assert tracing.configure("warden-checkpoint", None) is False
assert tracing.server_interceptors() == []
server, port = create_server(None, uds_path={str(tmp_path / 's.sock')!r}, policy_dir="policies",
                             data_dir={str(tmp_path / 'd')!r}, key=SigningKey.generate(), watch_interval=None)
server.start(); server.stop(0)
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
assert not loaded, loaded
print("ok")
"""
    out = _run(code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_an_endpoint_in_the_standard_variable_turns_tracing_on_and_sdk_disabled_turns_it_off():
    code = """
from warden import tracing
print(tracing.endpoint_from(None), tracing.endpoint_from("http://127.0.0.1:9"))
"""
    on = _run(code, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4317")
    assert on.stdout.split() == ["http://127.0.0.1:4317", "http://127.0.0.1:9"]  # the flag wins
    traces_first = _run(code, OTEL_EXPORTER_OTLP_ENDPOINT="http://a:1", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://b:2")
    assert traces_first.stdout.split()[0] == "http://b:2"
    off = _run(code, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4317", OTEL_SDK_DISABLED="true")
    assert off.stdout.split() == ["None", "None"]


def test_a_traced_checkpoint_continues_a_valid_traceparent_and_shrugs_off_forged_ones(tmp_path):
    """Whatever a caller puts in `traceparent`, the answer is the same; only a well-formed one is
    continued, and a refused call's span says how it ended."""
    code = f"""
import hashlib, json
import grpc
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from checkpoint.server.app import create_server
from warden.auth import AuthPolicy
from warden import tracing
from warden.checkpoint.v1 import checkpoint_pb2 as pb, checkpoint_pb2_grpc as pb_grpc
from warden.grants import SigningKey

tracing.configure("warden-checkpoint", None, always=True)
memory = InMemorySpanExporter()
tracing._provider.add_span_processor(SimpleSpanProcessor(memory))
server, port = create_server("127.0.0.1:0", policy_dir="policies", data_dir={str(tmp_path / 'd')!r},
                             key=SigningKey.generate(), watch_interval=None,
                             auth=AuthPolicy(tokens={{hashlib.sha256(b"t" * 20).digest(): "driver"}}))
server.start()
stub = pb_grpc.CheckpointServiceStub(grpc.insecure_channel(f"127.0.0.1:{{port}}"))
auth = ("authorization", "Bearer " + "t" * 20)
good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
token = stub.StartRun(pb.StartRunRequest(agent="recon", person="alice", mode=pb.RUN_MODE_INTERACTIVE),
                      metadata=[auth, ("traceparent", good)]).run_token
request = pb.CheckRequest(run=pb.RunContext(run_token=token), tool_call=pb.ToolCall(tool="get_task"),
                          counters=pb.Counters(stretch_turns=1, total_turns=1))
request.tool_call.arguments.update({{"task_id": "task-42"}})
forged = ["00-00000000000000000000000000000000-b7ad6b7169203331-01", "zz-" + "q" * 6000, "00-0af7651916cd43dd",
          "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", good + "-extra"]
verdicts = [stub.Check(request, metadata=[auth, ("traceparent", t)]).verdict for t in forged]
try:
    stub.Check(request, metadata=[("traceparent", good)])  # no credential
except grpc.RpcError as err:
    refused = err.code().name
server.stop(0)
spans = [dict(name=s.name, trace=format(s.context.trace_id, "032x"),
              parent=format(s.parent.span_id, "016x") if s.parent else "", status=s.status.status_code.name,
              code=s.attributes.get("rpc.grpc.status_code"), verdict=s.attributes.get("warden.verdict"))
         for s in memory.get_finished_spans()]
print(json.dumps(dict(verdicts=verdicts, refused=refused, spans=spans)))
"""
    out = _run(code)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["verdicts"] == [1] * 5  # VERDICT_ALLOW every time
    assert got["refused"] == "UNAUTHENTICATED"
    start, *checks, refused = got["spans"]
    assert start["name"].endswith("/StartRun") and start["trace"] == "0af7651916cd43dd8448eb211c80319c"
    assert start["parent"] == "b7ad6b7169203331"  # the caller's span
    assert len(checks) == 5 and all(c["name"].endswith("/Check") and c["verdict"] == "VERDICT_ALLOW" for c in checks)
    # An all-zero trace id, 6,000 bytes of junk, a truncated header, version ff, version 00 with
    # more fields: none is continued, each Check starts a trace of its own.
    assert all(c["parent"] == "" and c["trace"] != start["trace"] for c in checks), checks
    assert len({c["trace"] for c in checks}) == 5
    assert refused["trace"] == start["trace"] and refused["status"] == "ERROR" and refused["code"] == 16


def test_asking_for_traces_without_the_sdk_stops_the_start_with_the_extra_to_install(tmp_path):
    code = f"""
import sys
class NoSdk:  # this install lacks the `tracing` extra
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, NoSdk())
from warden.cli import main
sys.exit(main(["checkpoint", "serve", "--data", {str(tmp_path)!r}, "--address", "",
               "--otlp-endpoint", "http://127.0.0.1:9"]))
"""
    out = _run(code)
    assert out.returncode == 2
    assert "pip install 'warden[tracing]'" in out.stderr and "http://127.0.0.1:9" in out.stderr
    assert not (tmp_path / "decisions.db").exists()  # nothing started
