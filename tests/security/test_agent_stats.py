"""Per-version statistics at a real checkpoint (docs/catalog.md, "Statistics"): who may read them,
what a run's `end` must carry to be recorded, the CLI's table and JSON, the Prometheus gauges, and
a restart that recomputes them from the log. tests/driver/test_driver_agent_stats.py makes the
same figures with runs through the real loop."""

from __future__ import annotations

import hashlib
import json
import urllib.request

import grpc
import pytest
from google.protobuf import struct_pb2
from server.conftest import TOKEN

from checkpoint.server import AuthPolicy
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.cli import main

# carol and bob hold roles in acme (policies/tenants/acme.yaml); dave's credential is a person's
# (the `people` principal's token:*) but he holds no role there
PEOPLE = {name: f"{name}-token-0123456789abcdef" for name in ("carol", "bob", "dave")}
NARROWER = ("tokens: 200000", "tokens: 100000")  # a lower ceiling only narrows: it applies at once


@pytest.fixture
def running(start):
    tokens = {hashlib.sha256(TOKEN.encode()).digest(): "driver"}
    tokens.update({hashlib.sha256(t.encode()).digest(): name for name, t in PEOPLE.items()})
    return start(auth=AuthPolicy(tokens=tokens), metrics_address="127.0.0.1:0")


def new_version(running) -> str:
    path = running.policies / "agents" / "recon.yaml"
    text = path.read_text()
    assert NARROWER[0] in text
    path.write_text(text.replace(*NARROWER))
    assert running.server.store.reload()
    return running.version("recon")


def run(running, version: str) -> str:
    started = running.start_run("recon", version)
    assert started.run_token, started.decision
    return started.run_token


def end(running, token: str, status: str, tokens: int = 0, *, person: str = "", stub=None, **details):
    values = struct_pb2.Struct()
    values.update({"status": status, "code": details.pop("code", status), "tokens": tokens, "turns": 2, **details})
    request = pb.RecordActRequest(run=pb.RunContext(run_token=token), act="end", person=person, details=values,
                                  note="the run's own words")
    return (stub or running.stub()).RecordAct(request, timeout=5).decision


def trip_tokens(running, token: str) -> pb.CheckResponse:
    request = pb.CheckRequest(run=pb.RunContext(run_token=token), counters=pb.Counters(stretch_tokens=10**7),
                              model_call=pb.ModelCall(provider="scripted", model="scripted", max_tokens=10))
    answer = running.stub().Check(request, timeout=5)
    assert (answer.verdict, answer.code) == (pb.VERDICT_HALT, "breaker_tokens"), answer
    return answer


def stats(running, person: str = "carol", agent: str = "recon") -> pb.AgentStatsResponse:
    return running.stub(PEOPLE[person]).AgentStats(pb.AgentStatsRequest(agent=agent), timeout=10)


def two_versions(running) -> tuple[str, str]:
    """v1: a run that succeeds (100 tokens), one that pauses on a breaker (40, and stays open),
    one that fails (60); v2: a run that succeeds (10) and one still running (open)."""
    old = running.version("recon")
    end(running, run(running, old), "succeeded", 100)
    paused = run(running, old)
    trip_tokens(running, paused)
    end(running, paused, "paused", 40, code="breaker_tokens")
    end(running, run(running, old), "failed", 60, code="plan_refused")
    new = new_version(running)
    assert new != old
    end(running, run(running, new), "succeeded", 10)
    run(running, new)
    return old, new


def figures(answer: pb.AgentStatsResponse) -> dict[str, tuple]:
    return {v.version: (v.status, v.live, v.runs, v.succeeded, v.paused, v.failed, v.cancelled, v.open,
                        dict(v.breaker_trips), round(v.average_tokens, 1)) for v in answer.versions}


def test_a_person_with_a_role_reads_both_versions_side_by_side_and_a_restart_recomputes_them(running, start):
    old, new = two_versions(running)
    answer = stats(running)
    assert (answer.agent, answer.tenant, answer.live_version) == ("recon", "acme", new)
    assert [v.version for v in answer.versions] == [old, new]  # oldest first
    expected = {old: ("narrowed", False, 3, 1, 1, 1, 0, 1, {"tokens": 1}, 66.7),
                new: ("live", True, 2, 1, 0, 0, 0, 1, {}, 10.0)}
    assert figures(answer) == expected
    assert figures(stats(running, "bob")) == expected
    assert figures(running.stub().AgentStats(pb.AgentStatsRequest(agent="recon"), timeout=10)) == expected  # driver
    # the end is on the record, filed under its run, naming no person
    [ended] = [r for r in running.records() if r["action"] == "end" and r["arguments"]["details"]["status"] == "failed"]
    assert (ended["verdict"], ended["code"], ended["agent_version"], ended["principal"]) == (
        "ALLOW", "recorded", old, "driver")
    assert ended["arguments"] == {"person": "", "note": "the run's own words", "details": {
        "status": "failed", "code": "plan_refused", "tokens": 60, "turns": 2}}
    # a new checkpoint on the same data folder recomputes the figures from the log
    data, policies = running.data, running.policies
    running.server.stop(grace=0.5)
    tokens = {hashlib.sha256(t.encode()).digest(): name for name, t in PEOPLE.items()}
    again = start(data_dir=data, policy_dir=policies, auth=AuthPolicy(tokens=tokens))
    assert figures(stats(again)) == expected


