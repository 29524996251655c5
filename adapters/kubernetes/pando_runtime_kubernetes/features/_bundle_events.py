"""Bundle events of one cluster, from the pod watch: ``WATCHING`` first, ``MISSED`` after a gap.

After a warm start (``cache_dir``), the first stream opened also gets, after ``WATCHING``, the
events of what changed while the adapter was down (its watches caught up on them).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from pando_runtime import BundleEvent, BundleEventKind

from ..session._session import ClusterSession

__all__ = ["BundleEvents"]


class BundleEvents:
    """``watch_bundles`` of one cluster: the session's cache when it runs, else a pod watch."""

    def __init__(self, session: ClusterSession) -> None:
        self._session = session

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncIterator[Any]:
        """Bundle events from the pod watch: ``WATCHING`` first, ``MISSED`` after a relist."""
        async with self._session.cache.pod_watch() as informer:
            watching = BundleEvent(kind=BundleEventKind.WATCHING, at=datetime.now(UTC))
            # After a warm start: what changed while the adapter was down, as events.
            replay = informer.pods.take_replay()
            async with informer.pods.events.subscribe(watching, *replay) as stream:
                yield stream
