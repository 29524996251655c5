"""Traces, metrics and logs of contract operations: :func:`instrument` wraps any adapter.

The wrapper is a :class:`~pando_runtime.plugin.DelegatingAdapter`: every call reaches the
adapter it wraps, so instrumentation needs nothing from an adapter and works the same on all
of them. Per operation (``apply``,
``observe``, ``destroy``, ...) it makes:

- a span ``pando_runtime <operation>`` with ``pando.operation``, ``pando.adapter``
  and the ids it concerns (``pando.bundle_id``, ``pando.workload``,
  ``pando.volume_id``, ``pando.edge``); a failure sets the status to error and
  ``error.type`` to the error's code;
- ``pando_runtime.operation.duration`` (histogram, seconds) by operation and
  adapter, with ``error.type`` when it failed;
- ``pando_runtime.operation.errors`` (counter) by operation, adapter and code;
- ``pando_runtime.streams.open`` (up-down counter) of open event, log, exec and
  snapshot streams, by ``pando.stream``;
- a DEBUG log record per operation, WARNING when the runtime is degraded
  (unreachable, throttling, failing).

An adapter that talks to an API of its own (:class:`~pando_runtime.plugin.ObservableApi`, as
the Kubernetes adapter) is also given an :class:`~pando_runtime.plugin.ApiObserver` bound to
the same meter, so its calls, cache and watches are measured too (``pando_runtime.api.*``,
``pando_runtime.cache.objects``: see ``_telemetry_otel``), each with ``pando.adapter`` and,
for a named cluster, ``pando.cluster``.

Metrics and traces go through the OpenTelemetry API (``pip install
'pando-runtime[otel]'``), imported only by ``_telemetry_otel`` and only when :func:`instrument`
is called; it is a no-op until the host installs an SDK. Without the API
installed the wrapper still logs.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from anyio.abc import ByteReceiveStream

from .._adapter._abc import RuntimeAdapter
from .._adapter._api_observer import ObservableApi
from .._adapter._delegating import DelegatingAdapter
from .._contract._capabilities import RuntimeCapabilities
from .._contract._capacity import BundleUsage, Capacity, Fit, InUse
from .._contract._edge import EdgePlan, EdgeState
from .._contract._errors import PandoRuntimeError
from .._contract._events import BundleEvent
from .._contract._exec import ExecRequest, ExecResult, ExecSession
from .._contract._log_options import LogOptions
from .._contract._observed import ObservedBundle
from .._contract._plans import BundlePlan
from .._contract._refs import BundleHandle, BundleRef, DestroyOptions, WorkloadRef
from .._contract._trial import TrialRequest, TrialResult
from .._contract._volumes import VolumeHandle, VolumeRequest
from .._util._log import logger
from ._otel import Instruments

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = ["InstrumentedAdapter", "instrument"]

T = TypeVar("T")

_LOG = logger("operations")

_DEGRADED = frozenset({"ADAPTER_UNAVAILABLE", "RATE_LIMITED", "ADAPTER_FAILED"})
"""Codes that say the runtime, not the request, is in trouble: logged as warnings."""


def _code(error: BaseException) -> str:
    return error.code if isinstance(error, PandoRuntimeError) else type(error).__qualname__


class InstrumentedAdapter(DelegatingAdapter):
    """An adapter that traces, measures and logs each operation of the one it wraps.

    Made by :func:`instrument`; :attr:`adapter` is the wrapped adapter, for its
    own methods (a fake's test controls, for one). ``kind``, ``description``
    and ``Config`` are the wrapped adapter's. What is computed without I/O or hands back
    a context of the adapter's own (``configure``, ``info``, ``upstream``, ``read_scope``,
    ``membership``) is forwarded unmeasured, as :class:`DelegatingAdapter` does.
    """

    kind = "instrumented"

    def __init__(
        self,
        adapter: RuntimeAdapter,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        super().__init__(adapter)
        self._otel = Instruments(tracer_provider, meter_provider)
        if self._otel.enabled and isinstance(adapter, ObservableApi):
            adapter.observe_api(self._otel.api_observer(adapter.kind))

    # -- the measuring ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _operation(self, operation: str, **ids: str | None) -> Iterator[None]:
        known = {k: v for k, v in ids.items() if v is not None}
        # Metric labels stay few (operation, adapter, code); ids go to spans and logs only.
        labels = {"pando.operation": operation, "pando.adapter": self.adapter.kind}
        extra: dict[str, Any] = {"operation": operation, "adapter": self.adapter.kind, **known}
        started = time.perf_counter()
        with self._otel.span({**labels, **{f"pando.{k}": v for k, v in known.items()}}) as span:
            try:
                yield
            except Exception as error:
                seconds = time.perf_counter() - started
                code = _code(error)
                if self._otel.enabled:
                    self._otel.failed(span, code)
                    self._otel.errors.add(1, {**labels, "error.type": code})
                    self._otel.duration.record(seconds, {**labels, "error.type": code})
                degraded = code in _DEGRADED or not isinstance(error, PandoRuntimeError)
                _LOG.log(
                    logging.WARNING if degraded else logging.DEBUG,
                    "%s failed on %s: %s after %.1f ms",
                    operation,
                    self.adapter.kind,
                    code,
                    seconds * 1000,
                    extra={**extra, "code": code, "duration_s": seconds},
                )
                raise
        seconds = time.perf_counter() - started
        if self._otel.enabled:
            self._otel.duration.record(seconds, labels)
        _LOG.debug(
            "%s on %s: %.1f ms",
            operation,
            self.adapter.kind,
            seconds * 1000,
            extra={**extra, "duration_s": seconds},
        )

    @contextlib.asynccontextmanager
    async def _stream(
        self,
        operation: str,
        open_stream: Callable[[], contextlib.AbstractAsyncContextManager[T]],
        **ids: str | None,
    ) -> AsyncIterator[T]:
        """Open a stream inside an operation's span; count it open until its block ends."""
        async with contextlib.AsyncExitStack() as stack:
            with self._operation(operation, **ids):
                value = await stack.enter_async_context(open_stream())
            labels = {"pando.stream": operation, "pando.adapter": self.adapter.kind}
            if self._otel.enabled:
                self._otel.streams.add(1, labels)
            try:
                yield value
            finally:
                if self._otel.enabled:
                    self._otel.streams.add(-1, labels)

    # -- identity & health --------------------------------------------------------------------

    async def health_check(self) -> None:
        with self._operation("health_check"):
            await self.adapter.health_check()

    async def capabilities(self) -> RuntimeCapabilities:
        with self._operation("capabilities"):
            return await self.adapter.capabilities()

    async def aclose(self) -> None:
        with self._operation("aclose"):
            await self.adapter.aclose()

    async def __aenter__(self) -> Self:
        # The wrapped adapter's own block is entered with this one: an adapter may start
        # work there (a Kubernetes adapter's watches), which delegating calls alone skips.
        with self._operation("open"):
            await self.adapter.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._operation("aclose"):
            await self.adapter.__aexit__(exc_type, exc, tb)

    # -- bundles --------------------------------------------------------------------------------

    async def check_plan(self, plan: BundlePlan) -> None:
        with self._operation("check_plan", bundle_id=plan.bundle_id):
            await self.adapter.check_plan(plan)

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        with self._operation("apply", bundle_id=plan.bundle_id):
            return await self.adapter.apply(plan)

    async def observe(
        self, ref: BundleRef, *, not_before: datetime | None = None
    ) -> ObservedBundle:
        with self._operation("observe", bundle_id=ref.bundle_id):
            if not_before is None:  # an adapter written before ``not_before`` still works
                return await self.adapter.observe(ref)
            return await self.adapter.observe(ref, not_before=not_before)

    async def stop(self, ref: BundleRef) -> None:
        with self._operation("stop", bundle_id=ref.bundle_id):
            await self.adapter.stop(ref)

    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        with self._operation("destroy", bundle_id=ref.bundle_id):
            await self.adapter.destroy(ref, options)

    # -- capacity -------------------------------------------------------------------------------

    async def capacity(self) -> Capacity:
        with self._operation("capacity"):
            return await self.adapter.capacity()

    async def largest_fit_for(self, bundle_id: str) -> Fit | None:
        with self._operation("largest_fit_for", bundle_id=bundle_id):
            return await self.adapter.largest_fit_for(bundle_id)

    async def usage(self, ref: BundleRef) -> BundleUsage:
        with self._operation("usage", bundle_id=ref.bundle_id):
            return await self.adapter.usage(ref)

    async def in_use(self) -> InUse:
        with self._operation("in_use"):
            return await self.adapter.in_use()

    # -- events, logs and exec --------------------------------------------------------------------

    def watch_bundles(self) -> contextlib.AbstractAsyncContextManager[AsyncIterator[BundleEvent]]:
        return self._stream("watch_bundles", self.adapter.watch_bundles)

    def logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> contextlib.AbstractAsyncContextManager[ByteReceiveStream]:
        return self._stream(
            "logs",
            lambda: self.adapter.logs(ref, options),
            bundle_id=ref.bundle_id,
            workload=ref.workload,
        )

    def exec(
        self, ref: WorkloadRef, request: ExecRequest
    ) -> contextlib.AbstractAsyncContextManager[ExecSession]:
        return self._stream(
            "exec",
            lambda: self.adapter.exec(ref, request),
            bundle_id=ref.bundle_id,
            workload=ref.workload,
        )

    async def run(
        self, ref: WorkloadRef, request: ExecRequest, *, stdin: bytes | None = None
    ) -> ExecResult:
        with self._operation("run", bundle_id=ref.bundle_id, workload=ref.workload):
            return await self.adapter.run(ref, request, stdin=stdin)

    # -- volumes ----------------------------------------------------------------------------------

    async def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        with self._operation(
            "create_volume", bundle_id=request.bundle_id, volume_id=request.volume_id
        ):
            return await self.adapter.create_volume(request)

    async def destroy_volume(self, handle: VolumeHandle) -> None:
        with self._operation("destroy_volume", volume_id=handle.volume_id):
            await self.adapter.destroy_volume(handle)

    def snapshot_volume(
        self, handle: VolumeHandle
    ) -> contextlib.AbstractAsyncContextManager[ByteReceiveStream]:
        return self._stream(
            "snapshot_volume",
            lambda: self.adapter.snapshot_volume(handle),
            volume_id=handle.volume_id,
        )

    async def restore_volume(
        self, handle: VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        with self._operation("restore_volume", volume_id=handle.volume_id):
            await self.adapter.restore_volume(handle, source)

    # -- images, trial, edge ----------------------------------------------------------------------

    async def has_image(self, reference: str) -> bool:
        with self._operation("has_image"):
            return await self.adapter.has_image(reference)

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        with self._operation("import_image"):
            return await self.adapter.import_image(source)

    async def trial(self, request: TrialRequest) -> TrialResult:
        with self._operation("trial"):
            return await self.adapter.trial(request)

    async def apply_edge(self, plan: EdgePlan) -> None:
        with self._operation("apply_edge", edge=plan.name):
            await self.adapter.apply_edge(plan)

    async def observe_edge(self, name: str) -> EdgeState:
        with self._operation("observe_edge", edge=name):
            return await self.adapter.observe_edge(name)

    async def remove_edge(self, name: str) -> None:
        with self._operation("remove_edge", edge=name):
            await self.adapter.remove_edge(name)

    async def edges(self) -> tuple[str, ...]:
        with self._operation("edges"):
            return await self.adapter.edges()

    async def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        with self._operation("edge_volumes"):
            return await self.adapter.edge_volumes()


@functools.cache
def _wrapper_class(adapter_class: type[RuntimeAdapter]) -> type[InstrumentedAdapter]:
    # A subclass per adapter class, so kind, description and Config read as the wrapped one's.
    return type(
        f"Instrumented{adapter_class.__name__}",
        (InstrumentedAdapter,),
        {
            "kind": adapter_class.kind,
            "description": adapter_class.description,
            "Config": adapter_class.Config,
            "__module__": __name__,
        },
    )


def instrument(
    adapter: RuntimeAdapter,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> InstrumentedAdapter:
    """Wrap ``adapter`` so each operation is traced, measured and logged.

    Spans and metrics go to the given providers, or to OpenTelemetry's global
    ones (set by the host's SDK). ``async with`` the wrapper enters and leaves the
    adapter's own ``async with`` block; closing the wrapper closes the adapter.
    Instrumenting an instrumented adapter returns it unchanged.
    """
    if isinstance(adapter, InstrumentedAdapter):
        return adapter
    return _wrapper_class(type(adapter))(
        adapter, tracer_provider=tracer_provider, meter_provider=meter_provider
    )
