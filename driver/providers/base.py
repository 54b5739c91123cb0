"""The provider-neutral request every adapter receives.

The transcript is a list of neutral entries, so the loop never builds provider messages:
- ``{"role": "user", "text": ...}``: the goal, nudges, a person's reply (from the driver),
- ``{"role": "assistant", "reply": ProviderReply as dict}``: what the model said,
- ``{"role": "results", "results": [{"call_id", "content", "is_error"}], "text": ...}``: tool
  results and refusals, always marked as data, plus an optional note from the driver.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from driver.boundary import ProviderReply


class ToolDef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ModelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    # How many model calls this run already attempted: a scripted model replays by position.
    attempt: int
    system: str
    transcript: list[dict[str, Any]]
    tools: list[ToolDef]
    max_tokens: int = 2048


class Provider(Protocol):
    name: str
    model: str

    def complete(self, request: ModelRequest) -> ProviderReply:
        """One model call. Raises driver.errors.ProviderError when the provider refuses."""
        ...


def estimate_tokens(text: str) -> int:
    # A rough count for the model-call Check before the provider reports real usage.
    return max(1, len(text) // 4)
