"""`warden up --metrics-address`: each of the three real processes serves its own /metrics (the
checkpoint on PORT, the toolrunner on PORT+1, the driver on PORT+2), even with
WARDEN_METRICS_ADDRESS in the environment every child inherits; a scripted run with a real tool
call moves the figures of all three; and every metric name the shipped Grafana dashboard
(deploy/grafana/warden.json) queries is one those scrapes serve."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from driver_harness import PLAN, call

from warden.up import Stack, free_port, metrics_addresses

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "warden.json"
SHADOW_RULE = """
---
kind: Rule
name: no-task-reads
description: a rule on trial
effect: deny_if
condition: 'args.task_id.startsWith("task-")'
tools: [get_task]
reason: task reads are under review
mode: shadow
"""


def _free_run_of_three() -> int:
    """A port P with P, P+1 and P+2 free now."""
    for _ in range(50):
        base = free_port()
        if base + 2 > 65535:
            continue
        try:
            held = []
            for port in (base + 1, base + 2):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise AssertionError("no three free ports in a row")


def scrape(address: str) -> tuple[dict[str, float], set[str]]:
    """The samples, and the names a family declared with # TYPE serves (with its suffixes)."""
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line and not line.startswith("#")}
    declared = set()
    for family, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M):
        declared.add(family)
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(kind, ())
        declared.update(family.removesuffix("_total") + s for s in suffixes)
    return samples, declared


def dashboard_metric_names() -> set[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    names = set()
    for expr in exprs:
        bare = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
        bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)  # label lists
        names.update(re.findall(r"\b(?:warden|process|python)_[a-z0-9_]+\b", bare))
    return names


def test_the_dashboard_is_grafana_json_whose_queries_name_metrics():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in board["templating"]["list"]}
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}" and "datasource" in variables
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
            for var in re.findall(r"\$(\w+)", target["expr"]):
                assert var in variables or var.startswith("__"), var
    names = dashboard_metric_names()
    for expected in ("warden_checkpoint_grpc_calls_total", "warden_checkpoint_grpc_call_seconds_bucket",
                     "warden_checkpoint_shadow_flips_total", "warden_policy_revision_info",
                     "warden_toolrunner_grpc_calls_total", "warden_driver_grpc_calls_total",
                     "warden_driver_runs_taken_over_total", "warden_driver_leases_held"):
        assert expected in names


def test_metrics_addresses_are_the_base_port_and_the_two_after_it():
    assert metrics_addresses("127.0.0.1:9401") == {"checkpoint": "127.0.0.1:9401", "toolrunner": "127.0.0.1:9402",
                                                   "driver": "127.0.0.1:9403"}
    assert metrics_addresses(None) == {}
    zero = metrics_addresses("127.0.0.1:0")  # each a free port, chosen before the start so it can be printed
    assert len(set(zero.values())) == 3 and not any(a.endswith(":0") for a in zero.values())
    for bad in ("9401", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:65534"):
        with pytest.raises(ValueError, match="metrics_address_unavailable"):
            metrics_addresses(bad)


def test_up_gives_each_process_its_own_metrics_port_and_the_dashboard_finds_its_metrics(
        tmp_path, policy_dir, tool_images, monkeypatch):
    path = policy_dir / "rules" / "recon.yaml"
    path.write_text(path.read_text() + SHADOW_RULE)
    taken = socket.socket()  # what every child would get from the environment: one port, already taken
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    monkeypatch.setenv("WARDEN_METRICS_ADDRESS", f"127.0.0.1:{taken.getsockname()[1]}")
    base = _free_run_of_three()
    addresses = metrics_addresses(f"127.0.0.1:{base}")
    stack = Stack(tmp_path / "data", policy_dir, free_port(), free_port(), free_port(), metrics=addresses)
    try:
        stack.start(timeout=90)
        script = tmp_path / "script.yaml"
        script.write_text(yaml.safe_dump({"responses": [
            PLAN, call("get_task", task_id="task-abc123"), {"action": "handoff", "reason": "read it"}]}))
        env = {**os.environ, "WARDEN_DRIVER": stack.driver_address, "WARDEN_DATA": str(stack.data)}
        out = subprocess.run([sys.executable, "-m", "warden.cli", "run", "recon", "--goal",
                              str(ROOT / "goals" / "recon-lab-scan.yaml"), "--script", str(script), "--follow"],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
        assert out.returncode == 0, out.stderr
        assert "receipt get_task: exit 0" in out.stdout
        # a stream is counted once its handler has returned, which may be just after its caller
        # read the last answer: wait for the toolrunner's call to be counted
        deadline = time.monotonic() + 10
        while True:
            scraped = {name: scrape(address) for name, address in addresses.items()}
            if any(k.startswith("warden_toolrunner_grpc_calls_total{") for k in scraped["toolrunner"][0]) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        stack.stop()
        taken.close()
    assert [c.proc.returncode for c in stack.children] == [0, 0, 0]
    assert addresses == {"checkpoint": f"127.0.0.1:{base}", "toolrunner": f"127.0.0.1:{base + 1}",
                         "driver": f"127.0.0.1:{base + 2}"}

    for name, (samples, _) in scraped.items():  # each port is its own process's
        [info] = [k for k in samples if k.startswith("warden_build_info{")]
        assert f'process="{name}"' in info
    cp, tr, dr = (scraped[n][0] for n in ("checkpoint", "toolrunner", "driver"))

    def ok(samples: dict[str, float], process: str, method: str) -> float:
        return samples.get(f'warden_{process}_grpc_calls_total{{code="OK",method="{method}"}}', 0)

    assert ok(cp, "checkpoint", "Check") >= 2 and ok(cp, "checkpoint", "StartRun") >= 1  # the plan, get_task
    assert cp['warden_checkpoint_grpc_call_seconds_count{method="Check"}'] >= 2
    # the driver reads the tool's stream to its end: OK, not a call it left behind (CANCELLED or,
    # as it was counted once, UNKNOWN)
    assert ok(tr, "toolrunner", "ExecuteStream") >= 1, [k for k in tr if "_calls_total" in k]
    assert not [k for k in (*cp, *tr, *dr) if "_grpc_calls_total{" in k and 'code="OK"' not in k]
    assert ok(dr, "driver", "StartRun") >= 1
    assert cp['warden_checkpoint_shadow_flips_total{enforced="ALLOW",shadow="DENY"}'] >= 1  # get_task task-...
    # both serve the same revision of the same folder, and say which
    revisions = {n: [k for k in s if k.startswith("warden_policy_revision_info{")] for n, s in (("cp", cp), ("tr", tr))}
    [cp_revision], [tr_revision] = revisions["cp"], revisions["tr"]
    assert re.search(r'revision="([^"]+)"', cp_revision).group(1) == re.search(r'revision="([^"]+)"', tr_revision).group(1)

    served = set().union(*(set(re.sub(r"\{.*", "", k) for k in s) | d for s, d in scraped.values()))
    missing = sorted(dashboard_metric_names() - served)
    assert not missing, f"the dashboard queries metrics no process serves: {missing}"
    # and every one of them has samples now, but the refusals no call of this run made
    sampled = set().union(*(set(re.sub(r"\{.*", "", k) for k in s) for s, _ in scraped.values()))
    unsampled = sorted(dashboard_metric_names() - sampled)
    assert set(unsampled) <= {"warden_checkpoint_refusals_total", "warden_checkpoint_refusals_unrecorded_total",
                              "warden_checkpoint_audit_write_failures_total"}, unsampled
