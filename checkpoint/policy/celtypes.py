"""The declared types of what a rule's condition and a tool's `touches` read.

Rules are evaluated over plain maps (`RULE_VARIABLES` in the loader); these are the same
variables with their fields declared, for the type check at load (`checkpoint.cel.typed`):
`tool.acess`, `args.servcie` and `args.service > 5` are load errors with file:line, a code
frame and a "did you mean", not a `policy_error` on every matching call.

- `tool`, `agent`, `run`, `person`, `model`, `delegation`, `counters` are objects with the
  fields decide() fills (engine/decide.py, engine/context.py; a test holds them together).
- `plan` is a list of `{id, tool}` objects; `subjects` a list of strings; `touched` an object
  with a list per scope dimension of the values as read (engine/as_read.py); `action` a string;
  `now` a timestamp (the checkpoint's clock).
- `limits` is an object with one field per limit of the Instance (`used`, `remaining`, `max`: ints
  for a limit of calls, doubles in USD for one of spend).
- `args` is typed from the input_schema of the tools a rule names (`tools: [...]`): each
  property is a field, its JSON Schema type gives the field's type, and reading anything else is
  an error. A rule that names no tools reads `args` as a map of dyn (any key, checked at run
  time). So does a rule naming a tool whose schema cannot be read as fields (see `args_shape`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from checkpoint.cel import CelType
from checkpoint.cel.typed import ListOf, Obj, Shape, selectable
from warden.checkpoint.v1 import checkpoint_pb2 as pb

STR, INT, BOOL, DBL = CelType.STRING, CelType.INT, CelType.BOOL, CelType.DOUBLE

TOOL = Obj("Tool", "tool", (("name", STR), ("access", STR)))
AGENT = Obj("Agent", "agent", (("name", STR), ("version", STR), ("tenant", STR), ("tools", CelType.LIST_STRING),
                               ("access", CelType.LIST_STRING)))
RUN = Obj("Run", "run", (
    ("tenant", STR), ("run_id", STR), ("root_run_id", STR), ("parent_run_id", STR), ("mode", STR), ("depth", INT),
    ("accountable_person", STR), ("has_plan", BOOL), ("inputs", CelType.MAP_STRING_DYN),
))
PERSON = Obj("Person", "person", (("name", STR), ("roles", CelType.LIST_STRING)))
MODEL = Obj("Model", "model", (("provider", STR), ("name", STR), ("max_tokens", INT), ("input_tokens", INT)))
DELEGATION = Obj("Delegation", "delegation", (("agent", STR), ("version", STR)))
PLAN_STEP = Obj("PlanStep", "a plan step", (("id", STR), ("tool", STR)))
# a touched value as the subject reader reads it (engine/as_read.py fills it)
SUBJECT_AS_READ = Obj("SubjectAsRead", "a touched value", (
    ("kind", STR), ("text", STR), ("host", STR), ("address", STR), ("range", BOOL), ("scheme", STR),
    ("port", INT), ("path", STR), ("name", STR),
))
TOUCHED = Obj("Touched", "touched", tuple((dim, ListOf(SUBJECT_AS_READ)) for dim in
                                          ("images", "nodes", "connections", "threads", "subjects")))


def _counters() -> Obj:
    """Every Counters field, typed as decide() reads it from the proto (getattr: int, float, bool)."""
    F = FieldDescriptor
    kinds = {F.TYPE_DOUBLE: DBL, F.TYPE_FLOAT: DBL, F.TYPE_BOOL: BOOL}
    return Obj("Counters", "counters", tuple((f.name, kinds.get(f.type, INT)) for f in pb.Counters.DESCRIPTOR.fields))


COUNTERS = _counters()

# no limits: `limits.anything` is a load error (the Instance's limits give it fields: policy/limits.py)
NO_LIMITS = Obj("Limits", "limits", (), hint=": no limit of that name in the Instance's limits")

# The rule variables with their types, `args` left as the map it is for a rule naming no tools.
RULE_SHAPES: dict[str, Shape] = {
    "action": STR,
    "args": CelType.MAP_STRING_DYN,
    "tool": TOOL,
    "agent": AGENT,
    "run": RUN,
    "person": PERSON,
    "counters": COUNTERS,
    "subjects": CelType.LIST_STRING,
    "touched": TOUCHED,
    "model": MODEL,
    "delegation": DELEGATION,
    "plan": ListOf(PLAN_STEP),
    "now": CelType.TIMESTAMP,
    "limits": NO_LIMITS,
}

_UNTYPED_KEYWORDS = ("allOf", "anyOf", "oneOf", "$ref", "patternProperties", "if", "dependencies",
                     "dependentSchemas", "unevaluatedProperties")
_ITEMS: dict[str, Shape] = {"string": CelType.LIST_STRING, "integer": ListOf(INT), "boolean": ListOf(BOOL)}


def property_shape(schema: Any) -> Shape:
    """The CEL type of an argument with this JSON Schema, as the checkpoint hands it to CEL.

    A JSON number arrives as an int when it is whole and a double otherwise (warden/structs.py),
    so `number` is dyn: compared by value either way (`> 500`, `> 500.0`). `integer` is an int.
    Arrays of strings, integers or booleans are lists of them; other arrays list(dyn); objects
    map(string, dyn). A property with several types, or none, is dyn (an enum of strings only
    is a string)."""
    if not isinstance(schema, dict):
        return CelType.DYN
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0] if len(kind) == 1 else None
    if kind is None:
        values = schema["enum"] if isinstance(schema.get("enum"), list) else (
            [schema["const"]] if "const" in schema else None)
        return STR if values and all(isinstance(v, str) for v in values) else CelType.DYN
    if kind == "array":
        items = schema.get("items")
        item_kind = items.get("type") if isinstance(items, dict) else None
        return _ITEMS.get(item_kind, CelType.LIST_DYN) if isinstance(item_kind, str) else CelType.LIST_DYN
    return {"string": STR, "integer": INT, "boolean": BOOL, "object": CelType.MAP_STRING_DYN}.get(kind, CelType.DYN)


def untyped_reason(schema: Mapping[str, Any]) -> str | None:
    """Why a tool's arguments cannot be typed as fields, or None when they can."""
    for keyword in _UNTYPED_KEYWORDS:
        if keyword in schema:
            return f"its input_schema uses {keyword!r}, so its properties are not all listed in one place"
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        return "its input_schema has no readable properties"
    return selectable(list(properties))


