"""The lean cache: what the adapter needs from pods, Services and namespaces, fed by watches.

One cluster-wide watch per kind, selected by ``app.kubernetes.io/managed-by=pando``,
keeps small slotted projections (never whole API objects): observing an app
then costs no API call, and apply knows what exists without asking. The pod
store also turns pod transitions into bundle events for ``watch_bundles``
subscribers.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from pando_runtime import AdapterUnavailable, PandoRuntimeError

from .._log import logger
from .._names import (
    MANAGED_SELECTOR,
)
from ..api._errors import ApiError
from ..api._transport import KubeTransport
from ._list_watch import ApiListWatch, SharedAnswer
from ._stores import (
    CacheState,
    ClaimStore,
    GatewayStore,
    Listeners,
    NamespaceStore,
    ObservedMemo,
    PodHandler,
    PodStore,
    ServiceStore,
)
from ._watch import ListWatchSource, NewestVersion, WatchHandler, WatchLoop, why
from ._work_queue import WorkQueue

__all__ = ["Informer"]

_LOG = logger("watch")
_COLLECT_LOG = logger("bundles")

PROBE_REPEAT_LOG_INTERVAL = 300.0
"""Seconds between warnings while the API server keeps not answering the probe."""


_PLURALS = {
    "pods": "pods",
    "services": "services",
    "namespaces": "namespaces",
    "claims": "persistentvolumeclaims",
}
"""The resource each watch of the cache lists and watches (``/api/v1/<plural>``)."""


class Informer:
    """The three watches and their stores, run in one task group while :meth:`running`.

    ``collect`` (optional) is called, through a keyed work queue with retries,
    for each ``(namespace, workload)`` whose pods changed: the adapter uses it
    to delete pods a newer instance has superseded. A key given up after its retries is
    logged (WARNING, on ``pando_runtime.kubernetes.bundles``), naming the pod when the
    error's details do.

    ``probe`` (optional) asks the API server whether it answers; it raises
    :class:`ApiError` when it does not (anything else is a bug, and is not taken for an
    outage). ``answers`` (optional) counts the calls the API server has answered, any of
    them: an answer after a failed probe shows it reachable again before the next probe does.
    The first failed probe is logged (WARNING, on ``.watch``) with its reason,
    repeats at most every :data:`PROBE_REPEAT_LOG_INTERVAL` seconds, the return at INFO.
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
                assert transport is not None  # noqa: S101 - sources or a transport
                source = ApiListWatch(
                    transport,
                    paths[kind],
                    label_selector=MANAGED_SELECTOR,
                    timeout_seconds=watch_timeout,
                )
            self.loops[kind] = WatchLoop(
                source,
                handlers[kind],
                name=kind,
                on_restart=self._restart_reporter(transport, _PLURALS[kind]),
                log_extra={"cluster": transport.cluster if transport is not None else None},
            )
        if newest_version is None and transport is not None:
            newest_version = ApiListWatch(transport, paths["pods"]).newest_version
        self._newest_version = newest_version
        """Asked once by a resumed start: the version every resumed watch must reach."""
        self.queue: WorkQueue[tuple[str, str]] = WorkQueue()
        self._collect = collect
        if collect is not None:
            self.pods.pod_changed.add(lambda f: self.queue.add((f.namespace, f.workload)))
        self.active = False
        self._probe = probe
        self.probe_interval = probe_interval
        self.max_staleness = max_staleness
        self._answers = answers
        self._unanswered_at: int | None = None
        """``answers`` when a probe last got no answer; ``None`` once one is answered."""
        self.probes = 0
        self._probe_failures = 0
        self._probe_warned_at: float | None = None
        self._log_extra = {"cluster": transport.cluster if transport is not None else None}
        self._utc_epoch: datetime | None = None
        self._confirming = anyio.Lock()

    def resume(self, state: CacheState) -> None:
        """Before :meth:`running`: hold ``state`` (saved earlier) and watch on from its versions.

        Until each watch has caught up the cache is not synced (reads wait, then read the
        API), except that observe may answer from a saved state whose confirmation
        (``state.confirmed``) is within ``max_staleness`` (:attr:`serves_saved`); the pod
        events of the catch-up are kept for the first event stream.
        """
        self.pods.on_list(state.pods, relist=False)
        self.gateways.on_list(state.gateways, relist=False)
        self.services.on_list(state.services, relist=False)
        self.namespaces.on_list(state.namespaces, relist=False)
        self.claims.on_list(state.claims, relist=False)
        self.pods.replay = []
        newest = SharedAnswer(self._newest_version) if self._newest_version else None
        now = anyio.current_time()
        for kind, loop in self.loops.items():
            confirmed = state.confirmed.get(kind)
            saved_at = None if confirmed is None else min(now, self.monotonic(confirmed))
            loop.resume(state.versions[kind], newest, saved_at)

    def state(self) -> CacheState:
        """What the stores hold now, with each watch's version (nothing copied but lists)."""
        return CacheState(
            versions={kind: loop.resource_version for kind, loop in self.loops.items()},
            pods=[f for pods in self.pods.by_namespace.values() for f in pods.values()],
            gateways=[f for kept in self.gateways.by_namespace.values() for f in kept.values()],
            services=[(ns, n) for ns, names in self.services.by_namespace.items() for n in names],
            namespaces=list(self.namespaces.by_name.values()),
            claims=[f for kept in self.claims.by_namespace.values() for f in kept.values()],
            confirmed=self.confirmations(),
        )

    def start_report(self) -> dict[str, Any]:
        """How the cache started, for the operator.

        ``start`` is ``cold`` (listed), ``warm`` (every watch resumed from the saved cache)
        or ``relisted`` (some saved version had expired); ``replayed``: the events the
        resumed watches caught up with; ``watches``: each watch's own start.
        """
        starts = {loop.start for loop in self.loops.values()}
        start = "relisted" if "relisted" in starts else ("warm" if "warm" in starts else "cold")
        return {
            "start": start,
            "replayed": sum(loop.replayed for loop in self.loops.values()),
            "watches": {kind: loop.start for kind, loop in self.loops.items()},
        }

    def unconfirmed_for(self) -> float:
        """Seconds since every watch was last proved current (its oldest proof)."""
        if not self.loops:
            return 0.0
        oldest = min(loop.proved_at for loop in self.loops.values())
        return max(0.0, anyio.current_time() - oldest)

    def _epoch(self) -> datetime:
        """The UTC time of the event loop's clock's zero.

        The event loop's clock is mapped to UTC once: reading both clocks on every call made
        two answers with no proof in between differ by the gap between the reads, sometimes
        going back in time.
        """
        if self._utc_epoch is None:
            self._utc_epoch = datetime.now(UTC) - timedelta(seconds=anyio.current_time())
        return self._utc_epoch

    def utc(self, at: float) -> datetime:
        """The UTC time of ``at`` on the event loop's clock."""
        return self._epoch() + timedelta(seconds=at)

    def monotonic(self, when: datetime) -> float:
        """The event loop's clock at the UTC time ``when``."""
        return (when - self._epoch()).total_seconds()

    def confirmations(self) -> dict[str, datetime]:
        """Each watch's last proof, as a UTC time (saved with the versions)."""
        now = anyio.current_time()
        return {kind: self.utc(min(loop.proved_at, now)) for kind, loop in self.loops.items()}

    def confirmed_at(self) -> datetime:
        """When the cache was last known current (its oldest watch's proof), as a UTC time."""
        now = anyio.current_time()
        proved = min((loop.proved_at for loop in self.loops.values()), default=now)
        return self.utc(min(proved, now))

    @property
    def serves_saved(self) -> bool:
        """A warm start not caught up yet whose saved state is within the staleness bound.

        Every watch either caught up (and is connected) or still holds a saved state whose
        confirmation time is known; ``observe`` may then answer from it at once.
        """
        if not self.active:
            return False
        saved = False
        for loop in self.loops.values():
            if loop.serves_saved:
                saved = True
            elif not (loop.ready and loop.healthy):
                return False
        return saved and self.unconfirmed_for() <= self.max_staleness

    async def confirm(self, at: float, timeout: float) -> bool:  # noqa: ASYNC109 - a bound
        """Wait until the cache is synced and proved current at ``at`` or later.

        A synced cache whose watches have been quiet since before ``at`` is proved by one probe
        of the API server, shared by concurrent callers (the watches are connected, so
        nothing older than the probe is missing). False when not proved within ``timeout``.
        """
        at = min(at, anyio.current_time())
        with anyio.move_on_after(timeout):
            while True:
                proved = min((loop.proved_at for loop in self.loops.values()), default=at)
                if self.synced and proved >= at:
                    return True
                if not self.synced or self._probe is None:
                    await anyio.sleep(0.05)
                    continue
                async with self._confirming:
                    proved = min(loop.proved_at for loop in self.loops.values())
                    if proved >= at:
                        continue
                    asked = anyio.current_time()
                    try:
                        await self._probe(min(timeout, self.probe_interval))
                    except ApiError as error:
                        self._probe_failed(error)
                        await anyio.sleep(0.2)
                        continue
                    self._probe_answered()
                    if self.synced:
                        for loop in self.loops.values():
                            loop.proved_alive(asked)
        return False

    @property
    def reachable(self) -> bool:
        """False while the API server has answered nothing since a probe it did not answer.

        A probe's failure is a fact about one moment: a write or a read answered since then
        (the server restarted, say) proves it back, though the next probe is seconds away.
        """
        if self._unanswered_at is None:
            return True
        return self._answers is not None and self._answers() > self._unanswered_at

    @property
    def fresh(self) -> bool:
        """Synced, and proved current within the staleness bound."""
        return self.synced and self.unconfirmed_for() <= self.max_staleness

    def stale_error(self) -> AdapterUnavailable | None:
        """Why the cache must not answer and the API cannot either, or ``None``.

        Stale past the bound while the API server does not answer (its probe failed and no
        call has been answered since): a direct read would only wait for its timeout, so the
        outage is reported at once.
        """
        stale_for = self.unconfirmed_for()
        if self.reachable or stale_for <= self.max_staleness:
            return None
        return AdapterUnavailable(
            f"the cache has not been confirmed for {stale_for:.0f} s and the API server "
            "does not answer",
            remedy="Check that the API server is up and reachable; observe answers again "
            "as soon as it is.",
            details={
                "confirmed_at": self.confirmed_at().isoformat(),
                "stale_for": round(stale_for, 1),
            },
        )

    async def _run_probes(self) -> None:
        """Ask the API server whether it is there whenever the watches have been silent.

        A hung server (or a hung connection to it) leaves a watch open and quiet: only an
        answer proves it current. An answer while every watch is connected confirms them.
        """
        probe = self._probe
        if probe is None:
            return
        while True:
            await anyio.sleep(self.probe_interval)
            if self.unconfirmed_for() < self.probe_interval:
                continue
            self.probes += 1
            try:
                await probe(self.probe_interval)
            except ApiError as error:
                self._probe_failed(error)
                continue
            self._probe_answered()
            if all(loop.healthy for loop in self.loops.values()):
                now = anyio.current_time()
                for loop in self.loops.values():
                    loop.proved_alive(now)

    def _probe_failed(self, error: ApiError) -> None:
        """No answer: say why at the first failure, then at most every few minutes."""
        self._unanswered_at = self._answers() if self._answers is not None else 0
        self._probe_failures += 1
        now = anyio.current_time()
        last = self._probe_warned_at
        extra = {**self._log_extra, "failures": self._probe_failures, "status": error.status}
        if last is None or now - last >= PROBE_REPEAT_LOG_INTERVAL:
            self._probe_warned_at = now
            _LOG.warning(
                "the API server does not answer the cache's probe (%s): failed probes: %d; "
                "observe raises AdapterUnavailable once the cache is %.0f s unconfirmed",
                why(error),
                self._probe_failures,
                self.max_staleness,
                extra=extra,
            )
        else:
            _LOG.debug("the cache's probe failed again (%s)", why(error), extra=extra)

    def _probe_answered(self) -> None:
        self._unanswered_at = None
        if self._probe_failures:
            _LOG.info(
                "the API server answers the cache's probe again, after %d failed probes",
                self._probe_failures,
                extra={**self._log_extra, "failures": self._probe_failures},
            )
        self._probe_failures = 0
        self._probe_warned_at = None

    def _collect_retried(self, key: tuple[str, str], error: Exception) -> None:
        ns, workload = key
        _COLLECT_LOG.debug(
            "collecting superseded pods of %s in namespace %s failed (%s): retrying",
            workload,
            ns,
            _collect_why(error),
            extra={**self._log_extra, "namespace": ns, "workload": workload},
        )

    def _collect_dropped(self, key: tuple[str, str], error: Exception) -> None:
        """A key given up after its retries: what stays behind, and why (never a message)."""
        ns, workload = key
        details = error.details if isinstance(error, PandoRuntimeError) else {}
        pod = details.get("pod")
        what = f"superseded pod {pod} of {workload}" if pod else f"superseded pods of {workload}"
        _COLLECT_LOG.warning(
            "gave up removing %s in namespace %s after %d tries (%s): left until the "
            "workload's pods change again",
            what,
            ns,
            self.queue.max_retries + 1,
            _collect_why(error),
            extra={
                **self._log_extra,
                "namespace": ns,
                "workload": workload,
                "pod": pod,
                "code": getattr(error, "code", None),
                "status": details.get("status"),
            },
        )

    @staticmethod
    def _restart_reporter(
        transport: KubeTransport | None, resource: str
    ) -> Callable[[str], None] | None:
        if transport is None:
            return None
        # The transport's observer is read at each restart: it may be set after the start.
        return lambda reason: transport.observer.watch_restarted(resource, reason)

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

    def fail_subscribers(self, error: AdapterUnavailable) -> None:
        """End every event stream with ``error``."""
        self.pods.events.fail(error)

    async def _supervise(self, give_up_after: float) -> None:
        """End event streams when the pod watch has been down for ``give_up_after`` s."""
        loop = self.loops.get("pods")
        if loop is None:
            return
        down_since: float | None = None
        while True:
            await anyio.sleep(min(1.0, give_up_after / 4))
            if loop.healthy or not loop.synced.is_set():
                down_since = None
                continue
            now = anyio.current_time()
            down_since = down_since or now
            if now - down_since >= give_up_after and self.pods.events:
                self.fail_subscribers(
                    AdapterUnavailable(
                        f"the pod watch is down: {loop.last_error}",
                        remedy="Open a new event stream and re-observe every app.",
                    )
                )

    @contextlib.asynccontextmanager
    async def running(self, give_up_after: float = 30.0) -> AsyncIterator[Informer]:
        """Run the watches (and the collector) for the duration of the block."""
        async with anyio.create_task_group() as group:
            for loop in self.loops.values():
                group.start_soon(loop.run)
            if self._collect is not None:
                group.start_soon(
                    functools.partial(
                        self.queue.run,
                        self._collect,
                        on_error=self._collect_retried,
                        on_drop=self._collect_dropped,
                    )
                )
            group.start_soon(self._supervise, give_up_after)
            group.start_soon(self._run_probes)
            self.active = True
            try:
                yield self
            finally:
                self.active = False
                group.cancel_scope.cancel()


def _collect_why(error: Exception) -> str:
    """A collector's failure as a log may say it: its code and status, never its message."""
    if isinstance(error, PandoRuntimeError):
        status = error.details.get("status")
        return f"{error.code}, status {status}" if status is not None else error.code
    return why(error)
