"""deploy/k8s/checkpoint-fleet.yaml, validated strictly against Kubernetes' OpenAPI schemas (1.29
and the newest the validator knows), then read for what it promises (no cluster here): N checkpoint
replicas behind one Service, the store URL and password from a Secret, the schema migrated by a
Job on the same store, and NetworkPolicies that let the replicas reach the database and nothing
but their clients reach them."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "k8s" / "checkpoint-fleet.yaml"


def _docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


@pytest.fixture(scope="module")
def kinds() -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for d in _docs():
        out.setdefault(d["kind"], []).append(d)
    return out


@pytest.mark.parametrize("version", ["1.29.0", kubernetes_validate.latest_version()])
def test_every_resource_is_valid_for_kubernetes(version):
    for doc in _docs():
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_refuses_a_misplaced_secret_reference():
    [deployment] = [d for d in _docs() if d["kind"] == "Deployment"]
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    env[0]["valueFrom"] = {"secretRef": env[0]["valueFrom"]["secretKeyRef"]}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, "1.29.0", strict=True)


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _store_env(container: dict) -> dict[str, dict | str]:
    return {e["name"]: e.get("valueFrom") or e["value"] for e in container["env"]}


def _password_mount(pod: dict, container: dict) -> dict:
    """The Secret volume the password file is read from."""
    path = Path(_store_env(container)["WARDEN_STORE_PASSWORD_FILE"])
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent)]
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["items"] == [{"key": "password", "path": path.name}]
    return volume["secret"]


def test_replicas_behind_a_service_probed_over_grpc_on_the_port_they_serve(kinds):
    [deployment] = kinds["Deployment"]
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = deployment["spec"]["template"]["spec"]
    [checkpoint] = pod["containers"]
    assert checkpoint["image"] == "warden:local" and checkpoint["args"][:2] == ["checkpoint", "serve"]
    port = int(_arg(checkpoint["args"], "--address").rsplit(":", 1)[1])
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert checkpoint[probe]["grpc"] == {"port": port}, probe
    # a database outage makes every replica NOT_SERVING: readiness takes them out of the Service,
    # liveness must not restart them all for it (30 x 10 s before a restart)
    assert checkpoint["livenessProbe"]["failureThreshold"] * checkpoint["livenessProbe"]["periodSeconds"] >= 300
    [service] = [s for s in kinds["Service"] if s["metadata"]["name"] == "warden-checkpoint"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(port, "checkpoint")]
    assert {"name": "checkpoint", "containerPort": port} in checkpoint["ports"]
    command = checkpoint["lifecycle"]["preStop"]["exec"]["command"]
    assert int(command[1]) + int(_arg(checkpoint["args"], "--grace")) < pod["terminationGracePeriodSeconds"]


def test_the_store_url_and_password_come_from_a_secret_in_the_replicas_and_the_job(kinds):
    [deployment] = kinds["Deployment"]
    [job] = kinds["Job"]
    pods = [deployment["spec"]["template"]["spec"], job["spec"]["template"]["spec"]]
    for pod in pods:
        [container] = pod["containers"]
        env = _store_env(container)
        assert env["WARDEN_STORE"] == {"secretKeyRef": {"name": "warden-store", "key": "url"}}
        assert _password_mount(pod, container)["secretName"] == "warden-store"
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["fsGroup"] == 10001
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
    [migrate] = pods[1]["containers"]
    assert migrate["args"] == ["store", "migrate"] and migrate["image"] == "warden:local"
    assert pods[1]["restartPolicy"] == "OnFailure"


def test_every_replica_holds_the_same_keys_and_a_data_folder_that_dies_with_it(kinds):
    [deployment] = kinds["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    [checkpoint] = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in checkpoint["volumeMounts"]}
    data = _arg(checkpoint["args"], "--data")
    assert "emptyDir" in volumes[mounts[data]["name"]]  # nothing a replica must keep
    # run and approval tokens signed at one replica verify at every other: one Secret for all
    token_keys = mounts[f"{data}/token-keys"]
    assert token_keys["readOnly"] and volumes[token_keys["name"]]["secret"]["secretName"] == "warden-token-keys"
    for flag in ("--key", "--tokens"):
        folder = str(Path(_arg(checkpoint["args"], flag)).parent)
        assert volumes[mounts[folder]["name"]]["secret"]["secretName"] == "warden-checkpoint"


def test_the_replicas_reach_the_database_and_only_their_clients_reach_them(kinds):
    [deployment] = kinds["Deployment"]
    [job] = kinds["Job"]
    policies = {p["metadata"]["name"]: p["spec"] for p in kinds["NetworkPolicy"]}
    ingress = policies["warden-checkpoint-ingress"]
    assert ingress["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    rule, scrape = ingress["ingress"]
    assert rule["ports"] == [{"port": 7401, "protocol": "TCP"}]  # not the metrics port
    assert rule["from"][0]["podSelector"]["matchLabels"] == {"warden.dev/checkpoint-client": "true"}
    # the metrics port, to Prometheus only (tests/image/test_k8s_metrics.py)
    assert scrape["ports"] == [{"port": 9401, "protocol": "TCP"}]
    assert scrape["from"][0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    egress = policies["warden-checkpoint-egress"]
    [selected] = egress["podSelector"]["matchExpressions"]
    names = {deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"],
             job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]}
    assert selected["key"] == "app.kubernetes.io/name" and set(selected["values"]) == names
    ports = [p for rule in egress["egress"] for p in rule["ports"]]
    assert {"port": 5432, "protocol": "TCP"} in ports
    assert {"port": 53, "protocol": "UDP"} in ports  # the database's name resolves


def test_a_disruption_takes_one_replica_at_a_time(kinds):
    [budget] = kinds["PodDisruptionBudget"]
    [deployment] = kinds["Deployment"]
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
