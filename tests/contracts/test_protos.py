"""The committed gRPC stubs are exactly what `make gen` produces from proto/."""

from __future__ import annotations

from pathlib import Path

from warden import protogen


def test_committed_stubs_match_the_protos(tmp_path: Path):
    generated = protogen.generated_tree(tmp_path)
    assert generated, "protoc produced nothing"
    stale = [rel for rel, data in generated.items()
             if not (protogen.ROOT / rel).exists() or (protogen.ROOT / rel).read_bytes() != data]
    assert not stale, f"stubs drifted from proto/: {stale}; run `make gen` and commit"


def test_every_service_is_in_a_pinned_package():
    texts = {p.name: p.read_text() for p in protogen.proto_files()}
    assert "package warden.checkpoint.v1;" in texts["checkpoint.proto"]
    assert "service CheckpointService" in texts["checkpoint.proto"]
    assert "rpc Check(CheckRequest) returns (CheckResponse);" in texts["checkpoint.proto"]
    assert "package warden.toolrunner.v1;" in texts["toolrunner.proto"]
    assert "service ToolRunnerService" in texts["toolrunner.proto"]


def test_enum_zero_values_are_unspecified():
    import re

    for path in protogen.proto_files():
        for enum, body in re.findall(r"enum (\w+) \{(.*?)\}", path.read_text(), flags=re.S):
            first = re.search(r"(\w+)\s*=\s*0;", body)
            assert first and first.group(1).endswith("_UNSPECIFIED"), f"{path.name}: {enum}"
