"""One loop run in the background for the duration of an ``async with`` block."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import anyio

__all__ = ["beside", "in_background"]


@contextlib.asynccontextmanager
async def in_background(run: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
    """Run ``run()`` in a task until the block ends (its errors end the block)."""
    async with anyio.create_task_group() as group:
        group.start_soon(run)
        try:
            yield
        finally:
            group.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def beside(
    run: Callable[[anyio.CancelScope], Coroutine[Any, Any, None]],
) -> AsyncIterator[None]:
    """Run ``run(scope)`` in a task until the block ends; ``scope.cancel()`` cancels the block.

    Unlike :func:`in_background`, an error of the block comes out as itself, not inside an
    exception group, when it is the only one.
    """
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(run, group.cancel_scope)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
    except BaseExceptionGroup as errors:
        if len(errors.exceptions) == 1:
            raise errors.exceptions[0] from errors.exceptions[0].__cause__
        raise
