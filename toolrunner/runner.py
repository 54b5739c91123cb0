"""The whole of one call, in order: grant, replay, tool, arguments, image, secrets, slot,
claim, container, scrub, cap, receipt.

Everything before the claim is a refusal (``RunnerError``) and nothing starts. From the claim
on, the call has happened: whatever the container does (exit, crash, timeout, cancel), there is
a receipt, it is stored under the decision id, and the same grant only ever returns it again.
"""

from __future__ import annotations

import codecs
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
import jsonschema

from toolrunner import argv as argv_mod
from toolrunner.container import (
    LABEL_DECISION,
    LABEL_RUN,
    LABEL_RUNNER,
    LABEL_TOOL,
    ContainerRun,
    ContainerSpec,
    Outcome,
)
from toolrunner.errors import (
    AlreadyStarted,
    GrantRefused,
    InvalidArguments,
    PolicyRevisionMismatch,
    ReceiptNotFound,
    ReceiptsUnavailable,
    RunnerBusy,
    RuntimeUnavailable,
    SecretUnavailable,
    UnknownTool,
)
from toolrunner.images import ImagePins
from toolrunner.output import CappedOutput, RawDigest
from toolrunner.policies import LoadedTools, PolicySource, tool_specs
from toolrunner.receipts.store import Receipts
from warden import canonical, grants, tracing
from warden.scrub import Scrubber, StreamScrubber, apply
from warden.secret_rules import gitleaks
from warden.store.errors import StoreUnavailable
from warden.structs import struct_to_dict
from warden.toolrunner.v1 import toolrunner_pb2 as pb
from warden.tools import Tool

log = logging.getLogger(__name__)

# (stream, scrubbed text): what ExecuteStream sends while the tool runs.
OnChunk = Callable[[str, str], None]
_STREAM_NOTICE = "\n[... live output stopped at the cap; the receipt holds the start and the end ...]\n"


@dataclass
class RunnerConfig:
    max_concurrency: int = 4
    network_name: str = "bridge"  # the Docker network a tool with `run.network: true` joins
    default_runtime: str | None = None  # e.g. "runsc"; a tool's run.runtime overrides it
    runner_id: str = ""


class _Inflight:
    def __init__(self, run_id: str) -> None:
        self.done = threading.Event()
        self.run: ContainerRun | None = None
        self.run_id = run_id
        self.cancelled = False


