"""`checkpoint serve --rotate-size`: a serving checkpoint seals its log while it answers."""

from __future__ import annotations

import time

from checkpoint.audit import DecisionReader
from checkpoint.audit import segments as seg
from warden.checkpoint.v1 import checkpoint_pb2 as pb

START = pb.StartRunRequest(agent="recon", person="alice", mode=pb.RUN_MODE_INTERACTIVE)


def test_a_serving_checkpoint_seals_its_log_by_size(start):
    running = start(rotate_bytes=8192, rotate_interval=0.05)
    stub = running.stub()
    path = running.data / "decisions.db"
    answered = []
    deadline = time.monotonic() + 60
    while len(seg.read_manifest(path).seals) < 2 and time.monotonic() < deadline:
        answered.append(stub.StartRun(START, timeout=5).decision.decision_id)
    assert len(seg.read_manifest(path).seals) >= 2
    answered.append(stub.StartRun(START, timeout=5).decision.decision_id)
    recorded = {r["decision_id"] for r in DecisionReader(path).read()}
    assert set(answered) <= recorded  # every answer's record, sealed or live
    report = DecisionReader(path).verify()
    assert report.ok and report.segments >= 2, report.summary()


def test_rotation_flags_take_sizes_and_ages_and_refuse_the_rest():
    import argparse

    import pytest

    from checkpoint.server_cli import _duration, _megabytes

    assert (_duration("90"), _duration("30m"), _duration("12h"), _duration("7d")) == (90, 1800, 43200, 604800)
    assert _megabytes("0.5") == 0.5
    for bad in ("0", "-1h", "nan", "soon", "5w", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            _duration(bad)
    for bad in ("0", "-3", "nan", "big"):
        with pytest.raises(argparse.ArgumentTypeError):
            _megabytes(bad)
