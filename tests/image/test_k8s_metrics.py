"""How Prometheus finds warden on Kubernetes: each manifest's metrics Service (prometheus.io
annotations, every metrics port of every pod a target), deploy/k8s/servicemonitor.yaml for the
Prometheus Operator, and NetworkPolicies that let Prometheus reach the metrics ports and nothing
more. The ServiceMonitor is a CRD that kubernetes-validate does not know: its shape is checked here
against the fields of monitoring.coreos.com/v1 it uses, strictly (an unknown field is an error)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
MANIFESTS = {"driver-with-checkpoint.yaml": {"cp-metrics": 9401, "driver-metrics": 9403},
             "checkpoint-fleet.yaml": {"metrics": 9401}}

_DURATION = {"type": "string", "pattern": r"^(\d+(ms|s|m|h))+$"}  # the CRD's Duration
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name", "namespace"], "additionalProperties": False,
                     "properties": {"name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                                    "namespace": {"type": "string"}, "labels": _LABELS}},
        "spec": {
            "type": "object", "required": ["selector", "endpoints"], "additionalProperties": False,
            "properties": {
                "namespaceSelector": {"type": "object", "additionalProperties": False,
                                      "properties": {"matchNames": {"type": "array", "items": {"type": "string"}},
                                                     "any": {"type": "boolean"}}},
                "selector": {"type": "object", "additionalProperties": False, "required": ["matchLabels"],
                             "properties": {"matchLabels": _LABELS}},
                "endpoints": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["port"], "additionalProperties": False,
                    "properties": {"port": {"type": "string"}, "path": {"type": "string", "pattern": "^/"},
                                   "scheme": {"enum": ["http", "https"]}, "interval": _DURATION,
                                   "scrapeTimeout": _DURATION}}},
            },
        },
    },
}


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h)", duration))


def _metrics_service(name: str) -> dict:
    [service] = [d for d in _docs(name) if d["kind"] == "Service" and d["metadata"]["name"].endswith("-metrics")]
    return service


def _pod(name: str) -> dict:
    [workload] = [d for d in _docs(name) if d["kind"] in ("StatefulSet", "Deployment")]
    return workload["spec"]["template"]


@pytest.fixture(scope="module")
def monitors() -> list[dict]:
    return _docs("servicemonitor.yaml")


def test_every_service_monitor_has_the_crds_shape(monitors):
    assert len(monitors) == 2
    for monitor in monitors:
        jsonschema.validate(monitor, SERVICE_MONITOR)
        for endpoint in monitor["spec"]["endpoints"]:
            assert _seconds(endpoint["scrapeTimeout"]) <= _seconds(endpoint["interval"])  # Prometheus refuses more


def test_the_shape_check_refuses_a_misspelled_field(monitors):
    broken = copy.deepcopy(monitors[0])
    broken["spec"]["endpoints"][0]["targetport"] = broken["spec"]["endpoints"][0].pop("port")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SERVICE_MONITOR)
    broken = copy.deepcopy(monitors[0])
    broken["spec"]["endpoints"][0]["interval"] = "30"  # no unit
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SERVICE_MONITOR)


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_each_monitor_selects_a_metrics_service_and_scrapes_every_metrics_port(monitors, manifest):
    service = _metrics_service(manifest)
    labels = service["metadata"]["labels"]
    [monitor] = [m for m in monitors if m["spec"]["selector"]["matchLabels"].items() <= labels.items()]
    assert service["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == set(MANIFESTS[manifest])
    assert {e["path"] for e in monitor["spec"]["endpoints"]} == {"/metrics"}


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_the_metrics_service_points_at_ports_the_processes_serve_metrics_on(manifest):
    service = _metrics_service(manifest)
    for version in ("1.29.0", kubernetes_validate.latest_version()):
        kubernetes_validate.validate(service, version, strict=True)
    annotations = service["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"
    # several metrics ports: no prometheus.io/port, which would scrape only one of them
    assert ("prometheus.io/port" in annotations) == (len(MANIFESTS[manifest]) == 1)
    assert service["spec"]["clusterIP"] == "None"  # each pod a target
    pod = _pod(manifest)
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    containers = pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
    declared = {p["name"]: (c, p["containerPort"]) for c in containers for p in c.get("ports", [])}
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == MANIFESTS[manifest]
    for port in service["spec"]["ports"]:
        container, number = declared[port["targetPort"]]
        args = container["args"]
        assert args[args.index("--metrics-address") + 1] == f"0.0.0.0:{number}", container["name"]


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_prometheus_reaches_the_metrics_ports_and_no_grpc_port(manifest):
    [policy] = [d for d in _docs(manifest) if d["kind"] == "NetworkPolicy" and "Ingress" in d["spec"]["policyTypes"]]
    metrics_ports = set(MANIFESTS[manifest].values())
    scrape = [r for r in policy["spec"]["ingress"] if {p["port"] for p in r["ports"]} & metrics_ports]
    assert len(scrape) == 1, "the metrics ports are let in by one rule"
    [rule] = scrape
    assert {p["port"] for p in rule["ports"]} == metrics_ports  # the metrics ports and nothing else
    [source] = rule["from"]
    assert source["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    assert source["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
