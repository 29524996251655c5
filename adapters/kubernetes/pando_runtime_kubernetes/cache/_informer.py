"""The lean cache: what the adapter needs from pods, Services and namespaces, fed by watches.

One cluster-wide watch per kind, selected by ``app.kubernetes.io/managed-by=pando``,
keeps small slotted projections (never whole API objects): observing an app
then costs no API call, and apply knows what exists without asking. The pod
store also turns pod transitions into bundle events for ``watch_bundles``
subscribers.

The informer owns the watches and their stores; each other job is an object of its own
that it composes: :attr:`Informer.supervisor` runs the loops (``_supervision.py``),
:attr:`Informer.clock` converts proofs to UTC (``_clock.py``), :attr:`Informer.liveness`
probes the API server (``_liveness.py``), :attr:`Informer.staleness` says how current the
cache is (``_staleness.py``), :attr:`Informer.collector` runs ``collect``
(``_collector.py``); a warm start resumes an informer from a saved state (``_resume.py``).

An informer made with ``connect`` instead of a transport gets its transport when its watches
first need one, after ``before_watching`` (a warm start answers from its saved state
meanwhile, and checks there that the state is the cluster's).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any

import anyio

from pando_runtime.plugin import NO_API_OBSERVER, ApiObserver

from .._names import MANAGED_SELECTOR
from ..api._transport import KubeTransport
from ._clock import LoopClock
from ._collector import Collector
from ._list_watch import ApiListWatch, Connect, ConnectingListWatch
from ._liveness import Liveness
from ._staleness import Staleness
from ._stores import (
    ClaimStore,
    GatewayStore,
    Listeners,
    NamespaceStore,
    ObservedMemo,
    PodHandler,
    PodStore,
    ServiceStore,
)
from ._supervision import Supervisor
from ._watch import ListWatchSource, NewestVersion, WatchHandler, WatchLoop

__all__ = ["Informer"]

_PLURALS = {
    "pods": "pods",
    "services": "services",
    "namespaces": "namespaces",
    "claims": "persistentvolumeclaims",
}
"""The resource each watch of the cache lists and watches (``/api/v1/<plural>``)."""


class Informer:
    """The watches and their stores, run in one task group while :meth:`running`.

    ``collect`` (optional) is called, through a keyed work queue with retries
    (:class:`Collector`), for each ``(namespace, workload)`` whose pods changed: the adapter
    uses it to delete pods a newer instance has superseded.

    ``probe`` (optional) asks the API server whether it answers, every ``probe_interval``
    seconds the watches are silent; ``answers`` (optional) counts the calls the API server
    has answered (see :class:`Liveness`). ``max_staleness``: past it unconfirmed, the cache
    does not answer (see :class:`Staleness`).

    ``connect`` (instead of ``transport``): the watches' transport, asked when first needed;
    ``cluster`` names the cluster in logs then. ``before_watching`` (optional) runs before
    the watch loops start, again until it succeeds (a warm start's identity check).
    """

    def __init__(
        self,
        transport: KubeTransport | None,
        *,
        sources: Mapping[str, ListWatchSource] | None = None,
        kinds: tuple[str, ...] = ("pods", "services", "namespaces", "claims"),
        watch_timeout: int = 290,
        collect: Callable[[tuple[str, str]], Awaitable[None]] | None = None,
        probe: Callable[[float], Awaitable[object]] | None = None,
        probe_interval: float = 5.0,
        max_staleness: float = 30.0,
        newest_version: NewestVersion | None = None,
        answers: Callable[[], int] | None = None,
        connect: Connect | None = None,
        cluster: str | None = None,
        before_watching: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.pods = PodStore()
        self.gateways = GatewayStore()
        self.services = ServiceStore()
        self.namespaces = NamespaceStore()
        self.claims = ClaimStore()
        self.observed = ObservedMemo()
        """What observe answered per namespace, until one of its facts changes."""
        self.namespace_changed = Listeners[str | None]()
        """Told the namespace of every change of any store (``None``: all), for a disk copy."""
        for store in (self.pods, self.namespaces, self.claims):
            store.namespace_changed.add(self.observed.forget)  # what observe answers rests on these
        for each in (self.pods, self.namespaces, self.claims, self.gateways, self.services):
            each.namespace_changed.add(self.namespace_changed)
        self._transport = transport
        self._connect = connect
        log_extra = {"cluster": transport.cluster if transport is not None else cluster}
        paths = {kind: f"/api/v1/{plural}" for kind, plural in _PLURALS.items()}
        handlers: dict[str, WatchHandler] = {
            "pods": PodHandler(self.pods, self.gateways),
            "services": self.services,
            "namespaces": self.namespaces,
            "claims": self.claims,
        }
        self.loops: dict[str, WatchLoop] = {}
        for kind in kinds:
            source = (sources or {}).get(kind)
            if source is None:
                source = self._api_source(
                    paths[kind], label_selector=MANAGED_SELECTOR, timeout_seconds=watch_timeout
                )
            self.loops[kind] = WatchLoop(
                source,
                handlers[kind],
                name=kind,
                on_restart=self._restart_reporter(_PLURALS[kind]),
                log_extra=log_extra,
            )
        if newest_version is None and (transport is not None or connect is not None):
            newest_version = self._api_source(paths["pods"]).newest_version
        self.newest_version = newest_version
        """Asked once by a resumed start: the version every resumed watch must reach."""
        self.collector = Collector(collect, log_extra) if collect is not None else None
        if self.collector is not None:
            queue = self.collector.queue
            self.pods.pod_changed.add(lambda f: queue.add((f.namespace, f.workload)))
        self.active = False
        self.supervisor = Supervisor(self.loops, self.pods, before_watching)
        self.clock = LoopClock()
        self.liveness = Liveness(
            probe,
            interval=probe_interval,
            answers=answers,
            max_staleness=max_staleness,
            log_extra=log_extra,
        )
        self.staleness = Staleness(self, self.liveness, self.clock, max_staleness=max_staleness)

    def start_report(self) -> dict[str, Any]:
        """How the cache started, for the operator.

        ``start`` is ``cold`` (listed), ``warm`` (every watch resumed from the saved cache),
        ``relisted`` (some saved version had expired) or ``discarded`` (once connected, the
        saved cache proved another cluster's: everything listed); ``replayed``: the events the
        resumed watches caught up with; ``watches``: each watch's own start.
        """
        starts = {loop.start for loop in self.loops.values()}
        start = next((s for s in ("discarded", "relisted", "warm") if s in starts), "cold")
        return {
            "start": start,
            "replayed": sum(loop.replayed for loop in self.loops.values()),
            "watches": {kind: loop.start for kind, loop in self.loops.items()},
        }

    async def _connected(self) -> KubeTransport:
        if self._transport is None:
            assert self._connect is not None  # noqa: S101 - a transport or connect
            self._transport = await self._connect()
        return self._transport

    def _api_source(self, path: str, **options: Any) -> ApiListWatch | ConnectingListWatch:
        """A source over the API: on the transport, or on the one ``connect`` makes."""
        if self._transport is not None:
            return ApiListWatch(self._transport, path, **options)
        assert self._connect is not None  # noqa: S101 - sources, a transport or connect
        return ConnectingListWatch(self._connected, path, **options)

    def _observer(self) -> ApiObserver:
        transport = self._transport
        return transport.observer if transport is not None else NO_API_OBSERVER

    def _restart_reporter(self, resource: str) -> Callable[[str], None] | None:
        if self._transport is None and self._connect is None:
            return None
        # The transport's observer is read at each restart: it may be set after the start.
        return lambda reason: self._observer().watch_restarted(resource, reason)

    def discard_saved(self) -> None:
        """Before the watches run: the saved state resumed is not this cluster's.

        Every store is emptied at once and every watch lists first (see
        :meth:`WatchLoop.discard_saved`); the pod list tells event streams ``MISSED``.
        """
        for store in (self.pods, self.gateways, self.services, self.namespaces, self.claims):
            store.on_list([], relist=False)
        for loop in self.loops.values():
            loop.discard_saved()

    def cached_objects(self) -> dict[str, int]:
        """How many objects each store holds now, by resource."""
        return {
            "pods": len(self.pods),
            "services": sum(map(len, self.services.by_namespace.values())),
            "namespaces": len(self.namespaces.by_name),
            "persistentvolumeclaims": sum(map(len, self.claims.by_namespace.values())),
        }

    @property
    def synced(self) -> bool:
        """Every store holds a first list and every watch is connected."""
        if not self.active:
            return False
        # Asked by every read (several per observe): plain attributes, no event lookups.
        for loop in self.loops.values():  # noqa: SIM110 - the loop is the fast form here
            if not (loop.ready and loop.healthy):
                return False
        return True

    async def wait_synced(self, timeout: float) -> bool:  # noqa: ASYNC109 - a bound
        """Wait for the first lists; false when they did not come in time."""
        with anyio.move_on_after(timeout):
            for loop in self.loops.values():
                await loop.synced.wait()
        return self.synced

    @contextlib.asynccontextmanager
    async def running(self, give_up_after: float = 30.0) -> AsyncIterator[Informer]:
        """Run the watches (and the collector, and the probes) for the duration of the block."""
        tasks: list[Callable[[], Coroutine[Any, Any, None]]] = []
        if self.collector is not None:
            tasks.append(self.collector.run)
        probes = self.liveness.run
        tasks.append(lambda: probes(self.loops, self.staleness.unconfirmed_for))
        async with self.supervisor.running(give_up_after, tuple(tasks)):
            self.active = True
            try:
                yield self
            finally:
                self.active = False
