"""The HTTP door (checkpoint/server/http_door.py) against a real checkpoint on loopback: the same
answers as gRPC for the same request, records written before the answer, the same authentication
and codes, and the door's own refusals (malformed JSON, unknown fields, oversize bodies) deciding
nothing and recording nothing as allowed."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import struct
import threading
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .conftest import PERSON_TOKEN, TOKEN
from .helpers import rpc_error, tool_call
from .test_approvals import approved_call, asked

PREFIX = "/warden.checkpoint.v1.CheckpointService/"


def post(port: int, method: str, body: bytes | str | dict, *, token: str | None = TOKEN,
         content_type: str = "application/json", headers: dict[str, str] | None = None,
         context: ssl.SSLContext | None = None) -> tuple[int, Any]:
    """POST one call; (HTTP status, the decoded JSON body)."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body.encode() if isinstance(body, str) else body
    conn = (http.client.HTTPSConnection("localhost", port, context=context, timeout=10) if context
            else http.client.HTTPConnection("127.0.0.1", port, timeout=10))
    sent = {"Content-Type": content_type, **(headers or {})}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    try:
        conn.request("POST", PREFIX + method, body=data, headers=sent)
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    return resp.status, json.loads(raw) if raw and resp.getheader("Content-Type", "") == "application/json" else raw


def as_json(message: Any) -> dict:
    return json_format.MessageToDict(message)


def stable_code(error: dict) -> str:
    """The ErrorDetail's code in a Connect error body, read from its binary form as a Connect client would."""
    [detail] = error["details"]
    assert detail["type"] == "warden.checkpoint.v1.ErrorDetail"
    value = detail["value"] + "=" * (-len(detail["value"]) % 4)
    parsed = pb.ErrorDetail.FromString(base64.b64decode(value))
    assert detail["debug"]["code"] == parsed.code
    return parsed.code


@pytest.fixture
def door(start):
    running = start(http_address="127.0.0.1:0")
    assert running.server.http_port
    return running


def started_run(door, **fields) -> dict:
    status, body = post(door.server.http_port, "StartRun",
                        {"agent": "recon", "person": "alice", "mode": "RUN_MODE_INTERACTIVE", **fields})
    assert status == 200, body
    assert body["decision"]["verdict"] == "VERDICT_ALLOW" and body["runToken"]
    return body


def test_check_over_http_answers_as_grpc_and_is_recorded_before_the_answer(door):
    version = door.version("recon")
    run = started_run(door)
    for tool, args in [("get_task", {"task_id": "task-1"}), ("delete_everything", {}), ("cancel_task", {})]:
        req = tool_call("recon", version, tool, args)
        req.run.CopyFrom(pb.RunContext(run_token=run["runToken"]))
        grpc_answer = door.stub().Check(req, timeout=5)
        status, body = post(door.server.http_port, "Check", as_json(req))
        assert status == 200, body
        http_answer = json_format.ParseDict(body, pb.CheckResponse())
        assert (http_answer.verdict, http_answer.code, http_answer.rule) == (
            grpc_answer.verdict, grpc_answer.code, grpc_answer.rule), tool
        assert http_answer.decision_id != grpc_answer.decision_id  # two decisions, each its own record
        # the answer came after its record: the log has it as soon as the answer is read
        record = {r["decision_id"]: r for r in door.records()}[http_answer.decision_id]
        assert (record["verdict"], record["code"], record["caller"]) == (
            pb.Verdict.Name(http_answer.verdict).removeprefix("VERDICT_"), http_answer.code, "driver")
    verdicts = [r["verdict"] for r in door.records() if r["action"] == "tool_call"]
    assert "ALLOW" in verdicts and "DENY" in verdicts


def test_an_allowed_call_carries_a_grant_in_json(door):
    run = started_run(door)
    body = {"run": {"runToken": run["runToken"]}, "toolCall": {"tool": "get_task", "arguments": {"task_id": "task-9"}}}
    status, answer = post(door.server.http_port, "Check", body)
    assert status == 200 and answer["verdict"] == "VERDICT_ALLOW" and answer["code"] == "allowed"
    assert answer["grant"]["tool"] == "get_task" and answer["grant"]["runId"] == run["runId"]
    # the proto's own field names are taken too (proto3 JSON)
    status, again = post(door.server.http_port, "Check",
                         {"run": {"run_token": run["runToken"]}, "tool_call": {"tool": "get_task",
                                                                               "arguments": {"task_id": "task-9"}}})
    assert status == 200 and again["verdict"] == "VERDICT_ALLOW"


