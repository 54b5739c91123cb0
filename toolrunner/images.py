"""Pinning each tool's image to a local image id.

A tool names an image reference (``warden-tools:local``); the runner resolves it once, against
the images already present on the daemon, to an immutable id (``sha256:...``) and creates every
container from that id. So re-tagging the reference mid-flight changes nothing, and nothing is
ever pulled: an image that is not present is refused with ``image_not_allowed``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import docker
import docker.errors

from toolrunner.errors import ImageNotAllowed


class ImagePins:
    def __init__(self, api: docker.APIClient):
        self._api = api
        self._pins: dict[str, str] = {}
        self._lock = threading.Lock()

    def pin_all(self, refs: Iterable[str]) -> dict[str, str | None]:
        """Resolve every reference now; absent ones are retried at their first call."""
        result: dict[str, str | None] = {}
        for ref in sorted(set(refs)):
            try:
                result[ref] = self.resolve(ref)
            except ImageNotAllowed:
                result[ref] = None
        return result

    def resolve(self, ref: str) -> str:
        with self._lock:
            pinned = self._pins.get(ref)
        if pinned:
            return pinned
        try:
            image_id = self._api.inspect_image(ref)["Id"]
        except docker.errors.ImageNotFound:
            raise ImageNotAllowed(
                f"image {ref!r} is not present on this Docker engine and is never pulled; "
                "build it first (scripts/build-images.sh)"
            ) from None
        except docker.errors.APIError as exc:
            raise ImageNotAllowed(f"image {ref!r} cannot be inspected: {exc.explanation}") from None
        with self._lock:
            self._pins.setdefault(ref, image_id)
            return self._pins[ref]
