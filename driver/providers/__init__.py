"""Model providers. Each adapter is the only code that knows its provider's format or SDK."""

from __future__ import annotations

from typing import Any

from driver.providers.base import ModelRequest, Provider, ToolDef


def make_provider(name: str, **options: Any) -> Provider:
    """Build the adapter a run was configured with (imported lazily: only one SDK is loaded)."""
    if name == "scripted":
        from driver.providers.scripted import ScriptedProvider

        return ScriptedProvider(**options)
    if name == "anthropic":
        from driver.providers.anthropic_provider import AnthropicProvider

        return AnthropicProvider(**options)
    raise ValueError(f"unknown provider {name!r} (known: anthropic, scripted)")


__all__ = ["ModelRequest", "Provider", "ToolDef", "make_provider"]
