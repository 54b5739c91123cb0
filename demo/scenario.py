"""The demo scenario, played over gRPC exactly as a person would with the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from driver.cli import CHILD_INDENT, watch_tree
from driver.clients import CheckpointClient
from driver.goal import load_goal
from driver.render import event_line
from driver.service import goal_to_proto
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.checkpoint.v1 import checkpoint_pb2_grpc as cp_grpc
from warden.datafolder import PERSON_CHECKPOINT_TOKEN_FILE
from warden.driver.v1 import driver_pb2 as pb
from warden.driver.v1 import driver_pb2_grpc as pb_grpc
from warden.up import Stack

VERIFIED = "verified success of the task it started"
PLAN_READ = "plan read and approved before the run went on"
PROPOSAL = "an agent's proposal approved into a new version while the run kept its own"
PAUSED_CHILD = "a pause that paused a child, which resumed with its parent"
STATS = "per-version statistics of recon's two versions"
LEARNED = "the breaker's learning promoted by an admin"


class Scenario:
    def __init__(self, stack: Stack) -> None:
        token = (stack.data / "operator.token").read_text().strip()
        self.md = [("authorization", f"Bearer {token}")]
        self.channel = grpc.insecure_channel(stack.driver_address)
        self.driver = pb_grpc.DriverServiceStub(self.channel)
        self.stack = stack
        # the person's own checkpoint credential: approvals and the decision log, never via the driver
        self.person_token = (stack.data / PERSON_CHECKPOINT_TOKEN_FILE).read_text().strip()
        self.checkpoint = CheckpointClient(f"127.0.0.1:{stack.checkpoint_port}", token=self.person_token)
        self.seen: set[str] = set()
        self.after = 0
        self.started_task = ""  # the task id in the run's create_task_from_template receipt
        self.verified_task = ""  # the task the driver's own check read

    def follow_until_stop(self, run_id: str) -> pb.Run:
        """Print events until the run waits for a person or ends."""
        stream = self.driver.WatchRun(pb.WatchRunRequest(run_id=run_id, after_seq=self.after), metadata=self.md)
        for resp in stream:
            e = resp.event
            self.after = e.seq
            data: dict[str, Any] = json_format.MessageToDict(e.data)
            print(event_line(e.kind, data, e.seq), flush=True)
            self._note(e.kind, data)
            if e.kind == "decision" and data.get("action") == "proposal" and data.get("code") == "proposed":
                self.review_proposal(run_id, data)
            if e.kind == "child_started":
                self.pause_with_child(run_id, data["child_run_id"])
            if e.kind == "run_paused" and data.get("code") in ("paused", "parent_paused"):
                continue  # the demo's own pause (pause_with_child), already resumed
            if e.kind in ("approval_requested", "run_paused", "run_succeeded", "run_failed", "run_cancelled"):
                stream.cancel()
                break
        return self.driver.GetRun(pb.GetRunRequest(run_id=run_id), metadata=self.md).run

    def follow_child(self, run_id: str, after: int = 0) -> tuple[int, pb.Run]:
        """The child run's own events, indented, until it ends or waits for a person."""
        for indent, e, data in watch_tree(self.driver, self.md, run_id, after_seq=after, indent=CHILD_INDENT):
            print(indent + event_line(e.kind, data).replace("\n", "\n" + indent), flush=True)
            after = e.seq
            if e.kind == "run_succeeded":
                self.seen.add("delegation to a child run")
        return after, self.driver.GetRun(pb.GetRunRequest(run_id=run_id), metadata=self.md).run

    def review_proposal(self, run_id: str, data: dict[str, Any]) -> None:
        """The agent proposed a change to itself: a tenant admin reads it and approves it. New runs
        pin the new version; this run keeps the one it pinned."""
        agent, version = str(data.get("agent")), str(data.get("version"))
        # dana, the tenant's second admin: alice is accountable for the run that proposed it
        admin_token = (self.stack.data / "dana" / PERSON_CHECKPOINT_TOKEN_FILE).read_text().strip()
        with grpc.insecure_channel(f"127.0.0.1:{self.stack.checkpoint_port}") as ch:
            stub = cp_grpc.CheckpointServiceStub(ch)
            md = [("authorization", f"Bearer {admin_token}")]
            pending = next(v for v in stub.AgentHistory(cp.AgentHistoryRequest(agent=agent), metadata=md,
                                                         timeout=30).versions if v.version == version)
            print(f"\n== the agent proposed a change to {agent} ({pending.source}); it waits for a tenant admin "
                  f"other than the run's person, who reads it:\n   widens: {'; '.join(pending.widens) or 'nothing'}"
                  + "".join(f"\n   {line}" for line in pending.diff), flush=True)
            answer = stub.ReviewAgentChange(cp.ReviewAgentChangeRequest(
                agent=agent, version=version, approve=True, note="a larger tool-call budget is fine"),
                metadata=md, timeout=30)
        run = self.driver.GetRun(pb.GetRunRequest(run_id=run_id), metadata=self.md).run
        print(f"== dana, an admin, approved it ({answer.decision.code}): {agent} {answer.version.version} is "
              f"{answer.version.status} for new runs; this run keeps {run.agent_version}", flush=True)
        if answer.version.status == "live" and run.agent_version != version:
            self.seen.add(PROPOSAL)

    def pause_with_child(self, parent_id: str, child_id: str) -> None:
        """Follow the child until it waits (its plan is read first too), pause the parent and see
        the child paused with it, resume the parent and see the child resumed, then approve the
        child's plan and follow it to its end."""
        after, child = self.follow_child(child_id)
        if child.status != pb.RUN_STATUS_AWAITING_APPROVAL:
            return
        print(f"\n== a person pauses the parent run {parent_id}: its child {child_id} pauses with it", flush=True)
        paused = self.driver.PauseRun(pb.PauseRunRequest(run_id=parent_id, reason="let me look at the tree"),
                                      metadata=self.md)
        for c in paused.paused_children:
            print(f"   {c.run_id} ({c.agent}): {pb.RunStatus.Name(c.status)} {c.code}", flush=True)
        resumed = self.driver.ResumeRun(pb.ResumeRunRequest(run_id=parent_id, reply="go on"), metadata=self.md)
        print(f"== the person resumes the parent: {len(resumed.resumed_children)} child run(s) resume with it", flush=True)
        if [c.run_id for c in paused.paused_children] == [child_id] == [c.run_id for c in resumed.resumed_children]:
            self.seen.add(PAUSED_CHILD)
        child = self.driver.GetRun(pb.GetRunRequest(run_id=child_id), metadata=self.md).run
        if child.status == pb.RUN_STATUS_AWAITING_APPROVAL:
            self.approve(child.pending_approvals[0])
        self.follow_child(child_id, after)

    def approve(self, a: pb.Approval) -> bool:
        """A person reads what waits (a plan step by step) and approves it with their own credential."""
        if a.tool == "propose_plan":
            steps = json_format.MessageToDict(a.arguments).get("steps") or []
            print(f"\n== a person reads the plan of run {a.run_id} before it goes on, and approves it:"
                  + "".join(f"\n   {i}. {st.get('id')}: {st.get('tool')} ({st.get('description', '')})"
                            for i, st in enumerate(steps, 1)), flush=True)
            note = "the plan is fine"
        else:
            print(f"\n== a person reads the call and approves it: {a.tool} {json_format.MessageToDict(a.arguments)}",
                  flush=True)
            note = "lab subnet, go ahead"
        approved = self.checkpoint.approve(a.run_id, a.decision_id, note)  # the person's own act
        if approved.decision.verdict != cp.VERDICT_ALLOW:
            print(f"demo: the checkpoint refused the approval: {approved.decision.reason}", flush=True)
            return False
        self.driver.ApproveCall(pb.ApproveCallRequest(approval_id=a.approval_id, note=note,
                                                      approval_token=approved.approval_token), metadata=self.md)
        if a.tool == "propose_plan":
            self.seen.add(PLAN_READ)
        return True

    def _note(self, kind: str, d: dict[str, Any]) -> None:
        if kind == "tool_receipt" and int(d.get("exit_code", 1)) == 0:
            self.seen.add("allowed call ran in a container")
            if d.get("tool") == "create_task_from_template":
                self.started_task = json.loads(d.get("output") or "{}").get("task_id", "")
        if kind == "verification_started":
            self.verified_task = next((str(c["arguments"].get("task_id")) for c in d.get("calls") or []
                                       if c.get("criterion") == "task_finished"), "")
        if kind == "decision" and d.get("verdict") == "DENY":
            self.seen.add("denied call")
        if kind == "approval_decided" and d.get("decision") == "approved":
            self.seen.add("approval")
        if kind == "run_paused" and d.get("breaker"):
            self.seen.add("breaker trip and pause")
        if kind == "run_resumed":
            self.seen.add("resume")
        if (kind == "run_succeeded" and VERIFIED not in self.seen and self.verified_task
                and self.verified_task == self.started_task):
            self.seen.add(VERIFIED)
            print(f"\n== verified: the driver read task {self.verified_task} itself (the task this run started, "
                  "from its own create_task_from_template receipt) and it succeeded", flush=True)

    def second_run(self, goal_path: Path, script_path: Path) -> None:
        """A run of the version the admin approved, so the two versions can be compared."""
        run = self.driver.StartRun(pb.StartRunRequest(agent="recon", goal=goal_to_proto(load_goal(goal_path)),
                                                      mode=pb.RUN_MODE_INTERACTIVE, provider="scripted",
                                                      script_yaml=script_path.read_text()), metadata=self.md).run
        print(f"\n== a second run of recon pins the approved version {run.agent_version}", flush=True)
        self.after = 0
        run = self.follow_until_stop(run.run_id)
        print(f"== run {run.run_id}: {pb.RunStatus.Name(run.status)}", flush=True)

    def print_stats(self, agent: str) -> None:
        """The agent's versions side by side, computed by the checkpoint from its log."""
        from driver.agent_stats import render_stats

        with grpc.insecure_channel(f"127.0.0.1:{self.stack.checkpoint_port}") as ch:
            answer = cp_grpc.CheckpointServiceStub(ch).AgentStats(
                cp.AgentStatsRequest(agent=agent), metadata=[("authorization", f"Bearer {self.person_token}")],
                timeout=30)
        print(f"\n== {agent}'s versions side by side (warden agents stats {agent}), from the decision log", flush=True)
        print(render_stats(answer), flush=True)
        if len([v for v in answer.versions if v.runs]) >= 2:
            self.seen.add(STATS)

    def print_decisions(self, root_run_id: str) -> int:
        """Every decision of the run's delegation tree, in log order."""
        token = self.person_token
        with grpc.insecure_channel(f"127.0.0.1:{self.stack.checkpoint_port}") as ch:
            stub = cp_grpc.CheckpointServiceStub(ch)
            n = 0
            for resp in stub.WatchDecisions(cp.WatchDecisionsRequest(root_run_id=root_run_id, no_follow=True),
                                            metadata=[("authorization", f"Bearer {token}")], timeout=30):
                r = resp.record
                what = r.tool or r.action
                if r.action == "delegation":
                    what = f"to {json_format.MessageToDict(r.arguments).get('agent')}"
                print(f"  #{r.seq:<3} {r.action:<10} {what:<26} {cp.Verdict.Name(r.verdict).removeprefix('VERDICT_'):<16} "
                      f"{r.code:<20} {r.agent}@{r.agent_version[:12]} for {r.accountable_person}  hash {r.hash[:12]}")
                n += 1
        return n


    def promote_learning(self) -> None:
        """The breaker trip proposed a learning; a tenant admin reads it and promotes it (docs/learnings.md)."""
        with grpc.insecure_channel(f"127.0.0.1:{self.stack.checkpoint_port}") as ch:
            stub = cp_grpc.CheckpointServiceStub(ch)
            md = [("authorization", f"Bearer {self.person_token}")]
            proposed = [x for x in stub.ListLearnings(cp.ListLearningsRequest(status="proposed"), metadata=md,
                                                      timeout=30).learnings if x.source == "breaker"]
            if not proposed:
                return
            x = proposed[0]
            first = x.provenance[0]
            print(f"\n== the {x.code} trip proposed learning {x.id} about {x.agent}@{x.agent_version[:12]} "
                  f"(run {first.run_id}, decision {first.decision_id}):\n   {x.text}", flush=True)
            match = 'tool.name == "list_templates"'
            answer = stub.ReviewLearning(cp.ReviewLearningRequest(
                id=x.id, act=cp.LEARNING_ACT_PROMOTE, severity="warning", match=match,
                text="Runs of recon have run out of turns: list the templates once, then plan few steps.",
                note="worth telling the next run"), metadata=md, timeout=30)
        got = answer.learning
        print(f"== an admin promoted it ({answer.decision.code}): {got.id} is {got.status}, {got.severity} "
              f"when {got.match}, reviewed by {got.reviewed_by}; the next run of {got.agent} reads it as data",
              flush=True)
        if got.status == "active":
            self.seen.add(LEARNED)


