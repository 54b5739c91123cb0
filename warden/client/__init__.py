"""A typed Python client of the checkpoint, for agents warden does not host.

Start a run for a person and an agent, check each tool call with its arguments, wait for a
person's approval, and report each call's result so the run's breakers count across it. Every
adapter (the Claude Code hook, the MCP gateway) is thin over this package. It speaks the
checkpoint's gRPC contract (proto/warden/checkpoint/v1) and nothing else of warden's processes.
"""

from warden.client.aio import AsyncCheckpointClient
from warden.client.approvals import ApprovalInbox, ApprovalOutcome, Asked
from warden.client.checkpoint import CheckpointClient
from warden.client.failures import CheckpointUnavailable, ClientError
from warden.client.runs import Decision, Run

__all__ = ["ApprovalInbox", "ApprovalOutcome", "Asked", "AsyncCheckpointClient", "CheckpointClient", "CheckpointUnavailable", "ClientError",
           "Decision", "Run"]
