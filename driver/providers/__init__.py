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


def child_options(name: str, options: dict[str, Any], agent: str) -> dict[str, Any]:
    """The provider options of a child run of `agent`, started by a run with these options.

    A scripted run holds its children's scripts, by agent (a child without one hands off at
    once); every other provider gives its children the options it has itself.
    """
    if name == "scripted":
        from driver.providers.scripted import child_script

        return {"script": child_script(options.get("script"), agent)}
    return dict(options)


__all__ = ["ModelRequest", "Provider", "ToolDef", "child_options", "make_provider"]
