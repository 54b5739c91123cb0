"""deploy/k8s/driver-with-checkpoint.yaml, validated against Kubernetes' OpenAPI schemas of the
oldest version it claims (1.29, native sidecars) and the newest the validator knows, strictly (an
unknown field is an error), then read for what it promises (no cluster here): the checkpoint is a native sidecar probed over gRPC on the port
it serves, drains on preStop within the grace period, runs as the image's non-root user, and is
reachable from its own pod only; the driver never mounts the grant key."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "k8s" / "driver-with-checkpoint.yaml"


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d}


@pytest.mark.parametrize("version", ["1.29.0", kubernetes_validate.latest_version()])
def test_every_resource_is_valid_for_kubernetes(version):
    for doc in yaml.safe_load_all(MANIFEST.read_text()):
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_refuses_a_misspelled_probe():
    [stateful] = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d["kind"] == "StatefulSet"]
    sidecar = next(c for c in stateful["spec"]["template"]["spec"]["initContainers"] if c["name"] == "checkpoint")
    sidecar["readinesProbe"] = sidecar.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(stateful, "1.29.0", strict=True)


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_the_checkpoint_is_a_native_sidecar_probed_over_grpc_on_its_port(docs):
    pod = docs["StatefulSet"]["spec"]["template"]["spec"]
    [sidecar] = [c for c in pod["initContainers"] if c["name"] == "checkpoint"]
    assert sidecar["restartPolicy"] == "Always"  # starts before the driver, stops after it
    assert sidecar["image"] == "warden:local" and sidecar["args"][:2] == ["checkpoint", "serve"]
    port = int(_arg(sidecar["args"], "--address").rsplit(":", 1)[1])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sidecar[probe]["grpc"] == {"port": port}, probe
    # the policy copy runs first, so the sidecar starts with its folder in place
    assert [c["name"] for c in pod["initContainers"]].index("policies") < pod["initContainers"].index(sidecar)
    driver = next(c for c in pod["containers"] if c["name"] == "driver")
    assert _arg(driver["args"], "--checkpoint") == f"127.0.0.1:{port}"
    assert driver["readinessProbe"]["grpc"]["port"] == int(_arg(driver["args"], "--address").rsplit(":", 1)[1])


def test_prestop_drains_within_the_grace_period(docs):
    pod = docs["StatefulSet"]["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["initContainers"] if c["name"] == "checkpoint")
    command = sidecar["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    # the preStop wait plus the checkpoint's own 5 s drain fit in the grace period
    assert int(command[1]) + 5 < pod["terminationGracePeriodSeconds"]


def test_non_root_read_only_and_the_grant_key_stays_with_the_checkpoint(docs):
    pod = docs["StatefulSet"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    for c in pod["initContainers"] + pod["containers"]:
        ctx = c["securityContext"]
        assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    sidecar = next(c for c in pod["initContainers"] if c["name"] == "checkpoint")
    driver = next(c for c in pod["containers"] if c["name"] == "driver")
    mounted = {m["name"] for m in driver["volumeMounts"]}
    secrets = {volumes[n]["secret"]["secretName"] for n in mounted if "secret" in volumes.get(n, {})}
    assert secrets == {"warden-driver"}  # made from keys/driver/, which never holds grant.key
    assert _arg(sidecar["args"], "--key").startswith("/etc/warden/secrets/")
    # the decision log outlives the pod
    claims = {t["metadata"]["name"] for t in docs["StatefulSet"]["spec"]["volumeClaimTemplates"]}
    assert "checkpoint-data" in claims
    assert any(m["name"] == "checkpoint-data" and m["mountPath"] == _arg(sidecar["args"], "--data")
               for m in sidecar["volumeMounts"])


def test_only_the_drivers_port_is_reachable_from_other_pods(docs):
    rule, scrape = docs["NetworkPolicy"]["spec"]["ingress"]
    assert rule["ports"] == [{"port": 7403, "protocol": "TCP"}] and "from" not in rule
    # the metrics ports, to Prometheus only; never the checkpoint's gRPC port (tests/image/test_k8s_metrics.py)
    assert "from" in scrape and {p["port"] for p in scrape["ports"]} == {9401, 9403}
    services = {d["metadata"]["name"]: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d["kind"] == "Service"}
    assert [p["port"] for p in services["warden-driver"]["spec"]["ports"]] == [7403]
