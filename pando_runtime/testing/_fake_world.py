"""The fake runtime's world: everything one fake runtime holds, in one object.

A :class:`FakeWorld` is the runtime itself: its nodes and capabilities, the bundles
with their workload instances, volumes with their files, edges, imported images,
what each image does when started, the event hub, the faults it suffers and the
leases its replicas share. A :class:`~pando_runtime.testing.FakeAdapter` is one
client of a world; ``fake.replica()`` is another client of the same world; the
state file (``_fake_state``) writes a world to disk and reads it back. Every
client reads and changes the world through the methods here (and the scheduler's
functions), never through another client.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import anyio
import attrs

from .._adapter._event_hub import BundleEventHub
from .._adapter._fake_info import FakeConfig
from .._contract._capabilities import (
    ImageDelivery,
    IsolationClass,
    LogRetention,
    RuntimeCapabilities,
)
from .._contract._capacity import BundleUsage, VolumeUsage, WorkloadUsage
from .._contract._edge import EdgePlan
from .._contract._errors import AdapterUnavailable, NotFound
from .._contract._events import BundleEvent, BundleEventKind
from .._contract._observed import ObservedVolume, ObservedWorkload, WorkloadProblem
from .._contract._plans import BundlePlan, EgressPolicy, Port, WorkloadPlan
from .._contract._refs import WorkloadRef
from .._contract._volumes import VolumeHandle, VolumeRequest
from .._replicas._leases import LeaseStore
from .._util._log import logger
from ._clock import FakeClock
from ._fake_exec import ExecHandler, command_not_found
from ._fake_logs import LogBuffer
from ._fake_membership import FakeLeaseStore
from ._faults import Faults

__all__ = [
    "Bundle",
    "Edge",
    "FakeNode",
    "FakeWorld",
    "ImageBehaviour",
    "Instance",
    "Volume",
    "Workload",
    "new_world",
]

LOG: logging.Logger = logger("fake")
"""The fake's logger (``pando_runtime.fake``), shared by its modules."""


@attrs.frozen(kw_only=True)
class FakeNode:
    """A place workloads run, with a size that capacity and placement respect."""

    name: str
    cpu_millis: int
    memory_bytes: int


@attrs.frozen(kw_only=True)
class ImageBehaviour:
    """What a workload (or trial) started from an image does on its own.

    ``exit_code`` ends it at once with that code; ``oom`` ends it OOM-killed;
    ``healthy`` is its first health signal when it has a health check;
    ``log`` is written at start; ``listens``/``writes`` are what a trial sees.
    ``problem`` keeps it from ever starting (an image that cannot be pulled, say): the
    workload is present, never running, and observed with that problem and
    ``problem_detail``. ``stop_grace``: seconds of the fake's clock an instance keeps running
    after it is told to end (``stop``, ``destroy``), as an app that traps SIGTERM and ends
    gracefully; observed ``stopping`` meanwhile (0: it ends at once).
    """

    exit_code: int | None = None
    oom: bool = False
    healthy: bool | None = True
    log: bytes = b""
    listens: tuple[Port, ...] = ()
    loopback_listens: tuple[Port, ...] = ()
    writes: tuple[str, ...] = ()
    problem: WorkloadProblem | None = None
    problem_detail: str = ""
    stop_grace: float = 0.0


