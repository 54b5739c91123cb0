"""The decision function (decide) and agent resolution, over a loaded PolicySet."""

from checkpoint.engine.decide import decide
from checkpoint.engine.outcome import InvalidRequest
from checkpoint.engine.resolve import resolve_agent

__all__ = ["InvalidRequest", "decide", "resolve_agent"]
