from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .world import Checkpoint, Story, Web, policy_copy, serve, start_checkpoint, tell, write_tokens


@dataclass
class World:
    checkpoint: Checkpoint
    story: Story
    web: Web
    policies: Path
    tokens: Path


def _world(tmp: Path) -> Iterator[World]:
    policies = policy_copy(tmp / "policies")
    checkpoint = start_checkpoint(tmp, policies)
    try:
        story = tell(checkpoint)
        tokens = write_tokens(tmp / "audit.tokens")
        web = serve(checkpoint.log_path, tokens, policies)
        try:
            yield World(checkpoint, story, web, policies, tokens)
        finally:
            web.stop()
    finally:
        checkpoint.stop()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """A checkpoint that told the story, and the web view over its log: each test its own."""
    yield from _world(tmp_path)


@pytest.fixture(scope="module")
def shared_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The same, shared by a module's tests that only read."""
    yield from _world(tmp_path_factory.mktemp("world"))
