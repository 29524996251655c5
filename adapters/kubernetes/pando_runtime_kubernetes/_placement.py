"""Placement of a new app on one of several clusters, placements in flight counted.

Pure logic, no I/O: the multi-cluster adapter reads each member's room and its cached view of
pods, and asks :func:`choose` where the app goes. A cluster's room is its roomiest node
(``largest_fit_for``) less what is placed there but not counted by that room yet:

- the pods of any bundle written to the cluster but not on a node yet (every replica's cache
  sees them: the placements of other processes, once their pods are written);
- this process's own placements in flight (:class:`Reservations`): the plan's requests, held
  from the decision until the cluster's view counts the bundle's pods (on a node or waiting
  for one), released at once when the apply fails, and at most :data:`HOLD` seconds.

Among the clusters the app fits, the roomiest wins (memory first, then CPU); clusters with
the same room are told apart by rendezvous hashing of the bundle id over them, so a burst of
new apps on clusters of equal room spreads instead of all going to one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import attrs

from pando_runtime import BundlePlan, Fit, rendezvous_owner

from .cache._capacity import BundlePods

__all__ = ["HOLD", "Reservations", "choose", "largest_request", "total_request"]

Request = tuple[int, int]
"""CPU millicores and memory bytes."""

HOLD = 60.0
"""Seconds a placement stays reserved at most when its cluster's view never counts it (no
running cache, or pods that are not written yet): long enough for a slow apply, short enough
that a lost one does not hold room for long."""


def largest_request(plan: BundlePlan) -> Request:
    """The largest single workload's CPU and memory request: what one node must hold."""
    cpu = max((w.resources.cpu_millis or 0 for w in plan.workloads), default=0)
    memory = max((w.resources.memory_bytes or 0 for w in plan.workloads), default=0)
    return cpu, memory


def total_request(plan: BundlePlan) -> Request:
    """Every workload's CPU and memory request summed: what the bundle takes of a cluster."""
    cpu = sum(w.resources.cpu_millis or 0 for w in plan.workloads)
    memory = sum(w.resources.memory_bytes or 0 for w in plan.workloads)
    return cpu, memory


@attrs.frozen
class _Held:
    cluster: str
    request: Request
    until: float


class Reservations:
    """This process's placements in flight, by bundle id."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, hold: float = HOLD) -> None:
        self._clock = clock
        self._hold = hold
        self._held: dict[str, _Held] = {}

    def reserve(self, bundle_id: str, cluster: str, request: Request) -> None:
        """Hold ``request`` on ``cluster`` for ``bundle_id`` from now."""
        self._held[bundle_id] = _Held(cluster, request, self._clock() + self._hold)

    def release(self, bundle_id: str) -> None:
        """Drop ``bundle_id``'s reservation (its apply failed; nothing when there is none)."""
        self._held.pop(bundle_id, None)

    def clusters(self) -> dict[str, str]:
        """The cluster of each reservation held now."""
        return {bundle_id: held.cluster for bundle_id, held in self._held.items()}

    def held(
        self, cluster: str, seen: Mapping[str, BundlePods], *, fit_is_fresh: bool = True
    ) -> Request:
        """What this process's placements on ``cluster`` hold beyond what its room counts.

        ``seen``: the cluster's own view of pods, read with its room. A reservation the view
        fully counts, or past its hold, is dropped here. ``fit_is_fresh=False`` (the room is a
        read scope's, read before): pods on a node may be missing from it, so only the pods
        waiting for a node count, and nothing is dropped but by its hold.
        """
        now = self._clock()
        cpu = memory = 0
        for bundle_id, held in list(self._held.items()):
            if held.cluster != cluster:
                continue
            pods = seen.get(bundle_id, BundlePods((0, 0), (0, 0)))
            counted = _plus(pods.placed, pods.waiting) if fit_is_fresh else pods.waiting
            left = (max(0, held.request[0] - counted[0]), max(0, held.request[1] - counted[1]))
            if now >= held.until or (fit_is_fresh and left == (0, 0)):
                del self._held[bundle_id]
                continue
            cpu, memory = cpu + left[0], memory + left[1]
        return cpu, memory


def _plus(a: Request, b: Request) -> Request:
    return a[0] + b[0], a[1] + b[1]


def waiting(seen: Mapping[str, BundlePods]) -> Request:
    """What the bundles ``seen`` on a cluster request of pods not on a node yet."""
    cpu = memory = 0
    for pods in seen.values():
        cpu, memory = cpu + pods.waiting[0], memory + pods.waiting[1]
    return cpu, memory


def room_left(fit: Fit, *taken: Request) -> Fit:
    """``fit`` less every request of ``taken`` (never below nothing)."""
    cpu, memory = fit.cpu_millis, fit.memory_bytes
    for request in taken:
        cpu, memory = cpu - request[0], memory - request[1]
    return Fit(cpu_millis=max(0, cpu), memory_bytes=max(0, memory))


def choose(bundle_id: str, largest: Request, rooms: Mapping[str, Fit | None], default: str) -> str:
    """The cluster for ``bundle_id``: one its largest workload fits, the roomiest.

    ``rooms``: each cluster's room with placements in flight taken off (``None``: no eligible
    node). Equal rooms: rendezvous hashing over them. No room anywhere: ``default``.
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
    return tied[0] if len(tied) == 1 else str(rendezvous_owner(bundle_id, tied))
