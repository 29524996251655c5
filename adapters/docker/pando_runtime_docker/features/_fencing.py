"""Epochs on a member's containers: a stale write is repaired, since an engine cannot refuse it.

An engine has no conditional writes: a replica paused after its write guard and past its lease
still reaches the engine when it resumes. So each app's writers are numbered in the lease store
(:class:`~pando_runtime.plugin.WriteEpochs`): the write in progress runs under the app's epoch,
read with :func:`~pando_runtime.plugin.write_epoch`, whoever moved it: this adapter's own
membership, or the fleet this adapter is a member of. Every container an apply creates for the
app carries that number in the ``<prefix>.epoch`` label. When the apply's epoch is new to this
adapter, it notes the app's containers its view holds (confirmed by the engine after the epoch
moved): those it adopts, whatever epoch wrote them. A container of an older epoch that is not
among them was written after the move by a replica that no longer owned the app: this apply
removes it and converges as usual (a stale write lives until the owner's next apply). A
container of a newer epoch means another replica moved it since: the apply is refused
(``NotOwner``), nothing written.

A container without the label was written outside a membership and is never stale.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Iterable

import attrs

from pando_runtime import NotOwner
from pando_runtime.plugin import WriteEpoch, write_epoch

from ..cache import ContainerCache, ContainerView

__all__ = ["Fence", "Fences", "current_fence"]


@attrs.frozen(slots=True)
class Fence:
    """The epoch an apply writes under, and the containers adopted when it began."""

    epoch: int
    adopted: frozenset[str]

    def stale(self, containers: Iterable[ContainerView]) -> frozenset[str]:
        """Ids of ``containers`` written under an older epoch after this one began."""
        return frozenset(
            c.id
            for c in containers
            if c.epoch is not None and c.epoch < self.epoch and c.id not in self.adopted
        )


_FENCE: contextvars.ContextVar[Fence | None] = contextvars.ContextVar(
    "pando_docker_fence", default=None
)


def current_fence() -> Fence | None:
    """The fence of the apply running in this task (``None``: not a member's write)."""
    return _FENCE.get()


class Fences:
    """The fence of each app this adapter applies under an epoch (see the module)."""

    def __init__(self, cache: ContainerCache) -> None:
        self._cache = cache
        self._held: dict[str, Fence] = {}

    @contextlib.asynccontextmanager
    async def applying(self, bundle_id: str) -> AsyncIterator[None]:
        """Within a write guard that moves epochs: the apply writes under the bundle's."""
        epoch = write_epoch(bundle_id)
        if epoch is None:
            yield
            return
        reset = _FENCE.set(await self._fence(epoch))
        try:
            yield
        finally:
            _FENCE.reset(reset)

    async def _fence(self, epoch: WriteEpoch) -> Fence:
        bundle_id = epoch.bundle_id
        held = self._held.get(bundle_id)
        if held is None or held.epoch != epoch.epoch:
            # Every container the engine made before the move is in the view: those are adopted.
            await self._cache.confirmed_since(epoch.began)
            adopted = frozenset(c.id for c in self._cache.bundle(bundle_id).containers)
            held = self._held[bundle_id] = Fence(epoch.epoch, adopted)
        newer = max(
            (c.epoch for c in self._cache.bundle(bundle_id).containers if c.epoch is not None),
            default=0,
        )
        if newer > epoch.epoch:
            self._held.pop(bundle_id, None)
            raise NotOwner(
                f"replica {epoch.replica!r} may not write bundle {bundle_id!r}: the engine holds "
                f"containers of epoch {newer}, newer than this replica's {epoch.epoch}",
                details={"replica": epoch.replica, "bundle_id": bundle_id, "epoch": newer},
            )
        return held
