"""The adapter's side of bundle events: a channel to send them in, a hub to fan them out.

The host's side (:class:`BundleEvent`, :class:`BundleEventStream`) is the contract's vocabulary,
in ``pando_runtime._contract._events``; this is the machinery an adapter streams it with.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from .._contract._events import BundleEvent, BundleEventStream

__all__ = ["BundleEventHub", "bundle_event_channel"]


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
