"""The fleet adapter: each app on one of several member adapters, placed by room once.

Members are adapters of any kind (Docker engines, Kubernetes clusters, the fake, a plugin),
each named. Where each app lives, and where a new one goes, is the :class:`Placer`'s
(:mod:`._placer`); this class sends every call about an app to its member, sums what is the
fleet's as a whole (capacity, use, events), and gives the edge, trial runs and images to the
control member. A member that cannot be read makes every question about its apps raise
:class:`AdapterUnavailable` naming it, never an answer that they are absent. The fleet never
moves an app by itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Self

import anyio
import attrs
from anyio.abc import ByteReceiveStream

from .._adapter._abc import RuntimeAdapter
from .._adapter._versioned import supports_api
from .._contract._capabilities import Capability, RuntimeCapabilities
from .._contract._capacity import BundleUsage, Capacity, Fit, InUse, roomiest
from .._contract._edge import EdgePlan, EdgeState
from .._contract._errors import (
    AdapterUnavailable,
    CapabilityUnsupported,
    InvalidConfig,
    InvalidInput,
    NotFound,
    Problem,
)
from .._contract._events import BundleEvent
from .._contract._exec import ExecRequest, ExecResult, ExecSession
from .._contract._log_options import LogOptions
from .._contract._observed import ObservedBundle
from .._contract._plans import BundlePlan
from .._contract._refs import BundleHandle, BundleRef, DestroyOptions, Upstream, WorkloadRef
from .._contract._trial import TrialRequest, TrialResult
from .._contract._volumes import VolumeHandle, VolumeRequest
from .._input._validation import check_plan, validate_trial
from .._replicas._membership import Membership
from .._replicas._settings import MembershipSettings
from .._store_membership import StoreMembership
from .._util._log import logger
from .._write_epochs import WriteEpochs
from ._events import merged_events
from ._info import FLEET, FLEET_DESCRIPTION, FleetConfig
from ._live import LiveFleet, LiveMembers
from ._member_set import MemberSet
from ._members import BundleRecords, ConfiguredMembers, MemberSource, fleet_capabilities
from ._members_file import MembersFile
from ._placer import NewBundle, Placer
from ._records import PlacementRecords

__all__ = ["FleetAdapter"]

log = logger("fleet")


class FleetAdapter(RuntimeAdapter):
    """Runs each app on one of several member adapters, placed by room on its first deploy.

    Construct it with its settings (``{"members": {"host-a": {"adapter": "docker",
    "settings": {...}}, ...}}``), or with a ``source`` of members made elsewhere (the
    ``kubernetes-multi`` adapter's clusters over shared sessions). ``noun`` names a member in
    messages and in errors' ``details`` (``"member"``; ``"cluster"`` for clusters).
    """

    kind: ClassVar[str] = "fleet"
    api_version: ClassVar[str] = FLEET.api_version
    description: ClassVar[str] = FLEET_DESCRIPTION
    Config: ClassVar[type[Any]] = FleetConfig
    config: FleetConfig

    def __init__(
        self,
        config: Mapping[str, Any] | FleetConfig | None = None,
        *,
        source: MemberSource | None = None,
        noun: str = "member",
    ) -> None:
        super().__init__({"members": {}} if config is None and source is not None else config)
        self.replicas = StoreMembership(self.config.lease_store)
        """Host replicas over the lease store the settings name, and the write guard."""
        made: MemberSource
        if source is not None:
            if problems := self.replicas.problems():  # the settings' members check it otherwise
                raise InvalidConfig("the fleet's settings are not valid", problems)
            made = source
        elif self.config.members_file is not None:
            made = MembersFile(self.config)
        else:
            made = ConfiguredMembers(self.config).members
        self._source = made
        self.member_set = MemberSet(made, noun, lambda: self.config.answer_deadline)
        self.placer = Placer(self.member_set)
        self.epochs = WriteEpochs(self.replicas)
        """The epoch each app is written under, handed to its member during the write
        (``write_epoch``): a member that fences (Docker) labels its writes with it."""
        self.records = PlacementRecords(self.replicas)
        """Where each app was first placed, in the store, while the membership is joined."""
        self.placer.claim = self.records.claim
        self.noun = noun
        self._entered: contextlib.AsyncExitStack | None = None
        self.live: LiveFleet | None = None
        """The members held open and changed live while the fleet is entered."""

    # -- members ----------------------------------------------------------------------------

    @property
    def members(self) -> Mapping[str, RuntimeAdapter]:
        """The members by name (empty until made: at once from settings, else on first use)."""
        return self.member_set.adapters

    async def __aenter__(self) -> Self:
        """Start every member, each in a task that holds it open until the fleet closes.

        Returns once each member was tried: a member whose runtime is silent now does not hold
        up the others; its questions raise :class:`AdapterUnavailable` naming it, and it is
        started again and again (``events_retry``) until it answers. A source whose members
        change (:class:`LiveMembers`) is followed from then on, once its first members joined
        (:mod:`._live`).
        """
        adapters = (await self.member_set.fleet()).adapters
        stack = contextlib.AsyncExitStack()
        group = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(group.cancel_scope.cancel)  # each member's task closes it as it ends
        retry = self.config.events_retry or (1.0,)
        live = LiveFleet(self.placer, group, retry=retry, join_wait=self.config.join_wait)
        stack.push_async_callback(live.aclose)  # first: each member exits normally
        try:
            await live.open_all(adapters)
            if isinstance(self._source, LiveMembers):
                await group.start(self._source.follow, live, name=f"{self.noun}s joining")
        except BaseException:
            await stack.aclose()
            raise
        self._entered, self.live = stack, live
        return self

    async def aclose(self) -> None:
        """Leave and close every member. Safe to call twice."""
        stack, self._entered = self._entered, None
        if stack is not None:
            await stack.aclose()
        for member in self.member_set.adapters.values():
            await member.aclose()

    async def locate(self, bundle_id: str) -> str | None:
        """The member holding ``bundle_id``, ``None`` when no member has it.

        Raises:
            AdapterUnavailable: no member that answered has it and one could not answer
                (naming it): the bundle may be there.
        """
        return await self.placer.locate(bundle_id)

    async def held_bundles(self) -> list[str]:
        """Every member's bundles; a silent member is named."""
        each = await self.member_set.all_answer(lambda _, m: _held_bundles(m))
        return [b for ids in each.values() for b in ids]

    @property
    def placements_in_flight(self) -> Mapping[str, str]:
        """The member of each new bundle this process placed and still holds room for."""
        return self.placer.placements_in_flight()

    def membership(
        self, replica: str, settings: MembershipSettings | None = None
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        """Join the host's replicas over the ``lease_store`` setting's store (gate: ``membership``).

        One membership for every member, guarding the fleet's writes (``docs/replicas.md``).
        """
        return self.replicas.join(replica, settings, bundles=self.held_bundles)

    # -- identity & health ------------------------------------------------------------------

    async def capabilities(self) -> RuntimeCapabilities:
        """What the fleet can do (see :func:`fleet_capabilities`); one member: its own.

        Each member is asked every time (a member's may grow), a silent one's last answer
        standing for it; one that never answered yet is left out until it does.
        """
        fleet = await self.member_set.fleet()
        each = await self.member_set.capabilities()
        if len(fleet.adapters) == 1:
            found = next(iter(each.values()))
        else:
            placing = [n for n in fleet.adapters if n not in fleet.closed and n in each]
            found = fleet_capabilities(each, fleet.control, placing)
        # the fleet's own: its members' memberships are not joined through it
        return attrs.evolve(found, membership=self.replicas.named is not None)

    async def health_check(self) -> None:
        """Every member's health check; a failure names each member that failed."""
        answers = await self.member_set.ask(lambda _, m: m.health_check())
        failures = answers.silent
        if len(failures) == 1:
            raise failures[0]
        if failures:
            raise AdapterUnavailable(
                "; ".join(f.message for f in failures),
                remedy=failures[0].remedy,
                details={f"{self.noun}s": ",".join(str(f.details[self.noun]) for f in failures)},
            )

    def health_details(self) -> dict[str, str]:
        """Each member's health details (those that give any), keyed ``<member>.<key>``."""
        details: dict[str, str] = {}
        for name, member in self.member_set.adapters.items():
            own = getattr(member, "health_details", None)
            if callable(own):
                details.update({f"{name}.{k}": str(v) for k, v in own().items()})
        return details

    # -- bundles ----------------------------------------------------------------------------

    async def check_plan(self, plan: BundlePlan) -> None:
        """The plan's own rules, then what some member that takes new apps can run.

        The member the bundle goes to checks it again, with its own rules, before writing.
        """
        check_plan(plan)
        check_plan(plan, await self.capabilities())

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        """Converge the bundle on its member; a new one is placed first (see the module).

        As a member of the host's replicas, the member applies under the app's epoch
        (``docs/replicas.md``: a Docker member labels its containers with it).
        """
        await self.check_plan(plan)
        async with self.epochs.writing(plan.bundle_id):
            name, handle = await self.placer.write(NewBundle.of(plan), lambda m: m.apply(plan))
        return BundleHandle(
            bundle_id=plan.bundle_id,
            handle=f"{name}/{handle.handle}",
            details={**handle.details, self.noun: name},
        )

    async def observe(
        self, ref: BundleRef, *, not_before: datetime | None = None
    ) -> ObservedBundle:
        """The bundle as its member sees it; absent only when every member says so.

        Absent promises that nothing of it still runs only when every member says so much
        (a member written before adapter API 1.3 answers "absent" while an instance ends).
        """
        name = await self.placer.locate(ref.bundle_id)
        if name is None:
            members = self.member_set.adapters.values()
            return ObservedBundle(
                bundle_id=ref.bundle_id,
                exists=False,
                stopping_reported=all(supports_api(m, "1.3") for m in members),
            )
        try:
            member = await self.member_set.member(name)
            observed = await member.observe(ref, not_before=not_before)
        except AdapterUnavailable as error:
            raise self.member_set.named(error, name) from error
        return attrs.evolve(
            observed,
            volumes=tuple(
                attrs.evolve(v, handle=_tagged(name, v.handle)) if v.handle else v
                for v in observed.volumes
            ),
        )

    async def stop(self, ref: BundleRef) -> None:
        """Stop the bundle on its member."""
        async with self.replicas.writing(ref.bundle_id):
            await (await self.placer.member_of(ref.bundle_id)).stop(ref)

    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        """Remove the bundle from its member (nothing to do when it is nowhere)."""
        async with self.replicas.writing(ref.bundle_id):
            name = await self.placer.locate(ref.bundle_id)
            if name is not None:
                await (await self.member_set.member(name)).destroy(ref, options)
                if options is not None and not options.keep_volumes:
                    self.placer.forget(ref.bundle_id)  # nothing of it is left there
                    await self.records.forget(ref.bundle_id)

    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        """The workload's upstream from its member, computed (no I/O, as the contract says).

        The bundle's member as this process knows it (applied or found here, or in a member's
        view), else the member that answers for bundles found nowhere.
        """
        fleet = self.member_set.made
        if fleet is None:
            raise AdapterUnavailable(
                f"the fleet's {self.noun}s are not made yet",
                remedy="Use the fleet (async with, or any awaited call) before asking upstream.",
            )
        return fleet.adapters[self.placer.known_home(ref.bundle_id)].upstream(ref, port)

    # -- capacity and usage -----------------------------------------------------------------

    async def capacity(self) -> Capacity:
        """Every answering member's capacity summed; each one's figures in ``details``.

        A silent member is left out of the sums and named in ``details['silent']``; when every
        member is silent, :class:`AdapterUnavailable`.
        """
        answers = await self.member_set.ask(lambda _, m: m.capacity())
        each = answers.by_member
        if not each:
            raise answers.silent[0]
        details = {f"{self.noun}s": ",".join(each)}
        if answers.silent:
            details["silent"] = ",".join(str(e.details[self.noun]) for e in answers.silent)
        for name, c in each.items():
            details[f"{name}.cpu_millis"] = str(c.total_cpu_millis)
            details[f"{name}.memory_bytes"] = str(c.total_memory_bytes)
            details.update({f"{name}.{k}": v for k, v in c.details.items()})
        fits = [c.largest_fit for c in each.values() if c.largest_fit is not None]
        return Capacity(
            total_cpu_millis=sum(c.total_cpu_millis for c in each.values()),
            total_memory_bytes=sum(c.total_memory_bytes for c in each.values()),
            total_disk_bytes=sum(c.total_disk_bytes for c in each.values()),
            running_workloads=-1
            if any(c.running_workloads < 0 for c in each.values())
            else sum(c.running_workloads for c in each.values()),
            reported_at=datetime.now(UTC),
            largest_fit=roomiest(fits),
            details=details,
        )

    async def largest_fit_for(self, bundle_id: str) -> Fit | None:
        """The roomiest place for the bundle, its own use counted free.

        On its member once it is somewhere (an app never moves), else across every member.
        """
        name = await self.placer.locate(bundle_id)
        if name is not None:
            return await (await self.member_set.member(name)).largest_fit_for(bundle_id)
        each = await self.member_set.all_answer(lambda _, m: m.largest_fit_for(bundle_id))
        return roomiest(f for f in each.values() if f is not None)

    async def usage(self, ref: BundleRef) -> BundleUsage:
        """The bundle's use, from its member."""
        name = await self.placer.locate(ref.bundle_id)
        if name is None:
            raise NotFound(f"no bundle {ref.bundle_id!r}", details={"bundle_id": ref.bundle_id})
        return await (await self.member_set.member(name)).usage(ref)

    async def in_use(self) -> InUse:
        """What every member's apps use, summed (a silent member is named: unknown)."""
        each = (await self.member_set.all_answer(lambda _, m: m.in_use())).values()
        return InUse(
            cpu_millis=sum(u.cpu_millis for u in each),
            memory_bytes=sum(u.memory_bytes for u in each),
            reported_at=datetime.now(UTC),
        )

    # -- events, logs, exec -----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watch_bundles(self) -> AsyncIterator[AsyncIterator[BundleEvent]]:
        """Every member's events in one stream (see :mod:`._events`).

        A silent member's stream is retried: never the merged stream's end.
        """
        (await self.capabilities()).require(Capability.BUNDLE_EVENTS)
        await self.member_set.fleet()
        retry = self.config.events_retry or (1.0,)
        async with merged_events(self.member_set, retry=retry) as stream:
            yield stream

    @contextlib.asynccontextmanager
    async def logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> AsyncIterator[ByteReceiveStream]:
        """The workload's log, from its member."""
        member = await self.placer.member_of(ref.bundle_id)
        async with member.logs(ref, options) as stream:
            yield stream

    @contextlib.asynccontextmanager
    async def exec(self, ref: WorkloadRef, request: ExecRequest) -> AsyncIterator[ExecSession]:
        """A command in the workload's running instance, on its member."""
        member = await self.placer.member_of(ref.bundle_id)
        async with member.exec(ref, request) as session:
            yield session

    async def run(
        self, ref: WorkloadRef, request: ExecRequest, *, stdin: bytes | None = None
    ) -> ExecResult:
        """The member's own :meth:`RuntimeAdapter.run`."""
        member = await self.placer.member_of(ref.bundle_id)
        return await member.run(ref, request, stdin=stdin)

    # -- volumes ----------------------------------------------------------------------------

    async def _volume_member(self, handle: VolumeHandle) -> tuple[RuntimeAdapter, VolumeHandle]:
        """The member a fleet volume handle names, and the member's own handle.

        A member's name may hold ``/`` itself (a kubeconfig context named by its cluster's ARN,
        ``arn:aws:eks:...:cluster/prod``): the longest name the handle starts with is its member.
        """
        adapters = (await self.member_set.fleet()).adapters
        named = [n for n in adapters if handle.handle.startswith(f"{n}/")]
        name = max(named, key=len, default="")
        inner = handle.handle[len(name) + 1 :]
        if not name or not inner:
            raise InvalidInput(
                f"volume handle {handle.handle!r} names no member of this fleet",
                [
                    Problem(
                        "handle",
                        f"expected '<member>/<handle>' with a member of {', '.join(adapters)}",
                        "invalid",
                    )
                ],
                remedy="Pass a handle this fleet returned.",
            )
        return await self.member_set.member(name), attrs.evolve(handle, handle=inner)

    async def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        """The volume on its bundle's member; a bundle found nowhere is placed by it."""
        new = NewBundle.of_volume(request)
        name, handle = await self.placer.write(new, lambda m: m.create_volume(request))
        return _tagged(name, handle)

    async def destroy_volume(self, handle: VolumeHandle) -> None:
        """Delete the volume and its data, on its member."""
        member, inner = await self._volume_member(handle)
        await member.destroy_volume(inner)

    @contextlib.asynccontextmanager
    async def snapshot_volume(self, handle: VolumeHandle) -> AsyncIterator[ByteReceiveStream]:
        """The volume's files as a tar stream, from its member."""
        member, inner = await self._volume_member(handle)
        async with member.snapshot_volume(inner) as stream:
            yield stream

    async def restore_volume(
        self, handle: VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        """Replace the volume's files, on its member."""
        member, inner = await self._volume_member(handle)
        await member.restore_volume(inner, source)

    # -- images, trial and edge: the control member -----------------------------------------

    async def _control(self) -> tuple[str, RuntimeAdapter]:
        fleet = await self.member_set.fleet()
        return fleet.control, await self.member_set.member(fleet.control)

    async def has_image(self, reference: str) -> bool:
        """Asked of the control member."""
        return await (await self._control())[1].has_image(reference)

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        """Only a fleet of one member imports (an imported image is on one member only)."""
        (await self.capabilities()).require(Capability.IMAGE_IMPORT)
        return await (await self._control())[1].import_image(source)

    async def trial(self, request: TrialRequest) -> TrialResult:
        """A trial run: on the control member when it can run what the trial asks.

        Else on the first member that can (its egress rules); none: the control member refuses.
        """
        fleet = await self.member_set.fleet()
        capabilities = await self.member_set.capabilities()
        for name in (fleet.control, *(n for n in fleet.adapters if n != fleet.control)):
            can = capabilities.get(name)
            if can is not None and can.trial_run and not validate_trial(request, can):
                return await (await self.member_set.member(name)).trial(request)
        return await (await self._control())[1].trial(request)

    async def apply_edge(self, plan: EdgePlan) -> None:
        """The edge, on the control member."""
        await (await self._control())[1].apply_edge(plan)

    async def observe_edge(self, name: str) -> EdgeState:
        """The edge, on the control member."""
        return await (await self._control())[1].observe_edge(name)

    async def remove_edge(self, name: str) -> None:
        """The edge, on the control member."""
        await (await self._control())[1].remove_edge(name)

    async def edges(self) -> tuple[str, ...]:
        """The edges of the control member."""
        return await (await self._control())[1].edges()

    async def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        """The volumes the control member's edges mount, as fleet handles."""
        name, member = await self._control()
        return tuple(_tagged(name, h) for h in await member.edge_volumes())


def _tagged(member: str, handle: VolumeHandle) -> VolumeHandle:
    """A member's volume handle as the fleet's: ``<member>/<handle>``."""
    return attrs.evolve(handle, handle=f"{member}/{handle.handle}")


async def _held_bundles(member: RuntimeAdapter) -> list[str]:
    """The member's bundles, where it can list them (:class:`BundleRecords`)."""
    if isinstance(member, BundleRecords):
        return await member.held_bundles()
    raise CapabilityUnsupported(
        "held_bundles",
        f"a {member.kind} member cannot list its bundles (it offers no held_bundles)",
    )
