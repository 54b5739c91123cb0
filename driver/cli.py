"""`warden driver serve`, `warden up`, and the person's commands: run, runs, watch, approve,
reject, pause, resume, cancel, amend. The commands talk to DriverService with the operator credential
from DATA/operator.token (created by `warden up`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warden import observability
from warden.budget_fields import FIELDS as BUDGET_FIELDS
from warden.cli import add_grace_flag, add_metrics_flag
from warden.datafolder import DEFAULT_DATA
from warden.store.url import add_store_flags, store_of

if TYPE_CHECKING:
    from driver.runs.store import RunStore

# WARDEN_DATA, WARDEN_DRIVER, WARDEN_CHECKPOINT, ... reach every command through warden/config.py
DEFAULT_DRIVER = "127.0.0.1:7403"
DEFAULT_CHECKPOINT = "127.0.0.1:7401"
BUDGET_KEYS = tuple(f for f in BUDGET_FIELDS if f != "turns_total")  # what a resume may raise


def register(subparsers: argparse._SubParsersAction) -> None:
    drv = subparsers.add_parser("driver", help="the run driver (model loop)", description="The run driver.")
    dsub = drv.add_subparsers(dest="driver_command", metavar="COMMAND")
    serve = dsub.add_parser("serve", help="serve DriverService over gRPC",
                            description="Serve DriverService: host governed model loops, keep run state.")
    serve.add_argument("--address", default="127.0.0.1:7403", help="host:port (default %(default)s)")
    serve.add_argument("--data", default=DEFAULT_DATA, type=Path,
                       help="data folder: tokens, operators and, without --store, driver.db (default %(default)s)")
    add_store_flags(serve)
    serve.add_argument("--policies", default="policies", type=Path, help="policy folder (model prices)")
    serve.add_argument("--checkpoint", default="127.0.0.1:7401", help="checkpoint address")
    serve.add_argument("--checkpoint-tokens", type=Path,
                       help="token file holding the driver's checkpoint token (default DATA/checkpoint.tokens)")
    serve.add_argument("--toolrunner", default="127.0.0.1:7402", help="toolrunner address")
    serve.add_argument("--toolrunner-tokens", type=Path,
                       help="token file holding the driver's toolrunner token for Cancel "
                            "(default DATA/toolrunner.tokens)")
    serve.add_argument("--operators", type=Path, help="operators file, 'person token' per line (default DATA/operators.tokens)")
    serve.add_argument("--provider", default="anthropic", choices=("scripted", "anthropic"),
                       help="provider of runs that name none (default %(default)s; the scripted model only when "
                            "a run asks for it)")
    serve.add_argument("--model", default="claude-sonnet-4-5",
                       help="default model for the anthropic provider")
    serve.add_argument("--anthropic-base-url", default=os.environ.get("ANTHROPIC_BASE_URL"),
                       help="Messages API base URL (key from ANTHROPIC_API_KEY)")
    serve.add_argument("--lease-ttl", type=float, default=15.0,
                       help="PostgreSQL store: seconds without renewing its lease after which a driver is judged "
                            "dead and its runs are taken over (default %(default)s)")
    serve.add_argument("--approval-timeout", type=float, default=86400.0,
                       help="PostgreSQL store: seconds an approval may wait before it is refused "
                            "(approval_timeout; default %(default)s)")
    add_metrics_flag(serve)
    add_grace_flag(serve)
    observability.add_arguments(serve)
    serve.set_defaults(func=_serve)
    drv.set_defaults(func=lambda _a: (drv.print_help(), 2)[1])

    def client_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--driver", default=DEFAULT_DRIVER, help="driver address (default %(default)s, env WARDEN_DRIVER)")
        p.add_argument("--data", default=DEFAULT_DATA, type=Path, help="data folder holding operator.token")

    run = subparsers.add_parser("run", help="start a run of an agent on a goal",
                                description="Start a run: the agent version is pinned, the plan is checked, "
                                            "every step is decided by the checkpoint.")
    run.add_argument("agent")
    run.add_argument("--goal", required=True, type=Path, help="goal file (YAML): objective, criteria, constraints, budget")
    run.add_argument("--script", type=Path, help="model script for the scripted provider (YAML)")
    run.add_argument("--provider", choices=("scripted", "anthropic"), help="default: scripted with --script, else the driver's")
    run.add_argument("--model", default="")
    run.add_argument("--agent-version", default="", help="pin this known version instead of the current one")
    run.add_argument("--background", action="store_true", help="nobody is there to approve ('*' is refused)")
    run.add_argument("--input", action="append", default=[], metavar="KEY=VALUE",
                     help="an input you vouch for, bound into the run token (rules read run.inputs); repeatable")
    run.add_argument("--follow", action="store_true", help="stream the run's events until it stops")
    client_args(run)
    run.set_defaults(func=_run)

    runs = subparsers.add_parser("runs", help="list runs, or show one", description="List runs, or show one run.")
    runs.add_argument("run_id", nargs="?")
    runs.add_argument("--status", choices=("running", "paused", "awaiting_approval", "awaiting_child", "succeeded", "failed",
                                                "cancelled"))
    runs.add_argument("--tree", metavar="ROOT_RUN_ID",
                      help="the delegation tree whose root run this is, each child nested under its parent")
    client_args(runs)
    runs.set_defaults(func=_runs)

    watch = subparsers.add_parser("watch", help="stream a run's events", description="Stream a run's events.")
    watch.add_argument("run_id")
    watch.add_argument("--no-follow", action="store_true")
    client_args(watch)
    watch.set_defaults(func=_watch)

    for name, verb in (("approve", "approve"), ("reject", "reject")):
        p = subparsers.add_parser(name, help=f"{verb} a call waiting for a person",
                                  description=f"{verb.capitalize()} a call that waits for a person (REQUIRE_APPROVAL). "
                                              "The act goes to the checkpoint with your own credential "
                                              "(DATA/checkpoint.token), which records you as the approver; the "
                                              "driver only relays it.")
        p.add_argument("approval_id")
        p.add_argument("--note", default="")
        p.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT,
                       help="checkpoint address (default %(default)s, env WARDEN_CHECKPOINT)")
        client_args(p)
        p.set_defaults(func=_approve if name == "approve" else _reject)

    pause = subparsers.add_parser("pause", help="pause a run and its active child runs", description=(
        "Pause a run at its next step boundary (a model call or a tool call under way finishes and is "
        "kept), and every active run below it (code parent_paused). The pause is recorded in the "
        "checkpoint's decision log first, naming you; one it cannot record does not happen "
        "(act_not_recorded). `warden resume RUN_ID` resumes the run and, with it, the child runs this "
        "pause holds; a child paused for its own reason stays paused."))
    pause.add_argument("run_id")
    pause.add_argument("--reason", default="", help="why (recorded, and shown as the run's reason)")
    client_args(pause)
    pause.set_defaults(func=_pause)

    resume = subparsers.add_parser("resume", help="resume a paused run", description=(
        "Resume a paused run under the same pinned version: reply to the model and/or raise ceilings "
        "(e.g. --raise turns=20). turns_total is never raised. The child runs its pause holds "
        "(parent_paused) resume with it; a child run they hold cannot be resumed on its own."))
    resume.add_argument("run_id")
    resume.add_argument("--reply", default="")
    resume.add_argument("--raise", dest="raise_", action="append", default=[], metavar="CEILING=VALUE",
                        help=f"one of {', '.join(BUDGET_KEYS)}")
    client_args(resume)
    resume.set_defaults(func=_resume)

    cancel = subparsers.add_parser("cancel", help="cancel a run", description="Stop a run and anything running for it.")
    cancel.add_argument("run_id")
    cancel.add_argument("--reason", default="")
    client_args(cancel)
    cancel.set_defaults(func=_cancel)

    amend = subparsers.add_parser("amend", help="amend a run's goal (a new goal version)",
                                  description="A person amends the goal; the agent never can.")
    amend.add_argument("run_id")
    amend.add_argument("--goal", required=True, type=Path)
    client_args(amend)
    amend.set_defaults(func=_amend)


# -- server side ----------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    from warden import tracing

    # always_trace: the driver's calls carry a trace id even when no span is exported, so every
    # decision record can name the trace of the run step that asked for it.
    problem = observability.start(args, "warden-driver", always_trace=True)
    if problem:
        print(f"warden driver: {problem}", file=sys.stderr)
        return 2
    try:
        return _serve_configured(args)
    finally:
        tracing.shutdown()  # the spans still buffered go out before the process ends


def _serve_configured(args: argparse.Namespace) -> int:
    import signal
    import threading

    from driver.clients import CheckpointClient, ToolRunnerClient
    from driver.durable.leases import new_executor_id
    from driver.loop import Driver
    from driver.pricing import Prices
    from driver.providers import make_provider
    from driver.runs.postgresql import PostgresRunStore
    from driver.service import OperatorsFileError, create_server, load_operators
    from warden.datafolder import (
        CHECKPOINT_TOKENS_FILE,
        OPERATORS_FILE,
        TOOLRUNNER_TOKENS_FILE,
        caller_token,
        ensure_operator,
    )
    from warden.metrics import MetricsAddressUnavailable
    from warden.store.errors import StoreError

    data: Path = args.data
    if args.lease_ttl <= 0 or args.approval_timeout <= 0:
        print("warden driver: --lease-ttl and --approval-timeout must be positive", file=sys.stderr)
        return 2
    executor_id = new_executor_id()
    try:
        store = _open_runs(args, data, executor_id)  # a store that cannot be opened stops the start in one line
    except StoreError as exc:
        print(f"warden driver: {exc} [{exc.code}]", file=sys.stderr)
        return 2
    operators_path = args.operators or data / OPERATORS_FILE
    if args.operators is None and not operators_path.exists():
        ensure_operator(data)
    try:
        operators = load_operators(operators_path)
    except (OSError, OperatorsFileError) as exc:
        print(f"warden driver: {exc}", file=sys.stderr)
        return 2
    token = caller_token(args.checkpoint_tokens or data / CHECKPOINT_TOKENS_FILE, "driver")
    runner_token = caller_token(args.toolrunner_tokens or data / TOOLRUNNER_TOKENS_FILE, "driver")
    api_key = os.environ.get("ANTHROPIC_API_KEY")

    def provider_factory(name: str, model: str, options: dict[str, Any]) -> Any:
        if name == "anthropic":
            return make_provider("anthropic", model=model or args.model, api_key=api_key,
                                 base_url=args.anthropic_base_url)
        return make_provider(name, **options)

    driver = Driver(store, CheckpointClient(args.checkpoint, token=token), ToolRunnerClient(args.toolrunner, token=runner_token),
                    provider_factory, prices=Prices.from_policy_dir(args.policies),
                    default_provider=args.provider, default_model=args.model)
    durable = None
    if isinstance(store, PostgresRunStore):  # runs as DBOS workflows that other drivers take over
        from driver.durable.workflow import DurableRuns

        durable = DurableRuns(driver, store.db, executor_id=executor_id, lease_ttl_seconds=args.lease_ttl,
                              approval_timeout_seconds=args.approval_timeout)
        durable.launch()
    try:
        running, port = create_server(args.address, driver, operators, metrics_address=args.metrics_address)
    except MetricsAddressUnavailable as exc:  # before the gRPC port: one line, nothing left serving
        if durable is not None:
            durable.stop()
        store.close()
        print(f"warden driver: {exc}", file=sys.stderr)
        return 2
    print(f"driver listening on {args.address.rsplit(':', 1)[0]}:{port}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    running.stop(grace=args.grace)
    if durable is not None:
        durable.stop()
    store.close()
    return 0


def _open_runs(args: argparse.Namespace, data: Path, executor_id: str) -> RunStore:
    """The runs' store the store setting names: DATA/driver.db (or the SQLite folder named), or the
    shared PostgreSQL store whose `runs` schema must be current. StoreError otherwise."""
    from driver.runs.postgresql import open_postgresql
    from driver.runs.sqlite import SqliteRunStore

    url = store_of(args, data)
    if url.is_postgresql:
        return open_postgresql(url, name=f"driver:{executor_id}")
    return SqliteRunStore(url.sqlite_file("driver.db"))


# -- client side ----------------------------------------------------------------------------


def _credential(token_file: Path) -> str:
    from warden.datafolder import read_credential
    from warden.private import UntrustedFileError

    try:
        return read_credential(token_file)
    except UntrustedFileError as exc:
        raise SystemExit(f"warden: {exc}") from None


class _Client:
    def __init__(self, args: argparse.Namespace) -> None:
        import grpc

        from warden.driver.v1 import driver_pb2_grpc

        token_file = Path(args.data) / "operator.token"
        if not token_file.exists():
            raise SystemExit(f"warden: no operator credential at {token_file} (start the stack with `warden up`)")
        self.metadata = [("authorization", "Bearer " + _credential(token_file))]
        self.channel = grpc.insecure_channel(args.driver)
        self.stub = driver_pb2_grpc.DriverServiceStub(self.channel)

    def call(self, method: str, request: Any) -> Any:
        return getattr(self.stub, method)(request, metadata=self.metadata, timeout=30)


def _grpc_errors(fn):  # type: ignore[no-untyped-def]
    def wrapper(args: argparse.Namespace) -> int:
        import grpc

        try:
            return int(fn(args) or 0)
        except grpc.RpcError as err:
            print(f"warden {args.command}: {err.details() or err.code()}", file=sys.stderr)  # type: ignore[attr-defined]
            return 1
    return wrapper


def _goal_proto(path: Path) -> Any:
    from driver.errors import GoalError
    from driver.goal import load_goal
    from driver.service import goal_to_proto

    try:
        return goal_to_proto(load_goal(path))
    except GoalError as exc:  # one `file:line: message` per problem
        raise SystemExit("\n".join(f"warden: {line}" for line in exc.message.splitlines())) from None


def _script_text(path: Path | None) -> str:
    """The script's text, checked here first so its errors name the file and line."""
    if path is None:
        return ""
    from driver.providers.scripted import ScriptError, load_script

    try:
        load_script(path)
    except ScriptError as exc:
        raise SystemExit("\n".join(f"warden: {line}" for line in str(exc).splitlines())) from None
    return path.read_text()


