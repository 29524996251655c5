"""The watch loops run together, and event streams ended when the pod watch stays down."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any

import anyio

from pando_runtime import AdapterUnavailable

from ._stores import PodStore
from ._watch import WatchLoop

__all__ = ["Supervisor"]


class Supervisor:
    """Runs the cache's watch loops and its other tasks in one task group.

    While the pod watch has been down for ``give_up_after`` seconds (after its first list),
    every open event stream of ``pods`` is ended with :class:`AdapterUnavailable`: the
    subscriber re-observes rather than wait on a stream that may have missed events.
    """

    def __init__(self, loops: Mapping[str, WatchLoop], pods: PodStore) -> None:
        self._loops = loops
        self._pods = pods

    def fail_subscribers(self, error: AdapterUnavailable) -> None:
        """End every event stream with ``error``."""
        self._pods.events.fail(error)

    async def _watch_pod_watch(self, give_up_after: float) -> None:
        """End event streams when the pod watch has been down for ``give_up_after`` s."""
        loop = self._loops.get("pods")
        if loop is None:
            return
        down_since: float | None = None
        while True:
            await anyio.sleep(min(1.0, give_up_after / 4))
            if loop.healthy or not loop.synced.is_set():
                down_since = None
                continue
            now = anyio.current_time()
            down_since = down_since or now
            if now - down_since >= give_up_after and self._pods.events:
                self.fail_subscribers(
                    AdapterUnavailable(
                        f"the pod watch is down: {loop.last_error}",
                        remedy="Open a new event stream and re-observe every app.",
                    )
                )

    @contextlib.asynccontextmanager
    async def running(
        self, give_up_after: float, tasks: tuple[Callable[[], Coroutine[Any, Any, None]], ...] = ()
    ) -> AsyncIterator[None]:
        """Run the loops, then ``tasks``, and the pod watch's supervision during the block."""
        async with anyio.create_task_group() as group:
            for loop in self._loops.values():
                group.start_soon(loop.run)
            for task in tasks:
                group.start_soon(task)
            group.start_soon(self._watch_pod_watch, give_up_after)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
