"""A fleet's event stream: every member's bundle events in one, a silent member said.

Each member's stream is followed by a task of its own. A member's stream that ends (its runtime
went silent, the adapter's stream failed) is reopened, waiting ``retry`` seconds between
attempts; once it is open again, a ``MISSED`` says that events were lost: the contract's gap,
for every app, since the apps that member removed meanwhile are not in its list any more (a
``MISSED`` naming only the apps it lists afterwards would leave those out). The merged stream
itself never ends for a member's sake: ``WATCHING`` comes once every member's stream was tried
(open, or found silent), so one silent member never holds up the others'.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime

import anyio

from .._adapter._abc import RuntimeAdapter
from .._adapter._event_hub import BundleEventHub
from .._contract._errors import PandoRuntimeError
from .._contract._events import BundleEvent, BundleEventKind, BundleEventStream
from .._util._log import logger

__all__ = ["merged_events", "retry_delay"]

log = logger("fleet")


def retry_delay(retry: Sequence[float], attempt: int) -> float:
    """Seconds before attempt ``attempt`` (from 0) to reach a silent member: the last repeated."""
    return retry[min(attempt, len(retry) - 1)]


def _now() -> datetime:
    return datetime.now(UTC)


class _Merge:
    """The merged stream's state: events before ``WATCHING`` are kept for it."""

    def __init__(self, members: Mapping[str, RuntimeAdapter], noun: str) -> None:
        self.members = members
        self.noun = noun
        self.hub = BundleEventHub()
        self.early: list[BundleEvent] | None = []
        self.tried: set[str] = set()
        self.all_tried = anyio.Event()

    def publish(self, event: BundleEvent) -> None:
        if self.early is not None:
            self.early.append(event)
        else:
            self.hub.publish(event)

    def mark_tried(self, name: str) -> None:
        self.tried.add(name)
        if len(self.tried) == len(self.members):
            self.all_tried.set()

    async def follow(self, name: str, retry: Sequence[float]) -> None:
        """Member ``name``'s events, its stream reopened whenever it ends."""
        member = self.members[name]
        lost = False
        attempt = 0
        while True:
            try:
                async with member.watch_bundles() as events:
                    await anext(aiter(events))  # the member's own WATCHING
                    self.mark_tried(name)
                    if lost:  # what happened there meanwhile was not seen
                        log.warning("%s %s: events flow again", self.noun, name)
                        self.publish(BundleEvent(kind=BundleEventKind.MISSED, at=_now()))
                    lost, attempt = False, 0
                    async for event in events:
                        if event.kind is not BundleEventKind.WATCHING:
                            self.publish(event)
                    reason = "its event stream ended"
            except (PandoRuntimeError, StopAsyncIteration) as error:
                reason = str(error) or type(error).__name__
            except Exception as error:  # one member's fault never ends the merged stream
                reason = f"{type(error).__name__}: {error}"
                log.debug("%s %s: its event stream failed", self.noun, name, exc_info=True)
            self.mark_tried(name)
            if not lost:
                log.warning("%s %s is silent (%s); its events are retried", self.noun, name, reason)
            lost = True
            await anyio.sleep(retry_delay(retry, attempt))
            attempt += 1


@contextlib.asynccontextmanager
async def merged_events(
    members: Mapping[str, RuntimeAdapter], *, noun: str, retry: Sequence[float]
) -> AsyncIterator[BundleEventStream]:
    """Every member's events in one stream (see the module)."""
    merge = _Merge(members, noun)
    async with anyio.create_task_group() as group:
        for name in members:
            group.start_soon(merge.follow, name, retry, name=f"events of {noun} {name}")
        await merge.all_tried.wait()
        early, merge.early = merge.early or [], None
        watching = BundleEvent(kind=BundleEventKind.WATCHING, at=_now())
        try:
            async with merge.hub.subscribe(watching, *early) as stream:
                yield stream
        finally:
            group.cancel_scope.cancel()
