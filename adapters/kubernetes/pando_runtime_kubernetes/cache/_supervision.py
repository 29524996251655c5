"""The watch loops run together, and event streams ended when the pod watch stays down.

It logs on ``pando_runtime.kubernetes.watch``: WARNING while what must come before the watches
(a warm start's connection and identity check) fails, retried with backoff.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any

import anyio

from pando_runtime import AdapterUnavailable, PandoRuntimeError

from .._log import logger
from ..api._errors import ApiError
from ._stores import PodStore
from ._watch import WatchLoop, why

_LOG = logger("watch")

__all__ = ["Supervisor"]


class Supervisor:
    """Runs the cache's watch loops and its other tasks in one task group.

    While the pod watch has been down for ``give_up_after`` seconds (after its first list),
    every open event stream of ``pods`` is ended with :class:`AdapterUnavailable`: the
    subscriber re-observes rather than wait on a stream that may have missed events.

    ``before_watching`` (optional) is awaited before the loops start, again (with backoff)
    until it succeeds; meanwhile every loop is unhealthy with its error.
    """

    def __init__(
        self,
        loops: Mapping[str, WatchLoop],
        pods: PodStore,
        before_watching: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self._loops = loops
        self._pods = pods
        self._before = before_watching

    async def _run_loops(self) -> None:
        failures = 0
        while self._before is not None:
            try:
                await self._before()
                break
            except (PandoRuntimeError, ApiError, OSError, ValueError) as error:
                failures += 1
                for loop in self._loops.values():
                    loop.healthy, loop.last_error = False, error
                delay = min(10.0, 0.2 * 2 ** (failures - 1)) * (0.5 + random.random() / 2)  # noqa: S311
                _LOG.warning(
                    "connecting the cache failed (%s): retrying in %.1f s; it answers from "
                    "its saved state meanwhile, while that is within its staleness bound",
                    why(error),
                    delay,
                    extra={"failures": failures},
                )
                await anyio.sleep(delay)
        async with anyio.create_task_group() as group:
            for loop in self._loops.values():
                group.start_soon(loop.run)

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
            group.start_soon(self._run_loops)
            for task in tasks:
                group.start_soon(task)
            group.start_soon(self._watch_pod_watch, give_up_after)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
