"""OpenTelemetry traces with W3C trace context, off (and never imported) until configured.

One trace follows a run's work from the driver through the checkpoint to the toolrunner: the
driver starts spans for run steps, model calls and tool calls, and sends `traceparent` in the
gRPC metadata of every call it makes; the checkpoint and the toolrunner continue the caller's
trace in a server span per RPC. Spans go over OTLP/gRPC to a collector (`--otlp-endpoint`, or
the standard OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT and other OTEL_* variables).

Until `configure()` is called with an endpoint, nothing here imports OpenTelemetry and every
helper is a branch on one module global: the checkpoint's Check() path pays nothing, and its
base install needs no OpenTelemetry package (the SDK and exporter are the `tracing` extra).
The driver is the exception: it configures always, so each of its calls carries a trace id that
the checkpoint's decision record keeps, whether or not spans are exported.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import grpc

SERVICE_VERSION = "0.1.0"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
# RPCs that are the platform's, not the work's: a probe every few seconds is no trace anyone reads.
_UNTRACED_PREFIXES = ("/grpc.health.", "/grpc.reflection.")

_tracer: Any = None  # opentelemetry.trace.Tracer once configured
_provider: Any = None
_propagator: Any = None


class TracingUnavailable(RuntimeError):
    """Traces were asked for but the SDK is not installed."""


def endpoint_from(flag: str | None) -> str | None:
    """The OTLP endpoint a process exports to: the flag, else the standard variables; None: off."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if flag:
        return flag
    return next((os.environ[v] for v in ENDPOINT_VARIABLES if os.environ.get(v)), None)


def configure(service: str, endpoint_flag: str | None = None, *, always: bool = False) -> bool:
    """Start tracing for this process; True when spans are exported.

    `endpoint_flag` is `--otlp-endpoint` (else the OTEL_* variables decide). With `always` (the
    driver), spans and trace ids exist without an endpoint too, so every outgoing call carries
    `traceparent`; they are then dropped at their end. Raises TracingUnavailable when an export
    is asked for and the SDK is missing: traces a person configured must not silently vanish.
    """
    global _tracer, _provider, _propagator
    endpoint = endpoint_from(endpoint_flag)
    if endpoint is None and not always:
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError as exc:
        if endpoint is None:
            return False
        raise TracingUnavailable(
            f"traces to {endpoint} need the OpenTelemetry SDK: pip install 'warden[tracing]' ({exc})"
        ) from None
    name = os.environ.get("OTEL_SERVICE_NAME") or service
    provider = TracerProvider(resource=Resource.create({"service.name": name, "service.version": SERVICE_VERSION}))
    if endpoint is not None:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise TracingUnavailable(
                f"traces to {endpoint} need the OTLP exporter: pip install 'warden[tracing]' ({exc})"
            ) from None
        # The flag is passed on; without one the exporter reads the OTEL_* variables itself
        # (endpoint, headers, certificates, timeout), as every OpenTelemetry SDK does.
        exporter = OTLPSpanExporter(endpoint=endpoint_flag) if endpoint_flag else OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    _provider = provider
    _tracer = provider.get_tracer("warden", SERVICE_VERSION)
    _propagator = TraceContextTextMapPropagator()
    return endpoint is not None


def check(endpoint_flag: str | None = None) -> None:
    """Raise TracingUnavailable where `configure` would, making nothing: for a process that forks
    and configures tracing in each child (no gRPC channel may exist before a fork)."""
    endpoint = endpoint_from(endpoint_flag)
    if endpoint is None:
        return
    try:
        import opentelemetry.exporter.otlp.proto.grpc.trace_exporter  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise TracingUnavailable(
            f"traces to {endpoint} need the OTLP exporter: pip install 'warden[tracing]' ({exc})"
        ) from None


def enabled() -> bool:
    return _tracer is not None


def shutdown() -> None:
    """Send the spans still buffered, then stop (at process exit)."""
    global _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    _tracer = _provider = None


def span(name: str, attributes: dict[str, Any] | None = None) -> contextlib.AbstractContextManager[Any]:
    """An internal span, current for the block; a no-op when tracing is off."""
    if _tracer is None:
        return contextlib.nullcontext()
    return _tracer.start_as_current_span(name, attributes=_clean(attributes))


def set_attributes(**attributes: Any) -> None:
    """Add attributes to the current span (dots are spelled `__`); a no-op when tracing is off."""
    if _tracer is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(_clean({k.replace("__", "."): v for k, v in attributes.items()}) or {})


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) in hex of the current span, for log lines; None outside one or when off."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


@contextlib.contextmanager
def client_call(full_method: str) -> Iterator[list[tuple[str, str]]]:
    """A CLIENT span around one outgoing gRPC call; yields the metadata that carries its context.

    `full_method` is `package.Service/Method`. Off: yields an empty list and does nothing else.
    """
    if _tracer is None:
        yield []
        return
    from opentelemetry import trace

    service, _, method = full_method.partition("/")
    with _tracer.start_as_current_span(
        full_method, kind=trace.SpanKind.CLIENT,
        attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": method},
    ) as current:
        carrier: dict[str, str] = {}
        _propagator.inject(carrier)
        try:
            yield list(carrier.items())
        except Exception as exc:
            code = getattr(exc, "code", None)
            if callable(code):
                with contextlib.suppress(Exception):
                    current.set_attribute("rpc.grpc.status_code", code().value[0])
            raise


