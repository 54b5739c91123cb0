"""Claude Code's PreToolUse hook: every tool call Claude Code is about to make is a Check().

Claude Code sends the event as JSON on stdin (session_id, hook_event_name, tool_name, tool_input,
and agent_id/agent_type when a sub-agent makes the call). The answer is JSON on stdout with
hookSpecificOutput.permissionDecision `allow`, `deny` or `ask` and a reason. Anything that keeps
the hook from deciding (the checkpoint unreachable, an event it cannot read) exits 2 with the
reason on stderr, which Claude Code treats as a block: never a quiet exit, which would leave the
call to Claude Code's own permission settings.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from warden.client import ApprovalInbox, ApprovalOutcome, Asked, CheckpointClient, ClientError, Decision, Run
from warden.client.runs import call_digest
from warden.filelock import SharedLock
from warden.hooks.sessions import Sessions

BLOCK = 2  # Claude Code's exit code for "blocking error": the call does not run
MAX_EVENT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Settings:
    checkpoint: str
    token: str  # the hook's own checkpoint credential (a principal that may check for `person`)
    person: str
    state: Path
    inbox: Path
    agent: str = "claude-code"
    tenant: str = ""
    wait: float = 0.0  # seconds to wait for a person's approval before answering
    on_approval: str = "deny"  # or "ask": leave a call that waits for a person to Claude Code's prompt
    timeout: float = 5.0


class Blocked(Exception):
    """The hook cannot decide: the call is blocked (exit 2) with this reason."""


def tool_name(claude_name: str) -> str:
    """The policy's name of a Claude Code tool: `mcp__fs__read_text_file` is the gateway's
    `fs__read_text_file`, so one policy governs an MCP server whichever way it is reached; a
    built-in tool is `claude.` and its name in lower case (`Bash` is `claude.bash`)."""
    if claude_name.startswith("mcp__") and claude_name.count("__") >= 2:
        _, server, tool = claude_name.split("__", 2)
        return f"{server}__{tool}".lower()
    return f"claude.{claude_name.lower()}"


def answer(permission: str, reason: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": permission,
                                   "permissionDecisionReason": reason}}


def read_event(stdin: TextIO) -> dict[str, Any]:
    text = stdin.read(MAX_EVENT_BYTES + 1)
    if len(text) > MAX_EVENT_BYTES:
        raise Blocked("the hook event is larger than 4 MiB")
    try:
        event = json.loads(text)
    except ValueError as exc:
        raise Blocked(f"the hook event is not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise Blocked("the hook event is not a JSON object")
    if event.get("hook_event_name") != "PreToolUse":
        raise Blocked(f"warden hook claude-code answers PreToolUse only, not {event.get('hook_event_name')!r}")
    for name, kind in (("session_id", str), ("tool_name", str), ("tool_input", dict)):
        if not isinstance(event.get(name), kind):
            raise Blocked(f"the hook event has no {name}")
    return event


class ClaudeCodeHook:
    def __init__(self, settings: Settings, client: CheckpointClient) -> None:
        self.settings = settings
        self.client = client
        self.sessions = Sessions(settings.state / "claude-code.db")
        self.inbox = ApprovalInbox(settings.inbox)
        # Claude Code runs the hooks of parallel tool calls at once: each reads the run's counters,
        # checks and writes them back under this lock, so no call's count is lost to another's
        self.lock = SharedLock(settings.state / "claude-code.lock")

    def decide(self, event: dict[str, Any]) -> dict[str, Any]:
        sent = event.get("agent_id")
        agent_id = sent if isinstance(sent, str) else ""
        # a sub-agent acts in a run of its own, so its calls are told apart on the record
        key = event["session_id"] + (f"/{agent_id}" if agent_id else "")
        tool, arguments = tool_name(event["tool_name"]), event["tool_input"]
        call = call_digest(tool, arguments)
        approval = None
        waiting = self.sessions.waiting(key, call)
        if waiting:
            approval = self.inbox.take(waiting) or self._wait(waiting)
            if approval is None:
                return answer("deny", f"warden: still waiting for a person to approve this call "
                                      f"(`warden inbox approve {waiting}`); try it again once they have")
            self.sessions.answered(key, call)
            if not approval.approved:
                return answer("deny", f"warden: rejected: a person rejected this call (decision {waiting})")
        run, decision = self._checked(key, event, agent_id, tool, arguments, approval)
        if decision.verdict == "REQUIRE_APPROVAL":
            return self._asked(key, event, agent_id, call, run, tool, arguments, decision)
        if decision.verdict == "HALT":
            # a HALT ends the run's calls: with its end recorded, the checkpoint refuses every later
            # call of the Claude Code session (run_ended); a new one starts a new run
            self.client.end_run(run, status="failed", code=decision.code)
        return self._answer(decision)

    def _checked(self, key: str, event: dict[str, Any], agent_id: str, tool: str, arguments: dict[str, Any],
                 approval: ApprovalOutcome | None) -> tuple[Run, Decision]:
        with self.lock:
            run = self.sessions.run(key) or self._start(key, event, agent_id)
            decision = self.client.check(run, tool, arguments, approval=approval)
            if decision.code == "run_token_expired":  # a long session outlives its run token: a new run
                run = self._start(key, event, agent_id)
                decision = self.client.check(run, tool, arguments)
            self.sessions.save(key, run)
        return run, decision

    def _start(self, key: str, event: dict[str, Any], agent_id: str) -> Run:
        inputs = {"client": "claude-code", "session_id": event["session_id"][:200]}
        if agent_id:
            inputs |= {"agent_id": agent_id[:200], "agent_type": str(event.get("agent_type", ""))[:200]}
        run = self.client.start_run(person=self.settings.person, agent=self.settings.agent,
                                    tenant=self.settings.tenant, inputs=inputs)
        self.sessions.save(key, run)
        return run

    def _wait(self, decision_id: str) -> ApprovalOutcome | None:
        return self.inbox.wait(decision_id, self.settings.wait) if self.settings.wait > 0 else None

    def _asked(self, key: str, event: dict[str, Any], agent_id: str, call: str, run: Run, tool: str,
               arguments: dict[str, Any], decision: Decision) -> dict[str, Any]:
        self.inbox.ask(Asked(decision.decision_id, run.run_id, tool, arguments, decision.reason,
                             f"claude-code for {self.settings.person}", time.time()))
        self.sessions.wait_for(key, call, decision.decision_id)
        outcome = self._wait(decision.decision_id)  # outside the lock: the other calls go on meanwhile
        if outcome is not None:
            self.sessions.answered(key, call)
            if not outcome.approved:
                return answer("deny", f"warden: rejected: a person rejected this call (decision {decision.decision_id})")
            return self._answer(self._checked(key, event, agent_id, tool, arguments, outcome)[1])
        reason = (f"warden: {decision.code}: {decision.reason}. A person approves it with "
                  f"`warden inbox approve {decision.decision_id}`; then make the same call again")
        return answer("ask" if self.settings.on_approval == "ask" else "deny", reason)

    @staticmethod
    def _answer(decision: Decision) -> dict[str, Any]:
        if decision.allowed:
            return answer("allow", f"warden: allowed (decision {decision.decision_id})")
        return answer("deny", f"warden: {decision.code}: {decision.reason}")


def run_hook(settings: Settings, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """Read one event, answer it; 2 (block) whenever no decision could be made."""
    try:
        event = read_event(stdin)
        with CheckpointClient(settings.checkpoint, token=settings.token, timeout=settings.timeout) as client:
            out = ClaudeCodeHook(settings, client).decide(event)
    except (Blocked, ClientError) as exc:
        stderr.write(f"warden: blocked: {exc}\n")
        return BLOCK
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the call must not run
        stderr.write(f"warden: blocked: the hook failed: {type(exc).__name__}: {exc}\n")
        return BLOCK
    stdout.write(json.dumps(out) + "\n")
    return 0
