"""`warden learnings ...`: proposed and active learnings, read and reviewed at the checkpoint with
your own credential (DATA/checkpoint.token, which `warden up` creates). docs/learnings.md has the
rules: a tenant admin promotes, re-reviews, rejects and retires; any role in the tenant reads."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from driver.cli import DEFAULT_CHECKPOINT, _credential
from warden.datafolder import DEFAULT_DATA

COMMANDS = ("list", "show", "promote", "review", "reject", "retire")


def register(subparsers: argparse._SubParsersAction) -> None:
    from warden.cli import help_only

    learnings = subparsers.add_parser(
        "learnings", help="learnings: advice from failures and breakers, reviewed by a person",
        description="Read and review learnings at the checkpoint, with your own credential. A proposal acts "
                    "on nothing; a tenant admin promotes it (severity and CEL match); an active warning shows "
                    "in a matching call's answer, an error blocks it; 90 days untriggered, it goes stale "
                    "(docs/learnings.md).")
    learnings.set_defaults(func=help_only(learnings))
    sub = learnings.add_subparsers(dest="learnings_command", metavar="COMMAND")

    def command(name: str, help: str, func: Any, *, learning: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        if learning:
            p.add_argument("learning", help="the learning's id (lrn-...)")
        p.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT,
                       help="checkpoint address (default %(default)s, env WARDEN_CHECKPOINT)")
        p.add_argument("--data", default=DEFAULT_DATA, type=Path, help="data folder holding checkpoint.token")
        p.set_defaults(func=func)
        return p

    p = command("list", "list the learnings you may see, newest first", _list, learning=False)
    p.add_argument("--tenant", default="")
    p.add_argument("--agent", default="")
    p.add_argument("--status", default="", choices=["", "proposed", "active", "stale", "rejected", "retired"])
    p.add_argument("--stale", action="store_true", help="only the stale ones, waiting for re-review")
    p.add_argument("--json", action="store_true", help="one JSON object per learning")
    command("show", "one learning: its text, match, provenance and history", _show)
    p = command("promote", "make a proposed learning active, choosing severity and match (a tenant admin)", _promote)
    p.add_argument("--severity", required=True, choices=["warning", "error"])
    p.add_argument("--match", default="", help="a CEL condition over tool, args, agent, tenant "
                                               "(default: the proposal's suggested match)")
    p.add_argument("--text", default="", help="reword the lesson")
    p.add_argument("--note", default="", help="why: recorded")
    p = command("review", "review an active or stale learning again (its 90 days start over), optionally "
                          "editing it (a tenant admin)", _review)
    p.add_argument("--severity", default="", choices=["", "warning", "error"])
    p.add_argument("--match", default="")
    p.add_argument("--text", default="")
    p.add_argument("--note", default="")
    for name, verb in (("reject", "reject a proposed learning (a tenant admin); final"),
                       ("retire", "retire an active or stale learning (a tenant admin); final")):
        p = command(name, verb, _decide)
        p.add_argument("--note", default="")


def _rpc(args: argparse.Namespace, method: str, request: Any) -> Any:
    import grpc

    from warden.checkpoint.v1 import checkpoint_pb2_grpc
    from warden.datafolder import PERSON_CHECKPOINT_TOKEN_FILE

    token_file = Path(args.data) / PERSON_CHECKPOINT_TOKEN_FILE
    if not token_file.exists():
        raise SystemExit(f"warden learnings: no checkpoint credential of yours at {token_file} (`warden up` makes one)")
    metadata = [("authorization", "Bearer " + _credential(token_file))]
    with grpc.insecure_channel(args.checkpoint) as channel:
        try:
            return getattr(checkpoint_pb2_grpc.CheckpointServiceStub(channel), method)(
                request, timeout=30, metadata=metadata)
        except grpc.RpcError as err:
            raise SystemExit(f"warden learnings {args.learnings_command}: {err.details() or err.code()}") from None  # type: ignore[attr-defined]


def _one(args: argparse.Namespace, learning: str) -> Any:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    found = _rpc(args, "ListLearnings", pb.ListLearningsRequest(id=learning)).learnings
    if not found:
        raise SystemExit(f"warden learnings: no learning {learning!r} that you may read")
    return found[0]


def _line(x: Any) -> str:
    what = f"{x.severity}" + (f" when {x.match}" if x.match else "")
    seen = f"x{x.occurrences}" if x.occurrences > 1 else ""
    who = f"reviewed by {x.reviewed_by}" if x.reviewed_by else f"proposed by {x.proposed_by}"
    return (f"{x.id}  {x.status:<8} {x.agent or '(every agent)'}@{x.agent_version[:8]:<8} {x.source:<11} "
            f"{x.code[:24]:<24} {seen:<4} {what}  [{who}]\n    {x.text[:200]}")


def _list(args: argparse.Namespace) -> int:
    from google.protobuf import json_format

    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    status = "stale" if args.stale else args.status
    found = _rpc(args, "ListLearnings", pb.ListLearningsRequest(tenant=args.tenant, agent=args.agent,
                                                                 status=status)).learnings
    if args.json:
        for x in found:
            print(json.dumps(json_format.MessageToDict(x, preserving_proto_field_name=True), sort_keys=True))
        return 0
    if not found:
        print("no stale learnings" if args.stale else "no learnings you may see")
    for x in found:
        print(_line(x))
    return 0


def _show(args: argparse.Namespace) -> int:
    x = _one(args, args.learning)
    print(f"# {x.id} ({x.status}) tenant {x.tenant}, about {x.agent or 'every agent'}")
    print(f"text: {x.text}")
    print(f"severity: {x.severity}" + (" (the proposer asked for error; a proposal is kept at warning)"
                                       if x.severity_capped and x.status == "proposed" else ""))
    print(f"match: {x.match or '(none yet)'}" + (f"   suggested: {x.suggested_match}"
                                                   if x.suggested_match and not x.match else ""))
    print(f"source: {x.source} {x.code}" + (f" on {x.tool}" if x.tool else ""))
    print(f"proposed by {x.proposed_by} at {x.proposed_at}; {x.occurrences} occurrence(s), last {x.last_occurrence_at}")
    if x.reviewed_by:
        print(f"reviewed by {x.reviewed_by} at {x.reviewed_at}" + (f": {x.review_note}" if x.review_note else ""))
    if x.status in ("active", "stale"):
        print(f"triggered {x.triggers} time(s), last {x.last_triggered_at or 'never'}; "
              f"{'stale since' if x.status == 'stale' else 'goes stale at'} {x.stale_at}")
    print("provenance (first, then the latest):")
    for p in x.provenance:
        print(f"  {p.time}  run {p.run_id or '-'}  decision {p.decision_id or '-'}  {p.agent}@{p.agent_version}  {p.code}")
    return 0


def _acted(args: argparse.Namespace, response: Any) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    d = response.decision
    if d.verdict != pb.VERDICT_ALLOW:
        print(f"warden learnings {args.learnings_command}: refused: {d.code}: {d.reason}", file=sys.stderr)
        return 1
    x = response.learning
    print(f"{d.code}: {x.id} is {x.status}" + (f" ({x.severity}: {x.match})" if x.status == "active" else "")
          + f" (decision {d.decision_id})")
    return 0


def _promote(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    match = args.match
    if not match:
        match = _one(args, args.learning).suggested_match
        if not match:
            raise SystemExit("warden learnings promote: the proposal suggests no match; give --match")
        print(f"match: {match} (the proposal's suggestion)")
    return _acted(args, _rpc(args, "ReviewLearning", pb.ReviewLearningRequest(
        id=args.learning, act=pb.LEARNING_ACT_PROMOTE, severity=args.severity, match=match, text=args.text,
        note=args.note)))


def _review(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    return _acted(args, _rpc(args, "ReviewLearning", pb.ReviewLearningRequest(
        id=args.learning, act=pb.LEARNING_ACT_REVIEW, severity=args.severity, match=args.match, text=args.text,
        note=args.note)))


def _decide(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    act = pb.LEARNING_ACT_REJECT if args.learnings_command == "reject" else pb.LEARNING_ACT_RETIRE
    return _acted(args, _rpc(args, "ReviewLearning", pb.ReviewLearningRequest(id=args.learning, act=act,
                                                                              note=args.note)))
