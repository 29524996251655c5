"""Placement over several clusters: the core's (:mod:`pando_runtime.fleet`), by its old names.

The multi-cluster adapter places through the core's fleet; what was this module's placement
logic is :mod:`pando_runtime.fleet`'s, re-exported for code written against it. A
reservation's member is its cluster: :meth:`Reservations.clusters` is the core's
:meth:`~pando_runtime.fleet.Reservations.members`.
"""

from __future__ import annotations

from pando_runtime import fleet
from pando_runtime.fleet import (
    HOLD,
    Request,
    choose,
    largest_request,
    room_left,
    total_request,
    waiting,
)

__all__ = [
    "HOLD",
    "Request",
    "Reservations",
    "choose",
    "largest_request",
    "room_left",
    "total_request",
    "waiting",
]


class Reservations(fleet.Reservations):
    """The core's placements in flight, each one's member named as a cluster."""

    def clusters(self) -> dict[str, str]:
        """The cluster of each reservation held now."""
        return self.members()
