"""Hooks where agents already ask permission: each one turns the agent's question into a Check.

`warden hook claude-code` is Claude Code's PreToolUse command hook. A hook lives for one call, so
the run it checks for (and that run's breaker counters) is kept in a small SQLite file between
calls. Any failure blocks the call: a hook that exits quietly would hand the call to the agent's
own permission settings.
"""
