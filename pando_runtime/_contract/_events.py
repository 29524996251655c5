"""Bundle events: what a runtime tells a host as it happens."""

from __future__ import annotations

import contextlib
import enum
import math
from collections.abc import AsyncIterator
from datetime import datetime

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = [
    "BundleEvent",
    "BundleEventHub",
    "BundleEventKind",
    "BundleEventStream",
    "bundle_event_channel",
]


class BundleEventKind(enum.StrEnum):
    """What happened.

    ``WATCHING`` is always the first event of a stream: from then on nothing is
    missed. ``MISSED`` means events may have been lost (a gap, or an event that
    cannot be attributed): the host re-observes everything it cares about.
    """

    WATCHING = "watching"
    MISSED = "missed"
    STARTED = "started"
    EXITED = "exited"
    OOM_KILLED = "oom_killed"
    REMOVED = "removed"
    HEALTH_CHANGED = "health_changed"


@attrs.frozen(kw_only=True)
class BundleEvent:
    """One transition of one workload (``bundle_id``/``workload`` unset for stream events)."""

    kind: BundleEventKind
    at: datetime
    bundle_id: str | None = None
    workload: str | None = None
    exit_code: int | None = None
    healthy: bool | None = None


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


def bundle_event_channel(
    max_buffered: float = math.inf,
) -> tuple[MemoryObjectSendStream[BundleEvent | BaseException], BundleEventStream]:
    """A channel for an adapter's events: send events (or an error) in, hand the stream out."""
    send, receive = anyio.create_memory_object_stream[BundleEvent | BaseException](max_buffered)
    return send, BundleEventStream(receive)


class BundleEventHub:
    """An adapter's open event streams: each event published reaches every one of them.

    The one fan-out every adapter uses (the fake, the Kubernetes adapter, the multi-cluster
    adapter's merge): :meth:`subscribe` opens a stream for ``watch_bundles``, :meth:`publish`
    sends to all (a stream the host closed is dropped), :meth:`fail` ends all with an error
    the host gets in order, :meth:`close` ends all quietly. Never blocks: streams buffer.
    """

    def __init__(self) -> None:
        self._sends: list[MemoryObjectSendStream[BundleEvent | BaseException]] = []

    def __len__(self) -> int:
        """Streams open now."""
        return len(self._sends)

    def publish(self, event: BundleEvent) -> None:
        """Send ``event`` to every open stream."""
        for send in list(self._sends):
            try:
                send.send_nowait(event)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._sends.remove(send)

    def fail(self, error: BaseException) -> None:
        """End every open stream with ``error`` (raised to the host after what it has read)."""
        sends, self._sends = self._sends, []
        for send in sends:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                send.send_nowait(error)
            send.close()

    def close(self) -> None:
        """End every open stream (the host's iteration stops)."""
        sends, self._sends = self._sends, []
        for send in sends:
            send.close()

    @contextlib.asynccontextmanager
    async def subscribe(self, *first: BundleEvent) -> AsyncIterator[BundleEventStream]:
        """A stream that gets ``first`` (``WATCHING``, say), then everything published.

        Its end (the block's exit) unsubscribes and closes it.
        """
        send, stream = bundle_event_channel()
        for event in first:
            send.send_nowait(event)
        self._sends.append(send)
        try:
            yield stream
        finally:
            with contextlib.suppress(ValueError):
                self._sends.remove(send)
            send.close()
            await stream.aclose()
