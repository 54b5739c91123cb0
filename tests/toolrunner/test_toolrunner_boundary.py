"""The grant and toolrunner boundary attacked as a compromised driver would: real gRPC server,
real containers. Each test names the attack; what held is in tests/toolrunner/test_toolrunner_*.py."""

from __future__ import annotations

import grpc
import pytest
from toolrunner_harness import SECRETS, Harness, error_code

from warden.toolrunner.v1 import toolrunner_pb2 as pb

TOKEN = SECRETS["API_TOKEN"]
PASSWORD = SECRETS["DB_PASSWORD"]


def _with_arguments(request: pb.ExecuteRequest, arguments: dict) -> pb.ExecuteRequest:
    request.ClearField("arguments")
    request.arguments.update(arguments)
    return request


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_arguments_with_no_canonical_form_are_refused_with_a_stable_code(harness: Harness, number: float) -> None:
    # A Struct carries NaN and infinities; no grant can cover them (docs/grants.md): the runner must
    # refuse with grant_mismatch, not fail with an internal error and no code.
    request = _with_arguments(harness.request("sleeper", {"seconds": 1}), {"seconds": number})
    with pytest.raises(grpc.RpcError) as err:
        harness.stub.Execute(request, timeout=30)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error_code(err.value) == "grant_mismatch"
    # and a call with no grant at all is still grant_missing, whatever its arguments hold
    request.ClearField("grant")
    with pytest.raises(grpc.RpcError) as err:
        harness.stub.Execute(request, timeout=30)
    assert error_code(err.value) == "grant_missing"


def _script(harness: Harness, script: str) -> pb.Receipt:
    return harness.execute("sh_secret", {"script": script})


def test_a_credential_still_growing_at_the_streams_hold_limit_is_not_released_unmasked(harness: Harness) -> None:
    # An unterminated private key block is masked to the end (docs/toolrunner.md), and so it is
    # when the text arrives whole. Streamed, a find that grows past the 1 MiB hold limit used to
    # be cut there and its first MiB released with no mask: the key's body went to the model.
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
    receipt = _script(
        harness,
        f"printf -- '-----BEGIN PRIVATE KEY-----\\n{body}'; head -c 2200000 /dev/zero | tr '\\0' A",
    )
    assert receipt.exit_code == 0 and receipt.bytes_out > 2_200_000
    assert body[:12] not in receipt.output, receipt.output[:300]
    assert "[masked:private_key]" in receipt.output
    assert "AAAAAAAAAAAA" not in receipt.output  # the rest of the block is still inside it


def test_a_secret_split_between_stdout_and_stderr_is_masked_where_the_halves_meet(harness: Harness) -> None:
    # Each stream is scrubbed on its own; the receipt joins them. Half a secret on stdout and the
    # other half on stderr used to meet in the receipt's output, whole and unmasked.
    receipt = _script(harness, 'printf %s "$API_TOKEN" | head -c 10; printf %s "$API_TOKEN" | tail -c +11 >&2')
    assert receipt.exit_code == 0
    assert TOKEN not in receipt.output, receipt.output
    assert "[masked:secret:API_TOKEN]" in receipt.output and receipt.masked_count >= 1


@pytest.mark.parametrize(
    ("script", "leaked"),
    [
        # another letter case of the whole secret (`tr`, a tool that upper-cases its report)
        ('printf "%s\\n" "$API_TOKEN" | tr a-z A-Z', TOKEN.upper()),
        ('printf "%s\\n" "$API_TOKEN" | tr A-Z a-z', TOKEN.lower()),
        # URL-encoding with lower-case hex digits (RFC 3986: %2f and %2F are the same octet)
        ("""printf "%s\\n" "$DB_PASSWORD" | sed 's/\\//%2f/g; s/+/%2b/g; s/=/%3d/g'""",
         PASSWORD.replace("/", "%2f").replace("+", "%2b").replace("=", "%3d")),
        # hex with mixed case digits
        ("""printf %s "$API_TOKEN" | od -An -tx1 | tr -d ' \\n' | sed 's/a/A/g'; echo""",
         TOKEN.encode().hex().replace("a", "A")),
    ],
)
def test_a_secret_in_another_letter_case_is_masked(harness: Harness, script: str, leaked: str) -> None:
    receipt = _script(harness, script)
    assert receipt.exit_code == 0
    assert leaked not in receipt.output, receipt.output
    assert receipt.masked_count >= 1
