"""The lean cache: what the adapter needs from pods, Services and namespaces, fed by watches.

One cluster-wide watch per kind, selected by ``app.kubernetes.io/managed-by=pando``,
keeps small slotted projections (never whole API objects): observing an app
then costs no API call, and apply knows what exists without asking. The pod
store also turns pod transitions into bundle events for ``watch_bundles``
subscribers.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from pando_runtime import AdapterUnavailable, BundleEvent, BundleEventKind

from ._capacity import Reservation, cpu_millis, memory_bytes, pod_requests
from ._client import KubeTransport
from ._names import (
    ANN_BUNDLE_ID,
    ANN_CREATED,
    ANN_EXPOSED,
    ANN_NS_DIGEST,
    ANN_PLAN_DIGEST,
    ANN_VOLUME_ID,
    ANN_VOLUMES_ONLY,
    ANN_WORKLOADS,
    LABEL_BUNDLE,
    LABEL_ROLE,
    LABEL_WORKLOAD,
    MANAGED_SELECTOR,
    ROLE_EGRESS_GATEWAY,
)
from ._watch import (
    ApiListWatch,
    ListWatchSource,
    NewestVersion,
    SharedAnswer,
    WatchHandler,
    WatchLoop,
    WorkQueue,
)

__all__ = [
    "CacheState",
    "ClaimFacts",
    "ClaimStore",
    "GatewayFacts",
    "GatewayStore",
    "Informer",
    "NamespaceFacts",
    "NamespaceStore",
    "NamespacedStore",
    "ObservedMemo",
    "PodFacts",
    "PodStore",
    "ServiceStore",
    "bundle_workloads",
    "newest",
    "pod_transitions",
    "project_claim",
    "project_gateway",
    "project_namespace",
    "project_pod",
]

_intern = sys.intern

_PLURALS = {
    "pods": "pods",
    "services": "services",
    "namespaces": "namespaces",
    "claims": "persistentvolumeclaims",
}
"""The resource each watch of the cache lists and watches (``/api/v1/<plural>``)."""


_REPLAY_MAX = 10_000
"""Events kept for the first stream after a warm start; past it, one ``MISSED``."""

Limits = tuple[int | None, int | None]
_Pair = TypeVar("_Pair", bound=Limits)
_PAIRS: dict[Limits, Any] = {}
_PAIRS_MAX = 4096


def _shared(pair: _Pair) -> _Pair:
    """One tuple per distinct pair: apps mostly share a few sizes (a pointer per pod)."""
    shared: _Pair | None = _PAIRS.get(pair)
    if shared is None:
        if len(_PAIRS) < _PAIRS_MAX:
            _PAIRS[pair] = pair
        shared = pair
    return shared


def _version(meta: Mapping[str, Any]) -> int:
    try:
        return int(meta.get("resourceVersion") or 0)
    except ValueError:
        return 0


class _Projection:
    """Small slotted facts of an API object, made from keyword fields (unset ones ``None``)."""

    __slots__: tuple[str, ...] = ()

    def __init__(self, **fields: Any) -> None:
        for name in self.__slots__:
            setattr(self, name, fields.get(name))


class PodFacts(_Projection):
    """What the adapter needs of one pod (about 20 small fields, no API object)."""

    __slots__ = (
        "bundle_id",
        "claims",
        "created",
        "deleting",
        "digest",
        "ended",
        "exit_code",
        "has_probe",
        "image_id",
        "limits",
        "name",
        "namespace",
        "node_name",
        "oom",
        "ready",
        "reserved",
        "restart_count",
        "running",
        "started_at",
        "stuck",
        "uid",
        "unschedulable",
        "version",
        "workload",
    )

    uid: str
    namespace: str
    name: str
    bundle_id: str | None
    claims: tuple[str, ...]
    workload: str
    digest: str | None
    limits: Limits
    """The workload container's (CPU millicores, memory bytes) limits; ``None``: unlimited."""
    created: int
    running: bool
    ended: bool
    exit_code: int | None
    oom: bool
    ready: bool | None
    reserved: tuple[int, int] | None
    """What the scheduler holds for the pod on its node (CPU millicores, memory bytes);
    ``None`` once the pod has finished."""
    has_probe: bool
    deleting: bool
    started_at: str | None
    image_id: str | None
    restart_count: int
    node_name: str | None
    unschedulable: str | None
    stuck: tuple[str, str] | None
    """Why its container waits and will not start by itself: (``WorkloadProblem`` value,
    the kubelet's words); ``None`` while it runs, has ended or may still start."""
    version: int

    def __repr__(self) -> str:
        return (
            f"PodFacts({self.namespace}/{self.name}, running={self.running}, "
            f"ended={self.ended}, exit={self.exit_code})"
        )

    @property
    def live(self) -> bool:
        """Neither ended nor on its way out."""
        return not self.ended and not self.deleting

    def started(self) -> datetime | None:
        """When the container started, as a datetime."""
        if not self.started_at:
            return None
        return datetime.fromisoformat(self.started_at).astimezone(UTC)


