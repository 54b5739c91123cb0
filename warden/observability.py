"""The two observability flags every serve command takes, and their start-up in one place.

`--log-format text|json` (warden/logsetup.py) and `--otlp-endpoint URL` (warden/tracing.py).
See docs/observability.md.
"""

from __future__ import annotations

import argparse
import logging

from warden import logsetup, tracing


def add_arguments(parser: argparse.ArgumentParser, *, passed_on: bool = False) -> None:
    """`passed_on`: the command (`warden up`) gives both flags to the processes it starts."""
    where = "; given to all three processes" if passed_on else ""
    parser.add_argument(
        "--log-format", choices=logsetup.FORMATS, default="text",
        help="text (default) or json: one JSON object per line with time, level, logger, message, trace_id "
        f"and span_id inside a span, and any structured fields (docs/observability.md){where}",
    )
    parser.add_argument(
        "--otlp-endpoint", metavar="URL", default=None,
        help="export OpenTelemetry traces over OTLP/gRPC to URL (http://host:4317 plain, https:// TLS); "
        f"default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else no export{where}",
    )


def start(args: argparse.Namespace, service: str, *, level: int = logging.INFO, always_trace: bool = False,
          trace: bool = True) -> str | None:
    """Logging, then tracing (unless `trace` is False: a process that forks sets it up in each
    child, see checkpoint/server/workers.py); returns an error to print (and exit 2 with) or None."""
    logsetup.setup_logging(args.log_format, level)
    try:
        if not trace:
            tracing.check(args.otlp_endpoint)  # a missing SDK is said once, before any child starts
            return None
        exporting = tracing.configure(service, args.otlp_endpoint, always=always_trace)
    except tracing.TracingUnavailable as exc:
        return str(exc)
    if exporting:
        logging.getLogger("warden.tracing").info(
            "exporting traces over OTLP to %s", tracing.endpoint_from(args.otlp_endpoint),
            extra={"service": service})
    return None
