"""Containers die with their runner.

The Docker engine keeps a container running whatever happens to the client that started it, so
a runner killed mid-call (SIGKILL, an OOM kill, a crash) would leave its tool running to the end
of its deadline. A watchdog process started with the runner holds the read end of a pipe whose
write end only the runner holds: when the runner ends, however it ends, the pipe reads
end-of-file and the watchdog kills and removes every container labelled with the runner's id,
then exits. A runner that stops normally closes the pipe itself, after its calls ended, and the
watchdog sweeps whatever is left.

The watchdog runs in a process group of its own (setsid), so a signal sent to the runner's group (a
terminal's Ctrl-C, a supervisor's SIGTERM to the group) does not end it before it has swept.
Where the watchdog dies with the runner (a whole container or cgroup killed), the next runner's
start-up removes the containers of the calls its store shows were cut off, and the reaper removes
any other labelled container past its deadline.

    python -m toolrunner.watchdog RUNNER_ID      # the runner starts it; not a command for people
"""

from __future__ import annotations

import logging
import subprocess
import sys

log = logging.getLogger(__name__)


def sweep(api, runner_id: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Kill and remove every container labelled with `runner_id`; returns their ids."""
    import docker.errors

    from toolrunner.container import LABEL_RUNNER

    removed: list[str] = []
    for c in api.containers(all=True, filters={"label": f"{LABEL_RUNNER}={runner_id}"}):
        try:
            api.remove_container(c["Id"], force=True)
            removed.append(c["Id"])
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: already being removed, which is the goal
                raise
    return removed


class Watchdog:
    """The watchdog process of one runner: `stop()` when the runner's calls have ended."""

    def __init__(self, runner_id: str) -> None:
        if not runner_id:
            raise ValueError("a watchdog needs the runner's id (its containers' label)")
        self.runner_id = runner_id
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "toolrunner.watchdog", runner_id],
            stdin=subprocess.PIPE, start_new_session=True, close_fds=True,
        )

    @property
    def pid(self) -> int:
        return self._proc.pid

    def stop(self, timeout: float = 30.0) -> None:
        """Close the pipe (the watchdog sweeps and exits) and wait for it."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("the container watchdog of runner %s did not finish its sweep", self.runner_id)


def main(argv: list[str]) -> int:
    (runner_id,) = argv
    while sys.stdin.buffer.read(65536):  # nothing is ever written: this waits for end-of-file
        pass
    import docker

    api = docker.from_env(timeout=30).api
    removed = sweep(api, runner_id)
    if removed:
        print(f"toolrunner watchdog: removed {len(removed)} container(s) of runner {runner_id}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
