"""The Instance's `limits` checked against the rest of the folder, each problem with file:line:
a name given twice, a tool no document defines, a window past the longest kept, a spend limit with
no prices to count by, a code warden gives for something else."""

from __future__ import annotations

from typing import TYPE_CHECKING

from checkpoint.policy import model
from checkpoint.policy.limits import MAX_WINDOW_SECONDS, NO_LIMITS, LimitSet, compiled, window_seconds
from checkpoint.policy.loader.documents import Doc
from warden import codes

if TYPE_CHECKING:
    from checkpoint.policy.loader.compiler import Compiler


def compile_limits(compiler: Compiler, doc: Doc | None, instance: model.Instance, tools: dict[str, Doc]) -> LimitSet:
    """The instance's limits, compiled; problems reported through `compiler`."""
    if doc is None or not instance.limits:
        return NO_LIMITS
    seen: dict[str, int] = {}
    for i, spec in enumerate(instance.limits):
        first = seen.setdefault(spec.name, i)
        if first != i:
            compiler.error(doc, ("limits", i, "name"), f"limit {spec.name!r} is defined twice "
                           f"(first at line {doc.at('limits', first, 'name')})")
        for j, tool in enumerate(spec.tools):
            if tool not in tools:
                compiler.error(doc, ("limits", i, "tools", j), f"limit {spec.name!r} names unknown tool {tool!r}")
            elif tool in spec.tools[:j]:
                compiler.error(doc, ("limits", i, "tools", j), f"limit {spec.name!r} names tool {tool!r} twice")
        if window_seconds(spec.window) > MAX_WINDOW_SECONDS:
            compiler.error(doc, ("limits", i, "window"),
                           f"limit {spec.name!r}: window {spec.window} is longer than the longest kept, 31d")
        if spec.counts == "spend" and not instance.model_prices:
            compiler.error(doc, ("limits", i, "counts"), f"limit {spec.name!r} counts spend, but the Instance lists "
                           "no model_prices to price a model call by")
        if spec.code is not None and spec.code != codes.LIMIT_EXCEEDED and (
                spec.code in codes.DECISION_CODES or spec.code.startswith("breaker_")):
            compiler.error(doc, ("limits", i, "code"), f"limit {spec.name!r}: code {spec.code!r} is a stable code "
                           f"warden gives for something else; a limit's code is {codes.LIMIT_EXCEEDED!r} or a "
                           "name of its own")
    return compiled(instance.limits, instance.model_prices)
