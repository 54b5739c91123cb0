"""deploy/k8s/checkpoint-bundle.yaml, validated strictly against Kubernetes' schemas, then read for
what it promises: the checkpoint follows a signed bundle from a ConfigMap mounted as a folder (a
subPath mount is never updated by the kubelet), verifies it with a public key, installs it in its
data volume, and the flags it passes are ones `checkpoint serve` takes."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "k8s" / "checkpoint-bundle.yaml"


def _container() -> tuple[dict, dict]:
    [stateful] = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d and d["kind"] == "StatefulSet"]
    pod = stateful["spec"]["template"]["spec"]
    [container] = pod["containers"]
    return pod, container


@pytest.mark.parametrize("version", ["1.29.0", kubernetes_validate.latest_version()])
def test_every_resource_is_valid_for_kubernetes(version):
    for doc in yaml.safe_load_all(MANIFEST.read_text()):
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_bundle_comes_from_a_configmap_folder_and_is_installed_in_the_data_volume():
    pod, container = _container()
    args = container["args"]

    def arg(flag: str) -> str:
        return args[args.index(flag) + 1]

    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    bundle, key = Path(arg("--policy-bundle")), Path(arg("--bundle-pubkey"))
    for path, volume in ((bundle, "policy-bundle"), (key, "bundle-key")):
        assert "configMap" in volumes[volume]
        assert str(path.parent) == mounts[volume]["mountPath"] and "subPath" not in mounts[volume]
    assert arg("--policies").startswith(mounts["checkpoint-data"]["mountPath"] + "/")
    assert float(arg("--bundle-poll")) > 0


def test_the_flags_are_the_ones_serve_takes():
    from warden.cli import build_parser

    _pod, container = _container()
    parsed = build_parser().parse_args(container["args"])
    assert parsed.policy_bundle and parsed.bundle_pubkey