@attrs.define
class Instance:
    """One started instance of a workload: where it runs, how it ended, its log."""

    number: int
    digest: str
    node: str
    started_at: datetime
    log: LogBuffer = attrs.field(factory=LogBuffer)
    running: bool = True
    exit_code: int | None = None
    oom_killed: bool = False
    healthy: bool | None = None
    cpu_millis: int = 0
    memory_bytes: int = 0
    problem: WorkloadProblem | None = None
    problem_detail: str = ""
    stopping_until: datetime | None = None
    """Told to end: it runs until then (on the fake's clock), then it is removed."""

    def observed(self, name: str, image_digest: str, *, lost: bool = False) -> ObservedWorkload:
        """What ``observe`` reports of this instance of workload ``name``.

        ``lost``: its node no longer reports, so nothing confirms it runs.
        """
        return ObservedWorkload(
            name=name,
            present=True,
            running=self.running and not lost,
            lost=lost,
            instance_id=f"fake-instance-{self.number}",
            image_digest=image_digest,
            started_at=None if self.problem else self.started_at,
            exit_code=self.exit_code,
            healthy=self.healthy,
            oom_killed=self.oom_killed,
            problem=self.problem,
            problem_detail=self.problem_detail,
            stopping=self.stopping_until is not None and not lost,
        )


@attrs.define
class Workload:
    """A planned workload and its newest instance (``None``: never started or removed)."""

    plan: WorkloadPlan
    instance: Instance | None = None


@attrs.define
class Bundle:
    """An applied bundle: its last plan and its workloads by name."""

    plan: BundlePlan
    workloads: dict[str, Workload]


@attrs.define
class Volume:
    """A volume and the files it holds, by relative path."""

    request: VolumeRequest
    files: dict[str, bytes] = attrs.field(factory=dict)

    @property
    def handle(self) -> VolumeHandle:
        """The handle the fake gives out for this volume."""
        return VolumeHandle(
            volume_id=self.request.volume_id, handle=f"fake-volume:{self.request.volume_id}"
        )


@attrs.define
class Edge:
    """An applied edge and why it stopped serving (``None``: it serves)."""

    plan: EdgePlan
    failure: str | None = None


