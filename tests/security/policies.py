"""The shipped policies plus a few typed off-limits entries and a loose tool, for the attack tests.

The shipped `create_task_from_template` only takes ASCII targets, so Unicode spellings and URLs go
through `probe`, whose schema takes any string: what refuses them must be the subject reading.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

from checkpoint.engine import decide
from checkpoint.policy import PolicySet, load_policy_dir
from warden.checkpoint.v1 import checkpoint_pb2 as pb

SHIPPED = Path(__file__).resolve().parents[2] / "policies"

EXTRA = {
    "subjects/typed-off-limits.yaml": """\
kind: OffLimits
subjects:
  - {pattern: "bücher.example", reason: a Unicode host}
  - {pattern: "xn--mnchen-3ya.de", reason: a punycode host, type: host}
  - {pattern: "10.9.9.9", reason: one address, type: ip}
  - {pattern: "10.99.0.0/16", reason: a range}
  - {pattern: "2001:db8::/32", reason: an IPv6 range}
  - {pattern: "127.0.0.0/8", reason: this host}
  - {pattern: "localhost", reason: a single-label host read as a name}
  - {pattern: "intranet-*", reason: single-label hosts by glob}
  - {pattern: "https://docs.example.com/admin/**", reason: a URL path}
  - {pattern: "weiß.example", reason: a host written with a deviation character}
  - {pattern: "fuss.example", reason: a host another spelling writes with ß}
  - {pattern: "σοφος.example", reason: a host with a final sigma}
  - {pattern: "क्ष.example", reason: a host another spelling writes with ZWNJ}
  - {pattern: "db-main", reason: a single-label host}
""",
    "tools/probe.yaml": """\
kind: Tool
name: probe
access: read
input_schema:
  type: object
  additionalProperties: false
  required: [target]
  properties: {target: {type: string, maxLength: 2000}}
touches: {subjects: "[args.target]"}
""",
    "agents/attack-agents.yaml": """\
kind: Agent
name: prober
persona: Probes anything; only off-limits stands in its way.
allowlist: [probe]
scope: {access: [read], subjects: ["*"]}
---
kind: Agent
name: webber
persona: Reads two API prefixes.
allowlist: [probe]
scope:
  access: [read]
  subjects: ["https://api.example.com/v1/*", "https://docs.example.com/v1/**"]
---
kind: Agent
name: browser
persona: Browses any example.com host.
allowlist: [probe]
scope: {access: [read], subjects: ["https://*.example.com/**"]}
---
kind: Agent
name: refunder
persona: Reads customers by name.
allowlist: [probe]
scope: {access: [read], subjects: ["customer:*"]}
""",
}


@functools.cache
def shipped() -> PolicySet:
    return load_policy_dir(SHIPPED)


@functools.cache
def extended() -> PolicySet:
    folder = Path(tempfile.mkdtemp(prefix="warden-subjects-")) / "policies"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("tests"))
    for name, text in EXTRA.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return load_policy_dir(folder)


def check(p: PolicySet, tool: str, args: dict[str, str], chain: tuple[str, ...] = ()) -> tuple[str, str]:
    """(verdict, code) of one tool call, made by a person (empty chain) or by the chain's agents."""
    run = pb.RunContext(run_id="run-1", mode=pb.RUN_MODE_INTERACTIVE)
    run.actor_chain.add(kind=pb.ACTOR_KIND_PERSON, id="alice")
    for i, name in enumerate(chain):
        run.actor_chain.add(kind=pb.ACTOR_KIND_AGENT, id=name, agent_version=p.agents[name].version,
                            run_id=f"run-{i}")
    request = pb.CheckRequest(run=run, tool_call=pb.ToolCall(tool=tool))
    request.tool_call.arguments.update(args)
    response = decide(p, request)
    return pb.Verdict.Name(response.verdict).removeprefix("VERDICT_"), response.code


def target(value: str, chain: tuple[str, ...] = ()) -> tuple[str, str]:
    """The shipped recon tool aimed at `value`, on the shipped policies plus the typed entries."""
    return check(extended(), "create_task_from_template", {"template": "web-basic", "target": value}, chain)


def probe(value: str, chain: tuple[str, ...] = ()) -> tuple[str, str]:
    return check(extended(), "probe", {"target": value}, chain)


OFF_LIMITS = ("DENY", "subject_off_limits")
INVALID = ("DENY", "invalid_arguments")
OUT_OF_SCOPE = ("DENY", "subject_out_of_scope")
ALLOWED = ("ALLOW", "allowed")
