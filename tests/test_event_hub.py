"""The event hub every adapter fans its bundle events out with."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import pando_runtime as pr

pytestmark = pytest.mark.anyio

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _event(kind: pr.BundleEventKind, bundle: str | None = None) -> pr.BundleEvent:
    return pr.BundleEvent(kind=kind, at=AT, bundle_id=bundle)


async def _drain(stream: pr.BundleEventStream) -> list[pr.BundleEvent]:
    return [event async for event in stream]


async def test_every_stream_gets_its_first_events_then_everything_published() -> None:
    hub = pr.plugin.BundleEventHub()
    watching = _event(pr.BundleEventKind.WATCHING)
    started = _event(pr.BundleEventKind.STARTED, "a")
    async with hub.subscribe(watching) as one, hub.subscribe() as two:
        assert len(hub) == 2
        hub.publish(started)
        hub.close()
        assert await _drain(one) == [watching, started]
        assert await _drain(two) == [started]
    assert len(hub) == 0


async def test_a_stream_that_ended_is_dropped_and_the_others_still_get_events() -> None:
    hub = pr.plugin.BundleEventHub()
    async with hub.subscribe() as kept:
        async with hub.subscribe():
            pass
        assert len(hub) == 1
        hub.publish(_event(pr.BundleEventKind.MISSED))
        hub.close()
        assert [e.kind for e in await _drain(kept)] == [pr.BundleEventKind.MISSED]


async def test_fail_ends_every_stream_with_the_error_after_what_it_had() -> None:
    hub = pr.plugin.BundleEventHub()
    async with hub.subscribe() as stream:
        hub.publish(_event(pr.BundleEventKind.STARTED, "a"))
        hub.fail(pr.AdapterUnavailable("the event stream was lost"))
        assert len(hub) == 0
        assert (await anext(stream)).kind is pr.BundleEventKind.STARTED
        with pytest.raises(pr.AdapterUnavailable, match="was lost"):
            await anext(stream)
        assert await _drain(stream) == []
        hub.publish(_event(pr.BundleEventKind.STARTED, "b"))  # no stream left: nothing fails
