"""The cache's projections: the few facts of a pod, Service, namespace or claim it keeps.

Small slotted objects (never whole API objects), built by the ``project_*`` functions from a
watch event's object; equal facts share their strings and pairs, so 10,000 pods stay light.
:func:`pod_transitions` turns a pod's change into the bundle events subscribers get.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import attrs

from pando_runtime import BundleEvent, BundleEventKind

from .._names import (
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
    ROLE_EGRESS_GATEWAY,
)
from ._capacity import cpu_millis, memory_bytes, pod_requests
from ._podstatus import waits_for_its_claims

__all__ = [
    "ClaimFacts",
    "GatewayFacts",
    "NamespaceFacts",
    "PodFacts",
    "bundle_workloads",
    "newest",
    "pod_transitions",
    "project_claim",
    "project_gateway",
    "project_namespace",
    "project_pod",
]

_intern = sys.intern


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


@attrs.frozen(slots=True, weakref_slot=False, eq=False, repr=False, kw_only=True)
class PodFacts:
    """What the adapter needs of one pod (about 20 small fields, no API object).

    Frozen: a change is a new projection (``attrs.evolve``), never an edit of a cached one.
    """

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
    node_lost: bool
    """Its node stopped reporting while it ran: its state is unknown (see :func:`_node_lost`)."""
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

    @property
    def stopping(self) -> bool:
        """Told to end (deleted) while its container still runs: its grace period."""
        return self.deleting and not self.ended and self.started_at is not None

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
    conditions = status.get("conditions") or ()
    unschedulable = None
    for condition in conditions:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            message = condition.get("message") or "unschedulable"
            if not waits_for_its_claims(message):  # the scheduler retries those by itself
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
        node_lost=running_state is not None and not ended and _node_lost(conditions),
        unschedulable=unschedulable,
        stuck=_stuck(state.get("waiting")),
        version=_version(meta),
    )


def _node_lost(conditions: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the pod bears the node lifecycle controller's mark of a node gone silent.

    When a node stops reporting (its Ready condition turns Unknown past the controller
    manager's ``--node-monitor-grace-period``), the controller sets each of its pods' Ready
    condition False and leaves the rest as the kubelet last wrote it. The kubelet itself never
    writes Ready False beside ContainersReady True (Ready is ContainersReady and the readiness
    gates, which the adapter's pods have none of), so that pair is the controller's mark. The
    kubelet writes Ready again once its node reports.
    """
    status = {c.get("type"): c.get("status") for c in conditions}
    return status.get("Ready") == "False" and status.get("ContainersReady") == "True"


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


@attrs.frozen(slots=True, weakref_slot=False, eq=False, kw_only=True)
class GatewayFacts:
    """What the adapter needs of an egress gateway pod (app pods' facts never include it)."""

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


@attrs.frozen(slots=True, weakref_slot=False, eq=False)
class NamespaceFacts:
    """What the adapter needs of an app namespace."""

    name: str
    bundle_id: str | None
    workloads: tuple[str, ...]
    digest: str | None = attrs.field(kw_only=True)
    terminating: bool = attrs.field(kw_only=True)
    version: int = attrs.field(kw_only=True)
    volumes_only: bool = attrs.field(default=False, kw_only=True)
    exposed: tuple[str, ...] = attrs.field(default=(), kw_only=True)
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


@attrs.frozen(slots=True, weakref_slot=False, eq=False)
class ClaimFacts:
    """What the adapter needs of a volume's PersistentVolumeClaim."""

    namespace: str
    name: str
    volume_id: str
    phase: str = attrs.field(kw_only=True)
    bound_to: str | None = attrs.field(kw_only=True)
    deleting: bool = attrs.field(kw_only=True)


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
