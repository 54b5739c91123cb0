"""Typed declarations as the checker learns them: each `Obj` a protobuf message built at run time
(`descriptor_pb2`), in a descriptor pool of its own, and the names that can be its fields."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, struct_pb2, timestamp_pb2

from checkpoint.cel.api import CelType
from checkpoint.cel.shapes import ListOf, Obj, Shape

PACKAGE = "warden.cel.typed"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# CEL reserved words cannot be selected (`args.in` does not parse), so they cannot be fields.
RESERVED = frozenset(
    "true false null in as break const continue else for function if import let loop package namespace "
    "return var void while".split()
)
_F = descriptor_pb2.FieldDescriptorProto
_SCALARS: dict[CelType, tuple[int, str]] = {
    CelType.BOOL: (_F.TYPE_BOOL, ""),
    CelType.INT: (_F.TYPE_INT64, ""),
    CelType.UINT: (_F.TYPE_UINT64, ""),
    CelType.DOUBLE: (_F.TYPE_DOUBLE, ""),
    CelType.STRING: (_F.TYPE_STRING, ""),
    CelType.BYTES: (_F.TYPE_BYTES, ""),
    CelType.DYN: (_F.TYPE_MESSAGE, ".google.protobuf.Value"),
    CelType.LIST_DYN: (_F.TYPE_MESSAGE, ".google.protobuf.ListValue"),
    CelType.MAP_STRING_DYN: (_F.TYPE_MESSAGE, ".google.protobuf.Struct"),
    CelType.TIMESTAMP: (_F.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
}


def json_name(name: str) -> str:
    """protobuf's default JSON name of a field (`foo_bar` -> `fooBar`)."""
    out, upper = [], False
    for ch in name:
        if ch == "_":
            upper = True
        else:
            out.append(ch.upper() if upper else ch)
            upper = False
    return "".join(out)


def selectable(names: list[str]) -> str | None:
    """Why these names cannot all be fields of one typed object, or None when they can: each must
    be an identifier that is not reserved in CEL, and protobuf refuses two fields whose JSON names
    collide (`foo_bar`, `fooBar`)."""
    seen: dict[str, str] = {}
    for name in names:
        if not _IDENT.match(name) or name in RESERVED:
            return f"{name!r} cannot be read as a field (not a CEL identifier)"
        other = seen.setdefault(json_name(name), name)
        if other != name:
            return f"{other!r} and {name!r} cannot both be fields of one typed object"
    return None


class Declarations:
    """The messages of one declaration set, in one descriptor pool."""

    def __init__(self, variables: Mapping[str, Shape]) -> None:
        self.objects: dict[Obj, str] = {}  # Obj -> message full name
        self.labels: dict[str, Obj] = {}  # message full name -> Obj
        file = descriptor_pb2.FileDescriptorProto(name="warden_cel_typed.proto", package=PACKAGE, syntax="proto3")
        file.dependency.extend(["google/protobuf/struct.proto", "google/protobuf/timestamp.proto"])
        self.file = file
        for shape in variables.values():
            self._walk(shape)
        self.pool = descriptor_pool.DescriptorPool()
        self.pool.AddSerializedFile(struct_pb2.DESCRIPTOR.serialized_pb)
        self.pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
        self.pool.AddSerializedFile(file.SerializeToString())

    def _walk(self, shape: Shape) -> None:
        if isinstance(shape, ListOf):
            self._walk(shape.item)
        elif isinstance(shape, Obj) and shape not in self.objects:
            problem = selectable(shape.field_names())
            if problem is not None:
                raise ValueError(f"{shape.label}: {problem}")
            full = f"{PACKAGE}.{shape.name}_{len(self.objects)}"
            self.objects[shape] = full
            self.labels[full] = shape
            message = self.file.message_type.add(name=full.rsplit(".", 1)[1])
            for number, (name, ftype) in enumerate(shape.fields, start=1):
                self._walk(ftype)
                self._field(message, name, number, ftype)

    def _field(self, message: Any, name: str, number: int, shape: Shape) -> None:
        label = _F.LABEL_OPTIONAL
        if isinstance(shape, ListOf) or shape is CelType.LIST_STRING:
            label = _F.LABEL_REPEATED
            shape = CelType.STRING if shape is CelType.LIST_STRING else shape.item  # type: ignore[union-attr]
        if isinstance(shape, Obj):
            kind, type_name = _F.TYPE_MESSAGE, "." + self.objects[shape]
        elif shape in _SCALARS:
            kind, type_name = _SCALARS[shape]
        else:  # map(string, string) and other rarities: checked as dyn
            kind, type_name = _SCALARS[CelType.DYN]
        added = message.field.add(name=name, number=number, label=label, type=kind)
        if type_name:
            added.type_name = type_name

    def native_type(self, shape: Shape) -> Any:
        from cel_expr_python import cel  # only a Checker asks, and it exists only with the wheel

        T = cel.Type
        if isinstance(shape, Obj):
            return T(self.objects[shape])
        if isinstance(shape, ListOf):
            return T.List(self.native_type(shape.item))
        from checkpoint.cel.native import _native_type

        return _native_type(shape)