def print_run(r: Any) -> None:
    from driver.render import run_line

    print(run_line(r))
    if r.reason:
        print(f"  {r.code}: {r.reason}")
    for m in r.missing:
        print(f"  missing: {m}")
    for a in r.pending_approvals:
        print(f"  waiting for approval {a.approval_id}: {a.tool} ({a.reason})")


def follow(client: _Client, run_id: str, after_seq: int = 0, no_follow: bool = False) -> int:
    """Print the run's events until it ends or waits for a person, then where it stands."""
    from driver.render import event_line
    from warden.driver.v1 import driver_pb2 as pb

    for indent, e, data in watch_tree(client.stub, client.metadata, run_id, after_seq=after_seq, no_follow=no_follow):
        print(indent + event_line(e.kind, data, e.seq).replace("\n", "\n" + indent), flush=True)
    print_run(client.call("GetRun", pb.GetRunRequest(run_id=run_id)).run)
    return 0


CHILD_INDENT = "      | "


def watch_tree(stub: Any, metadata: Any, run_id: str, *, after_seq: int = 0, no_follow: bool = False,
               indent: str = "") -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """A run's events as (indent, event, data) until it ends or waits for a person; a child run it
    starts is followed in place, one CHILD_INDENT deeper, while it runs."""
    from google.protobuf import json_format

    from warden.driver.v1 import driver_pb2 as pb

    req = pb.WatchRunRequest(run_id=run_id, after_seq=after_seq, no_follow=no_follow, until_waiting=True)
    for resp in stub.WatchRun(req, metadata=metadata):
        data = json_format.MessageToDict(resp.event.data)
        yield indent, resp.event, data
        if resp.event.kind == "child_started" and not no_follow:
            yield from watch_tree(stub, metadata, str(data["child_run_id"]), indent=indent + CHILD_INDENT)


