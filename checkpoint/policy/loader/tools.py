"""A Tool document compiled: its input schema, the CEL of what it touches, its command's
placeholders and the templates it is filled from."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import fastjsonschema

from checkpoint.cel import CelProgram
from checkpoint.cel.fastpath import FastProgram, compile_fast
from checkpoint.policy import celtypes, entries, input_schemas, model
from checkpoint.policy.loader.documents import Doc
from checkpoint.policy.loader.variables import TOUCHES_VARIABLES
from checkpoint.policy.policyset import SCOPE_DIMENSIONS, CompiledTool

if TYPE_CHECKING:
    from checkpoint.policy.loader.compiler import Compiler

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def compile_tool(c: Compiler, doc: Doc) -> CompiledTool | None:
    spec: model.Tool = doc.spec
    try:
        input_schemas.check(spec.input_schema)
        fast = fastjsonschema.compile(spec.input_schema)
    except input_schemas.SchemaProblem as exc:
        c.error(doc, ("input_schema", *exc.path), f"input_schema is not a valid JSON Schema: {exc.message}")
        return None
    except fastjsonschema.JsonSchemaDefinitionException as exc:
        c.error(doc, ("input_schema",), f"input_schema cannot be compiled: {exc}")
        return None
    if spec.input_schema.get("type") != "object":
        c.error(doc, ("input_schema",), "input_schema must describe an object (type: object)")
    touches: dict[str, CelProgram] = {}
    compiled: dict[str, CelProgram] = {}
    failed = False
    for dim in SCOPE_DIMENSIONS:
        source = getattr(spec.touches, dim)
        if source is not None:
            # always compile through the engine: it type-checks; keep the fast form when there is one
            program = c.compile_cel(doc, ("touches", dim), source, TOUCHES_VARIABLES,
                                       ("LIST<STRING>", "LIST<DYN>", "DYN"),
                                       celtypes.touches_shapes(spec.name, spec.input_schema))
            if program is None:
                failed = True
            else:
                compiled[dim] = program
                touches[dim] = compile_fast(source) or program
    if any(not isinstance(p, FastProgram) for p in touches.values()):
        # one activation serves every expression of a call: when one needs CEL's, all take it
        touches = compiled
    if spec.run is not None:
        properties = spec.input_schema.get("properties", {})
        for i, part in enumerate(spec.run.command):
            for name in _PLACEHOLDER.findall(part):
                if name not in properties:
                    c.unknown(doc, ("run", "command", i), "property", name, properties,
                              f"command placeholder {{{name}}} is not an input_schema property")
        if spec.run.network and spec.touches.connections is None:
            c.error(doc, ("run", "network"), "network needs touches.connections, so scope can decide where it may go")
    if spec.templates is not None:
        templates_tool(c, doc)
    if failed:
        return None
    return CompiledTool(
        spec=spec, explainer=input_schemas.Explainer(spec.input_schema), fast_validate=fast, touches=touches,
        touches_need_cel=any(not isinstance(p, FastProgram) for p in touches.values()),
    )


def templates_tool(c: Compiler, doc: Doc) -> None:
    """A tool the checkpoint fills from the templates names the arguments it reads and fills (a
    resolved template's image and node are put into `image` and `node`, which its touches must
    read for scope); the filled one is never required (a plan step or the model leaves it out)."""
    spec: model.Tool = doc.spec
    properties = spec.input_schema.get("properties", {})
    filled = entries.FILLED[spec.templates or ""]
    read = ("template", "target", *entries.PLACED) if spec.templates == "resolve" else ()
    for name in (*read, filled):
        if name not in properties:
            c.error(doc, ("input_schema",), f"tool {spec.name!r} (templates: {spec.templates}) needs an "
                       f"input_schema property {name!r}")
    if filled in spec.input_schema.get("required", []):
        c.error(doc, ("input_schema", "required"), f"tool {spec.name!r}: {filled!r} is filled by the "
                   "checkpoint, so it cannot be required")
