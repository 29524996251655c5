"""The multi-cluster adapter: each app on one of several clusters, placed by room once.

Every member cluster is a :class:`KubernetesAdapter` of its own (a named cluster session and
its feature components), configured from the shared ``settings`` and its entry in
``clusters``. An app lives on exactly one member. Where it lives is recorded on that cluster,
never only in memory: it is the app's namespace (``pando-<bundle id>``, annotated with the
bundle id), so a restarted adapter, or a second host process, finds it by looking at each
member's cache. A new app with ``first_deploy=True`` goes to the member with the most room for
it (``largest_fit_for``), placements in flight counted (:mod:`._placement`); one without goes
to the default cluster; an app found somewhere stays there. One membership serves every member
(its Leases on ``membership_cluster``): the members share its write guard. A member that
cannot be read makes every question about its apps (and about any app not found elsewhere)
raise :class:`AdapterUnavailable` naming it: an app is never reported absent because its
cluster is down.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Self

import anyio
import anyio.to_thread
import attrs
from anyio.abc import ByteReceiveStream

from pando_runtime import (
    AdapterUnavailable,
    BundleHandle,
    BundlePlan,
    BundleRef,
    BundleUsage,
    Capability,
    Capacity,
    DestroyOptions,
    EdgePlan,
    EdgeState,
    ExecRequest,
    ExecSession,
    Fit,
    ImageDelivery,
    InUse,
    LogOptions,
    Membership,
    MembershipSettings,
    NotFound,
    ObservedBundle,
    RuntimeAdapter,
    RuntimeCapabilities,
    TrialRequest,
    TrialResult,
    Upstream,
    VolumeHandle,
    VolumeRequest,
    WorkloadRef,
    check_plan,
)
from pando_runtime.plugin import (
    NO_API_OBSERVER,
    ApiObserver,
    MembershipSlot,
    in_read_scope,
    roomiest,
)

from ._adapter import KubernetesAdapter
from ._info import MULTI_DESCRIPTION, KubernetesConfig, MultiClusterConfig
from ._log import logger
from ._members import check_members, common_capabilities, load_members, member_config, naming
from ._merged_events import merged_events
from ._names import upstream_for
from ._placement import Reservations, choose, largest_request, room_left, total_request, waiting
from .api._clusters import ApiRate
from .features._volumes import parse_handle
from .session._connect import transport_to
from .session._session import ClusterSession

__all__ = ["MultiClusterAdapter"]

log = logger("multi")


class MultiClusterAdapter(RuntimeAdapter):
    """Runs each app on one of several Kubernetes clusters, placed by room on its first deploy."""

    kind: ClassVar[str] = "kubernetes-multi"
    description: ClassVar[str] = MULTI_DESCRIPTION
    Config: ClassVar[type[Any]] = MultiClusterConfig
    config: MultiClusterConfig

    def __init__(self, config: Mapping[str, Any] | MultiClusterConfig | None = None) -> None:
        super().__init__(config)
        check_members(self.config)
        self._members: dict[str, KubernetesAdapter] = {}
        self._default = ""
        self._membership_cluster = ""
        self._ready_lock = anyio.Lock()
        self._placed: dict[str, str] = {}
        """Where this process last found or put each bundle (checked again on every use)."""
        self._placing: dict[str, anyio.Lock] = {}
        self._deciding = anyio.Lock()
        """One placement decision at a time: each sees the ones before it reserved."""
        self._reservations = Reservations()
        self._slot = MembershipSlot()
        """The one membership's write guard, shared by every member: it guards their writes."""
        self._entered: contextlib.AsyncExitStack | None = None
        self._observer: ApiObserver = NO_API_OBSERVER

    # -- members ------------------------------------------------------------------------------

    def _member_config(self, name: str | None) -> KubernetesConfig:
        return member_config(self.config, name)

    async def _ready(self) -> dict[str, KubernetesAdapter]:
        """The members, made on first use (the default first)."""
        if self._members:
            return self._members
        async with self._ready_lock:
            if not self._members:
                loaded = await anyio.to_thread.run_sync(load_members, self.config)
                default, clusters = loaded.default, loaded.clusters
                members = {}
                for name in (default, *(n for n in clusters if n != default)):
                    config = self._member_config(name)
                    rate = ApiRate(qps=config.api_qps, burst=config.api_burst)
                    cluster = clusters[name].with_rate(rate)
                    session = ClusterSession(
                        config,
                        name=name,
                        connect=functools.partial(transport_to, cluster, config),
                    )
                    members[name] = KubernetesAdapter(
                        config, session=session, membership_slot=self._slot
                    )
                    members[name].observe_api(self._observer)
                self._default = default
                self._membership_cluster = loaded.membership
                self._members = members
        return self._members

    def observe_api(self, observer: ApiObserver) -> None:
        """Report every member's API calls, cache and watches, each naming its cluster."""
        self._observer = observer
        for member in self._members.values():
            member.observe_api(observer)

    @property
    def members(self) -> Mapping[str, KubernetesAdapter]:
        """The member clusters by name, the default first (empty until first used)."""
        return dict(self._members)

    @property
    def default_cluster(self) -> str:
        """The default cluster's name (empty until first used)."""
        return self._default

    @property
    def api_calls(self) -> int:
        """API calls made so far, every member's summed."""
        return sum(m.api_calls for m in self._members.values())

    async def __aenter__(self) -> Self:
        members = await self._ready()
        stack = contextlib.AsyncExitStack()
        try:
            for member in members.values():
                await stack.enter_async_context(member)
        except BaseException:
            await stack.aclose()
            raise
        self._entered = stack
        return self

    async def aclose(self) -> None:
        """Stop every member's watches and close its connections. Safe to call twice."""
        stack, self._entered = self._entered, None
        if stack is not None:
            await stack.aclose()
        for member in self._members.values():
            await member.aclose()

    # -- where bundles are ----------------------------------------------------------------------

    async def locate(self, bundle_id: str) -> str | None:
        """The cluster holding ``bundle_id``, ``None`` when no member has it.

        A member that cannot be read while no other has the bundle: :class:`AdapterUnavailable`
        naming it (the bundle may be there).
        """
        members = await self._ready()
        known = self._placed.get(bundle_id)
        if known is not None:
            try:
                if await members[known].holds(bundle_id):
                    return known
            except AdapterUnavailable as error:
                raise naming(error, known) from error
        down: list[AdapterUnavailable] = []
        for name, member in members.items():
            if name == known:
                continue
            try:
                if await member.holds(bundle_id):
                    self._placed[bundle_id] = name
                    return name
            except AdapterUnavailable as error:
                down.append(naming(error, name))
        self._placed.pop(bundle_id, None)
        if down:
            raise down[0]
        return None

    async def _member_of(self, bundle_id: str) -> KubernetesAdapter:
        """The bundle's member, or the default one for a bundle found nowhere."""
        members = await self._ready()
        return members[await self.locate(bundle_id) or self._default]

    async def _place(self, plan: BundlePlan) -> str:
        """The member for a new bundle, reserved for it until its view counts it.

        See :mod:`._placement`.
        """
        members = await self._ready()
        rooms: dict[str, Fit | None] = {}
        down: list[AdapterUnavailable] = []

        async def read_room(name: str, member: KubernetesAdapter) -> None:
            try:
                fit = await member.largest_fit_for(plan.bundle_id)
            except AdapterUnavailable as error:
                down.append(naming(error, name))
                return
            seen = member.pods_by_bundle()  # the same cache, right after the fit read it
            held = self._reservations.held(name, seen, fit_is_fresh=not in_read_scope())
            rooms[name] = None if fit is None else room_left(fit, waiting(seen), held)

        async with self._deciding:
            async with anyio.create_task_group() as group:  # every member's room at once
                for name, member in members.items():
                    group.start_soon(read_room, name, member)
            if down:
                raise down[0]
            chosen = choose(plan.bundle_id, largest_request(plan), rooms, self._default)
            self._reservations.reserve(plan.bundle_id, chosen, total_request(plan))
        log.debug(
            "placing %s on %s",
            plan.bundle_id,
            chosen,
            extra={"bundle_id": plan.bundle_id, "cluster": chosen},
        )
        return chosen

    # -- identity & health ----------------------------------------------------------------------

    async def capabilities(self) -> RuntimeCapabilities:
        """What every member supports; image import only when they share one registry."""
        members = await self._ready()
        common = common_capabilities([await m.capabilities() for m in members.values()])
        if not self._one_registry(members):
            delivery = tuple(d for d in common.image_delivery if d is not ImageDelivery.IMPORT)
            common = attrs.evolve(common, image_delivery=delivery)
        return common

    @staticmethod
    def _one_registry(members: Mapping[str, KubernetesAdapter]) -> bool:
        """Whether every member has the same image registry settings (an import serves all)."""
        settings = {m.images.settings for m in members.values()}
        return len(settings) == 1

    def health_details(self) -> dict[str, str]:
        """Each member's :meth:`KubernetesAdapter.health_details`, keyed ``<cluster>.<key>``.

        Computed (no I/O), as the single-cluster adapter's: the members made so far, which
        is every member once the adapter is entered or has been used.
        """
        return {
            f"{name}.{key}": value
            for name, member in self._members.items()
            for key, value in member.health_details().items()
        }

    async def health_check(self) -> None:
        """Every member's health check; a failure names each member that failed."""
        members = await self._ready()
        failures: list[AdapterUnavailable] = []
        for name, member in members.items():
            try:
                await member.health_check()
            except AdapterUnavailable as error:
                failures.append(naming(error, name))
        if len(failures) == 1:
            raise failures[0]
        if failures:
            raise AdapterUnavailable(
                "; ".join(f.message for f in failures),
                remedy=failures[0].remedy,
                details={"clusters": ",".join(str(f.details["cluster"]) for f in failures)},
            )

    # -- bundles --------------------------------------------------------------------------------

    async def check_plan(self, plan: BundlePlan) -> None:
        """The default member's check, then the capabilities every member shares.

        Members share the plan rules (the same settings but the cluster's address), so a bad
        plan is refused before placement reads any cluster's room.
        """
        members = await self._ready()
        try:
            await members[self._default].check_plan(plan)
        except AdapterUnavailable as error:
            raise naming(error, self._default) from error
        check_plan(plan, await self.capabilities())

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        """Converge the bundle on its cluster; a new one is placed first (see the module)."""
        self._slot.check_write(plan.bundle_id)  # before placement reads or reserves anything
        await self.check_plan(plan)
        members = await self._ready()
        async with self._placing.setdefault(plan.bundle_id, anyio.Lock()):
            name = await self.locate(plan.bundle_id)
            placing = name is None and plan.first_deploy
            if name is None:
                name = await self._place(plan) if placing else self._default
            try:
                handle = await members[name].apply(plan)
            except BaseException:
                if placing:  # the room it held is free again
                    self._reservations.release(plan.bundle_id)
                raise
            self._placed[plan.bundle_id] = name
        return BundleHandle(
            bundle_id=plan.bundle_id,
            handle=f"{name}/{handle.handle}",
            details={**handle.details, "cluster": name},
        )

    def membership(
        self, replica: str, settings: MembershipSettings | None = None
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        """Join the host's replicas: one membership for every cluster.

        Its Leases are on ``membership_cluster`` (the default cluster when unset), in that
        member's ``server_namespace``; it guards every member's writes (``docs/replicas.md``).
        """
        return self._join(replica, settings)

    @contextlib.asynccontextmanager
    async def _join(
        self, replica: str, settings: MembershipSettings | None
    ) -> AsyncIterator[Membership]:
        members = await self._ready()
        leases = members[self._membership_cluster].leases
        async with self._slot.join(leases, replica, settings, bundles=self._bundle_ids) as joined:
            yield joined

    @property
    def placements_in_flight(self) -> Mapping[str, str]:
        """The cluster of each new bundle this process placed and still holds room for.

        No call: what each member's cache counts already is dropped first.
        """
        fresh = not in_read_scope()  # in a scope, kept for the scope's next decisions
        for name, member in self._members.items():
            self._reservations.held(name, member.pods_by_bundle(), fit_is_fresh=fresh)
        return self._reservations.clusters()

    @property
    def membership_cluster(self) -> str:
        """The cluster holding the membership's Leases (empty until first used)."""
        return self._membership_cluster

    async def _bundle_ids(self) -> list[str]:
        """Every member's bundles (for the membership's changes); a member down names it."""
        ids: list[str] = []
        for name, member in (await self._ready()).items():
            try:
                ids += await member.bundle_ids()
            except AdapterUnavailable as error:
                raise naming(error, name) from error
        return ids

    async def observe(
        self, ref: BundleRef, *, not_before: datetime | None = None
    ) -> ObservedBundle:
        """The bundle as its cluster sees it; absent only when every member says so."""
        name = await self.locate(ref.bundle_id)
        if name is None:
            return ObservedBundle(bundle_id=ref.bundle_id, exists=False)
        members = await self._ready()
        try:
            return await members[name].observe(ref, not_before=not_before)
        except AdapterUnavailable as error:
            raise naming(error, name) from error

    async def stop(self, ref: BundleRef) -> None:
        """Stop the bundle on its cluster."""
        await (await self._member_of(ref.bundle_id)).stop(ref)

    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        """Remove the bundle from its cluster (nothing to do when it is nowhere)."""
        name = await self.locate(ref.bundle_id)
        if name is not None:
            members = await self._ready()
            await members[name].destroy(ref, options)

    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        """The workload's address in its cluster, computed (no I/O, as the contract says).

        The bundle's cluster as this process knows it (applied or observed here, or in a
        member's synced cache), else the default cluster, where a bundle that is not a first
        deploy goes. The address has the same form in every member (only a member's
        ``cluster_domain`` may differ).
        """
        if not self._members:  # not used yet: the settings' address form
            domain = self._member_config(self.config.default_cluster or "").cluster_domain
            return upstream_for(ref, port, domain)
        return self._members[self._known_home(ref.bundle_id)].upstream(ref, port)

    def _known_home(self, bundle_id: str) -> str:
        """Where the bundle is as far as this process knows without a call (else the default)."""
        known = self._placed.get(bundle_id)
        if known is not None:
            return known
        for name, member in self._members.items():
            if member.known_to_hold(bundle_id):
                return name
        return self._default

    # -- capacity and usage -------------------------------------------------------------------

    async def capacity(self) -> Capacity:
        """Every member's capacity summed; each member's figures in ``details``."""
        members = await self._ready()
        each: dict[str, Capacity] = {}
        for name, member in members.items():
            try:
                each[name] = await member.capacity()
            except AdapterUnavailable as error:
                raise naming(error, name) from error
        fits = [c.largest_fit for c in each.values() if c.largest_fit is not None]
        details = {"clusters": ",".join(each)}
        for name, c in each.items():
            details[f"{name}.cpu_millis"] = str(c.total_cpu_millis)
            details[f"{name}.memory_bytes"] = str(c.total_memory_bytes)
            details.update({f"{name}.{k}": v for k, v in c.details.items()})
        return Capacity(
            total_cpu_millis=sum(c.total_cpu_millis for c in each.values()),
            total_memory_bytes=sum(c.total_memory_bytes for c in each.values()),
            reported_at=datetime.now(UTC),
            largest_fit=roomiest(fits),
            details=details,
        )

    async def largest_fit_for(self, bundle_id: str) -> Fit | None:
        """The roomiest node for the bundle, its own use counted free.

        On its cluster once it is somewhere (a bundle never moves), else across every member.
        """
        name = await self.locate(bundle_id)
        members = await self._ready()
        if name is not None:
            return await members[name].largest_fit_for(bundle_id)
        fits = []
        for member_name, member in members.items():
            try:
                fit = await member.largest_fit_for(bundle_id)
            except AdapterUnavailable as error:
                raise naming(error, member_name) from error
            if fit is not None:
                fits.append(fit)
        return max(fits, key=lambda f: (f.memory_bytes, f.cpu_millis), default=None)

    async def usage(self, ref: BundleRef) -> BundleUsage:
        """The bundle's use, from its cluster's metrics API."""
        name = await self.locate(ref.bundle_id)
        if name is None:
            raise NotFound(f"no bundle {ref.bundle_id!r}", details={"bundle_id": ref.bundle_id})
        return await self._members[name].usage(ref)

    async def in_use(self) -> InUse:
        """What every member's apps use, summed."""
        members = await self._ready()
        each = [await m.in_use() for m in members.values()]
        return InUse(
            cpu_millis=sum(u.cpu_millis for u in each),
            memory_bytes=sum(u.memory_bytes for u in each),
            reported_at=datetime.now(UTC),
        )

    # -- events, logs, exec -------------------------------------------------------------------

    def watch_bundles(self) -> contextlib.AbstractAsyncContextManager[AsyncIterator[Any]]:
        """Every member's events in one stream (see :func:`merged_events`)."""
        return merged_events(self._ready)

    @contextlib.asynccontextmanager
    async def logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> AsyncIterator[ByteReceiveStream]:
        """The workload's log, from its cluster."""
        member = await self._member_of(ref.bundle_id)
        async with member.logs(ref, options) as stream:
            yield stream

    @contextlib.asynccontextmanager
    async def exec(self, ref: WorkloadRef, request: ExecRequest) -> AsyncIterator[ExecSession]:
        """A command in the workload's running instance, on its cluster."""
        member = await self._member_of(ref.bundle_id)
        async with member.exec(ref, request) as session:
            yield session

    # -- volumes --------------------------------------------------------------------------------

    async def _volume_member(self, handle: VolumeHandle) -> KubernetesAdapter:
        _, _, bundle_id = parse_handle(handle)
        if bundle_id is None:  # an edge's volume: the edge runs on the default cluster
            await self._ready()
            return self._members[self._default]
        return await self._member_of(bundle_id)

    async def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        """The volume on its bundle's cluster (the default one for a bundle found nowhere)."""
        return await (await self._member_of(request.bundle_id)).create_volume(request)

    async def destroy_volume(self, handle: VolumeHandle) -> None:
        """Delete the volume and its data, on its cluster."""
        await (await self._volume_member(handle)).destroy_volume(handle)

    @contextlib.asynccontextmanager
    async def snapshot_volume(self, handle: VolumeHandle) -> AsyncIterator[ByteReceiveStream]:
        """The volume's files as a tar stream, from its cluster."""
        member = await self._volume_member(handle)
        async with member.snapshot_volume(handle) as stream:
            yield stream

    async def restore_volume(
        self, handle: VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        """Replace the volume's files, on its cluster."""
        await (await self._volume_member(handle)).restore_volume(handle, source)

    # -- trial and edge: the default cluster ----------------------------------------------------

    async def _default_member(self) -> KubernetesAdapter:
        members = await self._ready()
        return members[self._default]

    async def trial(self, request: TrialRequest) -> TrialResult:
        """A trial run, on the default cluster."""
        return await (await self._default_member()).trial(request)

    async def has_image(self, reference: str) -> bool:
        """Asked of the default cluster's registry (every member's, when import is offered)."""
        return await (await self._default_member()).has_image(reference)

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        """Into the registry every member shares (gate: ``image_import``)."""
        (await self.capabilities()).require(Capability.IMAGE_IMPORT)
        return await (await self._default_member()).import_image(source)

    async def apply_edge(self, plan: EdgePlan) -> None:
        """The edge, on the default cluster."""
        await (await self._default_member()).apply_edge(plan)

    async def observe_edge(self, name: str) -> EdgeState:
        """The edge, on the default cluster."""
        return await (await self._default_member()).observe_edge(name)

    async def remove_edge(self, name: str) -> None:
        """The edge, on the default cluster."""
        await (await self._default_member()).remove_edge(name)

    async def edges(self) -> tuple[str, ...]:
        """The edges of the default cluster."""
        return await (await self._default_member()).edges()

    async def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        """The volumes the default cluster's edges mount."""
        return await (await self._default_member()).edge_volumes()