@_grpc_errors
def _run(args: argparse.Namespace) -> int:
    from warden.driver.v1 import driver_pb2 as pb

    provider = args.provider or ("scripted" if args.script else "")
    req = pb.StartRunRequest(agent=args.agent, agent_version=args.agent_version, goal=_goal_proto(args.goal),
                             mode=pb.RUN_MODE_BACKGROUND if args.background else pb.RUN_MODE_INTERACTIVE,
                             provider=provider, model=args.model,
                             script_yaml=_script_text(args.script))
    for item in args.input:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"warden run: --input {item!r}: expected KEY=VALUE")
        req.inputs[key] = value
    client = _Client(args)
    run = client.call("StartRun", req).run
    print(f"started {run.run_id}: {run.agent}@{run.agent_version[:12]}")
    if args.follow:
        return follow(client, run.run_id)
    return 0


@_grpc_errors
def _runs(args: argparse.Namespace) -> int:
    from driver.render import run_line
    from warden.driver.v1 import driver_pb2 as pb

    client = _Client(args)
    if args.run_id:
        print_run(client.call("GetRun", pb.GetRunRequest(run_id=args.run_id)).run)
        return 0
    req = pb.ListRunsRequest()
    if args.tree:  # the whole tree: a status filter would cut branches off their parents
        if args.status:
            print("warden runs: --tree shows every run of the tree; it does not combine with --status",
                  file=sys.stderr)
            return 2
        req.root_run_id, req.limit = args.tree, 1000
        return _print_tree(list(client.call("ListRuns", req).runs), args.tree)
    if args.status:
        req.status = pb.RunStatus.Value("RUN_STATUS_" + args.status.upper())
    for r in client.call("ListRuns", req).runs:
        print(run_line(r))
    return 0


