"""The shapes a typed CEL variable is declared with: a scalar `CelType`, an object with known fields
(`Obj`), or a list of either (`ListOf`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from checkpoint.cel.api import CelType


@dataclass(frozen=True)
class Obj:
    """An object with known fields. `name` is an identifier naming its message; `label` is how
    messages call it ("tool", "args"); `hint` says where its fields come from, after an
    unknown-field message (": not a property of propose_refund's input_schema")."""

    name: str
    label: str
    fields: tuple[tuple[str, Shape], ...]
    hint: str = field(default="", compare=False)

    def field_names(self) -> list[str]:
        return [name for name, _ in self.fields]


@dataclass(frozen=True)
class ListOf:
    """A list whose items are objects (or one scalar type)."""

    item: Obj | CelType


Shape = CelType | Obj | ListOf


def shape_name(shape: Shape) -> str:
    if isinstance(shape, Obj):
        return f"an object ({shape.label})"
    if isinstance(shape, ListOf):
        return f"a list of {shape_name(shape.item)}"
    return shape.value
