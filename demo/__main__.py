"""`python -m demo`: the recon agent, a scripted model, and the three processes for real.

Ensures Docker and the tool image, starts checkpoint + toolrunner + driver on free loopback ports
(data under .warden/demo, or WARDEN_DEMO_DATA; policies from policies/), then plays the scenario a
person would: the person reads the run's plan before it goes on (review_plan=yes), an allowed call
runs in a container, a denied call, an approval, a breaker trip and pause, a resume with a raised
ceiling, the agent proposing a change to itself which an admin approves into a new version while
the run keeps its own, a delegation to a child run, a pause of the parent that pauses the child
(both resume together), and a success the driver verified itself on the task the run started (a
call_ok criterion of the goal). Prints the decision stream from the checkpoint's log at the end
and exits 0 only if every one was seen.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def ensure_docker() -> bool:
    for script in ("ensure-docker.sh", "build-images.sh"):
        path = ROOT / "scripts" / script
        if not path.exists():
            print(f"demo: {path} is missing", file=sys.stderr)
            return False
        _step(f"scripts/{script}")
        if subprocess.run(["sh", str(path)], cwd=ROOT).returncode != 0:
            print(f"demo: scripts/{script} failed (see above for what to do)", file=sys.stderr)
            return False
    return True


def main() -> int:
    os.chdir(ROOT)
    if os.environ.get("WARDEN_DEMO_SKIP_DOCKER") != "1" and not ensure_docker():
        return 1
    from demo.scenario import play
    from warden.datafolder import CHECKPOINT_TOKENS_FILE, ensure_person_checkpoint_token
    from warden.up import Stack, free_port

    data = Path(os.environ.get("WARDEN_DEMO_DATA") or ROOT / ".warden" / "demo")
    shutil.rmtree(data, ignore_errors=True)  # a fresh run store and decision log every time
    stack = Stack(data, ROOT / "policies", free_port(), free_port(), free_port())
    _step("starting checkpoint, toolrunner and driver")
    try:
        # dana, acme's second admin, reviews what alice's run proposes (nobody reviews their own)
        stack.prepare()
        ensure_person_checkpoint_token(data / "dana", "dana", stack.checkpoint_data / CHECKPOINT_TOKENS_FILE)
        stack.start()
    except RuntimeError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    try:
        return play(stack, ROOT / "goals" / "recon-lab-scan.yaml", ROOT / "demo" / "script.yaml")
    finally:
        _step("stopping")
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
