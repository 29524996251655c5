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

from .._info import KubernetesConfig
from ..cache._informer import Informer
from ._session import ClusterSession

__all__ = ["BundleEvents"]


class BundleEvents:
    """``watch_bundles`` of one cluster: the session's cache when it runs, else a pod watch."""

    def __init__(self, session: ClusterSession, config: KubernetesConfig) -> None:
        self._session = session
        self._config = config

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncIterator[Any]:
        """Bundle events from the pod watch: ``WATCHING`` first, ``MISSED`` after a relist."""
        informer = self._session.cache
        async with contextlib.AsyncExitStack() as stack:
            if informer is None:
                informer = Informer(
                    await self._session.transport(),
                    kinds=("pods",),
                    watch_timeout=self._config.watch_timeout,
                )
                await stack.enter_async_context(informer.running())
            if not await informer.wait_synced(self._config.read_timeout):
                loop = informer.loops["pods"]
                raise self._session.down(f"cannot watch pods: {loop.last_error}")
            watching = BundleEvent(kind=BundleEventKind.WATCHING, at=datetime.now(UTC))
            # After a warm start: what changed while the adapter was down, as events.
            replay = informer.pods.take_replay()
            async with informer.pods.events.subscribe(watching, *replay) as stream:
                yield stream
