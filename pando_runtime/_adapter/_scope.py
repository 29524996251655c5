"""Read scopes: one expensive read serves every question asked within a plan.

A host planning an app asks ``capacity()`` and ``largest_fit_for()``; each may
need the same costly listing. Inside ``async with adapter.read_scope():`` an
adapter's :func:`scoped_read` runs each keyed read once and serves the result
to every later call in that scope. Errors are never cached; nothing outlives
the scope.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from typing import Any, TypeVar, cast

import anyio

__all__ = ["in_read_scope", "read_scope", "scoped_read"]

T = TypeVar("T")


class _Scope:
    def __init__(self) -> None:
        self.values: dict[Hashable, Any] = {}
        self.locks: dict[Hashable, anyio.Lock] = {}


_current: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "pando_runtime_read_scope", default=None
)


@contextlib.asynccontextmanager
async def read_scope() -> AsyncIterator[None]:
    """Open a read scope (nested scopes share the outermost one)."""
    if _current.get() is not None:
        yield
        return
    token = _current.set(_Scope())
    try:
        yield
    finally:
        _current.reset(token)


def in_read_scope() -> bool:
    """Whether the calling task runs inside a read scope."""
    return _current.get() is not None


async def scoped_read(key: Hashable, read: Callable[[], Awaitable[T]]) -> T:
    """``await read()``, once per ``key`` within the current read scope (always outside one)."""
    scope = _current.get()
    if scope is None:
        return await read()
    lock = scope.locks.setdefault(key, anyio.Lock())
    async with lock:
        if key in scope.values:
            return cast("T", scope.values[key])
        value = await read()
        scope.values[key] = value
        return value
