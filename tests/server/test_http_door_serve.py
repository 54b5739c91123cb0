"""`warden checkpoint serve --http-address`, the real command: the setting by flag and by its
`WARDEN_HTTP_ADDRESS` variable, and every worker of `--workers 2` serving the HTTP door's one port."""

from __future__ import annotations

import os

import pytest

from .test_http_door import post
from .test_workers import Cluster, _free_port


@pytest.mark.timeout(240)
def test_two_workers_both_serve_the_http_door(tmp_path, policy_dir):
    http_port = _free_port()
    cluster = Cluster(tmp_path, policy_dir, extra=("--http-address", f"127.0.0.1:{http_port}"))
    try:
        cluster.wait_serving()
        before = [cluster.decisions_counted(i) for i in range(2)]
        for _ in range(40):  # each call a connection of its own: the kernel spreads them over the workers
            status, answer = post(http_port, "StartRun", {"agent": "recon", "person": "alice",
                                                          "mode": "RUN_MODE_INTERACTIVE"})
            assert status == 200 and answer["decision"]["verdict"] == "VERDICT_ALLOW", answer
        after = [cluster.decisions_counted(i) for i in range(2)]
        assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
    finally:
        assert cluster.stop() == 0


@pytest.mark.timeout(120)
def test_the_setting_comes_from_its_environment_variable_too(tmp_path, policy_dir, monkeypatch):
    http_port = _free_port()
    monkeypatch.setitem(os.environ, "WARDEN_HTTP_ADDRESS", f"127.0.0.1:{http_port}")
    cluster = Cluster(tmp_path, policy_dir, workers="1")
    try:
        cluster.wait_serving(workers=1)
        status, answer = post(http_port, "ResolveAgent", {"agent": "recon"})
        assert status == 200 and answer["agent"] == "recon"
        status, answer = post(http_port, "ResolveAgent", {"agent": "recon"}, token=None)
        assert status == 401 and answer["code"] == "unauthenticated"
    finally:
        assert cluster.stop() == 0
