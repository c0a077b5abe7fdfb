"""``--otlp-endpoint``: the commands that send their spans and metrics over OTLP/HTTP (``demo``, ``serve``).

The SDK is imported only when the flag is given (``rollout-telemetry[otel]``). At exit what is pending is
flushed for at most ``FLUSH_SECONDS``, so an endpoint that is down or slow cannot hold the command; spans that
could not be sent are said once, on stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rollout_telemetry._cli.args import url

if TYPE_CHECKING:
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client.registry import CollectorRegistry

    from rollout_telemetry.exporters.otel import OTLPExport

__all__ = ["add_otlp_option", "otlp_export"]

FLUSH_SECONDS = 2.0
"""The longest a command waits at exit for an OTLP endpoint to take what is pending (it ends within a second
more)."""


def add_otlp_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--otlp-endpoint URL``, read by ``otlp_export()``; ``what`` says what the command sends."""
    parser.add_argument(
        "--otlp-endpoint",
        type=url,
        default=None,
        metavar="URL",
        help=f"also send {what} over OTLP/HTTP to this base URL (e.g. http://127.0.0.1:4318); "
        "needs rollout-telemetry[otel]",
    )


@dataclass(frozen=True, slots=True)
class OTLP:
    """A command's OTLP export: give ``tracer_provider``, ``meter_provider`` and ``logger_provider`` to the
    telemetry, then ``attach`` its registry; ``shutdown`` at exit."""

    export: OTLPExport
    endpoint: str
    command: str

    @property
    def tracer_provider(self) -> TracerProvider:
        """The SDK tracer provider the command's telemetry records its spans to."""
        return self.export.tracer_provider

    @property
    def logger_provider(self) -> LoggerProvider:
        """The SDK logger provider the command's telemetry sends its evaluation events to."""
        return self.export.logger_provider

    @property
    def meter_provider(self) -> MeterProvider:
        """The SDK meter provider the command's telemetry publishes its metrics on."""
        return self.export.meter_provider

    def attach(self, registry: CollectorRegistry, run: str | None) -> None:
        """Publish the span export counts on ``/metrics``: the telemetry's ``registry``, with its ``run``."""
        registry.register(self.export.span_stats.collector({} if run is None else {"run": run}))

    def shutdown(self) -> None:
        """Flush and stop the export, waiting at most ``FLUSH_SECONDS``; say on stderr what was not sent."""
        finished = self.export.shutdown(timeout=FLUSH_SECONDS)
        stats = self.export.span_stats
        unsent = 0 if finished else stats.pending
        lost = stats.failed + stats.dropped + unsent
        if lost:
            # What the flush still does goes unsaid: it ends with the process, as its spans do.
            logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
            logging.getLogger("urllib3").setLevel(logging.CRITICAL)
            print(
                f"rollout-telemetry {self.command}: {lost} spans could not be sent to {self.endpoint}"
                + (
                    ""
                    if finished
                    else f" ({unsent} unsent when it stopped waiting after {FLUSH_SECONDS:g} s)"
                ),
                file=sys.stderr,
            )


def otlp_export(args: argparse.Namespace, command: str) -> OTLP | None:
    """The OTLP export ``--otlp-endpoint`` asks for, or ``None`` without it.

    Raises:
        ImportError: the OpenTelemetry SDK is not installed; the message says what to install.
    """
    if not args.otlp_endpoint:
        return None
    from rollout_telemetry.exporters.otel import otlp_providers

    if args.log_level != "debug":  # the SDK logs every failed batch; the command says it once, at exit
        logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
    export = otlp_providers(args.otlp_endpoint, export_interval_millis=2000, timeout_seconds=2.0)
    return OTLP(export, args.otlp_endpoint, command)
