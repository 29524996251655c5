"""Where a fleet's apps live, and where a new one goes.

An app lives on exactly one member, and where it lives is that member's record, never only
this process's memory: a member says whether it holds an app (its workloads, its network or
namespace, its volumes: :class:`BundleRecords`; else ``observe(...).exists``), so a restarted
fleet, or a second host process, finds every app where it is. What this process found or put
is kept as a hint, checked again on every use.

A bundle found nowhere goes where there is the most room (:mod:`._placement`) among the
members that take new apps and can run it, reserved there until that member counts it. While
any member is silent, a bundle found nowhere is placed only when the host says it is a first
deploy: it may be on the silent member, and a second copy is worse than a refusal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import anyio
import attrs

from .._adapter._abc import RuntimeAdapter
from .._adapter._scope import in_read_scope
from .._contract._capabilities import RuntimeCapabilities
from .._contract._capacity import Fit
from .._contract._errors import AdapterUnavailable, CapabilityUnsupported
from .._contract._plans import BundlePlan
from .._contract._refs import BundleRef
from .._contract._volumes import VolumeRequest
from .._input._validation import validate_plan
from .._util._log import logger
from ._member_set import MemberSet
from ._members import BundleRecords, RequestsView
from ._placement import (
    BundleRequests,
    Request,
    Reservations,
    choose,
    largest_request,
    placed,
    room_left,
    total_request,
    waiting,
)

__all__ = ["NewBundle", "Placer"]

log = logger("fleet")

T = TypeVar("T")


def _keeps_volumes(capabilities: RuntimeCapabilities) -> bool:
    return capabilities.persistent_volumes


@attrs.frozen
class NewBundle:
    """What placing a bundle found nowhere needs to know of it."""

    bundle_id: str
    first_deploy: bool
    runs: Callable[[RuntimeCapabilities], bool]
    """Whether a member with these capabilities can run it."""
    largest: Request = (0, 0)
    total: Request = (0, 0)

    @classmethod
    def of(cls, plan: BundlePlan) -> NewBundle:
        """A bundle applied for the first time."""

        def runs(capabilities: RuntimeCapabilities) -> bool:
            return not validate_plan(plan, capabilities)

        return cls(
            plan.bundle_id, plan.first_deploy, runs, largest_request(plan), total_request(plan)
        )

    @classmethod
    def of_volume(cls, request: VolumeRequest) -> NewBundle:
        """A bundle whose volume comes first: it goes where volumes are kept."""
        return cls(request.bundle_id, first_deploy=False, runs=_keeps_volumes)


def _seen(member: RuntimeAdapter) -> Mapping[str, BundleRequests]:
    return member.requests_by_bundle() if isinstance(member, RequestsView) else {}


class Placer:
    """Finds each bundle's member, and chooses one for a bundle found nowhere."""

    def __init__(self, members: MemberSet) -> None:
        self.members = members
        self.placed: dict[str, str] = {}
        """Where this process last found or put each bundle (checked again on every use)."""
        self._placing: dict[str, anyio.Lock] = {}
        self._deciding = anyio.Lock()
        """One placement decision at a time: each sees the ones before it reserved."""
        self.reservations = Reservations()
        self.claim: Callable[[str, str, frozenset[str]], Awaitable[str]] | None = None
        """Where a bundle found nowhere goes, given the member chosen for it and the fleet's
        members: the chosen one, or another replica's earlier choice (``PlacementRecords``)."""

    # -- finding ----------------------------------------------------------------------------

    @staticmethod
    async def _holds(member: RuntimeAdapter, bundle_id: str) -> bool:
        if isinstance(member, BundleRecords):
            return await member.holds(bundle_id)
        return (await member.observe(BundleRef(bundle_id))).exists

    async def find(self, bundle_id: str) -> tuple[str | None, list[AdapterUnavailable]]:
        """The member holding ``bundle_id`` (``None``: none that answered), and the silent."""
        adapters = (await self.members.fleet()).adapters
        known = self.placed.get(bundle_id)
        if known is not None and known in adapters:
            try:
                member = await self.members.member(known)
                if await self.members.in_time(known, self._holds(member, bundle_id)):
                    return known, []
            except AdapterUnavailable as error:
                raise self.members.named(error, known) from error
        others = [n for n in adapters if n != known]
        answers = await self.members.ask(lambda _, m: self._holds(m, bundle_id), others)
        found = next((n for n, holds in answers.by_member.items() if holds), None)
        if found is None:
            self.placed.pop(bundle_id, None)
            departed = self.members.departed(bundle_id)  # its member left: unavailable, not absent
            return None, [*answers.silent, *([departed] if departed else [])]
        self.placed[bundle_id] = found
        return found, []

    def forget(self, bundle_id: str) -> None:
        """``bundle_id`` was destroyed with its volumes: no member is its home any more."""
        self.placed.pop(bundle_id, None)
        self.reservations.release(bundle_id)

    async def locate(self, bundle_id: str) -> str | None:
        """The member holding ``bundle_id``, ``None`` when no member has it.

        Raises:
            AdapterUnavailable: no member that answered has it and one could not answer
                (naming it): the bundle may be there.
        """
        found, silent = await self.find(bundle_id)
        if found is None and silent:
            raise silent[0]
        return found

    async def member_of(self, bundle_id: str) -> RuntimeAdapter:
        """The bundle's member; for one found nowhere, the member that answers for it."""
        fleet = await self.members.fleet()
        name = await self.locate(bundle_id) or fleet.default or fleet.control
        return await self.members.member(name)

    def known_home(self, bundle_id: str) -> str:
        """Where the bundle is as far as this process knows without a call."""
        fleet = self.members.made
        assert fleet is not None  # noqa: S101 - callers made the members
        known = self.placed.get(bundle_id)
        if known is not None and known in fleet.adapters:
            return known
        for name, member in fleet.adapters.items():
            if isinstance(member, BundleRecords) and member.known_to_hold(bundle_id):
                return name
        return fleet.default or fleet.control

    # -- placing ----------------------------------------------------------------------------

    async def home_for_new(self, new: NewBundle, silent: list[AdapterUnavailable]) -> str:
        """Where a bundle found nowhere goes (see the module)."""
        fleet = await self.members.fleet()
        noun = self.members.noun
        if silent and not new.first_deploy:
            error = silent[0]
            raise AdapterUnavailable(
                f"{error.message}; bundle {new.bundle_id!r} is on no other {noun} and may be "
                "there, so it is not placed elsewhere",
                remedy=f"Retry once the {noun} answers; apply with first_deploy=True only if the "
                "bundle was never deployed.",
                details=error.details,
            )
        if not new.first_deploy and fleet.default is not None:
            return fleet.default
        return await self._place(new, silent)

    async def _runs(
        self, name: str, member: RuntimeAdapter, runs: Callable[[RuntimeCapabilities], bool]
    ) -> bool:
        return runs(await self.members.capabilities_of(name, member))

    async def _room(self, name: str, member: RuntimeAdapter, bundle_id: str) -> Fit | None:
        """The member's room for a new bundle, with what it does not count yet taken off."""
        fit = await member.largest_fit_for(bundle_id)
        seen = _seen(member)  # the same view, right after the fit read it
        if fit is None:  # no place to speak of: its capacity less what its apps asked for
            capacity = await member.capacity()
            if capacity.largest_fit is not None or not capacity.total_memory_bytes:
                return None  # places, none eligible; or no room at all
            total = Fit(
                cpu_millis=capacity.total_cpu_millis, memory_bytes=capacity.total_memory_bytes
            )
            fit = room_left(total, placed(seen))
        held = self.reservations.held(name, seen, fit_is_fresh=not in_read_scope())
        return room_left(fit, waiting(seen), held)

    async def _place(self, new: NewBundle, silent: list[AdapterUnavailable]) -> str:
        """The member for a new bundle, reserved for it until that member counts it."""
        fleet = await self.members.fleet()
        noun = self.members.noun
        away = {self.members.name_of(e) for e in silent} | fleet.closed
        open_ = [n for n in fleet.adapters if n not in away]
        able = await self.members.ask(lambda n, m: self._runs(n, m, new.runs), open_)
        eligible = [n for n, runs in able.by_member.items() if runs]
        if not eligible:
            if able.silent or silent:
                raise (able.silent or silent)[0]
            raise CapabilityUnsupported(
                "plan",
                f"no {noun} that takes new apps can run bundle {new.bundle_id!r}",
                remedy=f"Check each {noun}'s capabilities() against what the bundle needs.",
            )
        async with self._deciding:
            rooms = await self.members.ask(lambda n, m: self._room(n, m, new.bundle_id), eligible)
            if not rooms.by_member:
                raise rooms.silent[0]
            chosen = choose(new.bundle_id, new.largest, rooms.by_member, default=None)
            chosen = chosen or next(iter(rooms.by_member))
            self.reservations.reserve(new.bundle_id, chosen, new.total)
        log.debug(
            "placing %s on %s %s",
            new.bundle_id,
            noun,
            chosen,
            extra={"bundle_id": new.bundle_id, noun: chosen},
        )
        return chosen

    async def write(
        self, new: NewBundle, write: Callable[[RuntimeAdapter], Awaitable[T]]
    ) -> tuple[str, T]:
        """``write`` to the bundle's member, placing a bundle found nowhere first.

        One write per bundle at a time. A failed write releases the room its placement held (a
        bundle found somewhere keeps what an earlier placement still holds); a member's
        ``AdapterUnavailable`` is raised naming it.
        """
        bundle_id = new.bundle_id
        async with self._placing.setdefault(bundle_id, anyio.Lock()):
            name, silent = await self.find(bundle_id)
            placing = name is None
            if name is None:
                name = await self._claimed(bundle_id, await self.home_for_new(new, silent))
            try:
                member = await self.members.member(name)
                written = await write(member)
            except BaseException as error:
                if placing:  # the room this placement held is free again
                    self.reservations.release(bundle_id)
                if isinstance(error, AdapterUnavailable):
                    raise self.members.named(error, name) from error
                raise
            self.placed[bundle_id] = name
            self.members.settled(bundle_id)
            if placing and not isinstance(member, RequestsView):
                self.reservations.release(bundle_id)  # its room counts it from now on
        return name, written

    async def _claimed(self, bundle_id: str, chosen: str) -> str:
        """``chosen``, or the member another replica recorded first (its room released here)."""
        if self.claim is None:
            return chosen
        try:
            adapters = (await self.members.fleet()).adapters
            name = await self.claim(bundle_id, chosen, frozenset(adapters))
        except BaseException:
            self.reservations.release(bundle_id)
            raise
        if name != chosen:
            self.reservations.release(bundle_id)  # its member counts it once it holds it
        return name

    def placements_in_flight(self) -> dict[str, str]:
        """The member of each new bundle this process placed and still holds room for.

        No call: what each member's view counts already is dropped first.
        """
        fresh = not in_read_scope()  # in a scope, kept for the scope's next decisions
        for name, member in self.members.adapters.items():
            self.reservations.held(name, _seen(member), fit_is_fresh=fresh)
        return self.reservations.members()
