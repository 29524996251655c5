"""A fleet's event stream: every member's bundle events in one, a silent member said.

Each member's stream is followed by a task of its own. A member's stream that ends (its runtime
went silent, the adapter's stream failed) is reopened, waiting ``retry`` seconds between
attempts; once it is open again, a ``MISSED`` says that events were lost: the contract's gap,
for every app, since the apps that member removed meanwhile are not in its list any more (a
``MISSED`` naming only the apps it lists afterwards would leave those out). The merged stream
itself never ends for a member's sake: ``WATCHING`` comes once every member's stream was tried
(open, or found silent), so one silent member never holds up the others'.

Members that change while the stream is open (:mod:`._live`): a member that joined is followed
from then on; one replaced is followed on its new adapter, whose stream takes over once it
sent its ``WATCHING`` (the old one's is followed until then: nothing is missed, so no
``MISSED``); one that left is no longer followed. Each change is a ``FLEET_CHANGED`` event.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import anyio
import attrs
from anyio.abc import TaskGroup

from .._adapter._abc import RuntimeAdapter
from .._adapter._event_hub import BundleEventHub
from .._contract._errors import PandoRuntimeError
from .._contract._events import BundleEvent, BundleEventKind, BundleEventStream
from .._util._log import logger
from ._member_set import MemberChange, MemberSet

__all__ = ["merged_events", "retry_delay"]

log = logger("fleet")


def retry_delay(retry: Sequence[float], attempt: int) -> float:
    """Seconds before attempt ``attempt`` (from 0) to reach a silent member: the last repeated."""
    return retry[min(attempt, len(retry) - 1)]


def _now() -> datetime:
    return datetime.now(UTC)


@attrs.frozen
class _Handover:
    """A replaced member's old stream, followed until its successor's sent ``WATCHING``."""

    old: anyio.CancelScope | None
    handed_over: anyio.Event

    def done(self) -> None:
        if self.old is not None:
            self.old.cancel()
        self.handed_over.set()


class _Merge:
    """The merged stream's state: events before ``WATCHING`` are kept for it."""

    def __init__(self, members: MemberSet, group: TaskGroup, retry: Sequence[float]) -> None:
        self.members = members
        self.noun = members.noun
        self.group = group
        self.retry = retry
        self.hub = BundleEventHub()
        self.early: list[BundleEvent] | None = []
        self.waiting_for = set(members.adapters)
        self.all_tried = anyio.Event()
        self.following: dict[str, anyio.CancelScope] = {}
        if not self.waiting_for:
            self.all_tried.set()

    def publish(self, event: BundleEvent) -> None:
        if self.early is not None:
            self.early.append(event)
        else:
            self.hub.publish(event)

    def mark_tried(self, name: str) -> None:
        self.waiting_for.discard(name)
        if not self.waiting_for:
            self.all_tried.set()

    def start(self, name: str, *, taking_over: _Handover | None = None) -> None:
        """Follow member ``name``'s current adapter (replacing the stream ``taking_over``)."""
        scope = anyio.CancelScope()
        adapter = self.members.adapters[name]
        self.following[name] = scope
        self.group.start_soon(
            self.follow, name, adapter, scope, taking_over, name=f"events of {self.noun} {name}"
        )

    def changed(self, change: MemberChange) -> None:
        """A member joined, was replaced or left: follow it as it is now, and say so."""
        name, old = change.name, self.following.get(change.name)
        if change.change == "joined":
            self.start(name)
        elif change.change == "replaced":
            handed_over = anyio.Event()  # the old adapter stays open until then
            change.handovers.append(handed_over)
            self.start(name, taking_over=_Handover(old, handed_over))
        elif change.change == "left" and old is not None:
            old.cancel()
            del self.following[name]
        details = {"change": change.change, self.noun: name}
        if change.reason:
            details["reason"] = change.reason
        self.publish(BundleEvent(kind=BundleEventKind.FLEET_CHANGED, at=_now(), details=details))

    async def follow(
        self,
        name: str,
        member: RuntimeAdapter,
        scope: anyio.CancelScope,
        taking_over: _Handover | None = None,
    ) -> None:
        """Member ``name``'s events, its stream reopened whenever it ends."""
        lost = False
        attempt = 0
        with scope:
            while True:
                try:
                    async with member.watch_bundles() as events:
                        await anext(aiter(events))  # the member's own WATCHING
                        self.mark_tried(name)
                        if taking_over is not None:  # from here on this stream says it all
                            taking_over.done()
                            taking_over = None
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
                if self.members.adapters.get(name) is not member:
                    return  # replaced (its successor's stream took over) or left: not silent
                if not lost:
                    log.warning(
                        "%s %s is silent (%s); its events are retried", self.noun, name, reason
                    )
                lost = True
                await anyio.sleep(retry_delay(self.retry, attempt))
                attempt += 1


@contextlib.asynccontextmanager
async def merged_events(
    members: MemberSet, *, retry: Sequence[float]
) -> AsyncIterator[BundleEventStream]:
    """Every member's events in one stream, members joining and leaving (see the module)."""
    async with anyio.create_task_group() as group:
        merge = _Merge(members, group, retry)
        stop_watching = members.watch(merge.changed)
        try:
            for name in members.adapters:
                merge.start(name)
            await merge.all_tried.wait()
            early, merge.early = merge.early or [], None
            watching = BundleEvent(kind=BundleEventKind.WATCHING, at=_now())
            async with merge.hub.subscribe(watching, *early) as stream:
                yield stream
        finally:
            stop_watching()
            group.cancel_scope.cancel()