def server_interceptors() -> list[grpc.ServerInterceptor]:
    """What a gRPC server adds to continue its callers' traces: nothing when tracing is off, so
    an untraced server runs exactly the code it ran before tracing existed."""
    if _tracer is None:
        return []
    return [_server_interceptor()]


def _server_interceptor() -> grpc.ServerInterceptor:
    import grpc
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    tracer, propagator = _tracer, _propagator

    def start(details: Any) -> Any:
        incoming = {key: value for key, value in (details.invocation_metadata or ())
                    if isinstance(value, str)}
        service, _, method = details.method.lstrip("/").partition("/")
        return tracer.start_as_current_span(
            details.method.lstrip("/"), context=propagator.extract(incoming), kind=trace.SpanKind.SERVER,
            attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": method},
            record_exception=False, set_status_on_exception=False,
        )

    def finish(current: Any, context: Any, response: Any = None, error: BaseException | None = None) -> None:
        code = _context_code(context)
        if code is None and error is not None:
            code = grpc.StatusCode.UNKNOWN
        current.set_attribute("rpc.grpc.status_code", (code or grpc.StatusCode.OK).value[0])
        if code not in (None, grpc.StatusCode.OK):
            current.set_status(Status(StatusCode.ERROR, code.name))
        if response is not None:
            current.set_attributes(_response_attributes(response))

    def unary(behavior: Callable[..., Any], details: Any) -> Callable[..., Any]:
        def traced(request: Any, context: Any) -> Any:
            with start(details) as current:
                try:
                    response = behavior(request, context)
                except BaseException as exc:
                    finish(current, context, error=exc)
                    raise
                finish(current, context, response)
                return response

        return traced

    def streaming(behavior: Callable[..., Any], details: Any) -> Callable[..., Any]:
        def traced(request: Any, context: Any) -> Iterator[Any]:
            # The span is current while the handler runs between messages, and ends with the stream.
            with start(details) as current:
                try:
                    yield from behavior(request, context)
                except BaseException as exc:
                    finish(current, context, error=exc)
                    raise
                finish(current, context)

        return traced

    class ServerSpans(grpc.ServerInterceptor):
        def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
            handler = continuation(details)
            if handler is None or details.method.startswith(_UNTRACED_PREFIXES):
                return handler
            kw = {"request_deserializer": handler.request_deserializer,
                  "response_serializer": handler.response_serializer}
            if handler.unary_unary:
                return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary, details), **kw)
            if handler.unary_stream:
                return grpc.unary_stream_rpc_method_handler(streaming(handler.unary_stream, details), **kw)
            if handler.stream_unary:
                return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary, details), **kw)
            if handler.stream_stream:
                return grpc.stream_stream_rpc_method_handler(streaming(handler.stream_stream, details), **kw)
            return handler

    return ServerSpans()


def _context_code(context: Any) -> Any:
    try:
        return context.code()
    except Exception:  # noqa: BLE001 - a context without code() tells nothing
        return None


def _response_attributes(response: Any) -> dict[str, Any]:
    """What a checkpoint answer says about its decision, for finding the span of a decision."""
    found: dict[str, Any] = {}
    decision = getattr(response, "decision", None)
    answer = decision if decision is not None and hasattr(decision, "decision_id") else response
    for field in ("decision_id", "code"):
        value = getattr(answer, field, None)
        if isinstance(value, str) and value:
            found[f"warden.{field}"] = value
    verdict = getattr(answer, "verdict", None)
    if isinstance(verdict, int) and verdict:
        descriptor = answer.DESCRIPTOR.fields_by_name["verdict"].enum_type
        found["warden.verdict"] = descriptor.values_by_number[verdict].name if verdict in \
            descriptor.values_by_number else verdict
    return found


def _clean(attributes: dict[str, Any] | None) -> dict[str, Any] | None:
    """OpenTelemetry takes str, bool, int, float (and lists of them): drop None, text the rest."""
    if not attributes:
        return attributes
    return {k: v if isinstance(v, str | bool | int | float) else str(v)
            for k, v in attributes.items() if v is not None}


def in_thread_context(target: Callable[..., Any]) -> Callable[..., Any]:
    """`target` bound to the caller's context (and so its current span), for a new thread;
    `target` itself when tracing is off."""
    if _tracer is None:
        return target
    import contextvars

    context = contextvars.copy_context()

    def run(*args: Any, **kwargs: Any) -> Any:
        return context.run(target, *args, **kwargs)

    return run


__all__: Sequence[str] = (
    "TracingUnavailable", "client_call", "configure", "current_ids", "enabled", "endpoint_from",
    "in_thread_context", "server_interceptors", "set_attributes", "shutdown", "span",
)
