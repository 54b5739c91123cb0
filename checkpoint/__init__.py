"""The checkpoint: the policy decision point.

`policy/` reads and compiles the policy files, `cel/` runs their CEL, `engine/` holds the decision
function, `audit/` the decision log, and `server/` the gRPC service that establishes who asks for
which run, decides, signs grants and records before it answers (docs/architecture.md).
"""