def _print_tree(runs: list[Any], root: str) -> int:
    from driver.render import run_line

    below: dict[str, list[Any]] = {}
    for r in runs:  # oldest first: children in the order their parent started them
        below.setdefault(r.parent_run_id, []).append(r)
    by_id = {r.run_id: r for r in runs}
    if root not in by_id:
        print(f"warden runs: no run {root!r}", file=sys.stderr)
        return 1

    def show(r: Any, depth: int) -> None:
        print("    " * depth + run_line(r))
        for child in below.get(r.run_id, []):
            show(child, depth + 1)

    show(by_id[root], 0)
    return 0


@_grpc_errors
def _watch(args: argparse.Namespace) -> int:
    return follow(_Client(args), args.run_id, no_follow=args.no_follow)


def _act(args: argparse.Namespace, method: str, request: Any) -> int:
    """A person's action on a run, then where the run stands (and every child run the act
    paused or resumed with it)."""
    resp = _Client(args).call(method, request)
    print_run(resp.run)
    for field, verb in (("paused_children", "paused with it"), ("resumed_children", "resumed with it")):
        if field in resp.DESCRIPTOR.fields_by_name:
            for child in getattr(resp, field):
                print(f"{verb}: ", end="")
                print_run(child)
    return 0


def _person_act(args: argparse.Namespace, approve: bool) -> int:
    """Approve or reject at the checkpoint with the person's own credential, then tell the driver."""
    from driver.clients import CheckpointClient
    from driver.errors import DriverError
    from warden.checkpoint.v1 import checkpoint_pb2 as cp
    from warden.datafolder import PERSON_CHECKPOINT_TOKEN_FILE
    from warden.driver.v1 import driver_pb2 as pb

    verb = "approve" if approve else "reject"
    token_file = Path(args.data) / PERSON_CHECKPOINT_TOKEN_FILE
    if not token_file.exists():
        raise SystemExit(f"warden {verb}: no checkpoint credential of yours at {token_file} (`warden up` makes one)")
    driver = _Client(args)
    waiting = driver.call("ListRuns", pb.ListRunsRequest(status=pb.RUN_STATUS_AWAITING_APPROVAL, limit=1000)).runs
    pending = next((a for r in waiting for a in r.pending_approvals if a.approval_id == args.approval_id), None)
    if pending is None:
        print(f"warden {verb}: approval {args.approval_id!r} is not pending (approval_not_pending)", file=sys.stderr)
        return 1
    checkpoint = CheckpointClient(args.checkpoint, token=_credential(token_file))
    try:
        act = (checkpoint.approve if approve else checkpoint.reject)(pending.run_id, pending.decision_id, args.note)
    except DriverError as exc:
        print(f"warden {verb}: {exc.message}", file=sys.stderr)
        return 1
    finally:
        checkpoint.close()
    if act.decision.verdict != cp.VERDICT_ALLOW:
        print(f"warden {verb}: the checkpoint refused: {act.decision.code}: {act.decision.reason}", file=sys.stderr)
        return 1
    if approve:
        request: Any = pb.ApproveCallRequest(approval_id=args.approval_id, note=args.note,
                                             approval_token=act.approval_token)
    else:
        request = pb.RejectCallRequest(approval_id=args.approval_id, note=args.note,
                                       rejection_decision_id=act.decision.decision_id)
    return _act(args, "ApproveCall" if approve else "RejectCall", request)


