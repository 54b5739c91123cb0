"""An agent proposes a change to an agent through the real loop: the proposal waits for a tenant
admin, the run keeps its pinned version, and the model learns the outcome as data."""

from __future__ import annotations

from driver_harness import PLAN, call, decisions, final

from driver.runs.model import SUCCEEDED

PROPOSE = call("propose_agent_change", agent="recon", reason="cancelling stale scans needs cancel_task",
               changes={"allowlist": ["create_task_from_template", "get_task", "list_templates", "cancel_task"],
                        "scope": {"access": ["read", "write", "destructive"]}})


def test_a_proposal_is_recorded_and_waits_while_the_run_keeps_its_version(stack, checkpoint_server):
    d = stack.driver()
    run = stack.start(d, [PLAN, PROPOSE, call("create_task_from_template", template="web-basic",
                                               target="web.lab.example.com"),
                          final(scan_ran="receipt", reported="decision")])
    assert run.status == SUCCEEDED, run
    assert ("proposal", "ALLOW", "proposed") in decisions(d, run.run_id)
    proposal = next(e.data for e in d.store.events(run.run_id)
                    if e.kind == "decision" and e.data["action"] == "proposal")
    # the checkpoint keeps it pending, proposed by the agent in this run; the live version is unchanged
    catalog = checkpoint_server.store.current.catalog
    assert catalog.status("recon", proposal["version"]) == "pending"
    assert checkpoint_server.store.current.agents["recon"].version == run.agent_version
    [record] = [r for r in checkpoint_server.log.read(run_id=run.run_id) if r["action"] == "catalog"]
    assert record["code"] == "proposed" and record["accountable_person"] == "alice"
    assert "cancel_task" in " ".join(record["arguments"]["widens"])
    # the model was told, as data, that nothing changed
    result = next(c for c in d.store.calls(run.run_id) if c["tool"] == "propose_agent_change")["result"]
    assert not result["is_error"] and "waits for a tenant admin" in result["content"]


def test_a_malformed_or_refused_proposal_comes_back_as_a_refusal(stack):
    d = stack.driver()
    bad = call("propose_agent_change", agent="recon", reason="x", changes={"tenant": "other"})
    unknown = call("propose_agent_change", agent="nobody", reason="x", changes={"persona": "p"})
    run = stack.start(d, [PLAN, bad, unknown, final(scan_ran="none", reported="none")])
    refused = {c["arguments"]["agent"]: c["result"] for c in d.store.calls(run.run_id)
               if c["tool"] == "propose_agent_change"}
    assert refused["recon"]["is_error"] and "malformed_response" in refused["recon"]["content"]  # the typed boundary
    assert refused["nobody"]["is_error"] and "unknown_agent" in refused["nobody"]["content"]
