"""`warden hook claude-code`: Claude Code's PreToolUse command hook (docs/integrations.md)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_CHECKPOINT = "127.0.0.1:7401"


def default_state() -> Path:
    """Where adapters keep their runs and the approval inbox: $XDG_STATE_HOME/warden."""
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "warden"


def add_checkpoint_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every adapter shares: where the checkpoint is, its credential, for whom it checks."""
    parser.add_argument("--checkpoint", default=DEFAULT_CHECKPOINT, help="checkpoint address (default %(default)s)")
    parser.add_argument("--token-file", metavar="FILE",
                        help="this adapter's checkpoint credential (a principal allowed to check for --person)")
    parser.add_argument("--person", help="the accountable person the runs are started for")
    parser.add_argument("--tenant", default="", help="the agent's tenant (optional: checked when given)")
    parser.add_argument("--state", metavar="FOLDER", help="runs and the approval inbox (default $XDG_STATE_HOME/warden)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds for one checkpoint call (default %(default)s)")


def register(subparsers: argparse._SubParsersAction) -> None:
    hook = subparsers.add_parser("hook", help="permission hooks for agents warden does not host",
                                 description="Hooks where agents already ask permission (docs/integrations.md).")
    sub = hook.add_subparsers(dest="hook_command", metavar="AGENT")
    claude = sub.add_parser(
        "claude-code", help="Claude Code's PreToolUse command hook",
        description="Read one PreToolUse event on stdin, Check() the call, answer permissionDecision allow, deny "
        "or ask on stdout. Exit 2 (Claude Code blocks the call) whenever no decision can be made.")
    add_checkpoint_flags(claude)
    claude.add_argument("--agent", default="claude-code", help="the policy's agent (default %(default)s)")
    claude.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="wait this long for a person's approval before answering (default: answer at once)")
    claude.add_argument("--on-approval", choices=("deny", "ask"), default="deny",
                        help="a call waiting for a person: deny it until approved (default), or leave it to "
                        "Claude Code's own prompt (which warden does not record as an approval)")
    claude.set_defaults(func=_claude_code)
    hook.set_defaults(func=lambda _a: (hook.print_help(), 2)[1])


def _claude_code(args: argparse.Namespace) -> int:
    from warden.hooks.claude_code import BLOCK, Settings, run_hook

    if not args.token_file or not args.person:
        print("warden: blocked: the hook needs --token-file and --person", file=sys.stderr)
        return BLOCK
    try:
        from warden.datafolder import read_credential

        token = read_credential(Path(args.token_file))
    except Exception as exc:  # noqa: BLE001 - no credential, no decision: block
        print(f"warden: blocked: cannot read the hook's credential: {exc}", file=sys.stderr)
        return BLOCK
    state = Path(args.state) if args.state else default_state()
    settings = Settings(checkpoint=args.checkpoint, token=token, person=args.person, state=state,
                        inbox=state / "approvals.db", agent=args.agent, tenant=args.tenant, wait=args.wait,
                        on_approval=args.on_approval, timeout=args.timeout)
    return run_hook(settings, sys.stdin, sys.stdout, sys.stderr)
