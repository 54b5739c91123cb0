"""`warden mcp`: a governing MCP gateway in front of upstream MCP servers.

The client sees only the upstream tools the pinned allowlist of its run allows, under names
prefixed by their upstream; every tools/call is a Check() with its arguments before any upstream
sees it; a refusal comes back as a tool result marked as an error with its stable code; results
are scrubbed of credentials. What each upstream said its tools were is pinned when the policy
first admits them, and a tool that changed is refused until a person accepts it again.
"""