@pytest.mark.parametrize("token", [None, "not-a-token-0123456789", TOKEN + "x", TOKEN.upper(), "", f"{TOKEN} extra"])
def test_a_bad_token_is_refused_with_the_code_grpc_gives_and_the_refusal_recorded(door, token):
    before = len(door.records())
    code, detail = rpc_error(door.stub(token=token).Check, pb.CheckRequest())
    status, body = post(door.server.http_port, "Check", {}, token=token)
    assert (status, body["code"]) == (401, "unauthenticated") and code == grpc.StatusCode.UNAUTHENTICATED
    assert stable_code(body) == detail.code == "unauthenticated"
    refusals = door.records()[before:]
    assert [r["code"] for r in refusals] == ["unauthenticated", "unauthenticated"]  # one per door
    assert all(r["verdict"] == "DENY" for r in refusals)


def test_another_scheme_or_a_second_header_does_not_authenticate(door):
    port = door.server.http_port
    status, body = post(port, "Check", {}, token=None, headers={"Authorization": f"Basic {TOKEN}"})
    assert status == 401 and stable_code(body) == "unauthenticated"
    status, body = post(port, "Check", {}, token=None, headers={"X-Authorization": f"Bearer {TOKEN}"})
    assert status == 401


MALFORMED = [
    "{",  # not JSON
    "[]",  # JSON, not an object
    '{"toolCall": {"tool": "get_task"}, "evil": true}',  # a field this checkpoint does not know
    '{"toolCall": {"tool": "get_task", "approveAll": true}}',  # ... deeper down
    '{"tool_call": {"tool": "get_task"}, "toolCall": {"tool": "delete_everything"}}',  # one field, two spellings
    '{"toolCall": {"tool": "get_task"}, "toolCall": {"tool": "delete_everything"}}',  # one key twice
    '{"toolCall": {"tool": 7}}',  # a value of the wrong type
    '{"run": {"mode": "RUN_MODE_ROOT"}}',  # an enum value the proto does not have
    '{"toolCall": {"tool": "get_task"}}\x00',
    b'{"toolCall": {"tool": "\xff"}}',  # not UTF-8
]


@pytest.mark.parametrize("body", MALFORMED)
def test_a_malformed_body_is_refused_as_invalid_request_and_nothing_is_allowed(door, body):
    run = started_run(door)
    before = len(door.records())
    if isinstance(body, str):
        body = body.replace('"toolCall": {', f'"run": {{"runToken": "{run["runToken"]}"}}, "toolCall": {{', 1)
    status, answer = post(door.server.http_port, "Check", body)
    assert (status, answer["code"]) == (400, "invalid_argument"), answer
    assert stable_code(answer) == "invalid_request"
    assert "proto3 JSON" in answer["message"]
    recorded = door.records()[before:]
    assert [r["code"] for r in recorded] == ["invalid_request"]  # the refusal is on the record
    assert all(r["verdict"] != "ALLOW" for r in door.records() if r["action"] == "tool_call")


def test_binary_protobuf_is_taken_too_and_an_unknown_field_refused_the_same(door):
    run = started_run(door)
    req = tool_call("recon", door.version("recon"), "get_task", {"task_id": "task-1"})
    req.run.CopyFrom(pb.RunContext(run_token=run["runToken"]))
    status, raw = post(door.server.http_port, "Check", req.SerializeToString(), content_type="application/proto")
    assert status == 200 and pb.CheckResponse.FromString(raw).verdict == pb.VERDICT_ALLOW
    smuggled = req.SerializeToString() + bytes([0xF8, 0x06, 0x01])  # field 111, varint 1
    status, answer = post(door.server.http_port, "Check", smuggled, content_type="application/proto")
    assert status == 400 and stable_code(answer) == "invalid_request"


def test_an_oversize_body_is_refused_unread_and_nothing_recorded(start):
    running = start(http_address="127.0.0.1:0", max_request_bytes=64 * 1024)
    req = tool_call("recon", running.version("recon"), "get_task", {"task_id": "x" * 100_000})
    before = len(running.records())
    status, answer = post(running.server.http_port, "Check", as_json(req))
    assert (status, answer["code"], stable_code(answer)) == (413, "resource_exhausted", "request_too_large")
    code, _ = rpc_error(running.stub().Check, req)  # gRPC's answer to the same request
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert running.records()[before:] == []
    # a length one byte under the limit is read and decided (here: refused as no run, on the record)
    edge = json.dumps({"toolCall": {"tool": "get_task", "arguments": {"pad": ""}}})
    edge = edge.replace('"pad": ""', '"pad": "' + "y" * (64 * 1024 - len(edge)) + '"')
    assert len(edge) == 64 * 1024
    status, answer = post(running.server.http_port, "Check", edge)
    assert status == 400 and stable_code(answer) == "invalid_request"


