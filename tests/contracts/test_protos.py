"""The committed gRPC stubs are exactly what `make gen` produces from proto/."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def test_the_budget_is_defined_once_and_the_wire_carries_every_field():
    """warden.budget.Budget is the one definition (policy files, goals, the driver, the breakers);
    the proto's Budget must hold exactly its fields, so no ceiling can be dropped on the way."""
    from checkpoint.engine.breakers import BUDGET_FIELDS as BREAKER_FIELDS
    from checkpoint.policy import model
    from driver.goal import GoalBudget
    from warden.budget import FIELDS, Budget
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    assert FIELDS == tuple(f.name for f in pb.Budget.DESCRIPTOR.fields) == BREAKER_FIELDS
    assert model.Budget is Budget and GoalBudget is Budget
    with pytest.raises(ValueError):
        pb.Budget(**{"tokens": 1, "renamed_ceiling": 2})  # the driver builds the wire form strictly


def test_every_proto_names_its_go_and_java_packages():
    """Generated Go and Java code lands where docs/clients.md says; buf.yaml leaves these options to
    this test (a change would move every client's imports)."""
    for path in protogen.proto_files():
        name = path.stem
        text = path.read_text()
        assert f'option go_package = "warden/gen/go/warden/{name}/v1;{name}v1";' in text, path.name
        assert f'option java_package = "dev.warden.{name}.v1";' in text, path.name
        assert "option java_multiple_files = true;" in text, path.name
