"""The fake adapter: every method group, in memory, deterministic.

It is to pando-runtime what ``httpx.MockTransport`` is to httpx: the public
stand-in a host's unit tests use, and the first adapter to pass the
conformance kit. Time moves only with its :class:`FakeClock`; workloads start,
exit, get OOM-killed and change health when the test says so (or as their
image's :class:`ImageBehaviour` scripts); everything it did can be inspected.

The fake is told in parts, one job each: the runtime's state is a
:class:`~._fake_world.FakeWorld`; placement and starting instances are the
scheduler's (``_fake_scheduler``); the test controls are :class:`FakeControls`;
this module is the contract over a world. A replica (:meth:`FakeAdapter.replica`)
is another :class:`FakeAdapter` over the same world with a lease link of its
own, so it answers every contract method as the fake does.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from datetime import datetime
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream

from .._adapter._abc import RuntimeAdapter
from .._adapter._fake_info import FAKE, FakeConfig
from .._contract._capabilities import RuntimeCapabilities
from .._contract._capacity import BundleUsage, Capacity, Fit, InUse
from .._contract._edge import EdgePlan, EdgeState
from .._contract._errors import AdapterFailed, AdapterUnavailable, InvalidPlan
from .._contract._events import BundleEvent, BundleEventKind
from .._contract._exec import ExecRequest, ExecSession
from .._contract._log_options import LogOptions
from .._contract._observed import ObservedBundle
from .._contract._plans import BundlePlan
from .._contract._refs import BundleHandle, BundleRef, DestroyOptions, Upstream, WorkloadRef
from .._contract._streams import BytesReceiveStream, IteratorByteStream, read_all
from .._contract._trial import TrialRequest, TrialResult
from .._contract._volumes import VolumeHandle, VolumeRequest
from .._input._validation import (
    check_plan,
    raise_problems,
    validate_edge,
    validate_exec_request,
    validate_trial,
    validate_volume_request,
)
from .._replicas._leases import LeaseStore
from .._replicas._membership import Membership
from .._replicas._settings import MembershipSettings
from ._clock import FakeClock
from ._fake_controls import FakeControls
from ._fake_exec import new_session
from ._fake_membership import ReplicaLink
from ._fake_observe import observed_bundle
from ._fake_scheduler import (
    largest_fit,
    place,
    placements,
    refuse_while_stopping,
    start,
    workload_digest,
)
from ._fake_state import FakeStateFile
from ._fake_world import (
    LOG,
    Bundle,
    Edge,
    FakeNode,
    FakeWorld,
    ImageBehaviour,
    Workload,
    new_world,
)
from ._tar import make_tar, read_tar

__all__ = ["FakeAdapter", "FakeConfig", "FakeNode", "FakeReplica", "ImageBehaviour"]

CONFIRM_TIMEOUT = 10.0
"""Seconds (real time) ``observe(..., not_before=...)`` waits for the runtime to confirm."""

TRIAL_LOG_LIMIT = 64 * 1024


class FakeAdapter(FakeControls, RuntimeAdapter):
    """An in-memory runtime for host tests: deterministic, inspectable, scriptable.

    Args:
        config: settings (see :class:`FakeConfig`).
        clock: the time source; a fresh :class:`FakeClock` by default.
        nodes: the places workloads run; by default ``config.nodes`` equal nodes.
        capabilities: what the fake claims; narrow it to test a host against a
            weaker runtime (methods then raise ``CapabilityUnsupported``).
        lease_store: where the replicas' leases are kept (a real store under test, unclosed).
    """

    kind = "fake"
    api_version = FAKE.api_version
    description = "In-memory runtime for tests and the quickstart; nothing really runs."
    Config = FakeConfig

    def __init__(
        self,
        config: Mapping[str, Any] | FakeConfig | None = None,
        *,
        clock: FakeClock | None = None,
        nodes: Iterable[FakeNode] | None = None,
        capabilities: RuntimeCapabilities | None = None,
        lease_store: LeaseStore | None = None,
    ) -> None:
        super().__init__(config)
        cfg: FakeConfig = self.config
        world = new_world(cfg, clock=clock, nodes=nodes, capabilities=capabilities)
        world.leases = lease_store
        state_file = FakeStateFile(cfg.state_file) if cfg.state_file else None
        if state_file is not None:
            state_file.load(world)
        self._attach(world, owner=True, state_file=state_file)

    def _attach(
        self, world: FakeWorld, *, owner: bool, state_file: FakeStateFile | None = None
    ) -> None:
        """Become a client of ``world``: its ``owner`` (the fake that made it) or a replica."""
        self.world = world
        self.link = ReplicaLink(world.leases or world.lease_store)
        """This replica's own path to the runtime's leases (the fake is the first replica)."""
        self.closed = False
        self._owns_world = owner
        self._state_file = state_file

    # -- replicas ---------------------------------------------------------------------------

    def replica(self) -> FakeReplica:
        """Another host replica's adapter over this runtime, for membership tests."""
        return FakeReplica(self)

    def membership(
        self, replica: str, settings: MembershipSettings | None = None
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        self.world.capabilities.require("membership")

        async def bundles() -> list[str]:
            return self.bundle_ids()

        return self.link.join(replica, settings, bundles=bundles)

    # -- calls ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed or self.world.closed:
            msg = "the adapter is closed"
            raise AdapterUnavailable(msg)

    async def _enter(self, method: str) -> None:
        LOG.debug("fake %s", method, extra={"operation": method})
        self._check_open()
        await self.world.faults.enter(method)
        self._refuse_when_hung(method)

    def _confirmed_at(self) -> datetime:
        cfg: FakeConfig = self.config
        return self.world.confirmed_at(cfg.max_staleness)

    # -- identity & health ----------------------------------------------------------------

    async def health_check(self) -> None:
        await self._enter("health_check")
        if not self.world.healthy:
            msg = "the fake runtime was told to be unhealthy"
            raise AdapterUnavailable(msg)

    async def capabilities(self) -> RuntimeCapabilities:
        await self._enter("capabilities")
        return self.world.capabilities

    def save_state(self) -> None:
        """Write bundles, volumes and edges to the configured ``state_file`` (if any)."""
        if self._state_file is not None:
            self._state_file.save(self.world)

    async def aclose(self) -> None:
        if not self.closed:
            self.save_state()
        self.closed = True
        if self._owns_world:  # the runtime goes with the adapter that made it
            self.world.closed = True
            self.world.events.close()

    # -- bundles --------------------------------------------------------------------------

    async def check_plan(self, plan: BundlePlan) -> None:
        await self._enter("check_plan")
        check_plan(plan, self.world.capabilities)

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        await self._enter("apply")
        self.link.check_write(plan.bundle_id)
        check_plan(plan, self.world.capabilities)
        writes = self.world.writes
        self.world.settle_stops()
        bundle = self.world.bundles.get(plan.bundle_id)
        digests = {w.name: workload_digest(w) for w in plan.workloads}
        starting = []
        for planned in plan.start_order():
            current = bundle.workloads.get(planned.name) if bundle else None
            instance = current.instance if current else None
            # A lost instance is replaced (nothing confirms it runs), a stopping one too.
            kept = (
                instance is not None
                and instance.running
                and instance.stopping_until is None
                and not self.world.lost(instance)
            )
            current_digest = instance.digest if instance is not None and kept else None
            if current_digest != digests[planned.name]:
                starting.append(planned)
        refuse_while_stopping(self.world, plan.bundle_id, {w.name for w in starting})
        nodes = place(self.world, plan, starting)  # raises before any write
        for volume in plan.volumes:
            self.world.ensure_volume(
                VolumeRequest(
                    volume_id=volume.volume_id,
                    bundle_id=plan.bundle_id,
                    name=volume.name,
                    size_bytes=volume.size_bytes,
                )
            )
        if bundle is None:
            bundle = self.world.bundles[plan.bundle_id] = Bundle(plan=plan, workloads={})
            self.world.writes += 1
        elif bundle.plan != plan:
            bundle.plan = plan
            self.world.writes += 1
        for name in [n for n in bundle.workloads if n not in digests]:
            self.world.remove(WorkloadRef(plan.bundle_id, name), bundle.workloads.pop(name))
        for workload_plan in plan.start_order():
            workload = bundle.workloads.setdefault(workload_plan.name, Workload(plan=workload_plan))
            workload.plan = workload_plan
            if workload_plan.name in nodes:
                ref = WorkloadRef(plan.bundle_id, workload_plan.name)
                digest = digests[workload_plan.name]
                start(self.world, ref, workload, digest, nodes[workload_plan.name])
        LOG.log(
            logging.INFO if self.world.writes > writes else logging.DEBUG,
            "applied %s: %d changes, %d workloads started",
            plan.bundle_id,
            self.world.writes - writes,
            len(nodes),
            extra={"bundle_id": plan.bundle_id, "writes": self.world.writes - writes},
        )
        return BundleHandle(bundle_id=plan.bundle_id, handle=f"fake:{plan.bundle_id}")

    async def _confirmed_not_before(self, not_before: datetime) -> datetime:
        """A confirmation at or after ``not_before`` (or now, when that is later on the clock).

        While the cache is down (:meth:`simulate_cache_down`), waits for
        :meth:`simulate_cache_up`, up to ``CONFIRM_TIMEOUT`` seconds of real time.
        """
        wanted = min(not_before, self.world.clock.now())
        confirmed_at = self._confirmed_at()
        if confirmed_at >= wanted:
            return confirmed_at
        with anyio.move_on_after(CONFIRM_TIMEOUT):
            await self.world.confirmed_again.wait()
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
        return observed_bundle(self.world, ref.bundle_id, confirmed_at)

    # -- where bundles are: what a fleet asks of its members -------------------------------

    async def holds(self, bundle_id: str) -> bool:
        """Whether anything of the bundle is here: a workload (still stopping too), a volume."""
        await self._enter("holds")
        self._confirmed_at()
        return self.known_to_hold(bundle_id)

    def known_to_hold(self, bundle_id: str) -> bool:
        """:meth:`holds`, no call."""
        world = self.world
        return (
            bundle_id in world.bundles
            or bundle_id in world.leaving
            or any(v.request.bundle_id == bundle_id for v in world.volumes.values())
        )

    async def held_bundles(self) -> list[str]:
        """Every bundle anything of which is here."""
        await self._enter("held_bundles")
        self._confirmed_at()
        world = self.world
        volumes = (v.request.bundle_id for v in world.volumes.values())
        return list(dict.fromkeys([*world.bundles, *world.leaving, *volumes]))

    async def stop(self, ref: BundleRef) -> None:
        await self._enter("stop")
        self.link.check_write(ref.bundle_id)
        bundle = self.world.bundles.get(ref.bundle_id)
        if bundle is None:
            return
        for name, workload in bundle.workloads.items():
            if workload.instance is not None and workload.instance.running:
                self.world.tell_to_stop(WorkloadRef(ref.bundle_id, name), workload)

    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        await self._enter("destroy")
        self.link.check_write(ref.bundle_id)
        options = options or DestroyOptions()
        writes = self.world.writes
        bundle = self.world.bundles.pop(ref.bundle_id, None)
        if bundle is not None:
            self.world.writes += 1
            for name, workload in bundle.workloads.items():
                self.world.tell_to_stop(WorkloadRef(ref.bundle_id, name), workload)
            if any(w.instance is not None for w in bundle.workloads.values()):
                self.world.leaving[ref.bundle_id] = bundle  # gone once they have ended
        if not options.keep_volumes:
            for volume_id in [
                v for v, vol in self.world.volumes.items() if vol.request.bundle_id == ref.bundle_id
            ]:
                del self.world.volumes[volume_id]
                self.world.writes += 1
        if self.world.writes > writes:
            LOG.info(
                "destroyed %s: %d changes",
                ref.bundle_id,
                self.world.writes - writes,
                extra={"bundle_id": ref.bundle_id, "writes": self.world.writes - writes},
            )

    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        host = f"{ref.workload}.{ref.bundle_id.lower().replace('_', '-')}.fake.invalid"
        return Upstream(
            url=f"http://{host}:{port}", pool_key=f"fake/{ref.bundle_id}/{ref.workload}"
        )

    # -- capacity -------------------------------------------------------------------------

    async def capacity(self) -> Capacity:
        await self._enter("capacity")
        used = await placements(self.world, None)
        running = sum(
            1
            for b in self.world.bundles.values()
            for w in b.workloads.values()
            if w.instance and w.instance.running
        )
        return Capacity(
            total_cpu_millis=sum(n.cpu_millis for n in self.world.nodes),
            total_memory_bytes=sum(n.memory_bytes for n in self.world.nodes),
            reported_at=self.world.clock.now(),
            running_workloads=running,
            largest_fit=largest_fit(self.world, used),
            details={"nodes": str(len(self.world.nodes))},
        )

    async def largest_fit_for(self, bundle_id: str) -> Fit | None:
        await self._enter("largest_fit_for")
        return largest_fit(self.world, await placements(self.world, bundle_id))

    async def usage(self, ref: BundleRef) -> BundleUsage:
        await self._enter("usage")
        self.world.capabilities.require("reports_usage")
        return self.world.usage_of(ref.bundle_id, self.world.bundle(ref.bundle_id))

    async def in_use(self) -> InUse:
        await self._enter("in_use")
        self.world.capabilities.require("reports_usage")
        usages = [self.world.usage_of(i, b) for i, b in self.world.bundles.items()]
        return InUse(
            cpu_millis=sum(w.cpu_millis for u in usages for w in u.workloads),
            memory_bytes=sum(w.memory_bytes for u in usages for w in u.workloads),
            reported_at=self.world.clock.now(),
        )

    # -- events ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watch_bundles(self) -> AsyncIterator[AsyncIterator[BundleEvent]]:
        await self._enter("watch_bundles")
        self.world.capabilities.require("bundle_events")
        watching = BundleEvent(kind=BundleEventKind.WATCHING, at=self.world.clock.now())
        async with self.world.events.subscribe(watching) as stream:
            yield stream

    # -- logs and exec --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> AsyncIterator[ByteReceiveStream]:
        await self._enter("logs")
        instance = self.world.newest(ref)
        stream = IteratorByteStream(instance.log.read(options or LogOptions()))
        try:
            yield stream
        finally:
            await stream.aclose()

    @contextlib.asynccontextmanager
    async def exec(self, ref: WorkloadRef, request: ExecRequest) -> AsyncIterator[ExecSession]:
        await self._enter("exec")
        self.world.capabilities.require("exec")
        raise_problems(validate_exec_request(request), "exec request")
        self.world.running(ref)
        session = new_session(
            ref, request.command, request.env, tty=request.tty, want_stdin=request.stdin
        )
        async with anyio.create_task_group() as group:
            group.start_soon(session.play, self.world.handler_for(request.command))
            try:
                yield session
            finally:
                await session.aclose()
                group.cancel_scope.cancel()

    # -- volumes --------------------------------------------------------------------------

    async def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        await self._enter("create_volume")
        self.world.capabilities.require("persistent_volumes")
        raise_problems(validate_volume_request(request), f"volume {request.volume_id!r}")
        existing = self.world.volumes.get(request.volume_id)
        if existing is not None and existing.request.bundle_id != request.bundle_id:
            msg = f"volume {request.volume_id!r} belongs to bundle {existing.request.bundle_id!r}"
            raise AdapterFailed(msg, remedy="Use a volume id unique to the bundle.")
        return self.world.ensure_volume(request).handle

    async def destroy_volume(self, handle: VolumeHandle) -> None:
        await self._enter("destroy_volume")
        self.world.capabilities.require("persistent_volumes")
        if self.world.volumes.pop(handle.volume_id, None) is not None:
            self.world.writes += 1

    @contextlib.asynccontextmanager
    async def snapshot_volume(self, handle: VolumeHandle) -> AsyncIterator[ByteReceiveStream]:
        await self._enter("snapshot_volume")
        self.world.capabilities.require("persistent_volumes")
        volume = self.world.volume_by_handle(handle)
        stream = BytesReceiveStream(make_tar(volume.files, mtime=self.world.clock.now()))
        try:
            yield stream
        finally:
            await stream.aclose()

    async def restore_volume(
        self, handle: VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        await self._enter("restore_volume")
        self.world.capabilities.require("persistent_volumes")
        files = read_tar(await read_all(source))  # refuses a bad archive before any change
        volume = self.world.volumes.get(handle.volume_id)
        if volume is None:
            volume = self.world.ensure_volume(
                VolumeRequest(
                    volume_id=handle.volume_id, bundle_id=handle.volume_id, name=handle.volume_id
                )
            )
        volume.files = files
        self.world.writes += 1

    # -- images ---------------------------------------------------------------------------

    async def has_image(self, reference: str) -> bool:
        await self._enter("has_image")
        return reference in self.world.images or not reference.startswith("fake.local/")

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        await self._enter("import_image")
        self.world.capabilities.require("image_import")
        data = await read_all(source)
        if not data:
            raise InvalidPlan("an image archive cannot be empty")
        reference = "fake.local/imported@sha256:" + hashlib.sha256(data).hexdigest()
        self.world.images.add(reference)
        self.world.writes += 1
        return reference

    # -- trial ----------------------------------------------------------------------------

    async def trial(self, request: TrialRequest) -> TrialResult:
        await self._enter("trial")
        self.world.capabilities.require("trial_run")
        problems = validate_trial(request, self.world.capabilities)
        raise_problems(problems, f"trial {request.trial_id!r}")
        self.world.trial_egress[request.trial_id] = request.egress
        behaviour = self.world.behaviour(request.image)
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
        self.world.capabilities.require("edge")
        raise_problems(validate_edge(plan), f"edge {plan.name!r}")
        current = self.world.edges.get(plan.name)
        if current is not None and current.plan == plan:
            return
        for mount in plan.mounts:
            self.world.ensure_volume(
                VolumeRequest(
                    volume_id=mount.volume_id, bundle_id=f"edge-{plan.name}", name=mount.volume_id
                )
            )
        self.world.edges[plan.name] = Edge(plan=plan)
        self.world.writes += 1

    async def observe_edge(self, name: str) -> EdgeState:
        await self._enter("observe_edge")
        self.world.capabilities.require("edge")
        edge = self.world.edges.get(name)
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
        self.world.capabilities.require("edge")
        if self.world.edges.pop(name, None) is not None:
            self.world.writes += 1

    async def edges(self) -> tuple[str, ...]:
        await self._enter("edges")
        self.world.capabilities.require("edge")
        return tuple(sorted(self.world.edges))

    async def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        await self._enter("edge_volumes")
        self.world.capabilities.require("edge")
        ids = sorted({m.volume_id for e in self.world.edges.values() for m in e.plan.mounts})
        return tuple(self.world.volumes[i].handle for i in ids if i in self.world.volumes)


class FakeReplica(FakeAdapter):
    """Another host replica's adapter over the same fake runtime (``fake.replica()``).

    It is a :class:`FakeAdapter` over the fake's world with a lease link of its own:
    what one replica applies, every replica observes; faults and test controls are
    the runtime's, whichever replica scripts them. ``kill()`` crashes its membership;
    ``cut_off()`` and ``reconnect()`` take its leases away and give them back. Closing
    it closes this replica only; the runtime goes when the fake that made it closes.
    """

    description = "Another replica's view of a fake runtime."

    def __init__(self, fake: FakeAdapter) -> None:
        # No FakeAdapter.__init__: the settings are the fake's, already taken, and the
        # world is the fake's (its state file is read and written by the fake alone).
        RuntimeAdapter.__init__(self, fake.config)
        self.fake = fake
        """The fake whose runtime this replica shares."""
        self._attach(fake.world, owner=False)
