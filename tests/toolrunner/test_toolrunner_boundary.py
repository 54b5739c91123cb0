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

