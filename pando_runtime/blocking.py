"""A blocking facade over any adapter, for hosts that are not async.

The adapter runs on an event loop in a background thread (an anyio blocking
portal); each method here blocks until its coroutine finishes there::

    from pando_runtime.blocking import BlockingRuntime

    with BlockingRuntime.load("fake") as runtime:
        handle = runtime.apply(plan)
        print(runtime.observe(handle.ref))

Streams become plain iterators inside ``with`` blocks, so they are released on
every path.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from ._adapter._abc import RuntimeAdapter
from ._adapter._info import AdapterInfo
from ._adapter._registry import load_adapter
from ._contract._capabilities import RuntimeCapabilities
from ._contract._capacity import BundleUsage, Capacity, Fit, InUse
from ._contract._edge import EdgePlan, EdgeState
from ._contract._events import BundleEvent
from ._contract._exec import ExecRequest, ExecResult
from ._contract._log_options import LogOptions
from ._contract._observed import ObservedBundle
from ._contract._plans import BundlePlan
from ._contract._refs import BundleHandle, BundleRef, DestroyOptions, Upstream, WorkloadRef
from ._contract._streams import BytesReceiveStream, read_all
from ._contract._trial import TrialRequest, TrialResult
from ._contract._volumes import VolumeHandle, VolumeRequest

__all__ = ["BlockingRuntime"]


class BlockingRuntime:
    """The contract of a :class:`RuntimeAdapter`, as blocking calls.

    Use as ``with``: entering starts the event loop thread, leaving closes the
    adapter and stops the thread. ``backend`` is ``"asyncio"`` or ``"trio"``.

    Three parts of the contract have no blocking form, since what they hand back lives on
    the adapter's event loop: an interactive ``exec`` session (use :meth:`run`), a
    ``membership`` (its methods are async) and a ``read_scope`` (it holds within one task,
    and each blocking call is a task of its own). A host that needs them enters them on the
    loop: ``runtime.portal.wrap_async_context_manager(runtime.adapter.membership("a"))``.
    """

    def __init__(self, adapter: RuntimeAdapter, *, backend: str = "asyncio") -> None:
        self.adapter = adapter
        self._backend = backend
        self._stack = contextlib.ExitStack()
        self._portal: BlockingPortal | None = None

    @classmethod
    def load(
        cls, name: str, config: Mapping[str, Any] | None = None, *, backend: str = "asyncio"
    ) -> Self:
        """A blocking runtime over ``load_adapter(name, config)``."""
        return cls(load_adapter(name, config), backend=backend)

    def __enter__(self) -> Self:
        self._portal = self._stack.enter_context(start_blocking_portal(self._backend))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.portal.call(self.adapter.aclose)
        finally:
            self._portal = None
            self._stack.close()

    @property
    def portal(self) -> BlockingPortal:
        """The portal to the adapter's event loop (only inside ``with``)."""
        if self._portal is None:
            msg = "use BlockingRuntime as a context manager: with BlockingRuntime(...) as rt"
            raise RuntimeError(msg)
        return self._portal

    # -- identity, bundles, capacity ------------------------------------------------------

    def configure(self, config: Mapping[str, Any] | Any | None) -> None:
        """See :meth:`RuntimeAdapter.configure` (settings only; no loop round trip)."""
        self.adapter.configure(config)

    @property
    def info(self) -> AdapterInfo:
        """The adapter's :class:`AdapterInfo`."""
        return self.adapter.info

    def health_check(self) -> None:
        """See :meth:`RuntimeAdapter.health_check`."""
        self.portal.call(self.adapter.health_check)

    def capabilities(self) -> RuntimeCapabilities:
        """See :meth:`RuntimeAdapter.capabilities`."""
        return self.portal.call(self.adapter.capabilities)

    def check_plan(self, plan: BundlePlan) -> None:
        """See :meth:`RuntimeAdapter.check_plan`."""
        self.portal.call(self.adapter.check_plan, plan)

    def apply(self, plan: BundlePlan) -> BundleHandle:
        """See :meth:`RuntimeAdapter.apply`."""
        return self.portal.call(self.adapter.apply, plan)

    def observe(self, ref: BundleRef, *, not_before: datetime | None = None) -> ObservedBundle:
        """See :meth:`RuntimeAdapter.observe`."""
        if not_before is None:
            return self.portal.call(self.adapter.observe, ref)
        return self.portal.call(functools.partial(self.adapter.observe, ref, not_before=not_before))

    def stop(self, ref: BundleRef) -> None:
        """See :meth:`RuntimeAdapter.stop`."""
        self.portal.call(self.adapter.stop, ref)

    def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        """See :meth:`RuntimeAdapter.destroy`."""
        self.portal.call(self.adapter.destroy, ref, options)

    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        """See :meth:`RuntimeAdapter.upstream` (computed; no loop round trip)."""
        return self.adapter.upstream(ref, port)

    def capacity(self) -> Capacity:
        """See :meth:`RuntimeAdapter.capacity`."""
        return self.portal.call(self.adapter.capacity)

    def largest_fit_for(self, bundle_id: str) -> Fit | None:
        """See :meth:`RuntimeAdapter.largest_fit_for`."""
        return self.portal.call(self.adapter.largest_fit_for, bundle_id)

    def usage(self, ref: BundleRef) -> BundleUsage:
        """See :meth:`RuntimeAdapter.usage`."""
        return self.portal.call(self.adapter.usage, ref)

    def in_use(self) -> InUse:
        """See :meth:`RuntimeAdapter.in_use`."""
        return self.portal.call(self.adapter.in_use)

    # -- streams --------------------------------------------------------------------------

    def logs(self, ref: WorkloadRef, options: LogOptions | None = None) -> bytes:
        """The whole log (without ``follow``); see :meth:`follow_logs` for a live one."""

        async def read() -> bytes:
            async with self.adapter.logs(ref, options) as stream:
                return await read_all(stream)

        return self.portal.call(read)

    @contextlib.contextmanager
    def follow_logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> Iterator[Iterator[bytes]]:
        """``with runtime.follow_logs(ref) as chunks: for chunk in chunks: ...``."""
        options = options or LogOptions(follow=True)
        with self.portal.wrap_async_context_manager(self.adapter.logs(ref, options)) as stream:

            def chunks() -> Iterator[bytes]:
                while True:
                    try:
                        yield self.portal.call(stream.receive)
                    except anyio.EndOfStream:
                        return

            yield chunks()

    @contextlib.contextmanager
    def watch_bundles(self) -> Iterator[Iterator[BundleEvent]]:
        """``with runtime.watch_bundles() as events: for event in events: ...``."""
        with self.portal.wrap_async_context_manager(self.adapter.watch_bundles()) as events:

            def iterate() -> Iterator[BundleEvent]:
                while True:
                    try:
                        yield self.portal.call(anext, events)
                    except StopAsyncIteration:
                        return

            yield iterate()

    def run(
        self, ref: WorkloadRef, request: ExecRequest, *, stdin: bytes | None = None
    ) -> ExecResult:
        """See :meth:`RuntimeAdapter.run`."""
        return self.portal.call(lambda: self.adapter.run(ref, request, stdin=stdin))

    # -- volumes, images, trial, edge -----------------------------------------------------

    def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        """See :meth:`RuntimeAdapter.create_volume`."""
        return self.portal.call(self.adapter.create_volume, request)

    def destroy_volume(self, handle: VolumeHandle) -> None:
        """See :meth:`RuntimeAdapter.destroy_volume`."""
        self.portal.call(self.adapter.destroy_volume, handle)

    def snapshot_volume(self, handle: VolumeHandle) -> bytes:
        """The volume's contents as tar bytes."""

        async def read() -> bytes:
            async with self.adapter.snapshot_volume(handle) as stream:
                return await read_all(stream)

        return self.portal.call(read)

    def restore_volume(self, handle: VolumeHandle, tar: bytes) -> None:
        """Replace the volume's contents with ``tar``."""
        self.portal.call(self.adapter.restore_volume, handle, BytesReceiveStream(tar))

    def has_image(self, reference: str) -> bool:
        """See :meth:`RuntimeAdapter.has_image`."""
        return self.portal.call(self.adapter.has_image, reference)

    def import_image(self, archive: bytes) -> str:
        """Load the image archive ``archive``; see :meth:`RuntimeAdapter.import_image`."""
        return self.portal.call(self.adapter.import_image, BytesReceiveStream(archive))

    def trial(self, request: TrialRequest) -> TrialResult:
        """See :meth:`RuntimeAdapter.trial`."""
        return self.portal.call(self.adapter.trial, request)

    def apply_edge(self, plan: EdgePlan) -> None:
        """See :meth:`RuntimeAdapter.apply_edge`."""
        self.portal.call(self.adapter.apply_edge, plan)

    def observe_edge(self, name: str) -> EdgeState:
        """See :meth:`RuntimeAdapter.observe_edge`."""
        return self.portal.call(self.adapter.observe_edge, name)

    def remove_edge(self, name: str) -> None:
        """See :meth:`RuntimeAdapter.remove_edge`."""
        self.portal.call(self.adapter.remove_edge, name)

    def edges(self) -> tuple[str, ...]:
        """See :meth:`RuntimeAdapter.edges`."""
        return self.portal.call(self.adapter.edges)

    def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        """See :meth:`RuntimeAdapter.edge_volumes`."""
        return self.portal.call(self.adapter.edge_volumes)
