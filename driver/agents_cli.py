"""`warden agents ...`: the agent catalog, read and changed at the checkpoint with your own
credential (DATA/checkpoint.token, which `warden up` creates). docs/catalog.md has the rules."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from driver.cli import DEFAULT_CHECKPOINT, _credential
from warden.datafolder import DEFAULT_DATA

COMMANDS = ("list", "show", "history", "diff", "propose", "review", "approve", "reject", "retire", "rollback", "stats")


def register(subparsers: argparse._SubParsersAction) -> None:
    from warden.cli import help_only

    agents = subparsers.add_parser(
        "agents", help="the agent catalog: versions, proposals, reviews, retirement",
        description="Read and change the agent catalog at the checkpoint, with your own credential. "
                    "A change waits for a tenant admin; approving makes it live for new runs, while "
                    "running runs keep the version they pinned (docs/catalog.md).")
    agents.set_defaults(func=help_only(agents))
    sub = agents.add_subparsers(dest="agents_command", metavar="COMMAND")

    def command(name: str, help: str, func: Any, *, agent: bool = True, version: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        if agent:
            p.add_argument("agent")
        if version:
            p.add_argument("version")
        p.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT,
                       help="checkpoint address (default %(default)s, env WARDEN_CHECKPOINT)")
        p.add_argument("--data", default=DEFAULT_DATA, type=Path, help="data folder holding checkpoint.token")
        p.set_defaults(func=func)
        return p

    p = command("list", "list the agents you may see, their live version and what waits for review", _list, agent=False)
    p.add_argument("--tenant", default="")
    command("history", "every version of an agent, oldest first, with who moved it where", _history)
    p = command("show", "one version's definition (default: the live one), as a policy file writes it", _show)
    p.add_argument("version", nargs="?", default="")
    p = command("diff", "what changes from one version to another (default: from the live version)", _diff,
                version=True)
    p.add_argument("--from", dest="from_version", default="", help="the version to compare with (default: live)")
    command("review", "a pending version against the live one: what it widens and every difference", _diff,
            version=True).set_defaults(from_version="")
    p = command("propose", "propose a change: a whole Agent document from a file; it waits for an admin", _propose)
    p.add_argument("--file", type=Path, required=True, help="a YAML file holding one Agent document")
    p.add_argument("--note", default="", help="why: shown to the reviewer and recorded")
    for name, verb in (("approve", "approve a pending version: it goes live for new runs (a tenant admin)"),
                       ("reject", "reject a pending version (a tenant admin)")):
        p = command(name, verb, _review, version=True)
        p.add_argument("--note", default="")
        p.set_defaults(approve=name == "approve")
    p = command("retire", "retire a version: no new run pins it, its runs halt (a tenant admin)", _retire,
                version=True)
    p.add_argument("--note", default="")
    p = command("rollback", "propose an old version again, copied forward; it waits for an admin", _rollback,
                version=True)
    p.add_argument("--note", default="")
    p = command("stats", "compare an agent's versions: runs, how they ended, breaker trips, tokens (from the record)",
                _stats)
    p.add_argument("--json", action="store_true", help="one JSON document, for tools")


def _rpc(args: argparse.Namespace, method: str, request: Any) -> Any:
    import grpc

    from warden.checkpoint.v1 import checkpoint_pb2_grpc
    from warden.datafolder import PERSON_CHECKPOINT_TOKEN_FILE

    token_file = Path(args.data) / PERSON_CHECKPOINT_TOKEN_FILE
    if not token_file.exists():
        raise SystemExit(f"warden agents: no checkpoint credential of yours at {token_file} (`warden up` makes one)")
    metadata = [("authorization", "Bearer " + _credential(token_file))]
    with grpc.insecure_channel(args.checkpoint) as channel:
        try:
            return getattr(checkpoint_pb2_grpc.CheckpointServiceStub(channel), method)(
                request, timeout=30, metadata=metadata)
        except grpc.RpcError as err:
            raise SystemExit(f"warden agents {args.agents_command}: {err.details() or err.code()}") from None  # type: ignore[attr-defined]


def _history_of(args: argparse.Namespace) -> Any:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    return _rpc(args, "AgentHistory", pb.AgentHistoryRequest(agent=args.agent))


def _version(history: Any, version: str) -> Any:
    wanted = version or history.live_version
    for v in history.versions:
        if v.version == wanted:
            return v
    raise SystemExit(f"warden agents: no version {wanted!r} of this agent")


def _list(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    agents = _rpc(args, "ListAgents", pb.ListAgentsRequest(tenant=args.tenant)).agents
    if not agents:
        print("no agents you may see")
    for a in agents:
        waiting = f"  pending: {', '.join(a.pending_versions)}" if a.pending_versions else ""
        print(f"{a.agent:<16} {a.tenant:<10} live {a.live_version or '(none yet)'}{waiting}")
    return 0


def _history(args: argparse.Namespace) -> int:
    history = _history_of(args)
    for v in history.versions:
        decided = f"; {v.status} by {v.decided_by} {v.decided_at}" if v.decided_by else ""
        proposed = f" by {v.proposed_by}" if v.proposed_by else ""
        print(f"{v.version}  {v.status:<10} first seen {v.first_seen}  {v.source}{proposed}{decided}")
        for line in (v.note, v.decision_note):
            if line:
                print(f"    {line}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from google.protobuf import json_format

    v = _version(_history_of(args), args.version)
    print(f"# {v.agent} {v.version} ({v.status})")
    print(json.dumps(json_format.MessageToDict(v.definition), indent=2))
    return 0


def _diff(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    history = _rpc(args, "AgentHistory", pb.AgentHistoryRequest(
        agent=args.agent, compare_from=args.from_version or "", compare_to=args.version or ""))
    new = _version(history, args.version)
    if args.from_version:  # compared by the checkpoint, as its review compares them
        lines, widens = list(history.comparison.diff), list(history.comparison.widens)
    else:
        lines, widens = list(new.diff), list(new.widens)
    print(f"{args.agent}: {args.from_version or history.live_version} -> {new.version} ({new.status})")
    if new.note:
        print(f"note: {new.note}")
    print("widens: " + ("; ".join(widens) if widens else "nothing (it only narrows)"))
    for line in lines or ["(no difference)"]:
        print(f"  {line}")
    return 0


def _acted(args: argparse.Namespace, response: Any) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    d = response.decision
    if d.verdict != pb.VERDICT_ALLOW:
        print(f"warden agents {args.agents_command}: refused: {d.code}: {d.reason}", file=sys.stderr)
        return 1
    v = response.version
    print(f"{d.code}: {v.agent} {v.version} is {v.status} (decision {d.decision_id})")
    if v.status == "pending":
        print("widens: " + ("; ".join(v.widens) if v.widens else "nothing (it only narrows)"))
        for line in v.diff:
            print(f"  {line}")
    return 0


def _propose(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    try:
        text = args.file.read_text()
    except OSError as exc:
        raise SystemExit(f"warden agents propose: {exc}") from None
    return _acted(args, _rpc(args, "ProposeAgentChange", pb.ProposeAgentChangeRequest(
        agent=args.agent, definition_yaml=text, note=args.note)))


def _review(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    return _acted(args, _rpc(args, "ReviewAgentChange", pb.ReviewAgentChangeRequest(
        agent=args.agent, version=args.version, approve=args.approve, note=args.note)))


def _retire(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    return _acted(args, _rpc(args, "RetireAgentVersion", pb.RetireAgentVersionRequest(
        agent=args.agent, version=args.version, note=args.note)))


def _rollback(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    return _acted(args, _rpc(args, "ProposeAgentChange", pb.ProposeAgentChangeRequest(
        agent=args.agent, rollback_to=args.version, note=args.note)))


def _stats(args: argparse.Namespace) -> int:
    from driver.agent_stats import render_stats, stats_document
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    answer = _rpc(args, "AgentStats", pb.AgentStatsRequest(agent=args.agent))
    if args.json:
        print(json.dumps(stats_document(answer), indent=2))
    else:
        print(render_stats(answer))
    return 0