def newest(pods: Iterable[PodFacts], workload: str | None = None) -> PodFacts | None:
    """The most recently created of ``pods`` (of ``workload`` only, when given)."""
    mine = [p for p in pods if workload is None or p.workload == workload]
    return max(mine, key=lambda p: (p.created, p.name)) if mine else None


def bundle_workloads(
    facts: NamespaceFacts, pods: Iterable[PodFacts]
) -> list[tuple[str, PodFacts | None]]:
    """Each workload of an app with its newest pod.

    The planned workloads come in plan order, then any other workload that still has a pod
    (dropped from the plan, not yet removed).
    """
    pods = list(pods)
    names = list(facts.workloads)
    names += sorted({p.workload for p in pods} - set(names))
    return [(name, newest(pods, name)) for name in names]


def project_pod(obj: Mapping[str, Any]) -> PodFacts | None:
    """The facts of a pod, or ``None`` for a helper pod (role label) or a foreign one."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    workload = labels.get(LABEL_WORKLOAD)
    if not workload or LABEL_ROLE in labels:
        return None
    annotations = meta.get("annotations") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    main = next((s for s in statuses if s.get("name") == workload), statuses[0] if statuses else {})
    main_spec: Mapping[str, Any] = next((c for c in containers if c.get("name") == workload), {})
    limits = (main_spec.get("resources") or {}).get("limits") or {}
    state = main.get("state") or {}
    terminated = state.get("terminated")
    running_state = state.get("running")
    phase = status.get("phase")
    deleting = bool(meta.get("deletionTimestamp"))
    ended = terminated is not None or phase in ("Succeeded", "Failed")
    has_probe = any(c.get("readinessProbe") for c in containers)
    unschedulable = None
    for condition in status.get("conditions") or ():
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            message = condition.get("message") or "unschedulable"
            # Waiting for a volume claim to bind is no lack of room: the scheduler retries.
            if "unbound immediate PersistentVolumeClaims" not in message:
                unschedulable = message
    try:
        created = int(annotations.get(ANN_CREATED) or 0)
    except ValueError:
        created = 0
    bundle_id = annotations.get(ANN_BUNDLE_ID) or labels.get(LABEL_BUNDLE)
    return PodFacts(
        uid=meta.get("uid", ""),
        namespace=_intern(meta.get("namespace", "")),
        name=meta.get("name", ""),
        bundle_id=_intern(bundle_id) if bundle_id else None,
        claims=tuple(
            v["persistentVolumeClaim"].get("claimName", "")
            for v in spec.get("volumes") or ()
            if v.get("persistentVolumeClaim")
        ),
        workload=_intern(workload),
        digest=annotations.get(ANN_PLAN_DIGEST),
        limits=_shared(
            (
                cpu_millis(limits["cpu"]) if "cpu" in limits else None,
                memory_bytes(limits["memory"]) if "memory" in limits else None,
            )
        ),
        created=created,
        running=running_state is not None and not ended and not deleting,
        ended=ended,
        exit_code=(terminated or {}).get("exitCode"),
        oom=(terminated or {}).get("reason") == "OOMKilled",
        ready=bool(main.get("ready")) if has_probe else None,
        reserved=None if phase in ("Succeeded", "Failed") else _shared(pod_requests(obj)),
        has_probe=has_probe,
        deleting=deleting,
        started_at=(running_state or terminated or {}).get("startedAt"),
        image_id=main.get("imageID") or None,
        restart_count=int(main.get("restartCount") or 0),
        node_name=_intern(spec["nodeName"]) if spec.get("nodeName") else None,
        unschedulable=unschedulable,
        stuck=_stuck(state.get("waiting")),
        version=_version(meta),
    )


_STUCK_REASONS = {
    "ErrImagePull": "image_pull",
    "ImagePullBackOff": "image_pull",
    "InvalidImageName": "image_pull",
    "ErrImageNeverPull": "image_pull",
    "CreateContainerConfigError": "cannot_start",
    "CreateContainerError": "cannot_start",
    "RunContainerError": "cannot_start",
}
"""Waiting reasons of a container the kubelet will not start without a change (it retries,
but a retry of the same thing fails the same way), as ``WorkloadProblem`` values."""


def _stuck(waiting: Mapping[str, Any] | None) -> tuple[str, str] | None:
    if not waiting or waiting.get("reason") not in _STUCK_REASONS:
        return None
    reason = str(waiting["reason"])
    return (_STUCK_REASONS[reason], str(waiting.get("message") or reason))


def pod_transitions(old: PodFacts | None, new: PodFacts | None, at: datetime) -> list[BundleEvent]:
    """The bundle events one change of one pod means (one transition, one event)."""
    facts = new or old
    if facts is None:
        return []
    if not facts.bundle_id:
        return [BundleEvent(kind=BundleEventKind.MISSED, at=at)]
    bundle_id, workload = facts.bundle_id, facts.workload

    def event(
        kind: BundleEventKind, exit_code: int | None = None, healthy: bool | None = None
    ) -> BundleEvent:
        return BundleEvent(
            kind=kind,
            at=at,
            bundle_id=bundle_id,
            workload=workload,
            exit_code=exit_code,
            healthy=healthy,
        )

    if new is None:
        return [event(BundleEventKind.REMOVED)]
    events = []
    if new.running and not (old is not None and (old.running or old.ended)):
        events.append(event(BundleEventKind.STARTED))
    if new.ended and not (old is not None and old.ended):
        kind = BundleEventKind.OOM_KILLED if new.oom else BundleEventKind.EXITED
        events.append(event(kind, exit_code=new.exit_code))
    elif new.has_probe and old is not None and old.ready != new.ready and new.running:
        events.append(event(BundleEventKind.HEALTH_CHANGED, healthy=new.ready))
    return events


def _ignore(namespace: str | None) -> None:
    """No memo to tell."""


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
    """Pods by namespace, plus event subscribers (a :class:`WatchHandler`)."""

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.by_namespace: dict[str, dict[str, PodFacts]] = {}
        self.subscribers: list[MemoryObjectSendStream[BundleEvent | BaseException]] = []
        self.on_change: Callable[[PodFacts], None] | None = None
        self.forget: Callable[[str | None], None] = _ignore
        """Told the namespace of every change (``None``: everything), for a memo."""
        self._clock = clock
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
            for subscriber in list(self.subscribers):
                try:
                    subscriber.send_nowait(event)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    self.subscribers.remove(subscriber)

    def put(self, facts: PodFacts, *, emit: bool = True) -> None:
        """Store ``facts`` unless a newer version is already there (write-through safe)."""
        pods = self.by_namespace.setdefault(facts.namespace, {})
        old = pods.get(facts.name)
        if old is not None and old.version > facts.version > 0:
            return
        pods[facts.name] = facts
        self.forget(facts.namespace)
        if emit:
            self._emit(pod_transitions(old, facts, self._clock()))
        if self.on_change is not None:
            self.on_change(facts)
        self._notify()

    def remove(self, namespace: str, name: str, *, emit: bool = True) -> None:
        """Forget a pod (it was deleted)."""
        pods = self.by_namespace.get(namespace, {})
        old = pods.pop(name, None)
        if not pods:
            self.by_namespace.pop(namespace, None)
        self.forget(namespace)
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

    @staticmethod
    def project(obj: dict[str, Any]) -> PodFacts | None:
        """What the store keeps of a listed pod."""
        return project_pod(obj)

    def on_list(self, items: list[PodFacts], relist: bool) -> None:
        """Replace everything; after a relist tell subscribers they may have missed events."""
        fresh: dict[str, dict[str, PodFacts]] = {}
        for facts in items:
            fresh.setdefault(facts.namespace, {})[facts.name] = facts
        self.by_namespace = fresh
        self.forget(None)
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
        else:
            self.put(facts)


class GatewayFacts(_Projection):
    """What the adapter needs of an egress gateway pod (app pods' facts never include it)."""

    __slots__ = ("created", "deleting", "digest", "ended", "name", "namespace", "uid", "version")

    uid: str
    namespace: str
    name: str
    digest: str | None
    created: int
    ended: bool
    deleting: bool
    version: int

    @property
    def live(self) -> bool:
        """Neither ended nor on its way out."""
        return not self.ended and not self.deleting


def project_gateway(obj: Mapping[str, Any]) -> GatewayFacts | None:
    """The facts of an egress gateway pod, or ``None`` for any other pod."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(LABEL_ROLE) != ROLE_EGRESS_GATEWAY:
        return None
    annotations = meta.get("annotations") or {}
    try:
        created = int(annotations.get(ANN_CREATED) or 0)
    except ValueError:
        created = 0
    phase = (obj.get("status") or {}).get("phase")
    return GatewayFacts(
        uid=meta.get("uid", ""),
        namespace=_intern(meta.get("namespace", "")),
        name=meta.get("name", ""),
        digest=annotations.get(ANN_PLAN_DIGEST),
        created=created,
        ended=phase in ("Succeeded", "Failed"),
        deleting=bool(meta.get("deletionTimestamp")),
        version=_version(meta),
    )


class _PodHandler:
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
        self.forget: Callable[[str | None], None] = _ignore
        """Told the namespace of every change (``None``: everything)."""

    def names(self, namespace: str) -> tuple[str, ...]:
        """Service names of ``namespace``."""
        return self.by_namespace.get(namespace, ())

    def put(self, namespace: str, name: str) -> None:
        """Record a Service."""
        names = self.by_namespace.get(namespace, ())
        if name not in names:
            self.by_namespace[_intern(namespace)] = (*names, name)
            self.forget(namespace)

    def remove(self, namespace: str, name: str) -> None:
        """Forget a Service (it was deleted)."""
        names = tuple(n for n in self.by_namespace.get(namespace, ()) if n != name)
        if names:
            self.by_namespace[namespace] = names
        else:
            self.by_namespace.pop(namespace, None)
        self.forget(namespace)

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
        self.forget(None)

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """Apply one watch event."""
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        if kind == "DELETED":
            self.remove(namespace, name)
        else:
            self.put(namespace, name)


class NamespaceFacts:
    """What the adapter needs of an app namespace."""

    __slots__ = (
        "bundle_id",
        "digest",
        "exposed",
        "name",
        "terminating",
        "version",
        "volumes_only",
        "workloads",
    )

    def __init__(
        self,
        name: str,
        bundle_id: str | None,
        workloads: tuple[str, ...],
        *,
        digest: str | None,
        terminating: bool,
        version: int,
        volumes_only: bool = False,
        exposed: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.bundle_id = bundle_id
        self.workloads = workloads
        self.digest = digest
        self.terminating = terminating
        self.version = version
        self.volumes_only = volumes_only
        self.exposed = exposed
        """``<workload>=<digest>`` of each exposure policy the namespace says it has."""


def project_namespace(obj: Mapping[str, Any]) -> NamespaceFacts:
    """The facts of a namespace."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    workloads = tuple(_intern(w) for w in (annotations.get(ANN_WORKLOADS) or "").split(",") if w)
    exposed = tuple(m for m in (annotations.get(ANN_EXPOSED) or "").split(",") if m)
    terminating = bool(meta.get("deletionTimestamp")) or (
        (obj.get("status") or {}).get("phase") == "Terminating"
    )
    return NamespaceFacts(
        name=meta.get("name", ""),
        bundle_id=annotations.get(ANN_BUNDLE_ID),
        workloads=workloads,
        digest=annotations.get(ANN_NS_DIGEST),
        terminating=terminating,
        version=_version(meta),
        volumes_only=annotations.get(ANN_VOLUMES_ONLY) == "true",
        exposed=exposed,
    )


class ClaimFacts:
    """What the adapter needs of a volume's PersistentVolumeClaim."""

    __slots__ = ("bound_to", "deleting", "name", "namespace", "phase", "volume_id")

    def __init__(
        self,
        namespace: str,
        name: str,
        volume_id: str,
        *,
        phase: str,
        bound_to: str | None,
        deleting: bool,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.volume_id = volume_id
        self.phase = phase
        self.bound_to = bound_to
        self.deleting = deleting


def project_claim(obj: Mapping[str, Any]) -> ClaimFacts | None:
    """The facts of a volume claim, or ``None`` for a claim that is not a volume of ours."""
    meta = obj.get("metadata") or {}
    volume_id = (meta.get("annotations") or {}).get(ANN_VOLUME_ID)
    if not volume_id:
        return None
    return ClaimFacts(
        _intern(meta.get("namespace", "")),
        meta.get("name", ""),
        volume_id,
        phase=(obj.get("status") or {}).get("phase") or "Pending",
        bound_to=(obj.get("spec") or {}).get("volumeName") or None,
        deleting=bool(meta.get("deletionTimestamp")),
    )


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
        self.forget: Callable[[str | None], None] = _ignore
        """Told the namespace of every change (``None``: everything), for a memo."""
        self._project = project
        self._key = key

    def in_namespace(self, namespace: str) -> list[F]:
        """The facts of ``namespace``."""
        return list(self.by_namespace.get(namespace, {}).values())

    def put(self, facts: F) -> None:
        """Record ``facts`` unless a newer version of them is there."""
        kept = self.by_namespace.setdefault(facts.namespace, {})
        key = self._key(facts)
        old = kept.get(key)
        if old is not None and getattr(old, "version", 0) > getattr(facts, "version", 0) > 0:
            return
        kept[key] = facts
        self.forget(facts.namespace)

    def remove(self, namespace: str, key: str) -> None:
        """Forget the facts of ``key``."""
        kept = self.by_namespace.get(namespace, {})
        kept.pop(key, None)
        if not kept:
            self.by_namespace.pop(namespace, None)
        self.forget(namespace)

    def project(self, obj: dict[str, Any]) -> F | None:
        """What the store keeps of a listed object."""
        return self._project(obj)

    def on_list(self, items: list[F], relist: bool) -> None:
        """Replace everything."""
        self.by_namespace = {}
        self.forget(None)
        for facts in items:
            self.put(facts)

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """Apply one watch event."""
        facts = self._project(obj)
        if facts is None:
            return
        if kind == "DELETED":
            self.remove(facts.namespace, self._key(facts))
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
        self.forget: Callable[[str | None], None] = _ignore
        """Told the namespace of every change (``None``: everything), for a memo."""

    def put(self, facts: NamespaceFacts) -> None:
        """Store ``facts`` unless a newer version is there."""
        old = self.by_name.get(facts.name)
        if old is not None and old.version > facts.version > 0:
            return
        self.by_name[facts.name] = facts
        self.forget(facts.name)

    def terminating(self, facts: NamespaceFacts) -> None:
        """Mark a namespace being deleted (its watch event comes later)."""
        facts.terminating = True
        self.forget(facts.name)

    @staticmethod
    def project(obj: dict[str, Any]) -> NamespaceFacts:
        """What the store keeps of a listed namespace."""
        return project_namespace(obj)

    def on_list(self, items: list[NamespaceFacts], relist: bool) -> None:
        """Replace everything."""
        self.by_name = {}
        self.forget(None)
        for facts in items:
            self.put(facts)

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """Apply one watch event."""
        facts = project_namespace(obj)
        if kind == "DELETED":
            self.by_name.pop(facts.name, None)
            self.forget(facts.name)
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


class Informer:
    """The three watches and their stores, run in one task group while :meth:`running`.

    ``collect`` (optional) is called, through a keyed work queue with retries,
    for each ``(namespace, workload)`` whose pods changed: the adapter uses it
    to delete pods a newer instance has superseded.
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
    ) -> None:
        self.pods = PodStore()
        self.gateways = GatewayStore()
        self.services = ServiceStore()
        self.namespaces = NamespaceStore()
        self.claims = ClaimStore()
        self.observed = ObservedMemo()
        """What observe answered per namespace, until one of its facts changes."""
        self.journal: Callable[[str | None], None] = _ignore
        """Told the namespace of every change of any store (``None``: all), for a disk copy."""
        for store in (self.pods, self.namespaces, self.claims):
            store.forget = self._changed
        for other in (self.gateways, self.services):
            other.forget = self._journal
        paths = {kind: f"/api/v1/{plural}" for kind, plural in _PLURALS.items()}
        handlers: dict[str, WatchHandler] = {
            "pods": _PodHandler(self.pods, self.gateways),
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
            self.pods.on_change = lambda f: self.queue.add((f.namespace, f.workload))
        self.active = False
        self._probe = probe
        self.probe_interval = probe_interval
        self.max_staleness = max_staleness
        self.reachable = True
        """False while the last probe of the API server got no answer."""
        self.probes = 0
        self._utc_epoch: datetime | None = None
        self._confirming = anyio.Lock()

    def _changed(self, namespace: str | None) -> None:
        self.observed.forget(namespace)
        self.journal(namespace)

    def _journal(self, namespace: str | None) -> None:
        self.journal(namespace)

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
                    except Exception:  # noqa: BLE001 - any failure means no answer
                        self.reachable = False
                        await anyio.sleep(0.2)
                        continue
                    self.reachable = True
                    if self.synced:
                        for loop in self.loops.values():
                            loop.alive_at = max(loop.alive_at, asked)
        return False

    @property
    def fresh(self) -> bool:
        """Synced, and proved current within the staleness bound."""
        return self.synced and self.unconfirmed_for() <= self.max_staleness

    def stale_error(self) -> AdapterUnavailable | None:
        """Why the cache must not answer and the API cannot either, or ``None``.

        Stale past the bound while the API server does not answer its probe: a direct read
        would only wait for its timeout, so the outage is reported at once.
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
            except Exception:  # noqa: BLE001 - any failure means no answer
                self.reachable = False
                continue
            self.reachable = True
            if all(loop.healthy for loop in self.loops.values()):
                now = anyio.current_time()
                for loop in self.loops.values():
                    loop.alive_at = max(loop.alive_at, now)

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
        for subscriber in self.pods.subscribers:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                subscriber.send_nowait(error)
            subscriber.close()
        self.pods.subscribers.clear()

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
            if now - down_since >= give_up_after and self.pods.subscribers:
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
                group.start_soon(self.queue.run, self._collect)
            group.start_soon(self._supervise, give_up_after)
            group.start_soon(self._run_probes)
            self.active = True
            try:
                yield self
            finally:
                self.active = False
                group.cancel_scope.cancel()
