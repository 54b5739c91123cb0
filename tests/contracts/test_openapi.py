"""docs/openapi.json, the OpenAPI description of the checkpoint's HTTP door, is what
`python -m warden.openapigen` makes from proto/ now, and names every method the door serves."""

from __future__ import annotations

import json
import re

from warden import openapigen
from warden.checkpoint.v1 import checkpoint_pb2 as pb


def test_the_committed_description_is_current():
    assert openapigen.OUTPUT.read_text() == openapigen.render(), (
        "docs/openapi.json drifted from proto/: run `make gen` (python -m warden.openapigen) and commit")


def test_every_method_but_the_client_stream_has_a_path_and_every_ref_resolves():
    spec = json.loads(openapigen.OUTPUT.read_text())
    service = pb.DESCRIPTOR.services_by_name["CheckpointService"]
    served = {m.name for m in service.methods if not m.client_streaming}
    assert {p.rsplit("/", 1)[1] for p in spec["paths"]} == served
    assert "CheckStream" not in served and len(served) == len(service.methods) - 1
    schemas = spec["components"]["schemas"]
    refs = {m.group(1) for m in re.finditer(r'"#/components/schemas/([^"]+)"', json.dumps(spec))}
    assert refs and refs <= set(schemas), refs - set(schemas)
    # proto3 JSON names: lowerCamelCase, and every field of the message is there
    assert set(schemas["CheckRequest"]["properties"]) == {f.json_name for f in pb.CheckRequest.DESCRIPTOR.fields}
    assert schemas["Verdict"]["enum"][0] == "VERDICT_UNSPECIFIED"
