from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpoint.audit import DecisionLog

_counter = itertools.count(1)


def make_record(**overrides: Any) -> dict[str, Any]:
    n = next(_counter)
    record: dict[str, Any] = {
        "decision_id": f"dec-{n}",
        "tenant": "acme",
        "run_id": "run-1",
        "root_run_id": "run-1",
        "parent_run_id": None,
        "actor_chain": [
            {"kind": "person", "id": "ann"},
            {"kind": "agent", "id": "support", "agent_version": "v1"},
        ],
        "accountable_person": "ann",
        "agent": "support",
        "agent_version": "v1",
        "action": "tool_call",
        "tool": "refund",
        "arguments": {"order": f"o-{n}", "amount": 12.5, "note": "café"},
        "verdict": "ALLOW",
        "code": "allowed",
        "rule": "allowlist",
        "reason": "refund is on support's allowlist",
        "policy_revision": "rev-1",
        "latency_us": 42,
    }
    record.update(overrides)
    return record


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "decisions.db"


@pytest.fixture
def log(log_path: Path) -> Iterator[DecisionLog]:
    decision_log = DecisionLog(log_path)
    yield decision_log
    decision_log.close()


@pytest.fixture(name="make_record")
def make_record_fixture() -> Any:
    return make_record
