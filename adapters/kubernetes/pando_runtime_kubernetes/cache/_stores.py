"""The cache's stores: each kind's projections by namespace, kept by one watch each.

A store is the watch's handler (a first list, then events) and what reads ask; the pod store
also feeds bundle-event subscribers and remembers each namespace's observed answer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

import anyio
import attrs

from pando_runtime import BundleEvent, BundleEventKind
from pando_runtime.plugin import BundleEventHub

from ._capacity import BundlePods, Reservation
from ._projections import (
    ClaimFacts,
    GatewayFacts,
    NamespaceFacts,
    PodFacts,
    pod_transitions,
    project_claim,
    project_gateway,
    project_namespace,
    project_pod,
)

__all__ = [
    "CacheState",
    "ClaimStore",
    "Departures",
    "GatewayStore",
    "Listeners",
    "NamespaceStore",
    "NamespacedStore",
    "ObservedMemo",
    "PodHandler",
    "PodStore",
    "ServiceStore",
]

_intern = sys.intern


_REPLAY_MAX = 10_000
"""Events kept for the first stream after a warm start; past it, one ``MISSED``."""


_T = TypeVar("_T")

_DEPARTURES_KEPT = 4096
"""Departures each store remembers: a late answer is of a call in flight at the deletion."""


class Departures:
    """When each object left a store (its DELETED event's version): none of it comes back.

    A watch's DELETED event can be handled before the answer of a call made earlier: an
    immediate delete's own answer, or a read that found the object a moment before. Such an
    answer is at most as new as the deletion, and a store refuses it; an object made again
    under the same key is newer and is taken. Without this a late answer put back what the
    watch removed, no later event removed it, and the saved cache handed it to the next start.
    Only the newest departures are kept: a late answer belongs to a call in flight at the
    deletion, seconds at most.
    """

    __slots__ = ("_versions",)

    def __init__(self) -> None:
        self._versions: dict[Any, int] = {}

    def left(self, key: Any, version: int) -> None:
        """``key`` was deleted at ``version`` (0, unknown: nothing to hold against answers)."""
        if version <= 0:
            return
        self._versions.pop(key, None)
        self._versions[key] = version
        if len(self._versions) > _DEPARTURES_KEPT:
            del self._versions[next(iter(self._versions))]

    def refuses(self, key: Any, version: int) -> bool:
        """Whether facts of ``key`` at ``version`` are from before it left (or of no version)."""
        departed = self._versions.get(key)
        return departed is not None and version <= departed

    def clear(self) -> None:
        """Forget every departure (a list replaced everything with the truth)."""
        self._versions.clear()


class Listeners(Generic[_T]):
    """Who is told of a change: callbacks added by whoever needs to know, called in order.

    A store owns one and calls it; the informer, the observe memo and the disk copy each
    ``add`` themselves, instead of another class assigning a callback attribute.
    """

    __slots__ = ("_callbacks",)

    def __init__(self) -> None:
        self._callbacks: list[Callable[[_T], None]] = []

    def add(self, callback: Callable[[_T], None]) -> None:
        """Call ``callback`` with every change from now on."""
        self._callbacks.append(callback)

    def __call__(self, change: _T) -> None:
        for callback in self._callbacks:
            callback(change)


class ObservedMemo:
    """Each app's last observed state, kept until a fact of its namespace changes.

    An observe pass over thousands of apps then costs one lookup per app instead of
    building the same immutable answer again. The pod, claim and namespace stores forget a
    namespace's entry whenever they change one of its facts (every entry on a list); an
    answer built while something changed is not kept (``changes`` moved meanwhile).
    """

    __slots__ = ("_by_namespace", "changes")

    def __init__(self) -> None:
        self._by_namespace: dict[str, Any] = {}
        self.changes = 0

    def get(self, namespace: str) -> Any:
        """The kept answer for ``namespace``, or ``None``."""
        return self._by_namespace.get(namespace)

    def keep(self, namespace: str, answer: Any, since: int) -> None:
        """Keep ``answer``, built from the facts as they were when ``changes`` was ``since``."""
        if since == self.changes:
            self._by_namespace[namespace] = answer

    def forget(self, namespace: str | None) -> None:
        """Drop the answer of ``namespace`` (``None``: of every namespace)."""
        self.changes += 1
        if namespace is None:
            self._by_namespace.clear()
        else:
            self._by_namespace.pop(namespace, None)


class PodStore:
    """Pods by namespace, and the bundle events their changes make (a :class:`WatchHandler`).

    ``events``: the hub every ``watch_bundles`` stream of this cluster subscribes to.
    """

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.by_namespace: dict[str, dict[str, PodFacts]] = {}
        self.events = BundleEventHub()
        self.pod_changed = Listeners[PodFacts]()
        """Told every pod put (a new or changed one)."""
        self.namespace_changed = Listeners[str | None]()
        """Told the namespace of every change (``None``: everything)."""
        self._clock = clock
        self.departures = Departures()
        self.changed = anyio.Event()
        self.replay: list[BundleEvent] | None = None
        """While not ``None`` (a warm start), the events emitted are also kept here, for the
        first event stream opened after the start (it opens only once the cache caught up)."""

    def __len__(self) -> int:
        return sum(len(pods) for pods in self.by_namespace.values())

    def pods(self, namespace: str) -> list[PodFacts]:
        """The pods of ``namespace`` (a copy of the list)."""
        return list(self.by_namespace.get(namespace, {}).values())

    def _notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def take_replay(self) -> list[BundleEvent]:
        """The events kept since a warm start (once: later calls return none)."""
        replay, self.replay = self.replay or [], None
        return replay

    def _emit(self, events: Iterable[BundleEvent]) -> None:
        for event in events:
            if self.replay is not None:
                if len(self.replay) < _REPLAY_MAX:
                    self.replay.append(event)
                else:  # too many to tell one by one: the stream says MISSED instead
                    self.replay = [BundleEvent(kind=BundleEventKind.MISSED, at=event.at)]
            self.events.publish(event)

    def put(self, facts: PodFacts, *, emit: bool = True) -> None:
        """Store ``facts`` unless a newer version is already there (write-through safe)."""
        if self.departures.refuses((facts.namespace, facts.name), facts.version):
            return
        pods = self.by_namespace.setdefault(facts.namespace, {})
        old = pods.get(facts.name)
        if old is not None and old.version > facts.version > 0:
            return
        pods[facts.name] = facts
        self.namespace_changed(facts.namespace)
        if emit:
            self._emit(pod_transitions(old, facts, self._clock()))
        self.pod_changed(facts)
        self._notify()

    def remove(self, namespace: str, name: str, *, emit: bool = True) -> None:
        """Forget a pod (it was deleted)."""
        pods = self.by_namespace.get(namespace, {})
        old = pods.pop(name, None)
        if not pods:
            self.by_namespace.pop(namespace, None)
        self.namespace_changed(namespace)
        if old is not None and emit:
            self._emit(pod_transitions(old, None, self._clock()))
        self._notify()

    def reservations(self) -> Iterator[Reservation]:
        """What each cached pod placed on a node holds of it (for capacity)."""
        for namespace, pods in self.by_namespace.items():
            for facts in pods.values():
                reserved, node_name = facts.reserved, facts.node_name
                if reserved is not None and node_name:
                    yield Reservation(node_name, namespace, True, *reserved)  # noqa: FBT003

    def requests_by_bundle(self) -> dict[str, BundlePods]:
        """What each bundle's live pods request, placed on a node or waiting for one."""
        found: dict[str, list[int]] = {}
        for pods in self.by_namespace.values():
            for facts in pods.values():
                if facts.bundle_id is None or facts.reserved is None or facts.deleting:
                    continue
                sums = found.setdefault(facts.bundle_id, [0, 0, 0, 0])
                at = 0 if facts.node_name else 2
                sums[at] += facts.reserved[0]
                sums[at + 1] += facts.reserved[1]
        return {b: BundlePods((s[0], s[1]), (s[2], s[3])) for b, s in found.items()}

    @staticmethod
    def project(obj: dict[str, Any]) -> PodFacts | None:
        """What the store keeps of a listed pod."""
        return project_pod(obj)

    def on_list(self, items: list[PodFacts], relist: bool) -> None:
        """Replace everything; after a relist tell subscribers they may have missed events."""
        self.departures.clear()
        fresh: dict[str, dict[str, PodFacts]] = {}
        for facts in items:
            fresh.setdefault(facts.namespace, {})[facts.name] = facts
        self.by_namespace = fresh
        self.namespace_changed(None)
        if relist:
            self._emit([BundleEvent(kind=BundleEventKind.MISSED, at=self._clock())])
        self._notify()

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """Apply one watch event."""
        facts = project_pod(obj)
        if facts is None:
            return
        if kind == "DELETED":
            self.remove(facts.namespace, facts.name)
            self.departures.left((facts.namespace, facts.name), facts.version)
        else:
            self.put(facts)


class PodHandler:
    """The pod watch's handler: app pods to the pod store, gateway pods to theirs."""

    def __init__(self, pods: PodStore, gateways: GatewayStore) -> None:
        self._pods = pods
        self._gateways = gateways

    def project(self, obj: dict[str, Any]) -> PodFacts | GatewayFacts | None:
        return project_pod(obj) or project_gateway(obj)

    def on_list(self, items: list[Any], relist: bool) -> None:
        self._gateways.on_list([i for i in items if isinstance(i, GatewayFacts)], relist)
        self._pods.on_list([i for i in items if isinstance(i, PodFacts)], relist)

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._gateways.on_event(kind, obj)
        self._pods.on_event(kind, obj)


class ServiceStore:
    """Names of the managed Services, by namespace.

    A tuple per namespace, not a set: an app has one Service or a few, and a 1-tuple takes a
    fifth of an empty set's memory (about 190 bytes an app at 10,000 apps).
    """

    def __init__(self) -> None:
        self.by_namespace: dict[str, tuple[str, ...]] = {}
        self.namespace_changed = Listeners[str | None]()
        """Told the namespace of every change (``None``: everything)."""

    def names(self, namespace: str) -> tuple[str, ...]:
        """Service names of ``namespace``."""
        return self.by_namespace.get(namespace, ())

    def put(self, namespace: str, name: str) -> None:
        """Record a Service."""
        names = self.by_namespace.get(namespace, ())
        if name not in names:
            self.by_namespace[_intern(namespace)] = (*names, name)
            self.namespace_changed(namespace)

    def remove(self, namespace: str, name: str) -> None:
        """Forget a Service (it was deleted)."""
        names = tuple(n for n in self.by_namespace.get(namespace, ()) if n != name)
        if names:
            self.by_namespace[namespace] = names
        else:
            self.by_namespace.pop(namespace, None)
        self.namespace_changed(namespace)

    @staticmethod
    def project(obj: dict[str, Any]) -> tuple[str, str]:
        """What the store keeps of a listed Service: its namespace and name."""
        meta = obj.get("metadata") or {}
        return _intern(meta.get("namespace", "")), meta.get("name", "")

    def on_list(self, items: list[tuple[str, str]], relist: bool) -> None:
        """Replace everything."""
        fresh: dict[str, list[str]] = {}
        for namespace, name in items:
            fresh.setdefault(namespace, []).append(name)
        self.by_namespace = {ns: tuple(dict.fromkeys(names)) for ns, names in fresh.items()}
        self.namespace_changed(None)

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """Apply one watch event."""
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        if kind == "DELETED":
            self.remove(namespace, name)
        else:
            self.put(namespace, name)


class _Facts(Protocol):
    @property
    def namespace(self) -> str: ...


F = TypeVar("F", bound=_Facts)


class NamespacedStore(Generic[F]):
    """Facts by namespace and key, fed by one watch (a :class:`WatchHandler`).

    ``project`` makes the facts of an object (``None``: not one of these); ``key`` names
    them within their namespace. Facts with a ``version`` are not replaced by older ones
    (write-through safe).
    """

    def __init__(
        self, project: Callable[[Mapping[str, Any]], F | None], key: Callable[[F], str]
    ) -> None:
        self.by_namespace: dict[str, dict[str, F]] = {}
        self.namespace_changed = Listeners[str | None]()
        """Told the namespace of every change (``None``: everything)."""
        self._project = project
        self._key = key
        self.departures = Departures()

    def in_namespace(self, namespace: str) -> list[F]:
        """The facts of ``namespace``."""
        return list(self.by_namespace.get(namespace, {}).values())

    def put(self, facts: F) -> None:
        """Record ``facts`` unless a newer version of them is there."""
        key = self._key(facts)
        if self.departures.refuses((facts.namespace, key), getattr(facts, "version", 0)):
            return
        kept = self.by_namespace.setdefault(facts.namespace, {})
        old = kept.get(key)
        if old is not None and getattr(old, "version", 0) > getattr(facts, "version", 0) > 0:
            return
        kept[key] = facts
        self.namespace_changed(facts.namespace)

    def remove(self, namespace: str, key: str) -> None:
        """Forget the facts of ``key``."""
        kept = self.by_namespace.get(namespace, {})
        kept.pop(key, None)
        if not kept:
            self.by_namespace.pop(namespace, None)
        self.namespace_changed(namespace)

    def project(self, obj: dict[str, Any]) -> F | None:
        """What the store keeps of a listed object."""
        return self._project(obj)

    def on_list(self, items: list[F], relist: bool) -> None:
        """Replace everything."""
        self.by_namespace = {}
        self.departures.clear()
        self.namespace_changed(None)
        for facts in items:
            self.put(facts)

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """Apply one watch event."""
        facts = self._project(obj)
        if facts is None:
            return
        if kind == "DELETED":
            key = self._key(facts)
            self.remove(facts.namespace, key)
            self.departures.left((facts.namespace, key), getattr(facts, "version", 0))
        else:
            self.put(facts)


class ClaimStore(NamespacedStore[ClaimFacts]):
    """Volume claims by namespace and volume id."""

    def __init__(self) -> None:
        super().__init__(project_claim, lambda facts: facts.volume_id)

    def claims(self, namespace: str) -> list[ClaimFacts]:
        """The claims of ``namespace``."""
        return self.in_namespace(namespace)


class GatewayStore(NamespacedStore[GatewayFacts]):
    """Egress gateway pods by namespace and name (fed by the pod watch, beside app pods)."""

    def __init__(self) -> None:
        super().__init__(project_gateway, lambda facts: facts.name)

    def gateways(self, namespace: str) -> list[GatewayFacts]:
        """The gateway pods of ``namespace``."""
        return self.in_namespace(namespace)


class NamespaceStore:
    """The managed namespaces by name."""

    def __init__(self) -> None:
        self.by_name: dict[str, NamespaceFacts] = {}
        self.namespace_changed = Listeners[str | None]()
        """Told the namespace of every change (``None``: everything)."""
        self.departures = Departures()

    def put(self, facts: NamespaceFacts) -> None:
        """Store ``facts`` unless a newer version is there, or it left since."""
        if self.departures.refuses(facts.name, facts.version):
            return
        old = self.by_name.get(facts.name)
        if old is not None and old.version > facts.version > 0:
            return
        self.by_name[facts.name] = facts
        self.namespace_changed(facts.name)

    def terminating(self, facts: NamespaceFacts) -> None:
        """Mark a namespace being deleted (its watch event comes later)."""
        if self.departures.refuses(facts.name, facts.version):
            return
        self.by_name[facts.name] = attrs.evolve(facts, terminating=True)
        self.namespace_changed(facts.name)

    @staticmethod
    def project(obj: dict[str, Any]) -> NamespaceFacts:
        """What the store keeps of a listed namespace."""
        return project_namespace(obj)

    def on_list(self, items: list[NamespaceFacts], relist: bool) -> None:
        """Replace everything."""
        self.by_name = {}
        self.departures.clear()
        self.namespace_changed(None)
        for facts in items:
            self.put(facts)

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """Apply one watch event."""
        facts = project_namespace(obj)
        if kind == "DELETED":
            self.by_name.pop(facts.name, None)
            self.departures.left(facts.name, facts.version)
            self.namespace_changed(facts.name)
        else:
            self.put(facts)


class CacheState:
    """The stores' facts and each watch's version: what a warm start resumes from."""

    __slots__ = ("claims", "confirmed", "gateways", "namespaces", "pods", "services", "versions")

    def __init__(
        self,
        *,
        versions: dict[str, str],
        pods: list[PodFacts],
        gateways: list[GatewayFacts],
        services: list[tuple[str, str]],
        namespaces: list[NamespaceFacts],
        claims: list[ClaimFacts],
        confirmed: dict[str, datetime] | None = None,
    ) -> None:
        self.versions = versions
        self.confirmed = confirmed or {}
        """Each watch's last confirmation (UTC) of the state at its version, when known."""
        self.pods = pods
        self.gateways = gateways
        self.services = services
        self.namespaces = namespaces
        self.claims = claims