def test_a_body_without_a_length_or_with_a_lying_one_is_refused(door):
    port = door.server.http_port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"POST {PREFIX}Check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n"
                     .encode())
        head = b"".join(iter(lambda: sock.recv(65536), b"")).decode()  # the door closes the connection
    assert head.startswith("HTTP/1.1 411") and "length_required" in head
    status, answer = post(port, "Check", "{}", headers={"Content-Length": "-5"})
    assert status == 411 and stable_code(answer) == "length_required"


def test_the_doors_own_refusals_name_their_codes(door):
    port = door.server.http_port
    status, answer = post(port, "Nope", {})
    assert (status, stable_code(answer)) == (501, "unknown_method")
    status, answer = post(port, "CheckStream", {})  # a client stream: gRPC only
    assert (status, stable_code(answer)) == (501, "unknown_method")
    status, answer = post(port, "Check", "{}", content_type="text/plain")
    assert (status, stable_code(answer)) == (415, "unsupported_media_type")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", PREFIX + "Check")
    resp = conn.getresponse()
    assert resp.status == 501 and stable_code(json.loads(resp.read())) == "unknown_method"
    conn.close()
    assert all(r["verdict"] != "ALLOW" for r in door.records() if r["action"] == "tool_call")


def test_resolve_agent_and_check_plan_over_http(door):
    status, answer = post(door.server.http_port, "ResolveAgent", {"agent": "recon"})
    assert status == 200 and answer["agentVersion"] == door.version("recon")
    run = started_run(door)
    plan = {"run": {"runToken": run["runToken"]}, "plan": {"steps": [
        {"id": "s1", "tool": "get_task", "arguments": {"task_id": "task-t"}},
        {"id": "s2", "tool": "delete_everything"}]}}
    status, answer = post(door.server.http_port, "CheckPlan", plan)
    assert status == 200, answer
    assert answer["decision"]["verdict"] == "VERDICT_DENY"


def test_an_approval_given_over_http_allows_the_call(door):
    run, asked_id = asked(door)
    port = door.server.http_port
    approval = {"runId": run.run_id, "decisionId": asked_id, "note": "over http"}
    status, answer = post(port, "Approve", approval, token=TOKEN)  # the driver is no approver
    assert status in (401, 403) or answer["decision"]["verdict"] != "VERDICT_ALLOW"
    status, answer = post(port, "Approve", approval, token=PERSON_TOKEN)
    assert status == 200 and answer["decision"]["code"] == "approved", answer
    act = door.records()[-1]
    assert (act["action"], act["caller"], act["approver"]) == ("approval", "carol", "carol")
    spent = door.stub().Check(approved_call(run, asked_id, answer["approvalToken"]), timeout=5)
    assert spent.verdict == pb.VERDICT_ALLOW


def test_record_act_over_http_ends_the_run(door):
    run = started_run(door)
    status, answer = post(door.server.http_port, "RecordAct",
                          {"run": {"runToken": run["runToken"]}, "act": "cancel", "person": "alice", "actId": "c-1"})
    assert status == 200 and answer["decision"]["code"] == "recorded", answer
    assert door.records()[-1]["decision_id"] == answer["decision"]["decisionId"]
    req = tool_call("recon", door.version("recon"), "get_task", {"task_id": "task-t"})
    req.run.CopyFrom(pb.RunContext(run_token=run["runToken"]))
    status, after = post(door.server.http_port, "Check", as_json(req))
    assert status == 200 and after["code"] == "run_ended"


def _read_envelopes(stream: Any) -> list[tuple[int, bytes]]:
    out = []
    while True:
        head = stream.read(5)
        if len(head) < 5:
            return out
        flags, length = struct.unpack(">BI", head)
        out.append((flags, stream.read(length)))
        if flags & 0x02:
            return out


