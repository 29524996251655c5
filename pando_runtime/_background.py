"""One loop run in the background for the duration of an ``async with`` block."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import anyio

__all__ = ["in_background"]


@contextlib.asynccontextmanager
async def in_background(run: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
    """Run ``run()`` in a task until the block ends (its errors end the block)."""
    async with anyio.create_task_group() as group:
        group.start_soon(run)
        try:
            yield
        finally:
            group.cancel_scope.cancel()