class ToolRunner:
    def __init__(
        self,
        *,
        tools: Mapping[str, Any],
        keys: Mapping[str, grants.SigningKey] | grants.SigningKey,
        store: Receipts,
        api: docker.APIClient,
        secrets: Mapping[str, str] | None = None,
        config: RunnerConfig | None = None,
        policy_revision: str,
        policy_source: PolicySource | None = None,
    ):
        if not policy_revision:
            # A grant names the revision it was decided under; tools of no known revision could
            # run a call under definitions the checkpoint never decided it against.
            raise ValueError("the tools' policy revision is required (the revision grants are bound to)")
        # the tools and the revision they are, replaced together in one assignment: a call holds
        # the snapshot its grant's revision matched, whatever a concurrent reload does after
        self._held = LoadedTools(policy_revision, tool_specs(tools))
        gitleaks()  # the scrubber's rule set, compiled now (~0.5 s) rather than in the first call's time
        # tool name -> (the tool, its input-schema validator), built at the tool's first call and
        # rebuilt when a reload replaces the tool: no schema is re-checked on every call.
        self._validators: dict[str, tuple[Tool, Any]] = {}
        self.policy_source = policy_source
        self._reload_lock = threading.Lock()
        # verify() takes one key or a key-id -> key dict; copy a caller's mapping once, here.
        self.keys = keys if isinstance(keys, grants.SigningKey) else dict(keys)
        self.store = store
        self.api = api
        self.secrets = dict(secrets or {})
        self.config = config or RunnerConfig()
        if not self.config.runner_id:
            self.config.runner_id = uuid.uuid4().hex[:12]
        self.images = ImagePins(api)
        self.pinned = self.images.pin_all(t.run.image for t in self.tools.values() if t.run)
        self._slots = threading.BoundedSemaphore(self.config.max_concurrency)
        self._inflight: dict[str, _Inflight] = {}
        self._lock = threading.Lock()
        self._runtimes: set[str] | None = None
        interrupted = store.interrupt_cut_off()
        if interrupted:
            log.warning("%d call(s) were cut off by the previous runner; marked interrupted", len(interrupted))
            # Their containers may still run (the previous runner and its watchdog were killed
            # together): a call that is `interrupted` must not go on running.
            self._remove_containers_of(interrupted)

    # -- the call ----------------------------------------------------------------------------

    def execute(self, request: pb.ExecuteRequest, on_chunk: OnChunk | None = None) -> pb.Receipt:
        # The checkpoint's own converter, which never raises: a NaN or an infinity reaches verify,
        # which refuses it after the grant's own checks (grant_mismatch: no grant covers it), where
        # json_format raised ValueError before any check, an internal error with no code.
        arguments = struct_to_dict(request.arguments, checked=False)
        grant = request.grant if request.HasField("grant") else None
        try:
            grants.verify(
                self.keys,
                grant,
                run_id=request.run_id,
                agent_version=request.agent_version,
                tool=request.tool,
                arguments=arguments,
            )
        except grants.GrantError as exc:
            # An authentic grant that expired after its call ran still gets its receipt back:
            # nothing runs, and a driver retrying after a lost answer needs it.
            if exc.code == "grant_expired" and grant is not None:
                stored = self._stored(grant.decision_id)
                if stored is not None:
                    return stored
            raise GrantRefused(exc.message, code=exc.code) from None
        assert grant is not None
        arguments = canonical.normalise(arguments)  # verify hashed them: they have a canonical form
        if request.agent != grant.agent:  # a call that names no agent matches no grant either
            raise GrantRefused("the grant was issued for a different agent", code="grant_mismatch")
        decision_id = grant.decision_id

        stored = self._stored(decision_id)
        if stored is not None:
            return stored

        tool = self._check_revision(grant.policy_revision).get(request.tool)
        if tool is None or tool.run is None:
            raise UnknownTool(f"no runnable tool {request.tool!r} in the loaded policies")
        run = tool.run
        self._validate(tool, arguments)
        argv = argv_mod.fill(list(run.command), arguments)
        image_id = self.images.resolve(run.image)
        injected: dict[str, str] = {}
        for name in run.secrets:
            if name not in self.secrets:
                raise SecretUnavailable(f"tool {tool.name} needs secret {name}, which the secrets file lacks")
            injected[name] = self.secrets[name]
        runtime = run.runtime or self.config.default_runtime
        if runtime:
            self._check_runtime(runtime)
        spec = ContainerSpec(
            image_id=image_id,
            argv=argv,
            env={**run.env, **injected},
            user=run.user,
            timeout_seconds=run.timeout_seconds,
            limits=run.limits,
            network=self.config.network_name if run.network else None,
            read_only_root=run.read_only_root,
            runtime=runtime,
            labels={
                LABEL_RUNNER: self.config.runner_id,
                LABEL_DECISION: decision_id,
                LABEL_RUN: request.run_id,
                LABEL_TOOL: tool.name,
            },
        )

        entry, first = self._enter(decision_id, request.run_id)
        if not first:  # the same grant is running right now: wait for its receipt
            entry.done.wait()
            stored = self._stored(decision_id)
            if stored is None:
                raise AlreadyStarted("the same grant was being run and produced no receipt")
            return stored
        try:
            with self._slot():
                if not self._claim(decision_id, request.run_id, tool.name):
                    stored = self._stored(decision_id)
                    if stored is not None:
                        return stored
                    raise AlreadyStarted(
                        f"decision {decision_id} was claimed by an earlier runner that never finished it"
                    )
                try:
                    receipt = self._run(
                        spec, entry, grant, tool.name, injected, run.output_cap_bytes, on_chunk
                    )
                except Exception as exc:
                    # The container may have run: the grant is spent either way, and the
                    # receipt says the runner failed rather than leaving the claim open.
                    log.exception("call %s failed inside the runner", decision_id)
                    receipt = _receipt(
                        grant,
                        tool.name,
                        image_id,
                        exit_code=-1,
                        code="runner_error",
                        output=f"toolrunner: internal error: {type(exc).__name__}",
                    )
                self.store.finish(receipt)
                return receipt
        finally:
            self._leave(decision_id, entry)

    def _run(
        self,
        spec: ContainerSpec,
        entry: _Inflight,
        grant: Any,
        tool: str,
        injected: Mapping[str, str],
        cap: int,
        on_chunk: OnChunk | None,
    ) -> pb.Receipt:
        scrubber = Scrubber(injected)
        streams = {name: _StreamState(scrubber) for name in ("stdout", "stderr")}
        capped = CappedOutput(cap)
        raw = RawDigest()
        emit_lock = threading.Lock()
        live = {"sent": 0, "stopped": False}

        def emit(stream: str, text: str) -> None:
            if not text:
                return
            capped.add(text)
            if on_chunk is None or live["stopped"]:
                return
            size = len(text.encode())
            if live["sent"] + size > cap:
                live["stopped"] = True
                on_chunk(stream, _STREAM_NOTICE)
                return
            live["sent"] += size
            on_chunk(stream, text)

        def on_output(stream: str, data: bytes) -> None:
            with emit_lock:
                raw.add(data)
                state = streams[stream]
                emit(stream, state.scrub.feed(state.decoder.decode(data)))

        container = ContainerRun(self.api, spec, on_output)
        entry.run = container
        not_run = False
        if entry.cancelled:
            container.cancel()
        try:
            with tracing.span("toolrunner.container.run", {
                "warden.tool": tool, "warden.decision_id": grant.decision_id, "warden.run_id": grant.run_id,
                "container.image.id": spec.image_id,
            }):
                outcome = container.run()
                tracing.set_attributes(warden__exit_code=outcome.exit_code, warden__timed_out=outcome.timed_out,
                                       warden__cancelled=outcome.cancelled, warden__oom_killed=outcome.oom_killed)
                # One event per call that ran, with its fields (structured in --log-format json).
                log.info("%s ran for decision %s: exit %d", tool, grant.decision_id, outcome.exit_code, extra={
                    "tool": tool, "decision_id": grant.decision_id, "run_id": grant.run_id,
                    "exit_code": outcome.exit_code, "timed_out": outcome.timed_out, "cancelled": outcome.cancelled,
                    "duration_seconds": round(outcome.finished_at - outcome.started_at, 3)})
        except docker.errors.APIError as exc:
            # Could not create or start it (a bad runtime, a removed image): the call ran and
            # failed; a receipt says so rather than leaving the claim dangling.
            log.error("container for %s failed: %s", grant.decision_id, exc)
            now = time.time()
            outcome = Outcome.not_run(now, now, cancelled=False)
            not_run = True
            with emit_lock:
                emit("stderr", f"toolrunner: the container could not run: {exc.explanation or exc}\n")
        with emit_lock:
            for name, state in streams.items():
                emit(name, state.scrub.feed(state.decoder.decode(b"", final=True)) + state.scrub.finish())

        # Each stream was scrubbed on its own; the receipt joins them. Half a secret on stdout and
        # the other half on stderr meet here: mask the injected secrets once more in the join.
        output = capped.text()
        joined = scrubber.literal_spans(output)
        output = apply(output, joined)

        if not_run:
            code = "container_not_run"
        elif outcome.timed_out:
            code = "timeout"
        elif outcome.cancelled:
            code = "cancelled"
        elif capped.truncated:
            code = "output_truncated"
        else:
            code = ""
        receipt = _receipt(
            grant,
            tool,
            spec.image_id,
            exit_code=outcome.exit_code,
            oom_killed=outcome.oom_killed,
            timed_out=outcome.timed_out,
            duration_seconds=round(outcome.finished_at - outcome.started_at, 6),
            bytes_out=raw.size,
            truncated=capped.truncated,
            output=output,
            raw_output_sha256=raw.hexdigest(),
            masked_count=sum(s.scrub.masked for s in streams.values()) + len(joined),
            code=code,
        )
        receipt.started_at.FromNanoseconds(int(outcome.started_at * 1e9))
        receipt.finished_at.FromNanoseconds(int(outcome.finished_at * 1e9))
        return receipt

    # -- cancel, receipts ------------------------------------------------------------------

    def cancel(self, decision_id: str = "", run_id: str = "") -> int:
        """Kill the running call with this decision id, or every running call of this run."""
        with self._lock:
            targets = [
                e
                for d, e in self._inflight.items()
                if (decision_id and d == decision_id) or (run_id and e.run_id == run_id)
            ]
        for entry in targets:
            entry.cancelled = True
            if entry.run is not None:
                entry.run.cancel()
        return len(targets)

    def get_receipt(self, decision_id: str) -> pb.Receipt:
        found = self._get(decision_id)
        if found is None or found[1] is None:
            state = "is still running" if found else "has no receipt"
            raise ReceiptNotFound(f"decision {decision_id!r} {state}")
        return found[1]

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._inflight)

    # -- helpers -----------------------------------------------------------------------------

    def _remove_containers_of(self, decision_ids: list[str]) -> None:
        for decision_id in decision_ids:
            for c in self.api.containers(all=True, filters={"label": f"{LABEL_DECISION}={decision_id}"}):
                try:
                    self.api.remove_container(c["Id"], force=True)
                    log.warning("removed the container of interrupted call %s", decision_id)
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError as exc:
                    if exc.status_code != 409:  # 409: already being removed
                        raise

    def _get(self, decision_id: str) -> tuple[str, pb.Receipt | None] | None:
        try:
            return self.store.get(decision_id)
        except StoreUnavailable as exc:
            raise ReceiptsUnavailable(f"the receipt store cannot be read: {exc}") from None

    def _claim(self, decision_id: str, run_id: str, tool: str) -> bool:
        """The store's claim; a store that cannot answer refuses the call, which never runs unclaimed."""
        try:
            return self.store.claim(decision_id, run_id, tool)
        except StoreUnavailable as exc:
            raise ReceiptsUnavailable(f"the call cannot be claimed, so it does not run: {exc}") from None

    def _stored(self, decision_id: str) -> pb.Receipt | None:
        found = self._get(decision_id)
        if found is None or found[1] is None:
            return None
        receipt = found[1]
        receipt.replayed = True
        return receipt

    def _enter(self, decision_id: str, run_id: str) -> tuple[_Inflight, bool]:
        with self._lock:
            existing = self._inflight.get(decision_id)
            if existing is not None:
                return existing, False
            entry = _Inflight(run_id)
            self._inflight[decision_id] = entry
            return entry, True

    def _leave(self, decision_id: str, entry: _Inflight) -> None:
        with self._lock:
            self._inflight.pop(decision_id, None)
        entry.done.set()

    @contextmanager
    def _slot(self) -> Iterator[None]:
        """One of the `max_concurrency` slots for the length of a call, or RunnerBusy."""
        if not self._slots.acquire(blocking=False):
            raise RunnerBusy(f"{self.config.max_concurrency} calls are already running; retry later")
        try:
            yield
        finally:
            self._slots.release()

    def _validate(self, tool: Tool, arguments: Any) -> None:
        """`jsonschema.validate`, with the tool's validator built (and its schema checked) once."""
        cached = self._validators.get(tool.name)
        if cached is None or cached[0] is not tool:
            cls = jsonschema.validators.validator_for(tool.input_schema)
            cls.check_schema(tool.input_schema)
            cached = (tool, cls(tool.input_schema))
            self._validators[tool.name] = cached
        error = jsonschema.exceptions.best_match(cached[1].iter_errors(arguments))
        if error is not None:
            raise InvalidArguments(f"arguments do not match {tool.name}'s input schema: {error.message}")

    @property
    def tools(self) -> dict[str, Tool]:
        return self._held.tools

    @property
    def policy_revision(self) -> str:
        return self._held.revision

    def _check_revision(self, wanted: str) -> dict[str, Tool]:
        """The tool definitions of the revision the grant was issued under, or refuse.

        On a mismatch the policy folder is reloaded once, and only when its files changed (a
        hash, no compile), so a stream of stale grants cannot make the runner recompile forever.
        The definitions returned are those of the snapshot that matched: a reload landing after
        the check cannot hand the call another revision's command, image or secrets.
        """
        held = self._held
        if wanted == held.revision:
            return held.tools
        with self._reload_lock:
            held = self._held
            if wanted == held.revision:  # another call reloaded meanwhile
                return held.tools
            problem = "it does not have that revision"
            if self.policy_source is not None:
                try:
                    if self.policy_source.revision() != held.revision:
                        loaded = self.policy_source.load()
                        log.info("policy folder reloaded: revision %s -> %s", held.revision, loaded.revision)
                        self._held = held = loaded
                except Exception as exc:  # noqa: BLE001 - a broken edit keeps the last good set
                    problem = f"its policy folder does not load ({str(exc).splitlines()[0][:200]})"
                    log.warning("policy reload failed; keeping revision %s: %s", held.revision, exc)
            if wanted != held.revision:
                raise PolicyRevisionMismatch(
                    f"the grant was issued under policy revision {wanted or '(none)'!r}; the runner holds "
                    f"{held.revision!r} and {problem}"
                )
            return held.tools

    def _check_runtime(self, runtime: str) -> None:
        if self._runtimes is None:
            self._runtimes = set((self.api.info().get("Runtimes") or {}).keys())
        if runtime not in self._runtimes:
            raise RuntimeUnavailable(
                f"runtime {runtime!r} is not configured on this Docker engine "
                f"(it has: {', '.join(sorted(self._runtimes)) or 'none'})"
            )


def _receipt(grant: Any, tool: str, image_id: str, **fields: Any) -> pb.Receipt:
    """A receipt naming the call (decision, run, tool, pinned image), with `fields` for the rest."""
    return pb.Receipt(
        decision_id=grant.decision_id, run_id=grant.run_id, tool=tool, image_id=image_id, **fields
    )


class _StreamState:
    def __init__(self, scrubber: Scrubber):
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.scrub = StreamScrubber(scrubber)
