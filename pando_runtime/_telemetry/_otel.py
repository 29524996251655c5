"""The OpenTelemetry side of :func:`~pando_runtime.instrument`: a tracer and the instruments.

:class:`Instruments` holds the tracer and the operation instruments
(``pando_runtime.operation.duration``, ``pando_runtime.operation.errors``,
``pando_runtime.streams.open``) and makes, for an adapter that talks to an API of its own, an
:class:`~pando_runtime.plugin.ApiObserver` recording on the same meter:

- ``pando_runtime.api.calls`` (counter) and ``pando_runtime.api.duration``
  (histogram, seconds) by ``pando.api.verb``, ``pando.api.resource`` and
  ``http.response.status_code`` (0: nothing answered);
- ``pando_runtime.api.watch_restarts`` (counter) by resource and ``pando.reason``;
- ``pando_runtime.cache.objects`` and ``pando_runtime.api.watches`` (observable
  gauges) of cached objects and open watches, by resource, read at each export.

The OpenTelemetry API (``pip install 'pando-runtime[otel]'``) is imported only here and only
when instruments are made; without it :attr:`Instruments.enabled` is false and nothing is
recorded. What is measured, and when, is the wrapper's (``_telemetry``).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .._adapter._api_observer import ApiObserver, ApiState, ApiStateSource
from .._contract._version import __version__

if TYPE_CHECKING:
    from types import ModuleType

    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
    from opentelemetry.trace import TracerProvider

__all__ = ["DURATION_BUCKETS", "Instruments"]

DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
"""Histogram bounds in seconds: an observe served from a cache to an apply that pulls images."""


def _opentelemetry() -> tuple[ModuleType, ModuleType] | None:
    """OpenTelemetry's ``metrics`` and ``trace`` API modules, or ``None`` when not installed.

    The one place the library imports OpenTelemetry, on first use only.
    """
    try:
        from opentelemetry import metrics, trace  # noqa: PLC0415 - optional, on use
    except ImportError:
        return None
    return metrics, trace


class Instruments:
    """The OpenTelemetry tracer and instruments, or nothing when the API is not installed."""

    def __init__(
        self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None
    ) -> None:
        api = _opentelemetry()
        if api is None:
            self.enabled = False
            return
        metrics, trace = api
        self.enabled = True
        self._trace = trace
        self._metrics = metrics
        self.tracer = trace.get_tracer("pando_runtime", __version__, tracer_provider)
        self.meter = meter = metrics.get_meter("pando_runtime", __version__, meter_provider)
        self.duration = meter.create_histogram(
            "pando_runtime.operation.duration",
            unit="s",
            description="How long each contract operation took, by operation and adapter.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.errors = meter.create_counter(
            "pando_runtime.operation.errors",
            unit="{error}",
            description="Contract operations that failed, by operation, adapter and code.",
        )
        self.streams = meter.create_up_down_counter(
            "pando_runtime.streams.open",
            unit="{stream}",
            description="Open event, log, exec and snapshot streams.",
        )

    def api_observer(self, adapter: str) -> ApiObserver:
        """An observer of an adapter's API calls that records them on this meter."""
        return _ApiMetrics(_ApiInstruments(self.meter, self._metrics), {"pando.adapter": adapter})

    @contextlib.contextmanager
    def span(self, attributes: Mapping[str, str]) -> Iterator[Any]:
        """A client span named for ``pando.operation`` (``None`` when disabled)."""
        if not self.enabled:
            yield None
            return
        with self.tracer.start_as_current_span(
            f"pando_runtime {attributes['pando.operation']}",
            kind=self._trace.SpanKind.CLIENT,
            attributes=dict(attributes),
            # Messages stay out of traces, as out of logs: the code says what happened.
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span

    def failed(self, span: Any, code: str) -> None:
        """Mark ``span`` failed with the error's ``code``."""
        if span is not None:
            span.set_attribute("error.type", code)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, code))


class _ApiInstruments:
    """The instruments of API calls on one meter, and the state sources its gauges read."""

    def __init__(self, meter: Meter, metrics: ModuleType) -> None:
        self._observation: Callable[[int, Mapping[str, Any]], Observation] = metrics.Observation
        self.calls = meter.create_counter(
            "pando_runtime.api.calls",
            unit="{call}",
            description="Calls an adapter made to its runtime's API, by verb, resource, status.",
        )
        self.duration = meter.create_histogram(
            "pando_runtime.api.duration",
            unit="s",
            description="How long each call to the runtime's API took.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.restarts = meter.create_counter(
            "pando_runtime.api.watch_restarts",
            unit="{restart}",
            description="Watches that started over, by resource and reason.",
        )
        # Sources are held weakly: a closed adapter's session is never kept alive by a meter.
        self.sources: weakref.WeakKeyDictionary[ApiStateSource, dict[str, str]] = (
            weakref.WeakKeyDictionary()
        )
        meter.create_observable_gauge(
            "pando_runtime.cache.objects",
            callbacks=[self._cached],
            unit="{object}",
            description="Objects an adapter holds in its cache, by resource.",
        )
        meter.create_observable_gauge(
            "pando_runtime.api.watches",
            callbacks=[self._watches],
            unit="{watch}",
            description="Watches an adapter holds open, by resource.",
        )

    def _states(self) -> Iterator[tuple[dict[str, str], ApiState]]:
        for source, labels in list(self.sources.items()):
            yield labels, source.api_state()

    def _cached(self, options: CallbackOptions) -> Iterable[Observation]:
        for labels, state in self._states():
            for resource, count in state.cached_objects.items():
                yield self._observation(count, {**labels, "pando.api.resource": resource})

    def _watches(self, options: CallbackOptions) -> Iterable[Observation]:
        for labels, state in self._states():
            for resource, count in state.open_watches.items():
                yield self._observation(count, {**labels, "pando.api.resource": resource})


class _ApiMetrics:
    """An :class:`ApiObserver` recording on OpenTelemetry instruments, with fixed labels."""

    def __init__(self, instruments: _ApiInstruments, labels: Mapping[str, str]) -> None:
        self._instruments = instruments
        self._labels = dict(labels)

    def call(self, verb: str, resource: str, status: int, seconds: float) -> None:
        labels: dict[str, str | int] = {
            **self._labels,
            "pando.api.verb": verb,
            "pando.api.resource": resource,
            "http.response.status_code": status,
        }
        self._instruments.calls.add(1, labels)
        self._instruments.duration.record(seconds, labels)

    def watch_restarted(self, resource: str, reason: str) -> None:
        labels = {**self._labels, "pando.api.resource": resource, "pando.reason": reason}
        self._instruments.restarts.add(1, labels)

    def track(self, source: ApiStateSource) -> None:
        self._instruments.sources[source] = self._labels

    def bind(self, **attributes: str) -> ApiObserver:
        named = {f"pando.{key}": value for key, value in attributes.items()}
        return _ApiMetrics(self._instruments, {**self._labels, **named})
