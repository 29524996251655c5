"""The cache: this owner's containers, kept current by the event stream (private)."""

from ._cache import BundleView, ContainerCache
from ._views import (
    ContainerView,
    EngineEvent,
    Stuck,
    limits_of,
    parse_event,
    parse_time,
    view_from_inspect,
)

__all__ = [
    "BundleView",
    "ContainerCache",
    "ContainerView",
    "EngineEvent",
    "Stuck",
    "limits_of",
    "parse_event",
    "parse_time",
    "view_from_inspect",
]
