"""A Cancel that races the container's start is never lost, and a never-started call ends at once."""

from __future__ import annotations

import threading
from typing import Any

import docker

from toolrunner.container import ContainerRun, ContainerSpec

SH = "/bin/sh"


class _Api:
    """The real Docker API, with a hook that runs just before one of its methods."""

    def __init__(self, api: docker.APIClient, method: str, hook: Any) -> None:
        self._api, self._method, self._hook = api, method, hook
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._api, name)
        if name != self._method:
            return real

        def hooked(*args: Any, **kw: Any) -> Any:
            self.calls.append(name)
            self._hook()
            return real(*args, **kw)

        return hooked


def _image(api: docker.APIClient) -> str:
    return next(i["Id"] for i in api.images() if "warden-tools:local" in (i.get("RepoTags") or []))


def _spec(api: docker.APIClient) -> ContainerSpec:
    return ContainerSpec(image_id=_image(api), argv=[SH, "/tools/test/sleep.sh", "3"], env={},
                         user="65534:65534", timeout_seconds=30)


def test_a_cancel_during_start_kills_the_container_once_it_started(docker_api: docker.APIClient) -> None:
    output: list[bytes] = []
    cancels: list[threading.Thread] = []

    def cancel_now() -> None:  # from another thread, while start is about to happen
        t = threading.Thread(target=run.cancel)
        t.start()
        cancels.append(t)
        t.join(0.2)  # it waits for start to finish, then kills: it cannot slip in before start

    api = _Api(docker_api, "start", cancel_now)
    run = ContainerRun(api, _spec(docker_api), lambda _stream, data: output.append(data))  # type: ignore[arg-type]
    outcome = run.run()
    cancels[0].join(30)
    assert outcome.cancelled and api.calls == ["start"]
    # killed while sleeping: the tool never reached its last line
    assert b"done" not in b"".join(output) and outcome.exit_code != 0


def test_a_cancel_before_start_never_starts_it_and_leaves_no_reader_behind(docker_api: docker.APIClient) -> None:
    api = _Api(docker_api, "attach_socket", lambda: run.cancel())
    run = ContainerRun(api, _spec(docker_api), lambda *_: None)  # type: ignore[arg-type]
    outcome = run.run()
    assert outcome.cancelled and outcome.exit_code == -1
    assert "start" not in api.calls
    # the attach reader was woken by closing its socket, not left to the drain timeout
    assert not [t for t in threading.enumerate() if t.name == f"attach-{run.container_id[:12]}" and t.is_alive()]
    assert not docker_api.containers(all=True, filters={"id": run.container_id})
