"""Placement over several runtimes: the ``fleet`` adapter and the parts it is made of.

A :class:`FleetAdapter` runs each app on one of several member adapters (Docker engines,
Kubernetes clusters, the fake, any plugin), placed by room on its first deploy and found on its
member ever after (``docs/fleet.md``). Its parts serve adapters that place over members of
their own (``kubernetes-multi``): the placement logic (:func:`choose`, :class:`Reservations`),
and what a member may tell a fleet beyond the contract (:class:`BundleRecords`,
:class:`RequestsView`, :class:`RuntimeKey`).
"""

from __future__ import annotations

from .._lazy import lazy_attributes

TYPE_CHECKING = False
if TYPE_CHECKING:  # the same names as _EXPORTS, for type checkers and the API reference
    from ..fleet._adapter import FleetAdapter
    from ..fleet._info import FLEET, FleetConfig, MemberConfig
    from ..fleet._live import LiveMembers, MemberChanges
    from ..fleet._members import (
        BundleRecords,
        ConfiguredMembers,
        FleetMembers,
        MemberSource,
        RequestsView,
        RuntimeKey,
        fleet_capabilities,
        naming,
    )
    from ..fleet._placement import (
        HOLD,
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

# Every public name of this namespace, by the private module that defines it.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "fleet._adapter": ("FleetAdapter",),
    "fleet._info": ("FLEET", "FleetConfig", "MemberConfig"),
    "fleet._live": ("LiveMembers", "MemberChanges"),
    "fleet._members": (
        "BundleRecords",
        "ConfiguredMembers",
        "FleetMembers",
        "MemberSource",
        "RequestsView",
        "RuntimeKey",
        "fleet_capabilities",
        "naming",
    ),
    "fleet._placement": (
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
    ),
}

__all__ = [
    "FLEET",
    "HOLD",
    "BundleRecords",
    "BundleRequests",
    "ConfiguredMembers",
    "FleetAdapter",
    "FleetConfig",
    "FleetMembers",
    "LiveMembers",
    "MemberChanges",
    "MemberConfig",
    "MemberSource",
    "Request",
    "RequestsView",
    "Reservations",
    "RuntimeKey",
    "choose",
    "fleet_capabilities",
    "largest_request",
    "naming",
    "placed",
    "room_left",
    "total_request",
    "waiting",
]

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, globals())
