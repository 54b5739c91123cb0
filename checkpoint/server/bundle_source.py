"""The policy bundle a checkpoint follows: fetched from a URL (with ETag) or read from a mounted
file (a ConfigMap), verified, and installed as a new snapshot behind the policy link.

A bundle that passes `checkpoint.policy.bundle.verify` is unpacked into a staging folder and
installed by `warden policy apply`'s own code (`snapshot.apply`: a snapshot with its manifest of
digests, loaded before the link is switched), so the reload, the last good set and the revision
in every record work as for a folder. A bundle refused (its code in health and the metric) leaves
the set in force serving. The serial in force is read from the manifest the snapshot keeps, so a
restart does not forget it: an older bundle served after a restart is refused too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from checkpoint.policy import PolicyLoadError
from checkpoint.policy.bundle import MANIFEST_NAME, MAX_BUNDLE_BYTES, BundleError, verify
from checkpoint.policy.snapshot import apply
from warden import codes

log = logging.getLogger("warden.checkpoint.bundle")

DEFAULT_POLL = 30.0  # seconds between fetches
FETCH_TIMEOUT = 20.0


@dataclass(frozen=True)
class BundleSettings:
    """`serve --policy-bundle URL|PATH --bundle-pubkey PEM --bundle-poll SECONDS`."""

    source: str
    public: Ed25519PublicKey
    poll: float = DEFAULT_POLL


@dataclass
class BundleStatus:
    source: str = ""
    serial: int | None = None  # of the bundle in force
    revision: str = ""
    last_ok: bool = True
    last_code: str = ""  # the code of the newest refusal, "" once a bundle is taken
    last_error: str = ""
    applied: int = 0
    refused: int = 0
    not_modified: int = 0
    last_poll: float = 0.0
    refusals: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "serial": self.serial, "revision": self.revision, "last_ok": self.last_ok,
                "last_code": self.last_code, "last_error": self.last_error, "applied": self.applied,
                "refused": self.refused, "not_modified": self.not_modified}


class BundleSource:
    """Polls `source` every `poll` seconds; `poll_once` is one look (tests call it directly)."""

    def __init__(self, source: str, public: Ed25519PublicKey, link: Path, *, poll: float = DEFAULT_POLL,
                 cel_engine: str = "native", on_applied: Callable[[], object] | None = None,
                 on_refused: Callable[[str], None] | None = None) -> None:
        self.source, self.public, self.link, self.poll = source, public, Path(link), poll
        self.cel_engine = cel_engine
        self.on_applied, self.on_refused = on_applied, on_refused  # the store's reload; the metric
        self.on_serial: Callable[[int | None], None] | None = None  # the serial in force, for its gauge
        self.status = BundleStatus(source=source)
        self._etag: str | None = None
        self._seen: str | None = None  # sha256 of the newest bytes looked at, applied or refused
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="policy-bundle", daemon=True)
        if self.link.exists() and not self.link.is_symlink():
            raise ValueError(f"{self.link} is a folder: with a policy bundle, --policies names the link the "
                             "bundle is installed behind (made on first use)")
        self.status.serial, self.status.revision = self._in_force()[:2]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=FETCH_TIMEOUT + 5)

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self.poll_once()
            except Exception:  # keep polling whatever one look hit
                log.exception("policy bundle poll failed")

    def poll_once(self) -> str:
        """One look: "applied", "unchanged" (same bytes as last time), "not_modified" (HTTP 304) or
        "refused" (the code in `status.last_code`)."""
        with self._lock:
            self.status.last_poll = time.time()
            try:
                data = self._fetch()
            except BundleError as exc:
                return self._refused(exc)
            if data is None:
                self.status.not_modified += 1
                return "not_modified"
            digest = hashlib.sha256(data).hexdigest()
            if digest == self._seen:
                return "unchanged"  # verified (and taken or refused) already: nothing new to say
            self._seen = digest
            serial, _revision, manifest = self._in_force()
            try:
                bundle = verify(data, self.public, in_force=serial, in_force_manifest=manifest)
                if bundle.manifest == manifest:
                    return "unchanged"  # the bundle in force, fetched again (after a restart)
                self._install(bundle.files, bundle.manifest)
            except BundleError as exc:
                return self._refused(exc)
            if self.on_applied is not None:  # in force before the status says so
                self.on_applied()
            st = self.status
            st.serial, st.revision, st.last_ok, st.last_code, st.last_error = bundle.serial, bundle.revision, True, "", ""
            st.applied += 1
            self._tell_serial()
            log.info("policy bundle serial %d (revision %s) from %s installed", bundle.serial, bundle.revision,
                     self.source)
        return "applied"

    def _tell_serial(self) -> None:
        if self.on_serial is not None:
            self.on_serial(self.status.serial)

    def _fetch(self) -> bytes | None:
        """The bundle's bytes, or None for a 304 (the ETag the last 200 gave still current)."""
        if self.source.startswith(("http://", "https://")):
            request = urllib.request.Request(self.source)
            if self._etag:
                request.add_header("If-None-Match", self._etag)
            try:
                with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT) as answer:  # noqa: S310 (http(s) only)
                    data = answer.read(MAX_BUNDLE_BYTES + 1)
                    etag = answer.headers.get("ETag")
            except urllib.error.HTTPError as exc:
                if exc.code == 304:
                    return None
                raise BundleError(codes.BUNDLE_UNAVAILABLE, f"{self.source} answered {exc.code}") from exc
            except (urllib.error.URLError, OSError) as exc:
                raise BundleError(codes.BUNDLE_UNAVAILABLE, f"{self.source}: {exc}") from exc
            self._etag = etag
            return data
        try:
            with open(self.source, "rb") as f:
                return f.read(MAX_BUNDLE_BYTES + 1)
        except OSError as exc:
            raise BundleError(codes.BUNDLE_UNAVAILABLE, f"{self.source}: {exc.strerror or exc}") from exc

    def _in_force(self) -> tuple[int | None, str, bytes | None]:
        """The serial, revision and signed manifest of the bundle the link serves (None: none)."""
        try:
            manifest = (self.link / MANIFEST_NAME).read_bytes()
            doc = json.loads(manifest)
            return int(doc["serial"]), str(doc["revision"]), manifest
        except (OSError, ValueError, KeyError, TypeError):
            return None, "", None

    def _install(self, files: dict[str, bytes], manifest: bytes) -> None:
        self.link.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{self.link.name}.bundle-", dir=self.link.parent))
        try:
            for name, data in files.items():
                target = staging / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            (staging / MANIFEST_NAME).write_bytes(manifest)
            apply(staging, self.link, cel_engine=self.cel_engine)
        except PolicyLoadError as exc:
            shown = "; ".join(str(e) for e in exc.errors[:5])
            raise BundleError(codes.BUNDLE_DOES_NOT_LOAD, f"the bundle's policies do not load: {shown}") from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _refused(self, exc: BundleError) -> str:
        st = self.status
        st.last_ok, st.last_code, st.last_error = False, exc.code, exc.message
        st.refused += 1
        st.refusals[exc.code] = st.refusals.get(exc.code, 0) + 1
        keeping = f"keeping serial {st.serial}" if st.serial is not None else "no bundle in force"
        log.error("policy bundle from %s refused, %s: %s", self.source, keeping, exc)
        if self.on_refused is not None:
            self.on_refused(exc.code)
        self._tell_serial()
        return "refused"
