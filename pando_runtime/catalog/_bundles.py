"""Catalog source for any runtime: the bundles an adapter runs, as it reports them.

The host tells the source which plans to publish (:meth:`BundleSource.track`): the
contract lists no bundles, and only the plan knows a workload's ports. The source then
follows the adapter's bundle events (``watch_bundles``), observes each bundle an event
names (``observe``) and registers every running, not unhealthy, workload port where the
adapter says it is reached (``upstream``). ``WATCHING`` and ``MISSED`` re-observe every
tracked bundle; an adapter without bundle events is polled. A bundle that cannot be
observed (an outage) keeps its registrations until it can: an outage is never mistaken
for a removed app.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from urllib.parse import urlsplit

import anyio
import attrs

from .._adapter._abc import RuntimeAdapter
from .._contract._errors import CapabilityUnsupported, PandoRuntimeError
from .._contract._events import BundleEventKind
from .._contract._observed import ObservedBundle
from .._contract._plans import BundlePlan
from .._contract._refs import BundleRef, WorkloadRef
from .._util._background import in_background
from ._types import CATALOG_NODE, CatalogRegistration, Syncer

__all__ = ["BundleSource", "bundle_service_name"]

log = logging.getLogger("pando_runtime.catalog")
log.addHandler(logging.NullHandler())

_RESYNC = {BundleEventKind.WATCHING, BundleEventKind.MISSED}


def bundle_service_name(bundle_id: str, workload: str) -> str:
    """The default service name of a workload: ``<bundle id>-<workload>``, DNS-safe."""
    return f"{bundle_id.lower().replace('_', '-')}-{workload}"


@attrs.frozen
class _Tracked:
    plan: BundlePlan
    tags: tuple[str, ...]
    metadata: Mapping[str, str]


class BundleSource:
    """Publishes the running workloads of tracked bundles to a :class:`Syncer`.

    ``async with source.running():`` (or ``await source.run()``) follows the adapter until
    cancelled. The first whole set reaches the syncer only once every bundle tracked at
    start has been observed.
    """

    def __init__(
        self,
        adapter: RuntimeAdapter,
        syncer: Syncer,
        *,
        node: str = CATALOG_NODE,
        service_name: Callable[[str, str], str] = bundle_service_name,
        poll_interval: float = 5.0,
        retry_interval: float = 1.0,
        only_healthy: bool = True,
    ) -> None:
        self.adapter = adapter
        self.syncer = syncer
        self.node = node
        self.service_name = service_name
        self.poll_interval = poll_interval
        self.retry_interval = retry_interval
        self.only_healthy = only_healthy
        self._tracked: dict[str, _Tracked] = {}
        self._published: dict[str, tuple[CatalogRegistration, ...]] = {}
        self._dirty: set[str] = set()
        self._wake = anyio.Event()
        self._first_done = False
        self.observes = 0
        """``observe`` calls made so far."""

    # -- what the host calls ------------------------------------------------------------

    def track(
        self,
        plan: BundlePlan,
        *,
        tags: Iterable[str] = (),
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """Publish ``plan``'s workload ports while they run (replaces an earlier plan)."""
        self._tracked[plan.bundle_id] = _Tracked(plan, tuple(tags), dict(metadata or {}))
        self._mark(plan.bundle_id)

    def forget(self, bundle_id: str) -> None:
        """Stop publishing ``bundle_id`` (its registrations leave the desired set)."""
        self._tracked.pop(bundle_id, None)
        self._mark(bundle_id)

    @property
    def tracked(self) -> tuple[str, ...]:
        """The bundle ids being published."""
        return tuple(self._tracked)

    def _mark(self, *bundle_ids: str) -> None:
        self._dirty.update(bundle_ids)
        self._wake.set()

    # -- running ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[BundleSource]:
        """Follow the adapter for the duration of the block."""
        async with in_background(self.run):
            yield self

    async def run(self) -> None:
        """Follow events (or poll) and publish, until cancelled."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._follow)
            await self._publish_loop()

    async def _follow(self) -> None:
        """Turn bundle events into bundles to observe; reopen a lost stream."""
        while True:
            try:
                async with self.adapter.watch_bundles() as events:
                    async for event in events:
                        if event.kind in _RESYNC:
                            self._mark(*self._tracked)
                        elif event.bundle_id in self._tracked:
                            self._mark(event.bundle_id)
            except CapabilityUnsupported:
                log.info("adapter %s has no bundle events: polling", self.adapter.info.name)
                await self._poll()
            except PandoRuntimeError as error:
                log.warning("bundle events lost (%s); reopening", error.message)
            await anyio.sleep(self.retry_interval)

    async def _poll(self) -> None:
        while True:
            self._mark(*self._tracked)
            await anyio.sleep(self.poll_interval)

    async def _publish_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            dirty, self._dirty = self._dirty, set()
            failed = await self._observe_all(dirty)
            if failed:
                self._dirty |= failed
            if not self._first_done and (failed & set(self._tracked)):
                # The first whole set waits until every tracked bundle was seen once.
                await anyio.sleep(self.retry_interval)
                self._wake.set()
                continue
            self._first_done = True
            await self.syncer.sync(self.registrations())
            if failed:
                await anyio.sleep(self.retry_interval)
                self._wake.set()

    async def _observe_all(self, bundle_ids: set[str]) -> set[str]:
        failed: set[str] = set()
        for bundle_id in sorted(bundle_ids):
            tracked = self._tracked.get(bundle_id)
            if tracked is None:
                self._published.pop(bundle_id, None)
                continue
            self.observes += 1
            try:
                observed = await self.adapter.observe(BundleRef(bundle_id))
            except PandoRuntimeError as error:
                log.warning("cannot observe bundle %s (%s): kept as it was", bundle_id, error)
                failed.add(bundle_id)
                continue
            self._published[bundle_id] = self._registrations_of(tracked, observed)
        return failed

    def registrations(self) -> list[CatalogRegistration]:
        """The whole set this source publishes now."""
        return [r for bundle_id in sorted(self._published) for r in self._published[bundle_id]]

    def _registrations_of(
        self, tracked: _Tracked, observed: ObservedBundle
    ) -> tuple[CatalogRegistration, ...]:
        if not observed.exists:
            return ()
        plan = tracked.plan
        state = {w.name: w for w in observed.workloads}
        out: list[CatalogRegistration] = []
        for workload in plan.workloads:
            seen = state.get(workload.name)
            if seen is None or not seen.running or seen.stopping:  # draining: no new traffic
                continue
            if self.only_healthy and seen.healthy is False:
                continue
            for port in workload.ports:
                ref = WorkloadRef(plan.bundle_id, workload.name)
                url = urlsplit(self.adapter.upstream(ref, port.number).url)
                out.append(
                    CatalogRegistration(
                        service=self.service_name(plan.bundle_id, workload.name),
                        service_id=f"{plan.bundle_id}:{workload.name}:{port.number}",
                        address=url.hostname or "",
                        port=url.port or port.number,
                        tags=tracked.tags,
                        metadata={
                            "pando-bundle": plan.bundle_id,
                            "pando-workload": workload.name,
                            "pando-adapter": self.adapter.info.name,
                            **tracked.metadata,
                        },
                        node=self.node,
                    )
                )
        return tuple(out)
