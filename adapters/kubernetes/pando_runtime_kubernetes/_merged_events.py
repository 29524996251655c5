"""The multi-cluster adapter's event stream: every member's bundle events in one."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import anyio

from pando_runtime import AdapterUnavailable, BundleEvent, BundleEventKind, RuntimeAdapter
from pando_runtime.plugin import BundleEventHub

from ._members import naming

__all__ = ["merged_events"]


@contextlib.asynccontextmanager
async def merged_events(
    ready: Callable[[], Awaitable[Mapping[str, RuntimeAdapter]]],
) -> AsyncIterator[Any]:
    """Every member's events in one stream (``ready``: the members by name, made on first use).

    ``WATCHING`` once every member's stream is open; a gap in any member's stream is
    ``MISSED``; a member's lost stream ends this one with its error (naming it).
    """
    members = await ready()
    hub = BundleEventHub()
    async with contextlib.AsyncExitStack() as stack:
        opened: list[tuple[str, AsyncIterator[Any]]] = []
        early: list[BundleEvent] = []
        for name, member in members.items():
            try:
                events = await stack.enter_async_context(member.watch_bundles())
            except AdapterUnavailable as error:
                raise naming(error, name) from error
            first = await anext(events)  # each member's own WATCHING
            if isinstance(first, BundleEvent) and first.kind is not BundleEventKind.WATCHING:
                early.append(first)
            opened.append((name, events))

        async def forward(name: str, events: AsyncIterator[Any]) -> None:
            try:
                async for event in events:
                    hub.publish(event)
            except AdapterUnavailable as error:
                hub.fail(naming(error, name))

        watching = BundleEvent(kind=BundleEventKind.WATCHING, at=datetime.now(UTC))
        async with (
            hub.subscribe(*early, watching) as stream,
            anyio.create_task_group() as group,
        ):
            for name, events in opened:
                group.start_soon(forward, name, events)
            try:
                yield stream
            finally:
                group.cancel_scope.cancel()