def test_watch_decisions_is_a_connect_server_stream(door):
    run = started_run(door)
    body = json.dumps({"noFollow": True}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", door.server.http_port, timeout=10)
    conn.request("POST", PREFIX + "WatchDecisions", body=struct.pack(">BI", 0, len(body)) + body,
                 headers={"Content-Type": "application/connect+json", "Authorization": f"Bearer {PERSON_TOKEN}"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "application/connect+json"
    frames = _read_envelopes(resp)
    conn.close()
    *messages, (end_flags, end) = frames
    assert end_flags == 0x02 and json.loads(end) == {}
    ids = [json.loads(m)["record"]["decisionId"] for flags, m in messages if flags == 0]
    assert run["decision"]["decisionId"] in ids
    # no credentials: the stream ends at once with the error in its end message
    conn = http.client.HTTPConnection("127.0.0.1", door.server.http_port, timeout=10)
    conn.request("POST", PREFIX + "WatchDecisions", body=struct.pack(">BI", 0, len(body)) + body,
                 headers={"Content-Type": "application/connect+json"})
    resp = conn.getresponse()
    [(flags, end)] = _read_envelopes(resp)
    conn.close()
    assert flags == 0x02 and json.loads(end)["error"]["code"] == "unauthenticated"


def test_mtls_on_the_http_door_names_the_caller_as_grpc_does(tmp_path, policy_dir):
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509 import Name, NameAttribute
    from cryptography.x509.oid import NameOID

    from checkpoint.server import AuthPolicy, TlsConfig, create_server
    from warden.grants import SigningKey

    from .test_auth import MTLS_PRINCIPAL, _cert, _pem

    (policy_dir / "principals" / "mtls-driver.yaml").write_text(MTLS_PRINCIPAL)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = Name([NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = _cert("test-ca", ca_key, ca_name, ca_key, ca=True)
    server_key, client_key, stranger_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    stranger_ca = _cert("other-ca", stranger_key, Name([NameAttribute(NameOID.COMMON_NAME, "other-ca")]),
                        stranger_key, ca=True)
    files = {"ca.pem": ca, "server.pem": _cert("localhost", ca_key, ca_name, server_key, ca=False),
             "server.key": server_key, "client.pem": _cert("driver", ca_key, ca_name, client_key, ca=False),
             "client.key": client_key, "stranger.pem": _cert("driver", stranger_key, stranger_ca.subject,
                                                             stranger_key, ca=False), "stranger.key": stranger_key}
    for name, obj in files.items():
        (tmp_path / name).write_bytes(_pem(obj))
        (tmp_path / name).chmod(0o600)
    tls = TlsConfig(tmp_path / "server.pem", tmp_path / "server.key", tmp_path / "ca.pem")
    server, _ = create_server("localhost:0", http_address="localhost:0", policy_dir=policy_dir,
                              data_dir=tmp_path / "d", key=SigningKey.generate(),
                              auth=AuthPolicy(mtls=True), tls=tls, watch_interval=None)
    server.start()
    try:
        def client(cert: str, key: str | None) -> ssl.SSLContext:
            context = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
            if key:
                context.load_cert_chain(str(tmp_path / cert), str(tmp_path / key))
            return context

        status, answer = post(server.http_port, "StartRun", {"agent": "recon", "person": "alice",
                                                             "mode": "RUN_MODE_INTERACTIVE"},
                              token=None, context=client("client.pem", "client.key"))
        assert status == 200 and answer["decision"]["verdict"] == "VERDICT_ALLOW", answer
        from checkpoint.audit import DecisionReader

        record = list(DecisionReader(tmp_path / "d" / "decisions.db").read())[-1]
        assert (record["caller"], record["principal"]) == ("mtls:localhost", "mtls-driver")
        # no certificate, or one another CA signed: the handshake fails, nothing is decided
        for cert, key in [("client.pem", None), ("stranger.pem", "stranger.key")]:
            with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException, OSError)):
                post(server.http_port, "StartRun", {"agent": "recon"}, token=TOKEN, context=client(cert, key))
        assert list(DecisionReader(tmp_path / "d" / "decisions.db").read())[-1]["seq"] == record["seq"]
    finally:
        server.stop(grace=0.5)


def test_a_draining_checkpoint_refuses_new_http_calls_with_server_draining(door):
    door.server.gate.start()  # what SIGTERM starts: new calls refused, on both doors alike
    try:
        code, detail = rpc_error(door.stub().ResolveAgent, pb.ResolveAgentRequest(agent="recon"))
        status, answer = post(door.server.http_port, "ResolveAgent", {"agent": "recon"})
        assert (status, answer["code"]) == (503, "unavailable") and code == grpc.StatusCode.UNAVAILABLE
        assert stable_code(answer) == "server_draining"
    finally:
        door.server.gate.draining = False


def test_a_second_checkpoint_cannot_take_the_http_port(start, door):
    with pytest.raises(OSError):
        start(http_address=f"127.0.0.1:{door.server.http_port}")


def test_the_answers_match_the_published_openapi_description(door):
    """docs/openapi.json describes what the door really answers: an ALLOW with its grant, a DENY,
    and an error body, each validated against the description's schemas."""
    import jsonschema
    from referencing import Registry, Resource

    from warden import openapigen

    spec = json.loads(openapigen.OUTPUT.read_text())
    registry = Registry().with_resource("urn:openapi", Resource.from_contents(
        {"$schema": "https://json-schema.org/draft/2020-12/schema", **spec}))

    def valid(body: dict, name: str) -> None:
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": f"urn:openapi#/components/schemas/{name}"}
        jsonschema.Draft202012Validator(schema, registry=registry).validate(body)

    run = started_run(door)
    valid(run, "StartRunResponse")
    for tool in ("get_task", "delete_everything"):
        status, answer = post(door.server.http_port, "Check", {"run": {"runToken": run["runToken"]},
                                                               "toolCall": {"tool": tool, "arguments": {"task_id": "task-1"}}})
        assert status == 200
        valid(answer, "CheckResponse")
    assert answer["verdict"] == "VERDICT_DENY"
    status, error = post(door.server.http_port, "Check", {"evil": 1})
    assert status == 400
    valid(error, "ConnectError")
    with pytest.raises(jsonschema.ValidationError):  # the check can fail: a field the description lacks
        valid({**answer, "approvedBy": "mallory"}, "CheckResponse")


def test_calls_beyond_the_threads_are_refused_and_a_stream_hung_up_frees_its_place(start):
    running = start(http_address="127.0.0.1:0", max_workers=1)
    port = running.server.http_port
    run = started_run(running)
    # a decision stream holds the door's one call slot while it follows the log: here one run's,
    # whose one record is sent at once, and then nothing, so the stream never writes again
    body = json.dumps({"runId": run["runId"]}).encode()
    stream = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    stream.request("POST", PREFIX + "WatchDecisions", body=struct.pack(">BI", 0, len(body)) + body,
                   headers={"Content-Type": "application/connect+json", "Authorization": f"Bearer {PERSON_TOKEN}"})
    resp = stream.getresponse()
    assert resp.status == 200
    flags, length = struct.unpack(">BI", resp.read(5))
    assert flags == 0 and json.loads(resp.read(length))["record"]["runId"] == run["runId"]
    status, answer = post(port, "ResolveAgent", {"agent": "recon"})
    assert (status, stable_code(answer)) == (503, "too_many_requests")
    resp.close()
    stream.close()  # no record comes after: only the hang-up can end the stream
    for _ in range(200):
        status, answer = post(port, "ResolveAgent", {"agent": "recon"})
        if status == 200:
            break
        threading.Event().wait(0.05)
    assert status == 200, "the hung-up stream still holds the door's call"


def test_connections_beyond_the_cap_are_closed_unanswered(start):
    running = start(http_address="127.0.0.1:0", max_workers=1)  # one call: four connections held open
    port = running.server.http_port
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
    try:
        fifth = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert fifth.recv(1) == b""  # closed: the four before it were taken first (accepted in order)
        fifth.close()
        for sock in held:
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):  # still open, waiting for a request
                sock.recv(1)
        held.pop().close()
        for _ in range(200):  # its place is given back once the door sees it closed
            try:
                status, _answer = post(port, "ResolveAgent", {"agent": "recon"})
            except (ConnectionError, http.client.HTTPException):
                status = 0
            if status == 200:
                break
            threading.Event().wait(0.05)
        assert status == 200
    finally:
        for sock in held:
            sock.close()


def test_every_method_the_door_serves_needs_a_credential(door):
    """Every method, those added later too: none answers over HTTP without a valid credential."""
    service = pb.DESCRIPTOR.services_by_name["CheckpointService"]
    served = [m for m in service.methods if not m.client_streaming]
    assert len(served) > 20
    for method in served:
        if method.server_streaming:
            body = struct.pack(">BI", 0, 2) + b"{}"
            status, answer = post(door.server.http_port, method.name, body, token="not-a-token-0123456789",
                                  content_type="application/connect+json")
            assert status == 200 and b'"unauthenticated"' in answer, method.name  # the end of the stream
        else:
            status, answer = post(door.server.http_port, method.name, {}, token="not-a-token-0123456789")
            assert (status, stable_code(answer)) == (401, "unauthenticated"), method.name
