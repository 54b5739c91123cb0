"""Webhook notifications of REQUIRE_APPROVAL, HALT and handoff, against a real receiver on loopback:
signed (and checked by the documented `verify_signature`), retried, every attempt recorded, and a
receiver that fails or never answers changes no answer and holds none up."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from checkpoint.server.notifications import Notification, slack_body
from checkpoint.server.notifier import NotifySettings
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.webhooks import HEADER, SignatureInvalid, sign_header, verify_signature

from .helpers import tool_call

SECRET = b"s3cret-shared-with-the-receiver"
PUBLIC = "https://audit.example.com/warden"
SUBNET = {"template": "web", "target": "10.20.0.0/24"}


class Receiver:
    """A webhook receiver: answers each POST with the next scripted status (200 when none is
    left), or holds it until `release` is set when the status is None."""

    def __init__(self, statuses: list[int | None] | None = None):
        self.statuses = list(statuses or [])
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.arrived = threading.Event()
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.got.append((dict(self.headers), body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                receiver.arrived.set()
                if status is None:
                    receiver.release.wait(30)
                    status = 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/T0001/secret-path"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made: list[Receiver] = []
    yield lambda statuses=None: made.append(Receiver(statuses)) or made[-1]  # type: ignore[misc]
    for r in made:
        r.close()


def notifying(start, url: str, **settings):
    settings = {"kind": "generic", "public_url": PUBLIC, "backoff": 0.01, "timeout": 10.0, **settings}
    return start(notify=NotifySettings(urls=(url,), secret=SECRET, **settings))


def ask(checkpoint) -> tuple[pb.StartRunResponse, pb.CheckResponse]:
    run = checkpoint.start_run("recon")
    req = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token),
                          tool_call=pb.ToolCall(tool="create_task_from_template"))
    req.tool_call.arguments.update(SUBNET)
    asked = checkpoint.stub().Check(req, timeout=5)
    assert asked.verdict == pb.VERDICT_REQUIRE_APPROVAL, asked
    return run, asked


def idle(checkpoint) -> None:
    assert checkpoint.server.service.notifier.wait_idle(20), "the notifier never finished"


def notify_records(checkpoint) -> list[dict]:
    return [r for r in checkpoint.records() if r["action"] == "notify"]


def test_a_pending_approval_is_delivered_signed_linked_and_recorded(start, receiver):
    hook = receiver()
    checkpoint = notifying(start, hook.url)
    run, asked = ask(checkpoint)
    idle(checkpoint)
    [(headers, body)] = hook.got
    signed_at = verify_signature(SECRET, headers[HEADER], body)
    with pytest.raises(SignatureInvalid, match="outside the 300 s window"):  # the same bytes replayed later
        verify_signature(SECRET, headers[HEADER], body, now=signed_at + 301)
    with pytest.raises(SignatureInvalid, match="no signature matches"):
        verify_signature(b"another secret", headers[HEADER], body)
    with pytest.raises(SignatureInvalid, match="no signature matches"):  # one byte of the body changed
        verify_signature(SECRET, headers[HEADER], body.replace(b"approval_required", b"approval_requirex"))
    note = json.loads(body)
    assert (note["type"], note["decision_id"], note["run_id"]) == ("approval_required", asked.decision_id, run.run_id)
    assert note["link"] == f"{PUBLIC}/#run={run.run_id}&decision={asked.decision_id}"
    assert note["approval_rules"] == ["rule:wide-scans-need-approval"] and note["approval_deadline"]
    assert "10.20.0.0" not in body.decode()  # the call's arguments stay behind the audit page's credential
    [record] = notify_records(checkpoint)
    assert (record["verdict"], record["code"], record["run_id"]) == ("ALLOW", "notification_delivered", run.run_id)
    assert record["arguments"]["about"] == asked.decision_id
    # the URL's path is a credential (a Slack webhook's): the record shows scheme, host and port only
    assert record["arguments"]["webhook"] == hook.url.split("/hooks")[0]
    assert "secret-path" not in json.dumps(record)
    # the decision's own record came first
    seqs = {r["decision_id"]: i for i, r in enumerate(checkpoint.records())}
    assert seqs[asked.decision_id] < seqs[record["decision_id"]]


def test_a_500_is_retried_then_delivered_and_each_attempt_recorded(start, receiver):
    hook = receiver([500, 503])
    checkpoint = notifying(start, hook.url)
    _run, asked = ask(checkpoint)
    idle(checkpoint)
    assert len(hook.got) == 3 and len({body for _h, body in hook.got}) == 1  # the same body each time
    attempts = [(r["code"], r["arguments"]["attempt"], r["arguments"].get("status")) for r in notify_records(checkpoint)]
    assert attempts == [("notification_failed", 1, 500), ("notification_failed", 2, 503),
                        ("notification_delivered", 3, 200)]
    assert all(r["arguments"]["about"] == asked.decision_id for r in notify_records(checkpoint))


def test_a_receiver_that_keeps_failing_is_given_up_and_that_is_recorded(start, receiver):
    hook = receiver([500, 500, 500])
    checkpoint = notifying(start, hook.url, attempts=2)
    ask(checkpoint)
    idle(checkpoint)
    assert len(hook.got) == 2
    assert [r["code"] for r in notify_records(checkpoint)] == ["notification_failed", "notification_dropped"]
    assert "given up after 2 attempt(s)" in notify_records(checkpoint)[-1]["reason"]


def test_a_receiver_that_never_answers_holds_up_no_answer_and_changes_none(start, receiver):
    hook = receiver([None])
    checkpoint = notifying(start, hook.url, timeout=30.0)
    run, asked = ask(checkpoint)
    assert hook.arrived.wait(10)  # the notification is in the receiver's hands, unanswered ...
    # ... and Check answers meanwhile: the first answer came back, and so do more, unchanged
    _run2, again = ask(checkpoint)
    assert (again.verdict, again.code) == (asked.verdict, asked.code)
    plain = checkpoint.stub().Check(checkpoint.with_run(tool_call("recon", checkpoint.version("recon"), "get_task",
                                                                  {"task_id": "task-1"})), timeout=5)
    assert plain.verdict == pb.VERDICT_ALLOW and not hook.release.is_set()
    decisions = [r for r in checkpoint.records() if r["decision_id"] in (asked.decision_id, again.decision_id)]
    assert [r["verdict"] for r in decisions] == ["REQUIRE_APPROVAL", "REQUIRE_APPROVAL"]
    hook.release.set()
    idle(checkpoint)
    delivered = {r["arguments"]["about"] for r in notify_records(checkpoint) if r["code"] == "notification_delivered"}
    assert delivered == {asked.decision_id, again.decision_id}


def test_a_full_queue_drops_the_notification_on_the_record_and_the_answer_stands(start, receiver):
    hook = receiver([None])
    checkpoint = notifying(start, hook.url, queue=1, timeout=30.0)
    ask(checkpoint)
    assert hook.arrived.wait(10)  # the one place in the queue is taken
    _run, second = ask(checkpoint)
    assert second.verdict == pb.VERDICT_REQUIRE_APPROVAL
    hook.release.set()
    idle(checkpoint)
    dropped = [r for r in notify_records(checkpoint) if r["code"] == "notification_dropped"]
    assert [r["arguments"]["about"] for r in dropped] == [second.decision_id]
    assert "queue was full" in dropped[0]["reason"]


def test_a_handoff_and_a_halt_are_notified_too(start, receiver):
    hook = receiver()
    checkpoint = notifying(start, hook.url)
    refund = checkpoint.with_run(tool_call("refunds", checkpoint.version("refunds"), "propose_refund", {
        "invoice_id": "inv-1", "payment_id": "pay_1", "customer": "customer:bob", "amount_usd": 900,
        "card_number": "4111111111111111", "reason": "damaged"}))
    got = checkpoint.stub().Check(refund, timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_HALT, "handoff")
    idle(checkpoint)
    [(_h, body)] = hook.got
    note = json.loads(body)
    assert (note["type"], note["handoff_to"], note["decision_id"]) == ("handoff", "refunds-desk", got.decision_id)
    assert "4111111111111111" not in body.decode()


def test_the_slack_body_is_an_incoming_webhook_message_with_the_link(start, receiver):
    hook = receiver()
    checkpoint = notifying(start, hook.url, kind="slack")
    run, asked = ask(checkpoint)
    idle(checkpoint)
    [(headers, body)] = hook.got
    verify_signature(SECRET, headers[HEADER], body)
    message = json.loads(body)
    assert set(message) == {"text", "blocks"} and "create_task_from_template" in message["text"]
    section, context = message["blocks"]
    assert (section["type"], section["text"]["type"], context["type"]) == ("section", "mrkdwn", "context")
    assert f"<{PUBLIC}/#run={run.run_id}&decision={asked.decision_id}|Open the call on the audit page>" \
        in section["text"]["text"]
    assert "Answer by " in section["text"]["text"]


def test_a_reason_cannot_make_a_slack_link_or_mention():
    note = Notification(event="halted", decision_id="d", time="t", verdict="HALT", code="breaker_turns",
                        rule="r", reason="<!channel> see <https://evil.example|here> & more", tenant="t",
                        run_id="r", root_run_id="r", agent="a", agent_version="v", accountable_person="p",
                        action="tool_call", tool="x", approval_rules=[], approval_deadline="", handoff_to="",
                        link="")
    text = json.loads(slack_body(note))["blocks"][0]["text"]["text"]
    assert "<!channel>" not in text and "<https://evil" not in text
    assert "&lt;!channel&gt; see &lt;https://evil.example|here&gt; &amp; more" in text


def test_a_replayed_body_with_its_old_timestamp_is_refused():
    body = b'{"type":"approval_required","decision_id":"d1"}'
    header = sign_header(SECRET, body, now=1_800_000_000)
    assert verify_signature(SECRET, header, body, now=1_800_000_000 + 299) == 1_800_000_000
    with pytest.raises(SignatureInvalid, match="outside the 300 s window"):
        verify_signature(SECRET, header, body, now=1_800_000_000 + 301)  # the attacker's replay, later
    # the attacker's fresh time with the old signature: the signature covers the time
    signature = header.split("v1=")[1]
    with pytest.raises(SignatureInvalid, match="no signature matches"):
        verify_signature(SECRET, f"t=1800000400,v1={signature}", body, now=1_800_000_400)
    for broken in (None, "", "v1=" + signature, "t=1800000000", "t=x,v1=" + signature, "garbage",
                   f"t=1800000000,t=1800000000,v1={signature}"):
        with pytest.raises(SignatureInvalid):
            verify_signature(SECRET, broken, body, now=1_800_000_000)
    with pytest.raises(SignatureInvalid, match="no secret"):
        verify_signature(b"", header, body, now=1_800_000_000)


def test_settings_that_cannot_work_are_refused():
    for bad in ({"urls": ()}, {"urls": ("ftp://x/",)}, {"urls": ("http:///nohost",)}, {"secret": b""},
                {"kind": "teams"}, {"attempts": 0}, {"queue": 0}):
        with pytest.raises(ValueError):
            NotifySettings(**{"urls": ("http://127.0.0.1:9/",), "secret": SECRET, **bad})


def test_the_serve_flags_refuse_a_url_without_a_secret_and_a_secret_others_can_read(tmp_path):
    import argparse

    from checkpoint.server.notify_settings import add_notify_flags, notify_settings

    parser = argparse.ArgumentParser()
    add_notify_flags(parser)
    assert notify_settings(parser.parse_args([])) is None  # no webhook: nobody is told
    with pytest.raises(ValueError, match="needs --notify-secret-file"):
        notify_settings(parser.parse_args(["--notify-url", "http://127.0.0.1:9/"]))
    secret = tmp_path / "secret"
    secret.write_bytes(b"  " + SECRET + b"\n")
    secret.chmod(0o644)
    args = parser.parse_args(["--notify-url", "http://127.0.0.1:9/", "--notify-secret-file", str(secret),
                              "--notify-kind", "slack", "--audit-public-url", PUBLIC])
    with pytest.raises(ValueError, match="must not be readable by others"):
        notify_settings(args)
    secret.chmod(0o600)
    settings = notify_settings(args)
    assert (settings.secret, settings.kind, settings.public_url) == (SECRET, "slack", PUBLIC)
    secret.write_bytes(b"\n")
    with pytest.raises(ValueError, match="signed"):  # an empty secret signs nothing
        notify_settings(args)