def args_shape(tools: Sequence[tuple[str, Mapping[str, Any]]]) -> Shape:
    """`args` of a rule naming these tools (name, input_schema): the properties of all of them,
    a property typed differently in two tools being dyn. A map of dyn when no tools are named,
    or when one of them cannot be typed (`untyped_reason`)."""
    if not tools or any(untyped_reason(schema) is not None for _, schema in tools):
        return CelType.MAP_STRING_DYN
    fields: dict[str, Shape] = {}
    for _, schema in tools:
        for name, prop in schema.get("properties", {}).items():
            shape = property_shape(prop)
            fields[name] = shape if fields.get(name, shape) == shape else CelType.DYN
    names = [name for name, _ in tools]
    which = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
    return Obj("Args", "args", tuple(fields.items()),
               hint=f": not a property of the input_schema of {which}")


def rule_shapes(tools: Sequence[tuple[str, Mapping[str, Any]]], limits: Obj = NO_LIMITS) -> dict[str, Shape]:
    """The typed rule variables for a rule naming `tools` (name, input_schema), in a folder whose
    Instance declares `limits` (policy/limits.py, `LimitSet.shape`)."""
    return {**RULE_SHAPES, "args": args_shape(tools), "limits": limits}


def touches_shapes(tool: str, schema: Mapping[str, Any]) -> dict[str, Shape]:
    """The typed variables of a tool's `touches` expressions: its own arguments."""
    return {"args": args_shape([(tool, schema)])}
