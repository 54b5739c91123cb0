"""The toolrunner's refusals, each with a stable code and the gRPC status it travels as.

    RunnerError                   base; ``.code`` (stable), ``.status`` (grpc.StatusCode)
    ├── GrantRefused              grant_missing / grant_invalid / grant_expired / grant_mismatch
    │                               -> PERMISSION_DENIED
    ├── UnknownTool               unknown_tool: no tool of that name with a ``run`` section -> NOT_FOUND
    ├── InvalidArguments          invalid_arguments: arguments fail the tool's input schema or
    │                               leave an argv placeholder unfilled -> INVALID_ARGUMENT
    ├── ImageNotAllowed           image_not_allowed: the tool's image is not present locally
    │                               (it is never pulled) -> FAILED_PRECONDITION
    ├── SecretUnavailable         secret_unavailable: the tool needs a secret the secrets file
    │                               does not hold -> FAILED_PRECONDITION
    ├── RuntimeUnavailable        runtime_unavailable: the tool asks for an OCI runtime the
    │                               daemon does not have -> FAILED_PRECONDITION
    ├── PolicyRevisionMismatch    policy_revision_mismatch: the grant was issued under a policy
    │                               revision the runner does not hold, even after reloading its
    │                               policy folder once -> FAILED_PRECONDITION
    ├── RunnerBusy                runner_busy: the concurrency limit is reached; retry later
    │                               -> RESOURCE_EXHAUSTED
    ├── Unauthenticated           unauthenticated: Cancel / GetReceipt without a valid bearer
    │                               token -> UNAUTHENTICATED
    ├── AlreadyStarted            already_started: this grant's call was claimed by an earlier
    │                               process that never finished it -> ABORTED
    ├── ReceiptNotFound           receipt_not_found (GetReceipt) -> NOT_FOUND
    ├── ReceiptsUnavailable       store_unavailable: the receipt store (a shared database) is down,
    │                               slow or out of connections, so the call cannot be claimed
    │                               -> UNAVAILABLE
    └── DockerUnavailable         docker_unavailable: no Docker engine answers -> UNAVAILABLE

A refusal means nothing ran. Outcomes of a call that did run (``timeout``, ``output_truncated``,
``cancelled``, ``interrupted``) are not errors: they are the receipt's ``code``.

Every refusal reaches the client as a gRPC error whose details read ``<code>: <message>``, with
the code in a ``warden.checkpoint.v1.ErrorDetail`` packed into the standard status details
(``grpc-status-details-bin``, as the checkpoint sends it) and, for older clients, also in trailing
metadata under ``warden-code``.
"""

from __future__ import annotations

import grpc

DOCKER_HELP = (
    "no Docker engine answers. Get one with scripts/ensure-docker.sh (installs Debian's docker.io "
    "and starts dockerd), or start it yourself (`sudo dockerd &` or `sudo systemctl start docker`) "
    "and check with `docker info`; set DOCKER_HOST to use another engine. Then build the tool "
    "images with scripts/build-images.sh."
)


class RunnerError(Exception):
    code = "runner_error"
    status = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class GrantRefused(RunnerError):
    status = grpc.StatusCode.PERMISSION_DENIED


class UnknownTool(RunnerError):
    code = "unknown_tool"
    status = grpc.StatusCode.NOT_FOUND


class InvalidArguments(RunnerError):
    code = "invalid_arguments"
    status = grpc.StatusCode.INVALID_ARGUMENT


class ImageNotAllowed(RunnerError):
    code = "image_not_allowed"
    status = grpc.StatusCode.FAILED_PRECONDITION


class SecretUnavailable(RunnerError):
    code = "secret_unavailable"
    status = grpc.StatusCode.FAILED_PRECONDITION


class RuntimeUnavailable(RunnerError):
    code = "runtime_unavailable"
    status = grpc.StatusCode.FAILED_PRECONDITION


class PolicyRevisionMismatch(RunnerError):
    code = "policy_revision_mismatch"
    status = grpc.StatusCode.FAILED_PRECONDITION


class Unauthenticated(RunnerError):
    code = "unauthenticated"
    status = grpc.StatusCode.UNAUTHENTICATED


class RunnerBusy(RunnerError):
    code = "runner_busy"
    status = grpc.StatusCode.RESOURCE_EXHAUSTED


class AlreadyStarted(RunnerError):
    code = "already_started"
    status = grpc.StatusCode.ABORTED


class ReceiptNotFound(RunnerError):
    code = "receipt_not_found"
    status = grpc.StatusCode.NOT_FOUND


class ReceiptsUnavailable(RunnerError):
    code = "store_unavailable"
    status = grpc.StatusCode.UNAVAILABLE


class DockerUnavailable(RunnerError):
    code = "docker_unavailable"
    status = grpc.StatusCode.UNAVAILABLE

    def __init__(self, detail: str = ""):
        super().__init__(DOCKER_HELP + (f" ({detail})" if detail else ""))
