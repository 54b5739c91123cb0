"""Stable decision codes. Clients, tests and dashboards count by code: never change a meaning.

Each code is documented in docs/codes.md; a test keeps that page and this list in step.
"""

ALLOWED = "allowed"

# 1. request shape
INVALID_REQUEST = "invalid_request"
UNKNOWN_AGENT = "unknown_agent"
UNKNOWN_AGENT_VERSION = "unknown_agent_version"
AGENT_VERSION_RETIRED = "agent_version_retired"  # HALT for a run pinned to it; DENY for a new pin
AGENT_VERSION_NOT_APPROVED = "agent_version_not_approved"  # pending, rejected or withdrawn: never pinned
UNKNOWN_TOOL = "unknown_tool"
INVALID_ARGUMENTS = "invalid_arguments"
# 2. allowlist
TOOL_NOT_ALLOWED = "tool_not_allowed"
WILDCARD_IN_BACKGROUND = "wildcard_in_background"
AGENT_MANAGEMENT_TOOL = "agent_management_tool"
DELEGATION_NOT_ALLOWED = "delegation_not_allowed"
# 3. scope
ACCESS_NOT_ALLOWED = "access_not_allowed"
OUT_OF_SCOPE = {
    "images": "image_out_of_scope",
    "nodes": "node_out_of_scope",
    "connections": "connection_out_of_scope",
    "threads": "thread_out_of_scope",
    "subjects": "subject_out_of_scope",
}
# 4. off-limits
SUBJECT_OFF_LIMITS = "subject_off_limits"
# 5. rules
RULE_DENIED = "rule_denied"
APPROVAL_REQUIRED = "approval_required"
POLICY_ERROR = "policy_error"
# plans
PLAN_STEP_NOT_ALLOWED = "plan_step_not_allowed"
# 6. breakers
BREAKERS = (
    "tokens",
    "turns",
    "turns_total",
    "tool_calls",
    "wall_clock",
    "repetition",
    "failures",
    "drift",
    "tree_budget",
    "spend",
    "provider",
)
BREAKER_CODES = {name: f"breaker_{name}" for name in BREAKERS}
# 7. delegation
DELEGATION_DEPTH = "delegation_depth"
DELEGATION_CHILDREN = "delegation_children"
DELEGATION_TREE_SIZE = "delegation_tree_size"
DELEGATION_CYCLE = "delegation_cycle"
HANDOFF = "handoff"  # a handoff_if rule: the case goes to a person (verdict HALT)
# 6b. limits across runs (Instance `limits`): the count in the shared store is at its max
LIMIT_EXCEEDED = "limit_exceeded"
LIMIT_UNAVAILABLE = "limit_unavailable"  # the limits' store cannot be read or written: refused, nothing counted
# service (decided around the engine: who calls, which run, who approved; the record)
AUDIT_UNAVAILABLE = "audit_unavailable"
APPROVAL_INVALID = "approval_invalid"
CALLER_NOT_PERMITTED = "caller_not_permitted"
RUN_TOKEN_INVALID = "run_token_invalid"
RUN_TOKEN_EXPIRED = "run_token_expired"  # the run token's lifetime is over
APPROVAL_EXPIRED = "approval_expired"  # the approval token's lifetime is over: ask the approver again
# the REQUIRE_APPROVAL's deadline passed before it was answered and its call sent: refused for good
APPROVAL_TIMED_OUT = "approval_timed_out"
# a webhook notification's attempt (action notify, docs/approvals.md): never a verdict on a call
NOTIFICATION_DELIVERED = "notification_delivered"
NOTIFICATION_FAILED = "notification_failed"  # this attempt failed; another follows
NOTIFICATION_DROPPED = "notification_dropped"  # given up after the last attempt, or the queue was full
RUN_ENDED = "run_ended"  # the run, or a run it descends from, ended or was cancelled: it acts no more
RUN_STATE_UNAVAILABLE = "run_state_unavailable"  # whether the run ended cannot be read (or its end written)
# a resent act's id was taken by a decision that is on no log (its record failed, its id stayed taken)
ACT_ID_UNRECORDED = "act_id_unrecorded"
# a replica on a shared store cannot tell whether its catalog and learnings are current
CATALOG_UNAVAILABLE = "catalog_unavailable"
# the shared store (--store; warden/store): down, past its statement timeout, or its pool full
STORE_UNAVAILABLE = "store_unavailable"
# the person lacks the tenant's role for the act (operator, approver, auditor; policy/roles.py)
ROLE_REQUIRED = "role_required"
# the codes of a person's recorded act (Approve, Reject)
APPROVED = "approved"
REJECTED = "rejected"
RECORDED = "recorded"  # a person's act on a run (RecordAct)
# the agent catalog's lifecycle (ProposeAgentChange, ReviewAgentChange, RetireAgentVersion)
PROPOSED = "proposed"
CATALOG_CHANGED = "catalog_changed"  # approved, rejected, retired, or a policy file's change applied
NO_CHANGE = "no_change"
NOT_PENDING = "not_pending"
VERSION_LIVE = "version_live"
TOO_MANY_PROPOSALS = "too_many_proposals"  # proposals waiting for review, per agent, are capped
CATALOG_CODES = frozenset({AGENT_VERSION_RETIRED, AGENT_VERSION_NOT_APPROVED, PROPOSED, CATALOG_CHANGED, NO_CHANGE,
                           NOT_PENDING, VERSION_LIVE, TOO_MANY_PROPOSALS})
