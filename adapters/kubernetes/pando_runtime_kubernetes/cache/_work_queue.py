"""A keyed work queue with retries and backoff, as client-go's."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import anyio

__all__ = ["WorkQueue"]

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """Keys to process, each at most once in the queue, with retries and backoff.

    As client-go's work queue: a key added while it waits is not queued twice;
    a key added while it is being processed is queued again when
    :meth:`done` is called, so its latest state is always processed. A failed
    key is retried after an exponential backoff, at most ``max_retries`` times.
    """

    def __init__(
        self, *, max_retries: int = 5, backoff_initial: float = 0.05, backoff_max: float = 5.0
    ) -> None:
        self._queue: deque[K] = deque()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._wakeup = anyio.Event()
        self.max_retries = max_retries
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self.dropped = 0
        """Keys given up after ``max_retries`` failures."""

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: K) -> None:
        """Queue ``key`` (no-op when it already waits)."""
        if key in self._processing:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.append(key)
            self._wakeup.set()

    async def get(self) -> K:
        """The next key; mark it processing until :meth:`done`."""
        while not self._queue:
            self._wakeup = anyio.Event()
            await self._wakeup.wait()
        key = self._queue.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: K, *, failed: bool = False) -> float | None:
        """Finish ``key``; on failure returns the delay before its retry (None: given up)."""
        self._processing.discard(key)
        delay: float | None = None
        if failed:
            count = self._failures.get(key, 0) + 1
            if count > self.max_retries:
                self._failures.pop(key, None)
                self.dropped += 1
            else:
                self._failures[key] = count
                delay = min(self._backoff_max, self._backoff_initial * 2 ** (count - 1))
        else:
            self._failures.pop(key, None)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)
        return delay

    async def run(
        self,
        process: Callable[[K], Awaitable[None]],
        *,
        on_error: Callable[[K, Exception], None] | None = None,
        on_drop: Callable[[K, Exception], None] | None = None,
    ) -> None:
        """Process keys one at a time until cancelled; failures are retried with backoff.

        ``on_error`` is told of every failure; ``on_drop`` of the last one of a key given up
        after ``max_retries`` retries (it is not processed again until added again).
        """
        async with anyio.create_task_group() as retries:
            while True:
                key = await self.get()
                try:
                    await process(key)
                except Exception as error:  # noqa: BLE001 - any failure is retried
                    if on_error is not None:
                        on_error(key, error)
                    delay = self.done(key, failed=True)
                    if delay is not None:
                        retries.start_soon(self._readd_later, key, delay)
                    elif on_drop is not None:
                        on_drop(key, error)
                else:
                    self.done(key)

    async def _readd_later(self, key: K, delay: float) -> None:
        await anyio.sleep(delay)
        self.add(key)
