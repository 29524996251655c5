"""Reading back what the library reports: an in-memory OpenTelemetry SDK, captured log records.

Shared by the core's telemetry tests and the Kubernetes adapter's cluster tests.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pando_runtime as pr

__all__ = ["Otel", "assert_no_secret", "capturing", "otel_sdk"]


class Otel:
    """An SDK with in-memory readers, as a host's setup would install a real exporter."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def instrument(self, adapter: pr.RuntimeAdapter) -> pr.InstrumentedAdapter:
        return pr.instrument(
            adapter, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )

    def points(self, name: str) -> list[Any]:
        """The data points of the instrument ``name`` now (none when nothing was recorded)."""
        data = self.reader.get_metrics_data()
        return [
            point
            for resource in (data.resource_metrics if data is not None else ())
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    def by_resource(self, name: str) -> dict[str, int]:
        """A gauge's values by ``pando.api.resource``."""
        return {p.attributes["pando.api.resource"]: p.value for p in self.points(name)}


@contextlib.contextmanager
def otel_sdk() -> Iterator[Otel]:
    """An :class:`Otel`, shut down at the end."""
    sdk = Otel()
    try:
        yield sdk
    finally:
        sdk.meter_provider.shutdown()
        sdk.tracer_provider.shutdown()


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def capturing() -> Iterator[list[logging.LogRecord]]:
    """Every record of every pando logger (the core's and the adapters'), at DEBUG."""
    handler = _Capture()
    library = logging.getLogger("pando_runtime")
    level = library.level
    library.addHandler(handler)
    library.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        library.removeHandler(handler)
        library.setLevel(level)


def assert_no_secret(
    records: Iterable[logging.LogRecord],
    secrets: Mapping[str, str] | Iterable[str],
    spans: Iterable[ReadableSpan] = (),
) -> None:
    """Nothing of a secret in any record (message, args, attributes) nor span attribute."""
    named = dict(secrets) if isinstance(secrets, Mapping) else {s: s for s in secrets}
    records = list(records)
    assert records, "something was logged, so the check can fail"
    for record in records:
        seen = " ".join([record.getMessage(), repr(record.args), repr(vars(record))])
        for what, secret in named.items():
            assert secret not in seen, (what, record.name, record.getMessage())
    for span in spans:
        seen = repr(dict(span.attributes or {})) + repr([e.attributes for e in span.events])
        for what, secret in named.items():
            assert secret not in seen, (what, span.name)
