"""Generate the OpenAPI 3.1 description of the checkpoint's HTTP door from proto/ (`make gen`).

The description is docs/openapi.json, committed; tests/contracts/test_openapi.py regenerates it and
fails when it differs. It is built from the protos' descriptors with their comments (protoc's
source info), in proto3 JSON's terms, the door's wire form: lowerCamelCase names, enums by name,
64-bit integers as strings, Struct as any JSON object, Timestamp as an RFC 3339 string.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUTPUT = ROOT / "docs" / "openapi.json"
PACKAGE = "warden.checkpoint.v1"
SERVICE = "CheckpointService"

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS: dict[int, dict[str, Any]] = {
    _F.TYPE_STRING: {"type": "string"},
    _F.TYPE_BOOL: {"type": "boolean"},
    _F.TYPE_BYTES: {"type": "string", "format": "byte"},
    _F.TYPE_DOUBLE: {"type": "number", "format": "double"},
    _F.TYPE_FLOAT: {"type": "number", "format": "float"},
    **{t: {"type": "integer", "format": "int32"} for t in (_F.TYPE_INT32, _F.TYPE_SINT32, _F.TYPE_SFIXED32)},
    **{t: {"type": "integer", "format": "uint32", "minimum": 0} for t in (_F.TYPE_UINT32, _F.TYPE_FIXED32)},
    # proto3 JSON writes 64-bit integers as strings (a JavaScript number cannot hold them all)
    **{t: {"type": "string", "format": "int64", "pattern": "^-?[0-9]+$"}
       for t in (_F.TYPE_INT64, _F.TYPE_SINT64, _F.TYPE_SFIXED64)},
    **{t: {"type": "string", "format": "uint64", "pattern": "^[0-9]+$"} for t in (_F.TYPE_UINT64, _F.TYPE_FIXED64)},
}
_WELL_KNOWN: dict[str, dict[str, Any]] = {
    ".google.protobuf.Struct": {"type": "object", "additionalProperties": True},
    ".google.protobuf.Value": {},
    ".google.protobuf.ListValue": {"type": "array", "items": {}},
    ".google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
}


def descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    """The protos compiled with their comments."""
    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        files = [str(p.relative_to(PROTO_ROOT)) for p in sorted(PROTO_ROOT.rglob("*.proto"))]
        args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", "--include_source_info",
                f"--descriptor_set_out={out}", *files]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed: " + " ".join(args))
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _comments(file: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    return {tuple(loc.path): " ".join(loc.leading_comments.split()) for loc in file.source_code_info.location
            if loc.leading_comments.strip()}


def _field_schema(field: descriptor_pb2.FieldDescriptorProto, maps: dict[str, descriptor_pb2.DescriptorProto]) -> Any:
    if field.type == _F.TYPE_MESSAGE and field.type_name in maps:  # a map<k, v>
        value = maps[field.type_name].field[1]
        return {"type": "object", "additionalProperties": _field_schema(value, maps)}
    if field.type == _F.TYPE_MESSAGE:
        one: Any = _WELL_KNOWN.get(field.type_name) or {"$ref": _ref(field.type_name)}
    elif field.type == _F.TYPE_ENUM:
        one = {"$ref": _ref(field.type_name)}
    else:
        one = dict(_SCALARS[field.type])
    if field.label == _F.LABEL_REPEATED:
        return {"type": "array", "items": one}
    return one


def _ref(type_name: str) -> str:
    return "#/components/schemas/" + type_name.lstrip(".").removeprefix(PACKAGE + ".")


def _schemas(file: descriptor_pb2.FileDescriptorProto) -> dict[str, Any]:
    comments = _comments(file)
    schemas: dict[str, Any] = {}

    def message(msg: descriptor_pb2.DescriptorProto, name: str, path: tuple[int, ...]) -> None:
        maps = {f".{PACKAGE}.{name}.{nested.name}": nested for nested in msg.nested_type
                if nested.options.map_entry}
        properties = {}
        for index, field in enumerate(msg.field):
            schema = _field_schema(field, maps)
            text = comments.get((*path, 2, index))
            if field.HasField("oneof_index") and not field.proto3_optional:
                oneof = msg.oneof_decl[field.oneof_index].name
                text = (text + " " if text else "") + f"(One of `{oneof}`: at most one of its fields is set.)"
            if text:
                schema = {"description": text, **schema} if "$ref" not in schema else \
                    {"description": text, "allOf": [schema]}
            properties[field.json_name] = schema
        schemas[name] = {"type": "object", **({"description": comments[path]} if path in comments else {}),
                         "properties": properties, "additionalProperties": False}
        for index, nested in enumerate(msg.nested_type):
            if not nested.options.map_entry:
                message(nested, f"{name}.{nested.name}", (*path, 3, index))
        for index, enum in enumerate(msg.enum_type):
            enum_schema(enum, f"{name}.{enum.name}", (*path, 4, index))

    def enum_schema(enum: descriptor_pb2.EnumDescriptorProto, name: str, path: tuple[int, ...]) -> None:
        values = [v.name for v in enum.value]
        schemas[name] = {"type": "string", **({"description": comments[path]} if path in comments else {}),
                         "enum": values}

    for index, msg in enumerate(file.message_type):
        message(msg, msg.name, (4, index))
    for index, enum in enumerate(file.enum_type):
        enum_schema(enum, enum.name, (5, index))
    return schemas


CONNECT_ERROR = {
    "type": "object",
    "description": "A Connect error. `message` starts with warden's stable code (docs/codes.md); `details` "
                   "holds the warden.checkpoint.v1.ErrorDetail, in binary (`value`, base64) and as JSON (`debug`).",
    "required": ["code", "message"],
    "properties": {
        "code": {"type": "string", "description": "The Connect code: invalid_argument, unauthenticated, "
                 "permission_denied, resource_exhausted, unavailable, unimplemented, ..."},
        "message": {"type": "string"},
        "details": {"type": "array", "items": {
            "type": "object",
            "properties": {
                "type": {"type": "string", "const": f"{PACKAGE}.ErrorDetail"},
                "value": {"type": "string", "description": "The ErrorDetail, binary protobuf, base64 without padding"},
                "debug": {"$ref": "#/components/schemas/ErrorDetail"},
            },
        }},
    },
}


def build() -> dict[str, Any]:
    files = {f.name: f for f in descriptor_set().file}
    file = next(f for f in files.values() if f.package == PACKAGE)
    comments = _comments(file)
    schemas = {**_schemas(file), "ConnectError": CONNECT_ERROR}
    service_index, service = next((i, s) for i, s in enumerate(file.service) if s.name == SERVICE)
    paths: dict[str, Any] = {}
    errors = {"default": {"description": "An error: the request could not be decided (a DENY is a 200 answer).",
                          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ConnectError"}}}}}
    for index, method in enumerate(service.method):
        if method.client_streaming:
            continue  # CheckStream: gRPC only
        request, response = _ref(method.input_type), _ref(method.output_type)
        text = comments.get((6, service_index, 2, index), "")
        if method.server_streaming:
            text += (" A Connect server stream: the request and each answer are enveloped (one flags byte, "
                     "a 4-byte big-endian length, the JSON message); the last envelope (flags 2) holds "
                     "`{}` or `{\"error\": ConnectError}`.")
            content_type = "application/connect+json"
        else:
            content_type = "application/json"
        paths[f"/{PACKAGE}.{SERVICE}/{method.name}"] = {"post": {
            "operationId": method.name,
            "summary": text.split(". ")[0].rstrip(".") if text else method.name,
            "description": text.strip(),
            "requestBody": {"required": True, "content": {content_type: {"schema": {"$ref": request}}}},
            "responses": {"200": {"description": "The answer.",
                                  "content": {content_type: {"schema": {"$ref": response}}}}, **errors},
        }}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "warden checkpoint, HTTP/JSON door",
            "version": "v1",
            "description": "The checkpoint's contracts (proto/warden/checkpoint/v1/checkpoint.proto) as JSON over "
                           "HTTP, the Connect protocol: POST the request message as proto3 JSON. Generated by "
                           "`python -m warden.openapigen`; see docs/checkpoint-service.md, 'HTTP and JSON'.",
        },
        "servers": [{"url": "http://127.0.0.1:7402", "description": "`warden checkpoint serve --http-address "
                     "127.0.0.1:7402`"}],
        "security": [{"bearer": []}, {"mutualTLS": []}],
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "A token of the checkpoint's token file (the same as gRPC's)"},
                "mutualTLS": {"type": "mutualTLS",
                              "description": "A client certificate the configured CA signed, where mTLS is configured"},
            },
        },
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
