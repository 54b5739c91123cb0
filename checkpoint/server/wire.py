"""Nothing silently dropped on the wire: find fields a binary request carries that we do not know.

protobuf parses fields it has no definition for into the message's unknown-field set and goes on,
so a client built against a newer proto (or a hand-crafted request) could send a constraint this
checkpoint would silently ignore. The proto3 JSON parser refuses unknown fields; this gives the
binary path the same answer. Map entries are the one place it cannot see into: protobuf keeps no
unknown fields of an entry (the checkpoint's only maps are inside google.protobuf.Struct).

`has_unknown_fields` is the per-request check, done in C (about 8 us for a typical Check);
`unknown_field` walks in Python to say where, and runs only for a request about to be refused.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

_MESSAGE = FieldDescriptor.TYPE_MESSAGE


def has_unknown_fields(message: Message) -> bool:
    """True when the message or any message inside it holds unknown fields. Drops them."""
    size = message.ByteSize()  # unknown fields are serialized back, so they count
    message.DiscardUnknownFields()  # recursive
    return message.ByteSize() != size


def unknown_field(message: Message, path: str = "") -> str | None:
    """Where the first unknown field is (`run.actor_chain[1]: field 99`), or None when there is none."""
    unknown = UnknownFieldSet(message)
    if len(unknown):
        return f"{path or '(top level)'}: field {unknown[0].field_number}"
    for field, value in message.ListFields():
        if field.type != _MESSAGE:
            continue
        where = f"{path}.{field.name}" if path else field.name
        items: list[tuple[str, Any]]
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].type != _MESSAGE:
                continue
            items = [(f"{where}[{k!r}]", v) for k, v in value.items()]
        elif field.is_repeated:
            items = [(f"{where}[{i}]", v) for i, v in enumerate(value)]
        else:
            items = [(where, value)]
        for item_path, item in items:
            found = unknown_field(item, item_path)
            if found is not None:
                return found
    return None
