"""Placement of a new app on one of several members, placements in flight counted.

Pure logic, no I/O: a fleet reads each member's room and its view of what each bundle takes,
and asks :func:`choose` where the app goes. A member's room is its roomiest place
(``largest_fit_for``) less what is placed there but not counted by that room yet:

- what the member's view shows taken but not in its room yet (:attr:`BundleRequests.waiting`:
  on Kubernetes, pods written but not on a node); every replica's view sees it, so the
  placements of other processes count once their workloads are written;
- this process's own placements in flight (:class:`Reservations`): the plan's requests, held
  from the decision until the member's view counts the bundle, released at once when the apply
  fails, and at most :data:`HOLD` seconds.

Among the members the app fits, the roomiest wins (memory first, then CPU); members with the
same room are told apart by rendezvous hashing of the bundle id over them, so a burst of new
apps on members of equal room spreads instead of all going to one, and every replica breaks
the tie the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

import attrs

from .._contract._capacity import Fit
from .._contract._plans import BundlePlan
from .._replicas._ownership import rendezvous_owner

__all__ = [
    "HOLD",
    "BundleRequests",
    "Request",
    "Reservations",
    "choose",
    "largest_request",
    "placed",
    "room_left",
    "total_request",
    "waiting",
]

Request = tuple[int, int]
"""CPU millicores and memory bytes."""

NOTHING: Request = (0, 0)

HOLD = 60.0
"""Seconds a placement stays reserved at most when its member's view never counts it (no
running view, or workloads that are not written yet): long enough for a slow apply, short
enough that a lost one does not hold room for long."""


class BundleRequests(NamedTuple):
    """What a bundle takes of one member, as that member's view sees it.

    ``placed``: counted by the member's room already (a pod on a node, a container created on an
    engine); ``waiting``: taken, but not counted by its room yet (a pod written and not on a node:
    every replica sees it, no node's room counts it). Each is (CPU millicores, memory bytes).
    """

    placed: Request
    waiting: Request


def largest_request(plan: BundlePlan) -> Request:
    """The largest single workload's CPU and memory request: what one place must hold."""
    cpu = max((w.resources.cpu_millis or 0 for w in plan.workloads), default=0)
    memory = max((w.resources.memory_bytes or 0 for w in plan.workloads), default=0)
    return cpu, memory


def total_request(plan: BundlePlan) -> Request:
    """Every workload's CPU and memory request summed: what the bundle takes of a member."""
    cpu = sum(w.resources.cpu_millis or 0 for w in plan.workloads)
    memory = sum(w.resources.memory_bytes or 0 for w in plan.workloads)
    return cpu, memory


@attrs.frozen
class _Held:
    member: str
    request: Request
    until: float


class Reservations:
    """This process's placements in flight, by bundle id."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, hold: float = HOLD) -> None:
        self._clock = clock
        self._hold = hold
        self._held: dict[str, _Held] = {}

    def reserve(self, bundle_id: str, member: str, request: Request) -> None:
        """Hold ``request`` on ``member`` for ``bundle_id`` from now."""
        self._held[bundle_id] = _Held(member, request, self._clock() + self._hold)

    def release(self, bundle_id: str) -> None:
        """Drop ``bundle_id``'s reservation (nothing when there is none).

        Its apply failed, or its member counts it from now on.
        """
        self._held.pop(bundle_id, None)

    def drop_member(self, member: str) -> None:
        """Drop every reservation on ``member`` (it left: nothing goes there any more)."""
        self._held = {b: held for b, held in self._held.items() if held.member != member}

    def members(self) -> dict[str, str]:
        """The member of each reservation held now."""
        return {bundle_id: held.member for bundle_id, held in self._held.items()}

    def held(
        self, member: str, seen: Mapping[str, BundleRequests], *, fit_is_fresh: bool = True
    ) -> Request:
        """What this process's placements on ``member`` hold beyond what its room counts.

        ``seen``: the member's own view of what each bundle takes, read with its room. A
        reservation the view fully counts, or past its hold, is dropped here.
        ``fit_is_fresh=False`` (the room is a read scope's, read before): what was placed since
        may be missing from it, so only what waits counts, and nothing is dropped but by its hold.
        """
        now = self._clock()
        cpu = memory = 0
        for bundle_id, held in list(self._held.items()):
            if held.member != member:
                continue
            taken = seen.get(bundle_id, BundleRequests(NOTHING, NOTHING))
            counted = _plus(taken.placed, taken.waiting) if fit_is_fresh else taken.waiting
            left = (max(0, held.request[0] - counted[0]), max(0, held.request[1] - counted[1]))
            if now >= held.until or (fit_is_fresh and left == NOTHING):
                del self._held[bundle_id]
                continue
            cpu, memory = cpu + left[0], memory + left[1]
        return cpu, memory


def _plus(a: Request, b: Request) -> Request:
    return a[0] + b[0], a[1] + b[1]


def waiting(seen: Mapping[str, BundleRequests]) -> Request:
    """What the bundles ``seen`` on a member take that its room does not count yet."""
    cpu = memory = 0
    for taken in seen.values():
        cpu, memory = cpu + taken.waiting[0], memory + taken.waiting[1]
    return cpu, memory


def placed(seen: Mapping[str, BundleRequests]) -> Request:
    """What the bundles ``seen`` on a member take that its room counts."""
    cpu = memory = 0
    for taken in seen.values():
        cpu, memory = cpu + taken.placed[0], memory + taken.placed[1]
    return cpu, memory


def room_left(fit: Fit, *taken: Request) -> Fit:
    """``fit`` less every request of ``taken`` (never below nothing)."""
    cpu, memory = fit.cpu_millis, fit.memory_bytes
    for request in taken:
        cpu, memory = cpu - request[0], memory - request[1]
    return Fit(cpu_millis=max(0, cpu), memory_bytes=max(0, memory))


def choose(
    bundle_id: str, largest: Request, rooms: Mapping[str, Fit | None], default: str | None
) -> str | None:
    """The member for ``bundle_id``: one its largest workload fits, the roomiest.

    ``rooms``: each member's room with placements in flight taken off (``None``: no place to
    speak of). One the app fits beats a roomier one it does not; equal rooms: rendezvous
    hashing over them. No room anywhere: ``default``.
    """
    keyed = {
        name: (fit.holds(*largest), *fit.roominess)
        for name, fit in rooms.items()
        if fit is not None
    }
    if not keyed:
        return default
    best = max(keyed.values())
    tied = [name for name, key in keyed.items() if key == best]
    return tied[0] if len(tied) == 1 else rendezvous_owner(bundle_id, tied)
