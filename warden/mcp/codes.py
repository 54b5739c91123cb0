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
# a retry carrying the `requestState` of an `input_required` answer (warden/mcp/request_state.py)
REQUEST_STATE_INVALID = "request_state_invalid"  # not a state this gateway issued (altered, forged)
REQUEST_STATE_EXPIRED = "request_state_expired"  # past its expiry, or of an earlier run of the client
REQUEST_STATE_OTHER_PRINCIPAL = "request_state_other_principal"  # issued to another client
REQUEST_STATE_OTHER_CALL = "request_state_other_call"  # issued for another tool, arguments or upstream
REQUEST_STATE_SPENT = "request_state_spent"  # already used once
APPROVAL_NOT_FROM_CLIENT = "approval_not_from_client"  # the client answered or claimed an approval itself
