"""The fake adapter: every method group, in memory, deterministic.

It is to pando-runtime what ``httpx.MockTransport`` is to httpx: the public
stand-in a host's unit tests use, and the first adapter to pass the
conformance kit. Time moves only with its :class:`FakeClock`; workloads start,
exit, get OOM-killed and change health when the test says so (or as their
image's :class:`ImageBehaviour` scripts); everything it did can be inspected.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from datetime import datetime
from typing import Any

import anyio
import attrs
from anyio.abc import ByteReceiveStream

from .._adapter import RuntimeAdapter
from .._capabilities import ImageDelivery, IsolationClass, LogRetention, RuntimeCapabilities
from .._capacity import BundleUsage, Capacity, Fit, InUse, VolumeUsage, WorkloadUsage, roomiest
from .._convert import unstructure
from .._edge import EdgePlan, EdgeState
from .._errors import AdapterFailed, AdapterUnavailable, CapacityExceeded, InvalidPlan, NotFound
from .._events import BundleEvent, BundleEventHub, BundleEventKind
from .._exec import ExecRequest, ExecSession
from .._fake_info import FakeConfig
from .._log import logger
from .._logs import LogOptions
from .._member import Membership
from .._membership import MembershipSettings
from .._observed import ObservedBundle, ObservedVolume, ObservedWorkload, WorkloadProblem
from .._plans import BundlePlan, EgressPolicy, Port, PortProtocol, WorkloadPlan
from .._refs import BundleHandle, BundleRef, DestroyOptions, Upstream, WorkloadRef
from .._scope import scoped_read
from .._streams import BytesReceiveStream, IteratorByteStream, read_all
from .._trial import TrialRequest, TrialResult
from .._validation import (
    check_plan,
    raise_problems,
    validate_edge,
    validate_exec_request,
    validate_trial,
    validate_volume_request,
)
from .._volumes import VolumeHandle, VolumeRequest
from ._clock import FakeClock
from ._fake_exec import ExecHandler, command_not_found, new_session
from ._fake_logs import LogBuffer
from ._fake_membership import FakeLeaseStore, FakeReplica, ReplicaLink, check_fake_write
from ._fake_state import load_state, save_state
from ._faults import Faults
from ._tar import make_tar, read_tar

__all__ = ["FakeAdapter", "FakeConfig", "FakeNode", "ImageBehaviour"]

CONFIRM_TIMEOUT = 10.0
"""Seconds (real time) ``observe(..., not_before=...)`` waits for the runtime to confirm."""

_LOG = logger("fake")

TRIAL_LOG_LIMIT = 64 * 1024


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
    ``problem_detail``.
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


def _digest(workload: WorkloadPlan) -> str:
    # Exposure says who may connect, not what runs: changing it replaces no instance.
    data = json.dumps(unstructure(attrs.evolve(workload, exposed=False)), sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()


def _image_digest(image: str) -> str:
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


@attrs.define
class _Instance:
    number: int
    digest: str
    node: str
    started_at: Any
    log: LogBuffer = attrs.field(factory=LogBuffer)
    running: bool = True
    exit_code: int | None = None
    oom_killed: bool = False
    healthy: bool | None = None
    cpu_millis: int = 0
    memory_bytes: int = 0
    problem: WorkloadProblem | None = None
    problem_detail: str = ""


@attrs.define
class _Workload:
    plan: WorkloadPlan
    instance: _Instance | None = None


@attrs.define
class _Bundle:
    plan: BundlePlan
    workloads: dict[str, _Workload]


@attrs.define
class _Volume:
    request: VolumeRequest
    files: dict[str, bytes] = attrs.field(factory=dict)

    @property
    def handle(self) -> VolumeHandle:
        return VolumeHandle(
            volume_id=self.request.volume_id, handle=f"fake-volume:{self.request.volume_id}"
        )


@attrs.define
class _Edge:
    plan: EdgePlan
    failure: str | None = None


class FakeAdapter(RuntimeAdapter):
    """An in-memory runtime for host tests: deterministic, inspectable, scriptable.

    Args:
        config: settings (see :class:`FakeConfig`).
        clock: the time source; a fresh :class:`FakeClock` by default.
        nodes: the places workloads run; by default ``config.nodes`` equal nodes.
        capabilities: what the fake claims; narrow it to test a host against a
            weaker runtime (methods then raise ``CapabilityUnsupported``).
    """

    kind = "fake"
    description = "In-memory runtime for tests and the quickstart; nothing really runs."
    Config = FakeConfig

    def __init__(
        self,
        config: Mapping[str, Any] | FakeConfig | None = None,
        *,
        clock: FakeClock | None = None,
        nodes: Iterable[FakeNode] | None = None,
        capabilities: RuntimeCapabilities | None = None,
    ) -> None:
        super().__init__(config)
        cfg: FakeConfig = self.config
        self.clock = clock or FakeClock()
        self.nodes: list[FakeNode] = (
            list(nodes)
            if nodes is not None
            else [
                FakeNode(
                    name=f"fake-node-{i}",
                    cpu_millis=cfg.node_cpu_millis,
                    memory_bytes=cfg.node_memory_bytes,
                )
                for i in range(cfg.nodes)
            ]
        )
        self._capabilities = capabilities or RuntimeCapabilities(
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
        self.faults = Faults()
        self.lease_store = FakeLeaseStore()
        """The leases every replica of this fake runtime shares (``replica()``)."""
        self._link = ReplicaLink(self.lease_store)
        self.writes = 0
        """How many changes the fake made; an idempotent apply adds none."""
        self.reads = 0
        """How many expensive (placement) reads ran; a read scope shares one."""
        self.trial_egress: dict[str, EgressPolicy | None] = {}
        """The egress rules each trial ran under, by trial id."""
        self.start_order: list[WorkloadRef] = []
        """Every workload instance started, in order."""
        self.images: set[str] = set()
        self.healthy_runtime = True
        self._bundles: dict[str, _Bundle] = {}
        self._volumes: dict[str, _Volume] = {}
        self._edges: dict[str, _Edge] = {}
        self._behaviours: dict[str, ImageBehaviour] = {}
        self._exec_handlers: list[tuple[tuple[str, ...], ExecHandler]] = []
        self._events = BundleEventHub()
        self._instances = 0
        self._unconfirmed_since: datetime | None = None
        self._confirmed_again = anyio.Event()
        self.closed = False
        self._saved_state = load_state(self, cfg.state_file) if cfg.state_file else None

    # -- test controls --------------------------------------------------------------------

    @property
    def calls(self) -> Counter[str]:
        """How often each method was called, failed calls included."""
        return self.faults.calls

    def script_image(self, image: str, behaviour: ImageBehaviour) -> None:
        """Make every workload or trial started from ``image`` behave as ``behaviour``."""
        self._behaviours[image] = behaviour

    def on_exec(self, command_prefix: Iterable[str], handler: ExecHandler) -> None:
        """Play commands starting with ``command_prefix`` with ``handler`` (latest wins)."""
        self._exec_handlers.insert(0, (tuple(command_prefix), handler))

    def exit_workload(self, ref: WorkloadRef, exit_code: int = 0) -> None:
        """End the running instance of a workload with ``exit_code``."""
        self._end(ref, self._running(ref), exit_code=exit_code, oom=False)

    def oom_kill(self, ref: WorkloadRef) -> None:
        """End the running instance as the kernel's OOM killer would (exit code 137)."""
        self._end(ref, self._running(ref), exit_code=137, oom=True)

    def set_health(self, ref: WorkloadRef, healthy: bool | None) -> None:
        """Change a running workload's health signal (emits ``HEALTH_CHANGED``)."""
        instance = self._running(ref)
        if instance.healthy != healthy:
            instance.healthy = healthy
            self._emit(BundleEventKind.HEALTH_CHANGED, ref, healthy=healthy)

    def write_log(self, ref: WorkloadRef, data: bytes) -> None:
        """Append ``data`` to the log of the workload's newest instance."""
        self._newest(ref).log.write(self.clock.now(), data)

    def set_usage(self, ref: WorkloadRef, *, cpu_millis: int, memory_bytes: int) -> None:
        """What ``usage``/``in_use`` report for a running workload."""
        instance = self._running(ref)
        instance.cpu_millis, instance.memory_bytes = cpu_millis, memory_bytes

    def simulate_gap(self) -> None:
        """Tell every event stream that events were lost (they receive ``MISSED``)."""
        _LOG.warning("event gap: %d streams told to resync", len(self._events))
        self._broadcast(BundleEvent(kind=BundleEventKind.MISSED, at=self.clock.now()))

    def simulate_cache_down(self) -> None:
        """The runtime stops confirming what observe answers, as a cache whose watch is down.

        ``observe`` then reports the moment it went down as ``confirmed_at``, and raises
        ``AdapterUnavailable`` once that is more than ``max_staleness`` seconds ago on the
        clock; :meth:`simulate_cache_up` ends it.
        """
        if self._unconfirmed_since is None:
            self._unconfirmed_since = self.clock.now()
            self._confirmed_again = anyio.Event()

    def simulate_cache_up(self) -> None:
        """The runtime confirms again (after :meth:`simulate_cache_down`).

        An ``observe(..., not_before=...)`` waiting for a confirmation then answers.
        """
        self._unconfirmed_since = None
        self._confirmed_again.set()

    def _confirmed_at(self) -> datetime:
        since = self._unconfirmed_since
        if since is None:
            return self.clock.now()
        cfg: FakeConfig = self.config
        stale_for = (self.clock.now() - since).total_seconds()
        if stale_for > cfg.max_staleness:
            raise AdapterUnavailable(
                f"the runtime has not confirmed its state for {stale_for:.0f} s",
                details={"confirmed_at": since.isoformat(), "stale_for": stale_for},
            )
        return since

    def drop_event_streams(self) -> None:
        """Cut every open event stream: each raises ``AdapterUnavailable`` when read."""
        self._events.fail(AdapterUnavailable("the event stream was lost"))

    def fail_edge(self, name: str, detail: str) -> None:
        """Make an applied edge stop serving, for ``detail`` (``observe_edge`` says it)."""
        self._edge(name).failure = detail

    def set_runtime_health(self, healthy: bool) -> None:
        """Make ``health_check`` pass or fail."""
        self.healthy_runtime = healthy

    def replica(self) -> FakeReplica:
        """Another host replica's adapter over this runtime, for membership tests."""
        return FakeReplica(self, ReplicaLink(self.lease_store))

    def kill(self) -> None:
        """Crash this replica's membership: it stops renewing and releases nothing."""
        self._link.kill()

    def membership(
        self,
        replica: str,
        settings: MembershipSettings | None = None,
        *,
        link: ReplicaLink | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        self._capabilities.require("membership")
        return (link or self._link).join(self, replica, settings)

    # -- inspection -----------------------------------------------------------------------

    def bundle_ids(self) -> list[str]:
        """Ids of every bundle the fake holds."""
        return sorted(self._bundles)

    def egress_allowed(self, ref: BundleRef, destination: str, port: int) -> bool:
        """Whether the bundle's workloads may connect to ``destination`` on ``port``.

        The fake's model of enforcement: its plan's egress rules as data (no rules: any).
        """
        egress = self._bundle(ref.bundle_id).plan.network.egress
        return egress is None or egress.allows(destination, port)

    def ingress_allowed(
        self, ref: WorkloadRef, port: int, protocol: PortProtocol | str = PortProtocol.TCP
    ) -> bool:
        """Whether anything outside the workload's app may connect to it on ``port``.

        Outside is the host's proxy and the edge. The fake's model of enforcement: only an
        exposed workload, and only on a port its plan lists (protocol included); the
        workloads of its own app reach it on any port.
        """
        plan = self._workload(ref).plan
        return plan.exposed and Port(port, PortProtocol(protocol)) in plan.ports

    def plan_of(self, bundle_id: str) -> BundlePlan:
        """The last plan applied for ``bundle_id``."""
        return self._bundle(bundle_id).plan

    def instances_started(self, ref: WorkloadRef) -> int:
        """How many instances of this workload were ever started."""
        return self.start_order.count(ref)

    def volume_files(self, volume_id: str) -> dict[str, bytes]:
        """The files a volume holds, by relative path (a copy)."""
        return dict(self._volume(volume_id).files)

    def write_volume_file(self, volume_id: str, path: str, content: bytes) -> None:
        """Write a file into a volume, as a workload would."""
        self._volume(volume_id).files[path.lstrip("/")] = content

    def placement(self, ref: WorkloadRef) -> str | None:
        """The node the workload's running instance was placed on."""
        instance = self._bundle(ref.bundle_id).workloads[ref.workload].instance
        return instance.node if instance and instance.running else None

    # -- internals ------------------------------------------------------------------------

    def _bundle(self, bundle_id: str) -> _Bundle:
        try:
            return self._bundles[bundle_id]
        except KeyError:
            raise NotFound(f"no bundle {bundle_id!r}", details={"bundle_id": bundle_id}) from None

    def _workload(self, ref: WorkloadRef) -> _Workload:
        bundle = self._bundle(ref.bundle_id)
        try:
            return bundle.workloads[ref.workload]
        except KeyError:
            raise NotFound(
                f"bundle {ref.bundle_id!r} has no workload {ref.workload!r}",
                details={"bundle_id": ref.bundle_id, "workload": ref.workload},
            ) from None

    def _newest(self, ref: WorkloadRef) -> _Instance:
        instance = self._workload(ref).instance
        if instance is None:
            raise NotFound(
                f"workload {ref.workload!r} of {ref.bundle_id!r} has no instance",
                details={"bundle_id": ref.bundle_id, "workload": ref.workload},
            )
        return instance

    def _running(self, ref: WorkloadRef) -> _Instance:
        instance = self._newest(ref)
        if not instance.running:
            raise NotFound(
                f"workload {ref.workload!r} of {ref.bundle_id!r} is not running",
                details={"bundle_id": ref.bundle_id, "workload": ref.workload},
            )
        return instance

    def _volume(self, volume_id: str) -> _Volume:
        try:
            return self._volumes[volume_id]
        except KeyError:
            raise NotFound(f"no volume {volume_id!r}", details={"volume_id": volume_id}) from None

    def _volume_by_handle(self, handle: VolumeHandle) -> _Volume:
        volume = self._volume(handle.volume_id)
        if volume.handle != handle:
            raise NotFound(f"handle {handle.handle!r} does not name volume {handle.volume_id!r}")
        return volume

    def _edge(self, name: str) -> _Edge:
        try:
            return self._edges[name]
        except KeyError:
            raise NotFound(f"no edge {name!r}", details={"edge": name}) from None

    def _broadcast(self, event: BundleEvent) -> None:
        self._events.publish(event)

    def _emit(self, kind: BundleEventKind, ref: WorkloadRef, **fields: Any) -> None:
        self._broadcast(
            BundleEvent(
                kind=kind,
                at=self.clock.now(),
                bundle_id=ref.bundle_id,
                workload=ref.workload,
                **fields,
            )
        )

    def _end(self, ref: WorkloadRef, instance: _Instance, *, exit_code: int, oom: bool) -> None:
        instance.running, instance.exit_code, instance.oom_killed = False, exit_code, oom
        instance.healthy = None
        instance.log.close()
        self.writes += 1
        _LOG.info(
            "workload %s of %s %s",
            ref.workload,
            ref.bundle_id,
            "was OOM-killed" if oom else f"exited with {exit_code}",
            extra={"bundle_id": ref.bundle_id, "workload": ref.workload, "exit_code": exit_code},
        )
        kind = BundleEventKind.OOM_KILLED if oom else BundleEventKind.EXITED
        self._emit(kind, ref, exit_code=exit_code)

    def _remove(self, ref: WorkloadRef, workload: _Workload) -> None:
        if workload.instance is not None:
            workload.instance.log.close()
            workload.instance = None
            self.writes += 1
            self._emit(BundleEventKind.REMOVED, ref)

    def _used_by_node(self, exclude_bundle: str | None) -> dict[str, tuple[int, int]]:
        self.reads += 1
        used = {node.name: (0, 0) for node in self.nodes}
        for bundle_id, bundle in self._bundles.items():
            if bundle_id == exclude_bundle:
                continue
            for workload in bundle.workloads.values():
                instance = workload.instance
                if instance and instance.running and instance.node in used:
                    cpu, memory = used[instance.node]
                    resources = workload.plan.resources
                    used[instance.node] = (
                        cpu + (resources.cpu_millis or 0),
                        memory + (resources.memory_bytes or 0),
                    )
        return used

    async def _placements(self, exclude_bundle: str | None) -> dict[str, tuple[int, int]]:
        async def read() -> dict[str, tuple[int, int]]:
            return self._used_by_node(exclude_bundle)

        return await scoped_read(("fake-placements", exclude_bundle), read)

    def _place(self, plan: BundlePlan, starting: list[WorkloadPlan]) -> dict[str, str]:
        """Choose a node for each workload to start, or raise before anything is written."""
        used = self._used_by_node(plan.bundle_id)
        bundle = self._bundles.get(plan.bundle_id)
        if bundle is not None:  # the bundle's instances that keep running keep their room
            starting_names = {w.name for w in starting}
            planned_names = {w.name for w in plan.workloads}
            for name, kept in bundle.workloads.items():
                instance = kept.instance
                if name in starting_names or not (instance and instance.running):
                    continue
                if name in planned_names:
                    cpu, memory = used[instance.node]
                    used[instance.node] = (
                        cpu + (kept.plan.resources.cpu_millis or 0),
                        memory + (kept.plan.resources.memory_bytes or 0),
                    )
        sizes = {node.name: node for node in self.nodes}
        chosen: dict[str, str] = {}
        for workload in starting:
            cpu = workload.resources.cpu_millis or 0
            memory = workload.resources.memory_bytes or 0
            for name, (used_cpu, used_memory) in used.items():
                node = sizes[name]
                if used_cpu + cpu <= node.cpu_millis and used_memory + memory <= node.memory_bytes:
                    chosen[workload.name] = name
                    used[name] = (used_cpu + cpu, used_memory + memory)
                    break
            else:
                raise CapacityExceeded(
                    f"no node has room for workload {workload.name!r} ({cpu}m CPU, {memory} bytes)",
                    details={"bundle_id": plan.bundle_id, "workload": workload.name},
                )
        return chosen

    def _start(self, ref: WorkloadRef, workload: _Workload, digest: str, node: str) -> None:
        behaviour = self._behaviours.get(workload.plan.image, ImageBehaviour())
        self._instances += 1
        if workload.instance is not None:
            workload.instance.log.close()
        instance = _Instance(
            number=self._instances, digest=digest, node=node, started_at=self.clock.now()
        )
        if workload.plan.health is not None:
            instance.healthy = behaviour.healthy
        workload.instance = instance
        self.writes += 1
        if behaviour.problem is not None:  # present, stuck before it runs: no STARTED
            instance.running = False
            instance.problem, instance.problem_detail = behaviour.problem, behaviour.problem_detail
            return
        self.start_order.append(ref)
        self._emit(BundleEventKind.STARTED, ref)
        if behaviour.log:
            instance.log.write(self.clock.now(), behaviour.log)
        if behaviour.oom:
            self._end(ref, instance, exit_code=137, oom=True)
        elif behaviour.exit_code is not None:
            self._end(ref, instance, exit_code=behaviour.exit_code, oom=False)

    def _ensure_volume(self, request: VolumeRequest) -> _Volume:
        volume = self._volumes.get(request.volume_id)
        if volume is None:
            volume = self._volumes[request.volume_id] = _Volume(request=request)
            self.writes += 1
        return volume

    def _check_open(self) -> None:
        if self.closed:
            msg = "the adapter is closed"
            raise AdapterUnavailable(msg)

    async def _enter(self, method: str) -> None:
        _LOG.debug("fake %s", method, extra={"operation": method})
        self._check_open()
        await self.faults.enter(method)

    # -- identity & health ----------------------------------------------------------------

    async def health_check(self) -> None:
        await self._enter("health_check")
        if not self.healthy_runtime:
            msg = "the fake runtime was told to be unhealthy"
            raise AdapterUnavailable(msg)

    async def capabilities(self) -> RuntimeCapabilities:
        await self._enter("capabilities")
        return self._capabilities

    def save_state(self) -> None:
        """Write bundles, volumes and edges to the configured ``state_file`` (if any)."""
        cfg: FakeConfig = self.config
        if cfg.state_file:
            self._saved_state = save_state(self, cfg.state_file, unless=self._saved_state)

    async def aclose(self) -> None:
        if not self.closed:
            self.save_state()
        self.closed = True
        self._events.close()

    # -- bundles --------------------------------------------------------------------------

    async def check_plan(self, plan: BundlePlan) -> None:
        await self._enter("check_plan")
        check_plan(plan, self._capabilities)

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        await self._enter("apply")
        check_fake_write(self._link, plan.bundle_id)
        check_plan(plan, self._capabilities)
        writes = self.writes
        bundle = self._bundles.get(plan.bundle_id)
        digests = {w.name: _digest(w) for w in plan.workloads}
        starting = []
        for planned in plan.start_order():
            current = bundle.workloads.get(planned.name) if bundle else None
            instance = current.instance if current else None
            current_digest = instance.digest if instance and instance.running else None
            if current_digest != digests[planned.name]:
                starting.append(planned)
        nodes = self._place(plan, starting)  # raises before any write
        for volume in plan.volumes:
            self._ensure_volume(
                VolumeRequest(
                    volume_id=volume.volume_id,
                    bundle_id=plan.bundle_id,
                    name=volume.name,
                    size_bytes=volume.size_bytes,
                )
            )
        if bundle is None:
            bundle = self._bundles[plan.bundle_id] = _Bundle(plan=plan, workloads={})
            self.writes += 1
        elif bundle.plan != plan:
            bundle.plan = plan
            self.writes += 1
        for name in [n for n in bundle.workloads if n not in digests]:
            self._remove(WorkloadRef(plan.bundle_id, name), bundle.workloads.pop(name))
        for workload_plan in plan.start_order():
            workload = bundle.workloads.setdefault(
                workload_plan.name, _Workload(plan=workload_plan)
            )
            workload.plan = workload_plan
            if workload_plan.name in nodes:
                ref = WorkloadRef(plan.bundle_id, workload_plan.name)
                self._start(ref, workload, digests[workload_plan.name], nodes[workload_plan.name])
        _LOG.log(
            logging.INFO if self.writes > writes else logging.DEBUG,
            "applied %s: %d changes, %d workloads started",
            plan.bundle_id,
            self.writes - writes,
            len(nodes),
            extra={"bundle_id": plan.bundle_id, "writes": self.writes - writes},
        )
        return BundleHandle(bundle_id=plan.bundle_id, handle=f"fake:{plan.bundle_id}")

    def _observed_volumes(self, bundle_id: str, plan: BundlePlan | None) -> list[ObservedVolume]:
        ids = [v.volume_id for v in plan.volumes] if plan else []
        ids += sorted(
            v
            for v, vol in self._volumes.items()
            if vol.request.bundle_id == bundle_id and v not in ids
        )
        observed = []
        for volume_id in ids:
            volume = self._volumes.get(volume_id)
            observed.append(
                ObservedVolume(
                    volume_id=volume_id,
                    present=volume is not None,
                    handle=volume.handle if volume else None,
                )
            )
        return observed

    async def _confirmed_not_before(self, not_before: datetime) -> datetime:
        """A confirmation at or after ``not_before`` (or now, when that is later on the clock).

        While the cache is down (:meth:`simulate_cache_down`), waits for
        :meth:`simulate_cache_up`, up to ``CONFIRM_TIMEOUT`` seconds of real time.
        """
        wanted = min(not_before, self.clock.now())
        confirmed_at = self._confirmed_at()
        if confirmed_at >= wanted:
            return confirmed_at
        with anyio.move_on_after(CONFIRM_TIMEOUT):
            await self._confirmed_again.wait()
            return self._confirmed_at()
        raise AdapterUnavailable(
            f"the runtime has confirmed nothing since {confirmed_at.isoformat()}",
            remedy="Retry when the runtime answers, or observe without 'not_before'.",
            details={"confirmed_at": confirmed_at.isoformat(), "not_before": wanted.isoformat()},
        )

    async def observe(
        self, ref: BundleRef, *, not_before: datetime | None = None
    ) -> ObservedBundle:
        await self._enter("observe")
        if not_before is None:
            confirmed_at = self._confirmed_at()
        else:
            confirmed_at = await self._confirmed_not_before(not_before)
        bundle = self._bundles.get(ref.bundle_id)
        if bundle is None:
            return ObservedBundle(
                bundle_id=ref.bundle_id,
                exists=False,
                volumes=self._observed_volumes(ref.bundle_id, None),
                confirmed_at=confirmed_at,
            )
        workloads = []
        for workload_plan in bundle.plan.workloads:
            instance = bundle.workloads[workload_plan.name].instance
            if instance is None:
                workloads.append(
                    ObservedWorkload(name=workload_plan.name, present=False, running=False)
                )
                continue
            workloads.append(
                ObservedWorkload(
                    name=workload_plan.name,
                    present=True,
                    running=instance.running,
                    instance_id=f"fake-instance-{instance.number}",
                    image_digest=_image_digest(workload_plan.image),
                    started_at=None if instance.problem else instance.started_at,
                    exit_code=instance.exit_code,
                    healthy=instance.healthy,
                    oom_killed=instance.oom_killed,
                    problem=instance.problem,
                    problem_detail=instance.problem_detail,
                )
            )
        return ObservedBundle(
            bundle_id=ref.bundle_id,
            exists=True,
            workloads=workloads,
            volumes=self._observed_volumes(ref.bundle_id, bundle.plan),
            confirmed_at=confirmed_at,
        )

    async def stop(self, ref: BundleRef) -> None:
        await self._enter("stop")
        check_fake_write(self._link, ref.bundle_id)
        bundle = self._bundles.get(ref.bundle_id)
        if bundle is None:
            return
        for name, workload in bundle.workloads.items():
            if workload.instance is not None and workload.instance.running:
                self._remove(WorkloadRef(ref.bundle_id, name), workload)

    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        await self._enter("destroy")
        check_fake_write(self._link, ref.bundle_id)
        options = options or DestroyOptions()
        writes = self.writes
        bundle = self._bundles.pop(ref.bundle_id, None)
        if bundle is not None:
            self.writes += 1
            for name, workload in bundle.workloads.items():
                self._remove(WorkloadRef(ref.bundle_id, name), workload)
        if not options.keep_volumes:
            for volume_id in [
                v for v, vol in self._volumes.items() if vol.request.bundle_id == ref.bundle_id
            ]:
                del self._volumes[volume_id]
                self.writes += 1
        if self.writes > writes:
            _LOG.info(
                "destroyed %s: %d changes",
                ref.bundle_id,
                self.writes - writes,
                extra={"bundle_id": ref.bundle_id, "writes": self.writes - writes},
            )

    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        host = f"{ref.workload}.{ref.bundle_id.lower().replace('_', '-')}.fake.invalid"
        return Upstream(
            url=f"http://{host}:{port}", pool_key=f"fake/{ref.bundle_id}/{ref.workload}"
        )

    # -- capacity -------------------------------------------------------------------------

    async def capacity(self) -> Capacity:
        await self._enter("capacity")
        used = await self._placements(None)
        running = sum(
            1
            for b in self._bundles.values()
            for w in b.workloads.values()
            if w.instance and w.instance.running
        )
        return Capacity(
            total_cpu_millis=sum(n.cpu_millis for n in self.nodes),
            total_memory_bytes=sum(n.memory_bytes for n in self.nodes),
            reported_at=self.clock.now(),
            running_workloads=running,
            largest_fit=self._largest(used),
            details={"nodes": str(len(self.nodes))},
        )

    def _largest(self, used: dict[str, tuple[int, int]]) -> Fit | None:
        return roomiest(
            Fit(
                cpu_millis=max(n.cpu_millis - used[n.name][0], 0),
                memory_bytes=max(n.memory_bytes - used[n.name][1], 0),
            )
            for n in self.nodes
        )

    async def largest_fit_for(self, bundle_id: str) -> Fit | None:
        await self._enter("largest_fit_for")
        return self._largest(await self._placements(bundle_id))

    def _usage_of(self, bundle_id: str, bundle: _Bundle) -> BundleUsage:
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
                bytes=sum(map(len, self._volumes[v.volume_id].files.values())),
            )
            for v in bundle.plan.volumes
            if v.volume_id in self._volumes
        ]
        return BundleUsage(
            bundle_id=bundle_id, reported_at=self.clock.now(), workloads=workloads, volumes=volumes
        )

    async def usage(self, ref: BundleRef) -> BundleUsage:
        await self._enter("usage")
        self._capabilities.require("reports_usage")
        return self._usage_of(ref.bundle_id, self._bundle(ref.bundle_id))

    async def in_use(self) -> InUse:
        await self._enter("in_use")
        self._capabilities.require("reports_usage")
        usages = [self._usage_of(i, b) for i, b in self._bundles.items()]
        return InUse(
            cpu_millis=sum(w.cpu_millis for u in usages for w in u.workloads),
            memory_bytes=sum(w.memory_bytes for u in usages for w in u.workloads),
            reported_at=self.clock.now(),
        )

    # -- events ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watch_bundles(self) -> AsyncIterator[AsyncIterator[BundleEvent]]:
        await self._enter("watch_bundles")
        self._capabilities.require("bundle_events")
        watching = BundleEvent(kind=BundleEventKind.WATCHING, at=self.clock.now())
        async with self._events.subscribe(watching) as stream:
            yield stream

    # -- logs and exec --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> AsyncIterator[ByteReceiveStream]:
        await self._enter("logs")
        instance = self._newest(ref)
        stream = IteratorByteStream(instance.log.read(options or LogOptions()))
        try:
            yield stream
        finally:
            await stream.aclose()

    def _handler_for(self, command: tuple[str, ...]) -> ExecHandler:
        for prefix, handler in self._exec_handlers:
            if command[: len(prefix)] == prefix:
                return handler
        return command_not_found

    @contextlib.asynccontextmanager
    async def exec(self, ref: WorkloadRef, request: ExecRequest) -> AsyncIterator[ExecSession]:
        await self._enter("exec")
        self._capabilities.require("exec")
        raise_problems(validate_exec_request(request), "exec request")
        self._running(ref)
        session = new_session(
            ref, request.command, request.env, tty=request.tty, want_stdin=request.stdin
        )
        async with anyio.create_task_group() as group:
            group.start_soon(session.play, self._handler_for(request.command))
            try:
                yield session
            finally:
                await session.aclose()
                group.cancel_scope.cancel()

    # -- volumes --------------------------------------------------------------------------

    async def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        await self._enter("create_volume")
        self._capabilities.require("persistent_volumes")
        raise_problems(validate_volume_request(request), f"volume {request.volume_id!r}")
        existing = self._volumes.get(request.volume_id)
        if existing is not None and existing.request.bundle_id != request.bundle_id:
            msg = f"volume {request.volume_id!r} belongs to bundle {existing.request.bundle_id!r}"
            raise AdapterFailed(msg, remedy="Use a volume id unique to the bundle.")
        return self._ensure_volume(request).handle

    async def destroy_volume(self, handle: VolumeHandle) -> None:
        await self._enter("destroy_volume")
        self._capabilities.require("persistent_volumes")
        if self._volumes.pop(handle.volume_id, None) is not None:
            self.writes += 1

    @contextlib.asynccontextmanager
    async def snapshot_volume(self, handle: VolumeHandle) -> AsyncIterator[ByteReceiveStream]:
        await self._enter("snapshot_volume")
        self._capabilities.require("persistent_volumes")
        volume = self._volume_by_handle(handle)
        stream = BytesReceiveStream(make_tar(volume.files, mtime=self.clock.now()))
        try:
            yield stream
        finally:
            await stream.aclose()

    async def restore_volume(
        self, handle: VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        await self._enter("restore_volume")
        self._capabilities.require("persistent_volumes")
        files = read_tar(await read_all(source))  # refuses a bad archive before any change
        volume = self._volumes.get(handle.volume_id)
        if volume is None:
            volume = self._ensure_volume(
                VolumeRequest(
                    volume_id=handle.volume_id, bundle_id=handle.volume_id, name=handle.volume_id
                )
            )
        volume.files = files
        self.writes += 1

    # -- images ---------------------------------------------------------------------------

    async def has_image(self, reference: str) -> bool:
        await self._enter("has_image")
        return reference in self.images or not reference.startswith("fake.local/")

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        await self._enter("import_image")
        self._capabilities.require("image_import")
        data = await read_all(source)
        if not data:
            raise InvalidPlan("an image archive cannot be empty")
        reference = "fake.local/imported@sha256:" + hashlib.sha256(data).hexdigest()
        self.images.add(reference)
        self.writes += 1
        return reference

    # -- trial ----------------------------------------------------------------------------

    async def trial(self, request: TrialRequest) -> TrialResult:
        await self._enter("trial")
        self._capabilities.require("trial_run")
        raise_problems(validate_trial(request, self._capabilities), f"trial {request.trial_id!r}")
        self.trial_egress[request.trial_id] = request.egress
        if request.isolation_floor > self._capabilities.isolation_class:
            raise AdapterFailed(
                f"trial needs isolation {request.isolation_floor.name.lower()}, this runtime "
                f"gives {self._capabilities.isolation_class.name.lower()}",
            )
        behaviour = self._behaviours.get(request.image, ImageBehaviour())
        declared = tuple(p.rstrip("/") + "/" for p in request.declared_paths)
        writes = tuple(w for w in behaviour.writes if not (w + "/").startswith(declared))
        return TrialResult(
            started=True,
            exit_code=137 if behaviour.oom else behaviour.exit_code,
            observed_ports=behaviour.listens,
            loopback_ports=behaviour.loopback_listens,
            observed_writes=writes,
            log=behaviour.log[:TRIAL_LOG_LIMIT],
        )

    # -- edge -----------------------------------------------------------------------------

    async def apply_edge(self, plan: EdgePlan) -> None:
        await self._enter("apply_edge")
        self._capabilities.require("edge")
        raise_problems(validate_edge(plan), f"edge {plan.name!r}")
        current = self._edges.get(plan.name)
        if current is not None and current.plan == plan:
            return
        for mount in plan.mounts:
            self._ensure_volume(
                VolumeRequest(
                    volume_id=mount.volume_id, bundle_id=f"edge-{plan.name}", name=mount.volume_id
                )
            )
        self._edges[plan.name] = _Edge(plan=plan)
        self.writes += 1

    async def observe_edge(self, name: str) -> EdgeState:
        await self._enter("observe_edge")
        self._capabilities.require("edge")
        edge = self._edges.get(name)
        if edge is None:
            return EdgeState(
                name=name,
                present=False,
                running=False,
                detail=f"no edge named {name!r} is installed",
            )
        if edge.failure:
            return EdgeState(name=name, present=True, running=False, detail=edge.failure)
        return EdgeState(
            name=name,
            present=True,
            running=True,
            detail=f"{edge.plan.replicas} of {edge.plan.replicas} replicas serving",
        )

    async def remove_edge(self, name: str) -> None:
        await self._enter("remove_edge")
        self._capabilities.require("edge")
        if self._edges.pop(name, None) is not None:
            self.writes += 1

    async def edges(self) -> tuple[str, ...]:
        await self._enter("edges")
        self._capabilities.require("edge")
        return tuple(sorted(self._edges))

    async def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        await self._enter("edge_volumes")
        self._capabilities.require("edge")
        ids = sorted({m.volume_id for e in self._edges.values() for m in e.plan.mounts})
        return tuple(self._volumes[i].handle for i in ids if i in self._volumes)
