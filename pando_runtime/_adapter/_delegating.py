"""One way to wrap an adapter: :class:`DelegatingAdapter` forwards the whole contract.

A wrapper (instrumentation, a retry policy, a read cache, a host's audit log) holds the adapter
it wraps and changes a few of its methods. Written from scratch it re-lists the contract method
by method, and a method the contract gains later falls through to :class:`RuntimeAdapter`'s
default (``CapabilityUnsupported``) instead of reaching the wrapped adapter. Subclassing this
class, a wrapper overrides only what it changes; everything else is the wrapped adapter's,
including what the contract adds (``contract_coverage`` checks that this class forwards every
method). Composition, as an httpx client composes over a transport: the wrapped adapter is an
attribute, never a base class.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from anyio.abc import ByteReceiveStream

from .._contract._capabilities import RuntimeCapabilities
from .._contract._capacity import BundleUsage, Capacity, Fit, InUse
from .._contract._edge import EdgePlan, EdgeState
from .._contract._events import BundleEvent
from .._contract._exec import ExecRequest, ExecResult, ExecSession
from .._contract._log_options import LogOptions
from .._contract._observed import ObservedBundle
from .._contract._plans import BundlePlan
from .._contract._refs import BundleHandle, BundleRef, DestroyOptions, Upstream, WorkloadRef
from .._contract._trial import TrialRequest, TrialResult
from .._contract._volumes import VolumeHandle, VolumeRequest
from .._replicas._membership import Membership
from .._replicas._settings import MembershipSettings
from ._abc import RuntimeAdapter
from ._info import AdapterInfo

__all__ = ["DelegatingAdapter"]


class DelegatingAdapter(RuntimeAdapter):
    """An adapter that forwards every contract method to the adapter it wraps.

    Subclass it and override what the wrapper changes; :attr:`adapter` is the wrapped
    adapter (for its own methods beyond the contract, a fake's test controls for one).
    The settings are the wrapped adapter's: :attr:`config` is its config and
    :meth:`configure` reconfigures it. ``async with`` the wrapper enters and leaves the
    wrapped adapter's own block (an adapter may start work there, as the Kubernetes
    adapter's watches), and closing the wrapper closes the wrapped adapter.

    A subclass sets :attr:`kind` (and may set ``description`` and ``Config``) as any
    adapter does; :attr:`info` is the wrapped adapter's.
    """

    def __init__(self, adapter: RuntimeAdapter) -> None:
        # No super().__init__: the settings are the wrapped adapter's, already taken.
        self.adapter = adapter
        self.config = adapter.config

    # -- identity & health ----------------------------------------------------------------

    def configure(self, config: Mapping[str, Any] | Any | None) -> None:
        """Reconfigure the wrapped adapter."""
        self.adapter.configure(config)
        self.config = self.adapter.config

    @property
    def info(self) -> AdapterInfo:
        """The wrapped adapter's info."""
        return self.adapter.info

    async def health_check(self) -> None:
        """See :meth:`RuntimeAdapter.health_check`."""
        await self.adapter.health_check()

    async def capabilities(self) -> RuntimeCapabilities:
        """See :meth:`RuntimeAdapter.capabilities`."""
        return await self.adapter.capabilities()

    async def aclose(self) -> None:
        """Close the wrapped adapter."""
        await self.adapter.aclose()

    async def __aenter__(self) -> Self:
        await self.adapter.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.adapter.__aexit__(exc_type, exc, tb)

    # -- bundles --------------------------------------------------------------------------

    async def check_plan(self, plan: BundlePlan) -> None:
        """See :meth:`RuntimeAdapter.check_plan`."""
        await self.adapter.check_plan(plan)

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        """See :meth:`RuntimeAdapter.apply`."""
        return await self.adapter.apply(plan)

    async def observe(
        self, ref: BundleRef, *, not_before: datetime | None = None
    ) -> ObservedBundle:
        """See :meth:`RuntimeAdapter.observe`."""
        if not_before is None:  # an adapter written before ``not_before`` still works
            return await self.adapter.observe(ref)
        return await self.adapter.observe(ref, not_before=not_before)

    async def stop(self, ref: BundleRef) -> None:
        """See :meth:`RuntimeAdapter.stop`."""
        await self.adapter.stop(ref)

    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        """See :meth:`RuntimeAdapter.destroy`."""
        await self.adapter.destroy(ref, options)

    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        """See :meth:`RuntimeAdapter.upstream`."""
        return self.adapter.upstream(ref, port)

    # -- capacity -------------------------------------------------------------------------

    async def capacity(self) -> Capacity:
        """See :meth:`RuntimeAdapter.capacity`."""
        return await self.adapter.capacity()

    async def largest_fit_for(self, bundle_id: str) -> Fit | None:
        """See :meth:`RuntimeAdapter.largest_fit_for`."""
        return await self.adapter.largest_fit_for(bundle_id)

    async def usage(self, ref: BundleRef) -> BundleUsage:
        """See :meth:`RuntimeAdapter.usage`."""
        return await self.adapter.usage(ref)

    async def in_use(self) -> InUse:
        """See :meth:`RuntimeAdapter.in_use`."""
        return await self.adapter.in_use()

    def read_scope(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The wrapped adapter's read scope."""
        return self.adapter.read_scope()

    # -- events, logs and exec ------------------------------------------------------------

    def watch_bundles(self) -> contextlib.AbstractAsyncContextManager[AsyncIterator[BundleEvent]]:
        """See :meth:`RuntimeAdapter.watch_bundles`."""
        return self.adapter.watch_bundles()

    def logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> contextlib.AbstractAsyncContextManager[ByteReceiveStream]:
        """See :meth:`RuntimeAdapter.logs`."""
        return self.adapter.logs(ref, options)

    def exec(
        self, ref: WorkloadRef, request: ExecRequest
    ) -> contextlib.AbstractAsyncContextManager[ExecSession]:
        """See :meth:`RuntimeAdapter.exec`."""
        return self.adapter.exec(ref, request)

    async def run(
        self, ref: WorkloadRef, request: ExecRequest, *, stdin: bytes | None = None
    ) -> ExecResult:
        """The wrapped adapter's :meth:`RuntimeAdapter.run` (its own, when it has one)."""
        return await self.adapter.run(ref, request, stdin=stdin)

    # -- volumes --------------------------------------------------------------------------

    async def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        """See :meth:`RuntimeAdapter.create_volume`."""
        return await self.adapter.create_volume(request)

    async def destroy_volume(self, handle: VolumeHandle) -> None:
        """See :meth:`RuntimeAdapter.destroy_volume`."""
        await self.adapter.destroy_volume(handle)

    def snapshot_volume(
        self, handle: VolumeHandle
    ) -> contextlib.AbstractAsyncContextManager[ByteReceiveStream]:
        """See :meth:`RuntimeAdapter.snapshot_volume`."""
        return self.adapter.snapshot_volume(handle)

    async def restore_volume(
        self, handle: VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        """See :meth:`RuntimeAdapter.restore_volume`."""
        await self.adapter.restore_volume(handle, source)

    # -- images, trial, edge --------------------------------------------------------------

    async def has_image(self, reference: str) -> bool:
        """See :meth:`RuntimeAdapter.has_image`."""
        return await self.adapter.has_image(reference)

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        """See :meth:`RuntimeAdapter.import_image`."""
        return await self.adapter.import_image(source)

    async def trial(self, request: TrialRequest) -> TrialResult:
        """See :meth:`RuntimeAdapter.trial`."""
        return await self.adapter.trial(request)

    async def apply_edge(self, plan: EdgePlan) -> None:
        """See :meth:`RuntimeAdapter.apply_edge`."""
        await self.adapter.apply_edge(plan)

    async def observe_edge(self, name: str) -> EdgeState:
        """See :meth:`RuntimeAdapter.observe_edge`."""
        return await self.adapter.observe_edge(name)

    async def remove_edge(self, name: str) -> None:
        """See :meth:`RuntimeAdapter.remove_edge`."""
        await self.adapter.remove_edge(name)

    async def edges(self) -> tuple[str, ...]:
        """See :meth:`RuntimeAdapter.edges`."""
        return await self.adapter.edges()

    async def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        """See :meth:`RuntimeAdapter.edge_volumes`."""
        return await self.adapter.edge_volumes()

    # -- membership -----------------------------------------------------------------------

    def membership(
        self, replica: str, settings: MembershipSettings | None = None
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        """See :meth:`RuntimeAdapter.membership`."""
        return self.adapter.membership(replica, settings)