# skills and templates (docs/skills.md): LoadSkill, a `templates:` tool's Check, their catalog acts
UNKNOWN_SKILL = "unknown_skill"  # no skill of that name in the run's tenant
SKILL_NOT_LISTED = "skill_not_listed"  # a skill the run did not pin: its agent does not list it, or none was live
SKILL_RETIRED = "skill_retired"  # the version the run pinned was retired since
UNKNOWN_TEMPLATE = "unknown_template"  # no reviewed (live) template of that name in the run's tenant
TEMPLATE_RETIRED = "template_retired"  # a proposal of a version that was retired
ENTRY_CODES = frozenset({UNKNOWN_SKILL, SKILL_NOT_LISTED, SKILL_RETIRED, UNKNOWN_TEMPLATE, TEMPLATE_RETIRED})
# learnings (docs/learnings.md): an `error` learning blocks a call (Check); the acts on learnings
LEARNING_BLOCKED = "learning_blocked"
LEARNING_PROPOSED = "learning_proposed"
LEARNING_CHANGED = "learning_changed"  # promoted, re-reviewed or edited, rejected, retired, gone stale
UNKNOWN_LEARNING = "unknown_learning"
LEARNING_NOT_ACTIVE = "learning_not_active"
LEARNING_CODES = frozenset({LEARNING_BLOCKED, LEARNING_PROPOSED, LEARNING_CHANGED, UNKNOWN_LEARNING,
                            LEARNING_NOT_ACTIVE})

DECISION_CODES = frozenset(
    [
        ALLOWED, INVALID_REQUEST, UNKNOWN_AGENT, UNKNOWN_AGENT_VERSION, UNKNOWN_TOOL, INVALID_ARGUMENTS,
        TOOL_NOT_ALLOWED, WILDCARD_IN_BACKGROUND, AGENT_MANAGEMENT_TOOL, DELEGATION_NOT_ALLOWED,
        ACCESS_NOT_ALLOWED, *OUT_OF_SCOPE.values(), SUBJECT_OFF_LIMITS, RULE_DENIED, APPROVAL_REQUIRED,
        POLICY_ERROR, PLAN_STEP_NOT_ALLOWED, *BREAKER_CODES.values(), DELEGATION_DEPTH,
        DELEGATION_CHILDREN, DELEGATION_TREE_SIZE, DELEGATION_CYCLE, LIMIT_EXCEEDED, LIMIT_UNAVAILABLE,
        AUDIT_UNAVAILABLE, APPROVAL_INVALID,
        CALLER_NOT_PERMITTED, RUN_TOKEN_INVALID, RUN_TOKEN_EXPIRED, APPROVAL_EXPIRED, APPROVAL_TIMED_OUT, NOTIFICATION_DELIVERED, NOTIFICATION_FAILED,
        NOTIFICATION_DROPPED, RUN_ENDED, RUN_STATE_UNAVAILABLE, ACT_ID_UNRECORDED, CATALOG_UNAVAILABLE, STORE_UNAVAILABLE, ROLE_REQUIRED, APPROVED, REJECTED, RECORDED, HANDOFF,
        AGENT_VERSION_RETIRED, AGENT_VERSION_NOT_APPROVED, PROPOSED, CATALOG_CHANGED, NO_CHANGE, NOT_PENDING,
        VERSION_LIVE, TOO_MANY_PROPOSALS, *ENTRY_CODES, *LEARNING_CODES,
    ]
)

