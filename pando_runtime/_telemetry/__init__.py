"""Telemetry: an adapter wrapped with OpenTelemetry spans and metrics.

``_instrumented`` (:class:`InstrumentedAdapter`, :func:`instrument`: a delegating wrapper)
and ``_otel`` (the instruments and the API's metrics). Imported only when a host asks for it.
"""
