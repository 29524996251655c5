"""Catalog sync as a singleton: one replica of several writes the catalog at a time.

Every replica runs a source and keeps its desired set; only the holder of the singleton
lease (:meth:`Membership.singleton`) runs the sync loop. A loop that starts begins with a
full pass (it reads every node, then writes what differs), so a successor resumes from
what the catalog holds, not from what it believed before. When the singleton is lost the
loop is cancelled (before the lease can expire: the renew deadline is shorter) and the
replica waits to hold it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import anyio

from .._contract._errors import NotOwner
from .._util._log import logger

if TYPE_CHECKING:
    from .._replicas._membership import Membership

__all__ = ["CATALOG_SINGLETON", "SyncLoop", "sync_as_singleton"]

CATALOG_SINGLETON = "catalog-sync"
"""The singleton's default name (``Lease/pando-singleton-catalog-sync`` on Kubernetes)."""

_LOG = logger("catalog")


class SyncLoop(Protocol):
    """What the singleton runs: a :class:`~pando_runtime.catalog.CatalogSyncer`'s loop.

    Typed on this, not on the syncer, because the syncer starts the singleton: naming it
    here would be an import circle.
    """

    async def run(self) -> None:
        """Sync until cancelled, beginning with a full pass."""


async def sync_as_singleton(
    syncer: SyncLoop,
    membership: Membership,
    *,
    name: str = CATALOG_SINGLETON,
    on_hold: Callable[[bool], None] | None = None,
) -> None:
    """Run ``syncer``'s loop whenever this replica holds the singleton ``name``; until cancelled.

    ``on_hold(True)`` is called when the replica takes the singleton, ``on_hold(False)``
    when it has lost it. Raises :class:`NotOwner` when the replica has left (or crashed
    out of) its membership, so it cannot hold anything any more.
    """
    while True:
        held = False
        try:
            async with membership.singleton(name):
                held = True
                _LOG.info("catalog sync: %s holds %s; a full pass first", membership.replica, name)
                if on_hold is not None:
                    on_hold(True)  # noqa: FBT003 - the new state is the argument
                await syncer.run()
        except NotOwner as error:
            if not held:  # refused before holding: the replica left its membership
                raise
            _LOG.warning("catalog sync: %s stopped writing: %s", membership.replica, error)
        finally:
            if held and on_hold is not None:
                on_hold(False)  # noqa: FBT003 - the new state is the argument
        # Taken by another: wait one retry period before asking again.
        await anyio.sleep(membership.settings.retry_period)
