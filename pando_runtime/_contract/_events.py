"""Bundle events: what a runtime tells a host as it happens.

The host's vocabulary only; the adapter's side (the channel and the hub that fans events out to
every open stream) is in ``pando_runtime._adapter._event_hub``.
"""

from __future__ import annotations

import enum
from datetime import datetime

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream

__all__ = ["BundleEvent", "BundleEventKind", "BundleEventStream"]


class BundleEventKind(enum.StrEnum):
    """What happened.

    ``WATCHING`` is always the first event of a stream: from then on nothing is
    missed. ``MISSED`` means events may have been lost (a gap, or an event that
    cannot be attributed): the host re-observes everything it cares about.
    ``FLEET_CHANGED`` (API 1.6, a fleet's only): a member joined, was replaced, left or was
    refused; ``details`` says which (``change``, the member under the fleet's noun,
    ``reason``), and no bundle is named.
    A minor of the adapter API may add kinds: a host ignores the kinds it does not know.
    """

    WATCHING = "watching"
    MISSED = "missed"
    STARTED = "started"
    EXITED = "exited"
    OOM_KILLED = "oom_killed"
    REMOVED = "removed"
    HEALTH_CHANGED = "health_changed"
    FLEET_CHANGED = "fleet_changed"


@attrs.frozen(kw_only=True)
class BundleEvent:
    """One transition of one workload (``bundle_id``/``workload`` unset for stream events)."""

    kind: BundleEventKind
    at: datetime
    bundle_id: str | None = None
    workload: str | None = None
    exit_code: int | None = None
    healthy: bool | None = None
    details: dict[str, str] = attrs.field(factory=dict, hash=False)
    """What a stream event says beyond its kind (``FLEET_CHANGED``'s member and change)."""


class BundleEventStream:
    """The host's end of an event stream: ``async for event in stream``.

    Cancel-safe: a host may wait for the next event under a timeout and keep
    iterating afterwards (an async generator would be finished by the
    cancellation). An exception put into the channel by the adapter (for
    instance :class:`AdapterUnavailable` when the stream is lost) is raised to
    the host in order.
    """

    def __init__(self, receive: MemoryObjectReceiveStream[BundleEvent | BaseException]) -> None:
        self._receive = receive

    def __aiter__(self) -> BundleEventStream:
        return self

    async def __anext__(self) -> BundleEvent:
        try:
            item = await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None
        if isinstance(item, BaseException):
            raise item
        return item

    async def aclose(self) -> None:
        """Stop receiving."""
        self._receive.close()
