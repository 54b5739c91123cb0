"""Real containers: every hardening default holds, and hostile tools are contained."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import docker
from toolrunner_harness import AUTH, Harness, session_containers

from toolrunner.container import LABEL_DECISION, ContainerSpec, host_config
from warden.toolrunner.v1 import toolrunner_pb2 as pb


def _lines(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line and ":" not in line.split("=")[0])


def test_the_tool_runs_unprivileged_with_its_limits(harness: Harness) -> None:
    out = harness.execute("whoami", {}).output
    facts = _lines(out)
    assert facts["uid"] == "65534 gid" or out.startswith("uid=65534 gid=65534")
    assert "CapEff:\t0000000000000000" in out and "CapBnd:\t0000000000000000" in out
    assert "NoNewPrivs:\t1" in out and "Seccomp:\t2" in out
    assert facts["nofile"] == "256"
    assert facts["fsize"] == str(16 * 1024 * 1024 // 512)  # ulimit -f counts 512-byte blocks
    assert facts["pid1"].startswith("/sbin/docker-init")  # an init reaps and forwards the kill
    assert facts["docker_sock"] == "absent"
    assert " / overlay ro," in out and "tmpfs /tmp tmpfs rw,nosuid,nodev,noexec" in out


def test_the_container_spec_carries_every_default(harness: Harness, docker_api: docker.APIClient) -> None:
    request = harness.request("long_sleeper", {"seconds": 50})
    done: list[pb.Receipt] = []
    t = threading.Thread(target=lambda: done.append(harness.stub.Execute(request, timeout=120).receipt))
    t.start()
    try:
        deadline = time.time() + 30
        found: list[dict] = []
        while not found and time.time() < deadline:
            found = docker_api.containers(filters={"label": f"{LABEL_DECISION}={request.grant.decision_id}"})
            time.sleep(0.05)
        info = docker_api.inspect_container(found[0]["Id"])
    finally:
        harness.stub.Cancel(pb.CancelRequest(decision_id=request.grant.decision_id), metadata=AUTH)
        t.join(60)
    host = info["HostConfig"]
    assert host["NetworkMode"] == "none" and info["Config"]["NetworkDisabled"] is True
    assert host["ReadonlyRootfs"] is True and host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges:true"]
    assert host["Memory"] == 256 * 1024 * 1024 and host["MemorySwap"] == host["Memory"]
    assert host["PidsLimit"] == 64 and host["NanoCpus"] == 1_000_000_000
    assert {u["Name"]: u["Hard"] for u in host["Ulimits"]} == {"nofile": 256, "fsize": 16 * 1024 * 1024, "core": 0}
    assert host["Init"] is True
    assert host["PidMode"] == "" and host["IpcMode"] == "private" and host["UTSMode"] == "" and host["UsernsMode"] == ""
    assert not host["Binds"] and not host.get("Mounts") and set(host["Tmpfs"]) == {"/tmp"}
    assert host["LogConfig"]["Type"] == "none"
    assert info["Config"]["User"] == "65534:65534"
    assert info["Config"]["Image"] == done[0].image_id  # created from the pinned id, not the tag
    assert info["Mounts"] == []
    assert done[0].code == "cancelled"


def test_no_network_unless_the_definition_asks(harness: Harness) -> None:
    closed = _lines(harness.execute("net_probe", {}).output)
    assert closed["connect"] == "failed"
    assert harness.execute("net_probe", {}).output.startswith("interfaces: lo \n")
    opened = harness.execute("net_probe_networked", {}).output
    assert "eth0" in opened.splitlines()[0]  # the override works: a network is attached


def test_a_networked_tool_resolves_names_with_no_search_domain(harness: Harness, docker_api: docker.APIClient) -> None:
    # the checkpoint decided on the name as written; a search domain of the host's would make
    # `payments` reach `payments.<domain>`, a host it never saw
    spec = ContainerSpec(image_id="unused", argv=["true"], env={}, user="65534:65534", timeout_seconds=5,
                         network="bridge")
    assert host_config(docker_api, spec)["DnsSearch"] == ["."]
    assert "DnsSearch" not in host_config(docker_api, replace(spec, network=None))  # no network, no DNS
    resolv = harness.execute("resolv_networked", {}).output.splitlines()
    assert any(line.startswith("nameserver") for line in resolv), resolv
    assert not [line for line in resolv if line.split()[:1] in (["search"], ["domain"])], resolv


def test_the_root_is_read_only_and_tmp_is_writable(harness: Harness) -> None:
    facts = _lines(harness.execute("write_root", {}).output)
    assert facts == {"root": "read-only", "tools": "read-only", "tmp": "writable"}


def test_a_fork_bomb_is_contained(harness: Harness, docker_api: docker.APIClient) -> None:
    receipt = harness.execute("forkbomb", {})
    # The pids limit stops the bomb: the shells fail to fork and die out (or the timeout kills
    # them), and the kernel never runs out of processes.
    assert "can't fork: Resource temporarily unavailable" in receipt.output
    assert receipt.timed_out == (receipt.code == "timeout")
    assert not session_containers(docker_api)
    assert harness.execute("list_templates", {}).exit_code == 0  # the runner is still fine


def test_the_pids_limit_stops_process_creation(harness: Harness) -> None:
    receipt = harness.execute("spawn", {"n": 100})
    spawned = [int(line.split()[1]) for line in receipt.output.splitlines() if line.startswith("spawned ")]
    assert "all spawned" not in receipt.output and max(spawned) < 32
    assert "can't fork" in receipt.output


def test_a_memory_hog_is_oom_killed(harness: Harness) -> None:
    receipt = harness.execute("memhog", {"mb": 200})
    assert receipt.oom_killed
    assert "Killed" in receipt.output


def test_a_huge_writer_is_capped_keeping_head_and_tail(harness: Harness, docker_api: docker.APIClient) -> None:
    receipt = harness.execute("huge_writer", {"mb": 4})
    assert receipt.truncated and receipt.code == "output_truncated" and receipt.exit_code == 0
    assert receipt.bytes_out > 4 * 1024 * 1024
    assert receipt.output.startswith("START-OF-OUTPUT\n") and receipt.output.endswith("END-OF-OUTPUT\n")
    assert "bytes truncated ...]" in receipt.output and len(receipt.output.encode()) < 4096 + 100
    assert not session_containers(docker_api)


def test_the_file_size_limit_holds(harness: Harness) -> None:
    out = harness.execute("big_file", {"mb": 6}).output
    assert "File size limit exceeded" in out
    assert _lines(out)["size"] == str(2 * 1024 * 1024)
