"""The gateway's own stable codes, beside the checkpoint's (warden/codes.py): what a client sees
when the gateway refuses a call before or after the checkpoint decided it (docs/mcp.md)."""

UNKNOWN_TOOL = "unknown_tool"  # no upstream tool of that name is shown to this client
UPSTREAM_TOOL_CHANGED = "upstream_tool_changed"  # its definition is not the one pinned at admission
TOOL_NAME_COLLISION = "tool_name_collision"  # two upstream tools would have the same name
UPSTREAM_UNAVAILABLE = "upstream_unavailable"  # the upstream failed or could not be reached
RESULT_TOO_LARGE = "result_too_large"  # the upstream's result is larger than the gateway passes on
APPROVAL_PENDING = "approval_pending"  # a person has not answered yet
APPROVAL_REJECTED = "approval_rejected"  # a person rejected the call
CHECKPOINT_UNAVAILABLE = "checkpoint_unavailable"  # no decision: nothing is called
