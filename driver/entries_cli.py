"""`warden skills ...` and `warden templates ...`: skills and templates in the catalog, read and
changed at the checkpoint with your own credential (DATA/checkpoint.token, which `warden up`
creates). docs/skills.md has the rules."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from driver.cli import DEFAULT_CHECKPOINT, DEFAULT_DRIVER, _credential
from warden.datafolder import DEFAULT_DATA

KINDS = {"skills": "skill", "templates": "template"}


def register(subparsers: argparse._SubParsersAction) -> None:
    from warden.cli import help_only

    for group, kind in KINDS.items():
        about = ("skills: playbooks an agent's model may load by name, as data" if kind == "skill" else
                 "templates: task specs with a TARGET placeholder, served by list_templates")
        parser = subparsers.add_parser(
            group, help=about,
            description=f"Read and change the {group} of the catalog at the checkpoint, with your own credential. "
                        "A new version waits for a tenant admin; approving makes it live. They never add a tool "
                        "or widen a scope (docs/skills.md).")
        parser.set_defaults(func=help_only(parser))
        sub = parser.add_subparsers(dest="entries_command", metavar="COMMAND")
        _commands(sub, group, kind)


def _commands(sub: Any, group: str, kind: str) -> None:
    def command(name: str, help: str, func: Any, *, named: bool = True, version: bool = False,
                tenant: bool = True) -> Any:
        p = sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        if named:
            p.add_argument("name")
        if version:
            p.add_argument("version")
        if tenant:  # a proposal's tenant is its document's, or the saved call's
            p.add_argument("--tenant", default="", help=f"the {kind}'s tenant (default: the one tenant that has it)")
        p.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT,
                       help="checkpoint address (default %(default)s, env WARDEN_CHECKPOINT)")
        p.add_argument("--data", default=DEFAULT_DATA, type=Path, help="data folder holding checkpoint.token")
        p.set_defaults(func=func, kind=kind, group=group)
        return p

    command("list", f"list the {group} you may see, their live version and what waits for review", _list,
            named=False)
    command("history", f"every version of a {kind}, oldest first, with who moved it where", _history)
    p = command("show", f"one version of a {kind} (default: the live one), as a policy file writes it", _show)
    p.add_argument("version", nargs="?", default="")
    if kind == "skill":
        p = command("propose", "propose a skill from a file holding one Skill document; it waits for an admin",
                    _propose, tenant=False)
        p.add_argument("--file", type=Path, required=True)
    else:
        p = command("save", "save a template: from a file holding one Template document, or from a run's call "
                    "that worked (--run and --decision: its spec, the target put back as TARGET); it waits "
                    "for an admin", _propose, tenant=False)
        p.add_argument("--file", type=Path, help="a YAML file holding one Template document")
        p.add_argument("--run", default="", help="the run whose call worked")
        p.add_argument("--decision", default="", help="the decision id of that call (warden watch shows it)")
        p.add_argument("--description", default="", help="with --run: what the template does")
        p.add_argument("--driver", default=DEFAULT_DRIVER,
                       help="with --run: the driver that ran it, asked whether the call worked")
    p.add_argument("--note", default="", help="why: shown to the reviewer and recorded")
    for name, verb in (("approve", "approve a pending version: it goes live (a tenant admin)"),
                       ("reject", "reject a pending version (a tenant admin)")):
        p = command(name, verb, _review, version=True)
        p.add_argument("--note", default="")
        p.set_defaults(approve=name == "approve")
    p = command("retire", "retire a version, the live one included: no run may use it again (a tenant admin)",
                _retire, version=True)
    p.add_argument("--note", default="")


def _rpc(args: argparse.Namespace, method: str, request: Any) -> Any:
    import grpc

    from warden.checkpoint.v1 import checkpoint_pb2_grpc
    from warden.datafolder import PERSON_CHECKPOINT_TOKEN_FILE

    token_file = Path(args.data) / PERSON_CHECKPOINT_TOKEN_FILE
    if not token_file.exists():
        raise SystemExit(f"warden {args.group}: no checkpoint credential of yours at {token_file} "
                         "(`warden up` makes one)")
    metadata = [("authorization", "Bearer " + _credential(token_file))]
    with grpc.insecure_channel(args.checkpoint) as channel:
        try:
            return getattr(checkpoint_pb2_grpc.CheckpointServiceStub(channel), method)(
                request, timeout=30, metadata=metadata)
        except grpc.RpcError as err:
            raise SystemExit(f"warden {args.group} {args.entries_command}: "
                             f"{err.details() or err.code()}") from None  # type: ignore[attr-defined]


def _tenant(args: argparse.Namespace) -> str:
    """The tenant named, or the one tenant where an entry of this name is listed."""
    if args.tenant:
        return str(args.tenant)
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    found = {e.tenant for e in _rpc(args, "ListCatalogEntries", pb.ListCatalogEntriesRequest(kind=args.kind)).entries
             if e.name == args.name}
    if len(found) != 1:
        raise SystemExit(f"warden {args.group}: name the tenant (--tenant): "
                         + (f"{args.name!r} is in {', '.join(sorted(found))}" if found else
                            f"no {args.kind} {args.name!r} you may see is listed"))
    return found.pop()


def _history_of(args: argparse.Namespace) -> Any:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    return _rpc(args, "CatalogEntryHistory", pb.CatalogEntryHistoryRequest(kind=args.kind, tenant=_tenant(args),
                                                                            name=args.name))


def _list(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    entries = _rpc(args, "ListCatalogEntries", pb.ListCatalogEntriesRequest(kind=args.kind, tenant=args.tenant)).entries
    if not entries:
        print(f"no {args.group} you may see")
    for e in entries:
        waiting = f"  pending: {', '.join(e.pending_versions)}" if e.pending_versions else ""
        print(f"{e.name:<22} {e.tenant:<10} live {e.live_version or '(none yet)'}{waiting}")
        if e.description:
            print(f"    {e.description}")
    return 0


def _history(args: argparse.Namespace) -> int:
    for v in _history_of(args).versions:
        decided = f"; {v.status} by {v.decided_by} {v.decided_at}" if v.decided_by else ""
        proposed = f" by {v.proposed_by}" if v.proposed_by else ""
        print(f"{v.version}  {v.status:<10} first seen {v.first_seen}  {v.source}{proposed}{decided}")
        for line in (v.note, v.decision_note):
            if line:
                print(f"    {line}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from google.protobuf import json_format

    history = _history_of(args)
    wanted = args.version or history.live_version
    found = next((v for v in history.versions if v.version == wanted), None)
    if found is None:
        raise SystemExit(f"warden {args.group}: no version {wanted!r} of {args.kind} {args.name!r}")
    print(f"# {found.kind} {found.tenant}/{found.name} {found.version} ({found.status})")
    print(json.dumps(json_format.MessageToDict(found.definition), indent=2))
    return 0


def _acted(args: argparse.Namespace, response: Any) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    d = response.decision
    if d.verdict != pb.VERDICT_ALLOW:
        print(f"warden {args.group} {args.entries_command}: refused: {d.code}: {d.reason}", file=sys.stderr)
        return 1
    e = response.entry
    print(f"{d.code}: {e.kind} {e.tenant}/{e.name} {e.version} is {e.status} (decision {d.decision_id})")
    return 0


def _call_worked(args: argparse.Namespace) -> None:
    """The driver's own record of the call: a receipt that exited 0 with no error."""
    from driver.cli import _Client
    from warden.driver.v1 import driver_pb2 as dpb

    client = _Client(args)
    try:
        events = client.stub.WatchRun(dpb.WatchRunRequest(run_id=args.run, no_follow=True), metadata=client.metadata,
                                      timeout=30)
        receipts = [e.event for e in events if e.event.kind == "tool_receipt"
                    and e.event.data.fields.get("decision_id") is not None
                    and e.event.data["decision_id"] == args.decision]
    finally:
        client.channel.close()
    if not receipts:
        raise SystemExit(f"warden templates save: run {args.run} has no receipt of decision {args.decision}")
    data = receipts[-1].data
    if data["exit_code"] != 0 or (data.fields.get("code") is not None and data["code"]):
        raise SystemExit(f"warden templates save: the call of decision {args.decision} did not work "
                         f"(exit {data['exit_code']:g}): a template is saved from a task that worked")