@attrs.define(kw_only=True, eq=False)
class FakeWorld:
    """One fake runtime's state, shared by every adapter (replica) over it."""

    clock: FakeClock
    nodes: list[FakeNode]
    capabilities: RuntimeCapabilities
    faults: Faults = attrs.field(factory=Faults)
    """The runtime's faults: scripted through any of its adapters, suffered by all."""
    lease_store: FakeLeaseStore = attrs.field(factory=FakeLeaseStore)
    leases: LeaseStore | None = None
    """Where the replicas' leases are kept instead of ``lease_store`` (a real store under test)."""
    bundles: dict[str, Bundle] = attrs.field(factory=dict)
    leaving: dict[str, Bundle] = attrs.field(factory=dict)
    """Destroyed bundles whose instances are still stopping (gone once they have ended)."""
    volumes: dict[str, Volume] = attrs.field(factory=dict)
    edges: dict[str, Edge] = attrs.field(factory=dict)
    instances_started: int = 0
    """How many instances were ever made; numbers each new one."""
    images: set[str] = attrs.field(factory=set)
    behaviours: dict[str, ImageBehaviour] = attrs.field(factory=dict)
    exec_handlers: list[tuple[tuple[str, ...], ExecHandler]] = attrs.field(factory=list)
    events: BundleEventHub = attrs.field(factory=BundleEventHub)
    writes: int = 0
    reads: int = 0
    trial_egress: dict[str, EgressPolicy | None] = attrs.field(factory=dict)
    start_order: list[WorkloadRef] = attrs.field(factory=list)
    healthy: bool = True
    unconfirmed_since: datetime | None = None
    confirmed_again: anyio.Event = attrs.field(factory=anyio.Event)
    hung: bool = False
    """The runtime answers nothing (``simulate_hang``): calls that need it are refused."""
    closed: bool = False
    """Set when the adapter that made the world closes: the runtime is gone for all."""
    lost_nodes: set[str] = attrs.field(factory=set)
    """Nodes that no longer report: what runs there is observed ``lost``."""
    stranded: list[tuple[WorkloadRef, Instance]] = attrs.field(factory=list)
    """Instances replaced or removed while their node was lost: they run on there, unseen,
    until the node reports again."""

    # -- lookups ----------------------------------------------------------------------------

    def bundle(self, bundle_id: str) -> Bundle:
        """The bundle, or :class:`NotFound`."""
        try:
            return self.bundles[bundle_id]
        except KeyError:
            raise NotFound(f"no bundle {bundle_id!r}", details={"bundle_id": bundle_id}) from None

    def workload(self, ref: WorkloadRef) -> Workload:
        """The workload, or :class:`NotFound`."""
        bundle = self.bundle(ref.bundle_id)
        try:
            return bundle.workloads[ref.workload]
        except KeyError:
            raise NotFound(
                f"bundle {ref.bundle_id!r} has no workload {ref.workload!r}",
                details={"bundle_id": ref.bundle_id, "workload": ref.workload},
            ) from None

    def newest(self, ref: WorkloadRef) -> Instance:
        """The workload's newest instance, running or not, or :class:`NotFound`."""
        instance = self.workload(ref).instance
        if instance is None:
            raise NotFound(
                f"workload {ref.workload!r} of {ref.bundle_id!r} has no instance",
                details={"bundle_id": ref.bundle_id, "workload": ref.workload},
            )
        return instance

    def running(self, ref: WorkloadRef) -> Instance:
        """The workload's running instance, or :class:`NotFound`."""
        instance = self.newest(ref)
        if not instance.running:
            raise NotFound(
                f"workload {ref.workload!r} of {ref.bundle_id!r} is not running",
                details={"bundle_id": ref.bundle_id, "workload": ref.workload},
            )
        return instance

    def volume(self, volume_id: str) -> Volume:
        """The volume, or :class:`NotFound`."""
        try:
            return self.volumes[volume_id]
        except KeyError:
            raise NotFound(f"no volume {volume_id!r}", details={"volume_id": volume_id}) from None

    def volume_by_handle(self, handle: VolumeHandle) -> Volume:
        """The volume a handle names, or :class:`NotFound` (a stale or foreign handle too)."""
        volume = self.volume(handle.volume_id)
        if volume.handle != handle:
            raise NotFound(f"handle {handle.handle!r} does not name volume {handle.volume_id!r}")
        return volume

    def edge(self, name: str) -> Edge:
        """The edge, or :class:`NotFound`."""
        try:
            return self.edges[name]
        except KeyError:
            raise NotFound(f"no edge {name!r}", details={"edge": name}) from None

    def behaviour(self, image: str) -> ImageBehaviour:
        """What a workload started from ``image`` does (by default: runs, healthy)."""
        return self.behaviours.get(image, ImageBehaviour())

    def lost(self, instance: Instance) -> bool:
        """Whether a running instance's node no longer reports."""
        return instance.running and instance.node in self.lost_nodes

    def handler_for(self, command: tuple[str, ...]) -> ExecHandler:
        """The newest exec handler whose prefix starts ``command``."""
        for prefix, handler in self.exec_handlers:
            if command[: len(prefix)] == prefix:
                return handler
        return command_not_found

    # -- changes ----------------------------------------------------------------------------

    def emit(self, kind: BundleEventKind, ref: WorkloadRef, **fields: Any) -> None:
        """Send a workload's event to every open event stream."""
        self.events.publish(
            BundleEvent(
                kind=kind,
                at=self.clock.now(),
                bundle_id=ref.bundle_id,
                workload=ref.workload,
                **fields,
            )
        )

    def end(self, ref: WorkloadRef, instance: Instance, *, exit_code: int, oom: bool) -> None:
        """End a running instance with ``exit_code`` (OOM-killed when ``oom``)."""
        instance.running, instance.exit_code, instance.oom_killed = False, exit_code, oom
        instance.healthy = None
        instance.log.close()
        self.writes += 1
        LOG.info(
            "workload %s of %s %s",
            ref.workload,
            ref.bundle_id,
            "was OOM-killed" if oom else f"exited with {exit_code}",
            extra={"bundle_id": ref.bundle_id, "workload": ref.workload, "exit_code": exit_code},
        )
        kind = BundleEventKind.OOM_KILLED if oom else BundleEventKind.EXITED
        self.emit(kind, ref, exit_code=exit_code)

    def strand(self, ref: WorkloadRef, instance: Instance) -> None:
        """Let go of an instance; one on a lost node runs on there until the node is back."""
        if self.lost(instance):
            self.stranded.append((ref, instance))
        else:
            instance.log.close()

    def remove(self, ref: WorkloadRef, workload: Workload) -> None:
        """Remove the workload's instance, if it has one."""
        if workload.instance is not None:
            self.strand(ref, workload.instance)
            workload.instance = None
            self.writes += 1
            self.emit(BundleEventKind.REMOVED, ref)

    def tell_to_stop(self, ref: WorkloadRef, workload: Workload) -> None:
        """End the workload's instance: at once, or after its image's ``stop_grace``."""
        instance = workload.instance
        if instance is None:
            return
        grace = self.behaviour(workload.plan.image).stop_grace
        if not instance.running or grace <= 0 or self.lost(instance):
            # A lost node's instance is let go of at once: its node stops it when back.
            self.remove(ref, workload)
        elif instance.stopping_until is None:
            instance.stopping_until = self.clock.now() + timedelta(seconds=grace)
            self.writes += 1

    def settle_stops(self) -> None:
        """Remove the stopping instances whose grace has run out on the clock."""
        now = self.clock.now()
        for group in (self.bundles, self.leaving):
            for bundle_id, bundle in list(group.items()):
                for name, workload in bundle.workloads.items():
                    until = workload.instance.stopping_until if workload.instance else None
                    if until is not None and until <= now:
                        self.remove(WorkloadRef(bundle_id, name), workload)
        for bundle_id, bundle in list(self.leaving.items()):
            if all(w.instance is None for w in bundle.workloads.values()):
                del self.leaving[bundle_id]

    def stopping(self, bundle_id: str) -> list[str]:
        """The bundle's workloads whose instance was told to end and still runs."""
        found = []
        for group in (self.bundles, self.leaving):
            bundle = group.get(bundle_id)
            for name, workload in bundle.workloads.items() if bundle else ():
                if workload.instance is not None and workload.instance.stopping_until is not None:
                    found.append(name)
        return sorted(found)

    def lose_node(self, node: str) -> None:
        """Node ``node`` stops reporting; what runs there keeps running, unseen."""
        if node not in {n.name for n in self.nodes}:
            raise NotFound(f"no node {node!r}", details={"node": node})
        self.lost_nodes.add(node)
        LOG.warning("node %s no longer reports", node, extra={"node": node})

    def recover_node(self, node: str) -> None:
        """Node ``node`` reports again: it stops the instances let go of while it was lost."""
        self.lost_nodes.discard(node)
        kept = []
        for ref, instance in self.stranded:
            if instance.node != node:
                kept.append((ref, instance))
                continue
            instance.running, instance.healthy = False, None
            instance.log.close()
            self.writes += 1
            LOG.info(
                "node %s back: stopped an old instance of %s of %s",
                node,
                ref.workload,
                ref.bundle_id,
                extra={"node": node, "bundle_id": ref.bundle_id, "workload": ref.workload},
            )
        self.stranded = kept

    def ensure_volume(self, request: VolumeRequest) -> Volume:
        """The volume ``request`` names, made empty when it does not exist."""
        volume = self.volumes.get(request.volume_id)
        if volume is None:
            volume = self.volumes[request.volume_id] = Volume(request=request)
            self.writes += 1
        return volume

    # -- the watch cache's confirmation -------------------------------------------------------

    def cache_down(self) -> None:
        """Stop confirming what observe answers (from now on the clock)."""
        if self.unconfirmed_since is None:
            self.unconfirmed_since = self.clock.now()
            self.confirmed_again = anyio.Event()

    def cache_up(self) -> None:
        """Confirm again; wakes every observe waiting for a confirmation."""
        self.unconfirmed_since = None
        self.confirmed_again.set()

    def confirmed_at(self, max_staleness: float) -> datetime:
        """When the runtime last confirmed its state; raises once that is too long ago."""
        since = self.unconfirmed_since
        if since is None:
            return self.clock.now()
        stale_for = (self.clock.now() - since).total_seconds()
        if stale_for > max_staleness:
            raise AdapterUnavailable(
                f"the runtime has not confirmed its state for {stale_for:.0f} s",
                details={"confirmed_at": since.isoformat(), "stale_for": stale_for},
            )
        return since

    # -- reads as contract types --------------------------------------------------------------

    def observed_volumes(self, bundle_id: str, plan: BundlePlan | None) -> list[ObservedVolume]:
        """The bundle's volumes as observed: the planned ones first, then any other it owns."""
        ids = [v.volume_id for v in plan.volumes] if plan else []
        ids += sorted(
            v
            for v, vol in self.volumes.items()
            if vol.request.bundle_id == bundle_id and v not in ids
        )
        observed = []
        for volume_id in ids:
            volume = self.volumes.get(volume_id)
            observed.append(
                ObservedVolume(
                    volume_id=volume_id,
                    present=volume is not None,
                    handle=volume.handle if volume else None,
                )
            )
        return observed

    def usage_of(self, bundle_id: str, bundle: Bundle) -> BundleUsage:
        """What the bundle's running instances and volumes use now."""
        workloads = []
        for name, workload in bundle.workloads.items():
            instance = workload.instance
            running = bool(instance and instance.running)
            workloads.append(
                WorkloadUsage(
                    workload=name,
                    running=running,
                    cpu_millis=instance.cpu_millis if instance and running else 0,
                    memory_bytes=instance.memory_bytes if instance and running else 0,
                    cpu_limit_millis=workload.plan.resources.cpu_millis,
                    memory_limit_bytes=workload.plan.resources.memory_bytes,
                )
            )
        volumes = [
            VolumeUsage(
                volume_id=v.volume_id,
                bytes=sum(map(len, self.volumes[v.volume_id].files.values())),
            )
            for v in bundle.plan.volumes
            if v.volume_id in self.volumes
        ]
        return BundleUsage(
            bundle_id=bundle_id, reported_at=self.clock.now(), workloads=workloads, volumes=volumes
        )