# the checkpoint's HTTP door (checkpoint/server/http_door.py): refused before any handler runs,
# so nothing is decided or recorded
UNKNOWN_METHOD = "unknown_method"  # a path that names no method the door serves
UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"  # a body neither JSON nor binary protobuf
LENGTH_REQUIRED = "length_required"  # no Content-Length (chunked), or one that is not a length
REQUEST_TOO_LARGE = "request_too_large"  # a body over --max-request-bytes, refused unread
TOO_MANY_REQUESTS = "too_many_requests"  # more calls at once than the door's threads
HTTP_DOOR_CODES = frozenset({UNKNOWN_METHOD, UNSUPPORTED_MEDIA_TYPE, LENGTH_REQUIRED, REQUEST_TOO_LARGE,
                             TOO_MANY_REQUESTS})

# the store setting at start (warden/store): each stops the command before anything starts
STORE_URL_INVALID = "store_url_invalid"  # an unknown scheme, no path or database, an unreadable password file
STORE_SCHEMA = "store_schema_mismatch"  # no schema yet (run `warden store migrate`), or a newer one than this release knows
STORE_HALF_MIGRATED = "store_half_migrated"  # a catalog file holding both the old tables and the new: refused, not guessed at
# retention of the decision log on PostgreSQL (`warden audit prune --store`; docs/fleet.md): refused,
# nothing dropped
PARTITION_NOT_EXPORTED = "partition_not_exported"  # a partition the cutoff reaches was never rotated (exported)
RETENTION_CUTOFF_INVALID = "retention_cutoff_invalid"  # --before unreadable, or in the future
RETENTION_CODES = frozenset({PARTITION_NOT_EXPORTED, RETENTION_CUTOFF_INVALID})
# the metrics address at start (--metrics-address): not HOST:PORT, or its port taken or not
# permitted; the server stops before it serves, with one line naming the address
METRICS_ADDRESS_UNAVAILABLE = "metrics_address_unavailable"

# a signed policy bundle refused (checkpoint/policy/bundle.py): the set in force stays, health and
# the metric warden_checkpoint_policy_bundle_refusals say which (docs/bundles.md)
BUNDLE_MALFORMED = "bundle_malformed"  # not a gzip tar, a member twice, a manifest that is not the bundle format
BUNDLE_UNSIGNED = "bundle_unsigned"  # no signed manifest or no signature in the bundle
BUNDLE_BAD_SIGNATURE = "bundle_bad_signature"  # the signature does not verify with --bundle-pubkey
BUNDLE_DIGEST_MISMATCH = "bundle_digest_mismatch"  # a file not listed, listed and missing, or other bytes than signed
BUNDLE_UNSAFE_PATH = "bundle_unsafe_path"  # a member escaping the folder, or no regular file (link, device, FIFO)
BUNDLE_TOO_LARGE = "bundle_too_large"  # over the size caps, packed or unpacked, or more files than the cap
BUNDLE_ROLLBACK = "bundle_rollback"  # a serial below the one in force, or the same serial with other content
BUNDLE_DOES_NOT_LOAD = "bundle_does_not_load"  # signed and whole, but its policy files do not load
BUNDLE_UNAVAILABLE = "bundle_unavailable"  # the URL or file cannot be read (an answer other than 200 or 304)
BUNDLE_CODES = frozenset({BUNDLE_MALFORMED, BUNDLE_UNSIGNED, BUNDLE_BAD_SIGNATURE, BUNDLE_DIGEST_MISMATCH,
                          BUNDLE_UNSAFE_PATH, BUNDLE_TOO_LARGE, BUNDLE_ROLLBACK, BUNDLE_DOES_NOT_LOAD,
                          BUNDLE_UNAVAILABLE})