def test_a_person_without_a_role_in_the_tenant_cannot_read_them(running):
    two_versions(running)
    for agent in ("recon", "no-such-agent", ""):
        with pytest.raises(grpc.RpcError) as err:
            stats(running, "dave", agent)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "caller_not_permitted" in str(
            err.value.trailing_metadata())
    with pytest.raises(grpc.RpcError) as err:  # nor does anyone learn whether an agent exists
        stats(running, "carol", "no-such-agent")
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_an_end_is_recorded_only_with_what_the_statistics_read(running):
    token = run(running, running.version("recon"))
    for details, reason in (({"status": "done"}, "status"), ({"status": "paused", "tokens": -3}, "tokens"),
                            ({"status": "paused", "spent": 3}, "unknown field")):
        values = struct_pb2.Struct()
        values.update(details)
        refused = running.stub().RecordAct(pb.RecordActRequest(run=pb.RunContext(run_token=token), act="end",
                                                                details=values), timeout=5).decision
        assert (refused.verdict, refused.code) == (pb.VERDICT_DENY, "invalid_request") and reason in refused.reason
    named = end(running, token, "succeeded", person="alice")  # a run's end is nobody's act
    assert (named.verdict, named.code) == (pb.VERDICT_DENY, "invalid_request")
    # a person's credential cannot end a run the driver's token holds
    other = end(running, token, "succeeded", stub=running.stub(PEOPLE["carol"]))
    assert (other.verdict, other.code) == (pb.VERDICT_DENY, "run_token_invalid")
    refusals = [r for r in running.records() if r["action"] == "end"]
    assert len(refusals) == 5 and all(r["verdict"] == "DENY" for r in refusals)
    [v] = stats(running).versions
    assert (v.runs, v.succeeded, v.open) == (1, 0, 1)  # refused ends count for nothing


def agents(capsys, running, person: str, *argv: str) -> tuple[int, str]:
    data = running.data.parent / f"cli-{person}"
    data.mkdir(exist_ok=True)
    (data / "checkpoint.token").write_text(PEOPLE[person] + "\n")
    code = main(["agents", *argv, "--checkpoint", f"127.0.0.1:{running.port}", "--data", str(data)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_the_command_line_prints_one_row_per_version_and_json_for_tools(running, capsys):
    old, new = two_versions(running)
    code, out = agents(capsys, running, "carol", "stats", "recon")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("recon (tenant acme): 2 version(s)")
    assert lines[1].split() == ["VERSION", "STATUS", "RUNS", "SUCCEEDED", "PAUSED", "FAILED", "CANCELLED", "OPEN",
                                "breaker_tokens", "AVG", "TOKENS"]
    assert lines[2].split() == [old, "narrowed", "3", "1", "1", "1", "0", "1", "1", "67"]
    assert lines[3].split() == ["*", new, "live", "2", "1", "0", "0", "0", "1", "0", "10"]
    code, out = agents(capsys, running, "carol", "stats", "recon", "--json")
    assert code == 0, out
    document = json.loads(out)
    assert document["live_version"] == new and [v["version"] for v in document["versions"]] == [old, new]
    first = document["versions"][0]
    assert {k: first[k] for k in ("runs", "succeeded", "paused", "failed", "cancelled", "open", "pauses",
                                  "breaker_trips", "tokens", "runs_with_tokens", "average_tokens")} == {
        "runs": 3, "succeeded": 1, "paused": 1, "failed": 1, "cancelled": 0, "open": 1, "pauses": 1,
        "breaker_trips": {"tokens": 1}, "tokens": 200, "runs_with_tokens": 3, "average_tokens": 66.7}
    with pytest.raises(SystemExit) as refused:
        agents(capsys, running, "dave", "stats", "recon")
    assert "caller_not_permitted" in str(refused.value.code) or "may read" in str(refused.value.code)


def test_the_same_figures_are_gauges_labelled_by_agent_and_version(running):
    old, new = two_versions(running)
    with urllib.request.urlopen(f"http://127.0.0.1:{running.server.metrics_port}/metrics", timeout=5) as page:
        text = page.read().decode()
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in text.splitlines() if line.startswith("warden_checkpoint_agent_")}

    def at(name: str, version: str, **labels: str) -> float:  # the text format sorts the labels
        written = ",".join(f'{k}="{v}"' for k, v in sorted({"agent": "recon", "version": version, **labels}.items()))
        return samples[f"warden_checkpoint_agent_{name}{{{written}}}"]

    assert [at(n, old) for n in ("runs", "runs_succeeded", "runs_paused", "runs_failed", "runs_cancelled",
                                 "runs_open", "pauses")] == [3, 1, 1, 1, 0, 1, 1]
    assert at("breaker_trips", old, breaker="tokens") == 1
    assert at("tokens_per_run", old) == pytest.approx(200 / 3)
    assert [at(n, new) for n in ("runs", "runs_succeeded", "runs_open", "tokens_per_run")] == [2, 1, 1, 10]
    # refreshed on scrape: a run that ends now is in the next one
    end(running, run(running, new), "cancelled", 4)
    with urllib.request.urlopen(f"http://127.0.0.1:{running.server.metrics_port}/metrics", timeout=5) as page:
        assert f'warden_checkpoint_agent_runs_cancelled{{agent="recon",version="{new}"}} 1.0' in page.read().decode()
