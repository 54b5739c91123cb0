"""Generate the committed Python gRPC stubs from proto/ (`make gen`).

The stubs are committed so a client needs no protoc; tests regenerate them into a temporary
folder and fail when they differ from what is committed.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.rglob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Write *_pb2.py, *_pb2.pyi and *_pb2_grpc.py for every proto under proto/ into out_dir."""
    include = Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto
    files = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *files,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed: " + " ".join(args))
    return sorted(p for p in out_dir.rglob("*_pb2*.py*"))


def generated_tree(out_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out_dir)): p.read_bytes() for p in generate(out_dir)}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for rel, data in generated_tree(Path(tmp)).items():
            target = ROOT / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            print(f"wrote {rel}")
    for package_dir in {p.parent for p in (ROOT / "warden").rglob("*_pb2.py")}:
        d = package_dir
        while d != ROOT:
            init = d / "__init__.py"
            if not init.exists() or not init.read_text():
                init.write_text(f'"""Generated from proto/{d.relative_to(ROOT).as_posix()}: do not edit."""\n')
            d = d.parent
    return 0


if __name__ == "__main__":
    sys.exit(main())