def _claimed(cfg: FakeConfig) -> RuntimeCapabilities:
    """What a fake claims unless told otherwise: everything."""
    return RuntimeCapabilities(
        isolation_class=IsolationClass.CONTAINER,
        persistent_volumes=True,
        exec=True,
        multiple_workloads=True,
        carried_files=True,
        private_network=True,
        resource_limits=True,
        reports_usage=True,
        bundle_events=True,
        edge=True,
        egress_restriction=True,
        egress_host_names=True,
        trial_run=True,
        port_observation=True,
        write_observation=True,
        membership=True,
        image_delivery=(ImageDelivery.REGISTRY, ImageDelivery.IMPORT),
        platform=cfg.platform,
        log_retention=LogRetention(supports_size_cap=True),
    )


def new_world(
    cfg: FakeConfig,
    *,
    clock: FakeClock | None = None,
    nodes: Iterable[FakeNode] | None = None,
    capabilities: RuntimeCapabilities | None = None,
) -> FakeWorld:
    """A new, empty world made from a fake's settings (see :class:`FakeAdapter`)."""
    if nodes is None:
        nodes = (
            FakeNode(
                name=f"fake-node-{i}",
                cpu_millis=cfg.node_cpu_millis,
                memory_bytes=cfg.node_memory_bytes,
            )
            for i in range(cfg.nodes)
        )
    return FakeWorld(
        clock=clock or FakeClock(),
        nodes=list(nodes),
        capabilities=capabilities or _claimed(cfg),
    )
