"""`python -m demo.mcp` (`make demo-mcp`): an MCP client behind `warden mcp serve`.

A checkpoint on loopback with the example policy (examples/mcp/policies), the reference
filesystem server as the upstream (npm @modelcontextprotocol/server-filesystem when installed in
examples/mcp/filesystem-server, else the Python-SDK server of the tests), and the SDK's own client
over stdio: a read inside the allowed folder, a read outside it refused by scope, a write that
waits for a person and is approved, a key scrubbed from a result. Exits 0 only if each happened.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from demo.mcp_world import ROOT, start_checkpoint

GATEWAY_TOKEN = "demo-gateway-token-0123456789abcdef"
ALICE_TOKEN = "demo-alice-token-0123456789abcdef"
REFERENCE = ROOT / "examples" / "mcp" / "filesystem-server" / "node_modules" / "@modelcontextprotocol" / \
    "server-filesystem" / "dist" / "index.js"
KEY = "AKIAIOSFODNN7EXAMPLE"


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _show(result) -> str:  # type: ignore[no-untyped-def]
    shown = "\n".join(getattr(block, "text", "") for block in result.content)
    print(("   error: " if result.is_error else "   ") + shown.replace("\n", "\n   "), flush=True)
    return shown


def upstream(shared: Path) -> list[str]:
    node = shutil.which("node")
    if node and REFERENCE.exists():
        return [node, str(REFERENCE), str(shared)]
    print("demo: the npm reference server is not installed (`npm install` in examples/mcp/filesystem-server); "
          "using the Python-SDK filesystem server", flush=True)
    return [sys.executable, str(ROOT / "tests" / "integrations" / "fs_upstream.py")]


def main() -> int:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp_types import InputRequiredResult

    from checkpoint.audit import DecisionReader
    from warden.client import ApprovalInbox, CheckpointClient

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        shared = (tmp / "shared").resolve()
        shared.mkdir()
        (shared / "notes.md").write_text("standup at ten\n")
        (shared / "deploy.env").write_text(f"AWS_ACCESS_KEY_ID={KEY}\nREGION=eu-west-1\n")
        _step("a checkpoint on loopback with examples/mcp/policies (agent `files`, scope " f"{shared}/**)")
        server, address = start_checkpoint(tmp, shared, {GATEWAY_TOKEN: "mcp-gateway", ALICE_TOKEN: "alice"})
        token = tmp / "gateway.token"
        token.write_text(GATEWAY_TOKEN + "\n")
        token.chmod(0o600)
        command = upstream(shared)
        settings = tmp / "mcp.toml"
        settings.write_text(f'checkpoint = "{address}"\ntoken_file = "{token}"\nperson = "alice"\nagent = "files"\n'
                            f'state = "{tmp / "state"}"\n\n[upstreams.fs]\ncommand = {json.dumps(command[0])}\n'
                            f'args = {json.dumps(command[1:])}\n')
        gateway = StdioServerParameters(command=sys.executable, args=["-m", "warden.cli", "mcp", "serve", "--settings",
                                                                      str(settings)], env={"PYTHONPATH": str(ROOT)},
                                        cwd=str(ROOT))
        seen: list[str] = []

        async def play() -> None:
            async with Client(gateway, cache=None) as client:
                _step("tools/list: only what the policy allows agent `files`")
                names = sorted(t.name for t in (await client.list_tools()).tools)
                print("   " + ", ".join(names))
                _step("a read inside the allowed folder")
                if "standup" in _show(await client.call_tool("fs__read_text_file", {"path": f"{shared}/notes.md"})):
                    seen.append("read inside")
                _step("a read outside it: refused by scope before the server sees it")
                if "subject_out_of_scope" in _show(await client.call_tool("fs__read_text_file", {"path": "/etc/hostname"})):
                    seen.append("read outside refused")
                _step("a write: it waits for a person (input_required, with a signed requestState)")
                write = {"path": f"{shared}/summary.md", "content": "shipped\n"}
                asked = await client.session.call_tool("fs__write_file", write, allow_input_required=True)
                warden = (asked.meta or {}).get("warden", {}) if isinstance(asked, InputRequiredResult) else {}
                state = asked.request_state if isinstance(asked, InputRequiredResult) else None
                print(f"   input_required: {warden.get('code', '?')}: {warden.get('reason', '')}")
                approval_id = warden.get("approval_id", "")
                _step(f"alice approves it with her own credential (`warden inbox approve {approval_id[:8]}...`)")
                inbox = ApprovalInbox(tmp / "state" / "approvals.db")
                waiting = inbox.asked(approval_id)
                if waiting is not None:
                    with CheckpointClient(address, token=ALICE_TOKEN) as alice:
                        inbox.put(alice.approve(waiting.run_id, waiting.decision_id, "fine"))
                _step("the same write again with the requestState: it runs, once")
                _show(await client.call_tool("fs__write_file", write, request_state=state))
                if (shared / "summary.md").exists():
                    seen.append("write approved")
                _step("a file holding a key: the key is masked in the result")
                if KEY not in _show(await client.call_tool("fs__read_text_file", {"path": f"{shared}/deploy.env"})):
                    seen.append("secret scrubbed")

        try:
            anyio.run(play)
            _step("the decision log")
            for r in DecisionReader(tmp / "data" / "decisions.db").read():
                if r["action"] != "catalog":
                    print(f"   {r['action']:10} {r['tool'] or '':20} {r['code']:22} person={r['accountable_person']} "
                          f"approver={r['approver'] or '-'}")
        finally:
            server.stop(grace=0.5)
    missing = [s for s in ("read inside", "read outside refused", "write approved", "secret scrubbed") if s not in seen]
    print(f"\ndemo: {'all four seen' if not missing else 'missing: ' + ', '.join(missing)}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