@_grpc_errors
def _approve(args: argparse.Namespace) -> int:
    return _person_act(args, approve=True)


@_grpc_errors
def _reject(args: argparse.Namespace) -> int:
    return _person_act(args, approve=False)


def parse_raises(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in BUDGET_KEYS:
            raise SystemExit(f"warden resume: --raise {key}: not a ceiling a resume may raise ({', '.join(BUDGET_KEYS)})")
        try:
            out[key] = float(value)
        except ValueError:
            raise SystemExit(f"warden resume: --raise {item}: the value must be a number") from None
    return out


@_grpc_errors
def _resume(args: argparse.Namespace) -> int:
    from warden.checkpoint.v1 import checkpoint_pb2 as cp
    from warden.driver.v1 import driver_pb2 as pb

    raises = parse_raises(args.raise_)
    budget = cp.Budget()
    for k, v in raises.items():
        setattr(budget, k, v if k in ("wall_clock_seconds", "spend_usd") else int(v))
    return _act(args, "ResumeRun", pb.ResumeRunRequest(run_id=args.run_id, reply=args.reply, raise_budget=budget))


@_grpc_errors
def _pause(args: argparse.Namespace) -> int:
    from warden.driver.v1 import driver_pb2 as pb

    return _act(args, "PauseRun", pb.PauseRunRequest(run_id=args.run_id, reason=args.reason))


@_grpc_errors
def _cancel(args: argparse.Namespace) -> int:
    from warden.driver.v1 import driver_pb2 as pb

    return _act(args, "CancelRun", pb.CancelRunRequest(run_id=args.run_id, reason=args.reason))


@_grpc_errors
def _amend(args: argparse.Namespace) -> int:
    from warden.driver.v1 import driver_pb2 as pb

    resp = _Client(args).call("AmendGoal", pb.AmendGoalRequest(run_id=args.run_id, goal=_goal_proto(args.goal)))
    print(f"goal version {resp.goal_version}")
    return 0