def play(stack: Stack, goal_path: Path, script_path: Path) -> int:
    s = Scenario(stack)
    print("\n== a person starts the recon agent on a goal (scripted model, no API key)", flush=True)
    # review_plan=yes: the person reads the run's plan before anything runs (rule plans-read-first)
    inputs = struct_pb2.Struct()
    inputs.update({"review_plan": "yes"})
    run = s.driver.StartRun(pb.StartRunRequest(agent="recon", goal=goal_to_proto(load_goal(goal_path)),
                                               mode=pb.RUN_MODE_INTERACTIVE, provider="scripted", inputs=inputs,
                                               script_yaml=script_path.read_text()), metadata=s.md).run
    run_id = run.run_id
    for _ in range(12):
        run = s.follow_until_stop(run_id)
        if run.status == pb.RUN_STATUS_AWAITING_APPROVAL:
            if not s.approve(run.pending_approvals[0]):
                break
        elif run.status == pb.RUN_STATUS_PAUSED and run.code.startswith("breaker_"):
            print(f"\n== the run paused on {run.code}; a person raises the ceiling and resumes", flush=True)
            s.driver.ResumeRun(pb.ResumeRunRequest(run_id=run_id, reply="you have five more turns",
                                                   raise_budget=cp.Budget(turns=10)), metadata=s.md)
        else:
            break
    below = run.counters.descendant_total_turns
    print(f"\n== run {run_id}: {pb.RunStatus.Name(run.status)} ({run.code}) after {run.counters.total_turns} turns"
          + (f" (and {below} by the runs it delegated to)" if below else "") + f", {run.total_tokens} tokens",
          flush=True)
    print("\n== the decision stream, from the checkpoint's hash-chained log", flush=True)
    n = s.print_decisions(run_id)
    s.promote_learning()  # the next run of recon reads it, as data
    s.second_run(goal_path.parent / "recon-quick.yaml", script_path.parent / "quick.yaml")
    s.print_stats("recon")
    wanted = [PLAN_READ, "allowed call ran in a container", "denied call", "approval", "breaker trip and pause",
              "resume", PROPOSAL, PAUSED_CHILD, "delegation to a child run", VERIFIED, LEARNED, STATS]
    missing = [w for w in wanted if w not in s.seen]
    print(f"\n== {n} decisions recorded; scenario: " + ", ".join(f"{w} {'ok' if w in s.seen else 'MISSING'}"
                                                              for w in wanted), flush=True)
    return 0 if not missing and run.status == pb.RUN_STATUS_SUCCEEDED else 1
