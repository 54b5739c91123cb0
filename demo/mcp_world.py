"""A checkpoint on a loopback port with the shipped policies and the MCP example policy added, its
shared folder moved to FOLDER: what `python -m demo.mcp` and `python -m bench mcp_gateway` run on."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "mcp" / "policies"


def example_policies(target: Path, shared: Path) -> Path:
    shutil.copytree(ROOT / "policies", target)
    for path in EXAMPLE.rglob("*.yaml"):
        out = target / path.relative_to(EXAMPLE)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(path.read_text().replace("/srv/shared", str(shared)))
    return target


def start_checkpoint(folder: Path, shared: Path, tokens: dict[str, str]) -> tuple[Any, str]:
    """(the server, its address); `tokens` maps each token to its caller name."""
    from checkpoint.server import AuthPolicy, create_server
    from warden.grants import SigningKey

    hashed = {hashlib.sha256(token.encode()).digest(): name for token, name in tokens.items()}
    server, port = create_server("127.0.0.1:0", uds_path=folder / "cp.sock",
                                 policy_dir=example_policies(folder / "policies", shared), data_dir=folder / "data",
                                 key=SigningKey.generate(), auth=AuthPolicy(tokens=hashed))
    server.start()
    return server, f"127.0.0.1:{port}"