def _propose(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    request = pb.ProposeCatalogEntryRequest(kind=args.kind, name=args.name, note=args.note)
    if getattr(args, "run", "") or getattr(args, "decision", ""):
        if args.file or not (args.run and args.decision):
            raise SystemExit("warden templates save: either --file, or --run with --decision")
        _call_worked(args)
        request.from_call.CopyFrom(pb.DecisionRef(run_id=args.run, decision_id=args.decision))
        request.description = args.description
    else:
        if not args.file:
            raise SystemExit(f"warden {args.group} {args.entries_command}: --file is needed")
        try:
            request.definition_yaml = args.file.read_text()
        except OSError as exc:
            raise SystemExit(f"warden {args.group} {args.entries_command}: {exc}") from None
    return _acted(args, _rpc(args, "ProposeCatalogEntry", request))


def _review(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    return _acted(args, _rpc(args, "ReviewCatalogEntry", pb.ReviewCatalogEntryRequest(
        kind=args.kind, tenant=_tenant(args), name=args.name, version=args.version, approve=args.approve,
        note=args.note)))


def _retire(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    return _acted(args, _rpc(args, "RetireCatalogEntry", pb.RetireCatalogEntryRequest(
        kind=args.kind, tenant=_tenant(args), name=args.name, version=args.version, note=args.note)))
