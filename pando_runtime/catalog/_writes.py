"""Writing a pass's changes to a catalog backend: in batches when it can, one by one else.

A :class:`~pando_runtime.catalog.BatchCatalogBackend` gets the writes in batches of at most
its ``batch_limit``; any other backend gets one ``register`` or ``deregister`` call per
write, as before batches existed. Either way at most ``limiter``'s capacity of calls are in
flight, and every call is made inside the caller's cancel scope: a syncer whose singleton is
lost is cancelled before its next batch is sent, as it was before its next single write.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import anyio

from .._contract._errors import PandoRuntimeError
from ._types import BatchCatalogBackend, CatalogBackend, CatalogWrite

__all__ = ["WriteDone", "apply_writes"]

WriteDone = Callable[[CatalogWrite, BaseException | None], None]
"""Told each write's outcome: ``None`` when applied, else why not."""


async def apply_writes(
    backend: CatalogBackend,
    writes: Sequence[CatalogWrite],
    *,
    limiter: anyio.CapacityLimiter,
    calls: Counter[str],
    on_done: WriteDone,
) -> None:
    """Apply ``writes`` (each key once); ``on_done`` hears every write's outcome.

    ``calls`` counts the backend calls made, by method (``write_batch``, or ``register``
    and ``deregister``). A backend error fails the writes of its call, never the others.
    """
    async with anyio.create_task_group() as group:
        if isinstance(backend, BatchCatalogBackend):
            size = max(1, int(backend.batch_limit))
            for start in range(0, len(writes), size):
                batch = writes[start : start + size]
                group.start_soon(_write_batch, backend, batch, limiter, calls, on_done)
        else:
            for write in writes:
                group.start_soon(_write_one, backend, write, limiter, calls, on_done)


async def _write_batch(
    backend: BatchCatalogBackend,
    batch: Sequence[CatalogWrite],
    limiter: anyio.CapacityLimiter,
    calls: Counter[str],
    on_done: WriteDone,
) -> None:
    failed: Mapping[tuple[str, str], BaseException]
    async with limiter:
        calls["write_batch"] += 1
        try:
            failed = await backend.write_batch(batch)
        except (PandoRuntimeError, OSError) as error:
            failed = {write.key: error for write in batch}
    for write in batch:
        on_done(write, failed.get(write.key))


async def _write_one(
    backend: CatalogBackend,
    write: CatalogWrite,
    limiter: anyio.CapacityLimiter,
    calls: Counter[str],
    on_done: WriteDone,
) -> None:
    error: BaseException | None = None
    async with limiter:
        try:
            if write.remove:
                calls["deregister"] += 1
                await backend.deregister(*write.key)
            else:
                calls["register"] += 1
                await backend.register(write.registration)
        except (PandoRuntimeError, OSError) as caught:
            error = caught
    on_done(write, error)
