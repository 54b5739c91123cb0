"""The real checkpoint server fixtures of tests/server, for the attacks that need the wire."""

from server.conftest import checkpoint, policy_dir, start  # noqa: F401  (pytest fixtures)
