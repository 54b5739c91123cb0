"""A run as the client holds it: its signed token and the counters the run's breakers read.

The checkpoint keeps no counters: the caller sends them with every Check, as warden's own driver
does. A client that forgot its failures would let a failing agent retry forever, so a run's
counters can be saved between processes (a hook lives for one call) with `to_dict`/`from_dict`.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from warden.canonical import sha256_hex
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.structs import struct_to_dict

VERDICTS = {cp.VERDICT_ALLOW: "ALLOW", cp.VERDICT_DENY: "DENY", cp.VERDICT_REQUIRE_APPROVAL: "REQUIRE_APPROVAL",
            cp.VERDICT_HALT: "HALT"}


@dataclass(frozen=True)
class Decision:
    """The checkpoint's answer to one call: anything but ALLOW means the call must not run."""

    verdict: str  # ALLOW, DENY, REQUIRE_APPROVAL or HALT
    code: str
    reason: str
    rule: str
    decision_id: str
    arguments: dict[str, Any] | None = None  # on ALLOW of a template tool: the arguments to run
    approval_rules: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.verdict == "ALLOW"

    @classmethod
    def of(cls, response: cp.CheckResponse) -> Decision:
        return cls(
            verdict=VERDICTS.get(response.verdict, "DENY"), code=response.code or "unspecified",
            reason=response.reason, rule=response.rule, decision_id=response.decision_id,
            arguments=struct_to_dict(response.arguments, checked=False) if response.HasField("arguments") else None,
            approval_rules=tuple(response.approval_rules),
        )


@dataclass
class Run:
    """One started run: what StartRun signed, and the counters of what happened since."""

    run_id: str
    token: str
    agent: str = ""
    agent_version: str = ""
    tenant: str = ""
    tools: tuple[str, ...] = ()
    started_at: float = field(default_factory=time.time)
    consecutive_failures: int = 0
    # sha256 of (tool, canonical arguments) -> how many times that exact call was made
    made: dict[str, int] = field(default_factory=dict)

    def counters(self, tool: str, arguments: dict[str, Any]) -> cp.Counters:
        return cp.Counters(
            wall_clock_seconds=max(0.0, time.time() - self.started_at),
            identical_calls=self.made.get(call_digest(tool, arguments), 0),
            consecutive_failures=self.consecutive_failures,
        )

    def made_call(self, tool: str, arguments: dict[str, Any]) -> None:
        digest = call_digest(tool, arguments)
        self.made[digest] = self.made.get(digest, 0) + 1

    def report_result(self, ok: bool) -> None:
        """A call ran (or was refused): failures in a row trip the run's `failures` breaker."""
        self.consecutive_failures = 0 if ok else self.consecutive_failures + 1

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "token": self.token, "agent": self.agent, "agent_version": self.agent_version,
                "tenant": self.tenant, "tools": list(self.tools), "started_at": self.started_at,
                "consecutive_failures": self.consecutive_failures, "made": dict(self.made)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Run:
        return cls(run_id=str(data["run_id"]), token=str(data["token"]), agent=str(data.get("agent", "")),
                   agent_version=str(data.get("agent_version", "")), tenant=str(data.get("tenant", "")),
                   tools=tuple(data.get("tools", ())), started_at=float(data.get("started_at", time.time())),
                   consecutive_failures=int(data.get("consecutive_failures", 0)),
                   made={str(k): int(v) for k, v in dict(data.get("made", {})).items()})


def call_digest(tool: str, arguments: dict[str, Any]) -> str:
    """The digest of one exact call: the same tool with the same arguments, in any key order."""
    try:
        return sha256_hex({"tool": tool, "arguments": arguments})
    except (TypeError, ValueError):  # no canonical form (the checkpoint refuses those): still one digest
        return hashlib.sha256(json.dumps([tool, arguments], sort_keys=True, default=repr).encode()).hexdigest()
