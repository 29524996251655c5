"""One cluster's session: the parts every feature of the adapter is given, composed.

A :class:`ClusterSession` is the one place that talks to one cluster. Features reach the
part that owns what they need through one attribute each, never a forward per method:

- ``connection`` (:class:`ClusterConnection`): the transport, made lazily from the settings
  (constructing an adapter does no I/O), and its counts;
- ``errors`` (:class:`ClusterErrors`): how an API error becomes the contract's error;
- ``api`` (:class:`ApiReads`): GETs straight from the API server;
- ``cache`` (:class:`ClusterCache`): the watch-fed informer while it runs, and whether it
  may answer now;
- ``reads`` (:class:`CachedReads`): our objects in a namespace, from the cache when synced,
  else from the API;
- ``writer`` (:class:`SessionWriter`): applies, creates, deletes and conditional writes;
- ``streams`` (:class:`SessionStreams`): exec sessions and log streams;

and the session itself holds the per-namespace locks. A session of a named cluster (``name``,
as a multi-cluster adapter makes them) names that cluster in the message and the details of
every error it raises. The session is what an :class:`~pando_runtime.plugin.ApiObserver`
observes (:meth:`ClusterSession.observe_api`): every call, the cache's size, the open watches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import anyio

from pando_runtime.plugin import ApiObserver, ApiState

from .._info import KubernetesConfig
from ..api._transport import KubeTransport
from ._api_reads import ApiReads
from ._cached_reads import CachedReads
from ._cluster_cache import ClusterCache
from ._connect import build_transport, kubeconfig_key
from ._connection import ClusterConnection
from ._errors import ClusterErrors, named_namespaces
from ._streams import SessionStreams
from ._writes import SessionWriter

__all__ = ["ClusterSession"]


class ClusterSession:
    """One cluster: its connection, cache and locks, and the operations every feature needs.

    ``transport``: use this one (tests, or a caller that built it); else one is made from
    ``config`` on first use by ``connect`` (default: the settings' kubeconfig and context).
    ``name``: the cluster's name in errors (``None`` for the only cluster of an adapter).
    """

    def __init__(
        self,
        config: KubernetesConfig,
        *,
        transport: KubeTransport | None = None,
        connect: Callable[[], KubeTransport] | None = None,
        name: str | None = None,
    ) -> None:
        self.config = config
        self.name = name
        self.errors = ClusterErrors(name, named_namespaces(config))
        self.connection = ClusterConnection(
            self.errors, connect or (lambda: build_transport(config)), transport=transport
        )
        self.api = ApiReads(self.connection, self.errors)
        # The settings' own cluster is named by its kubeconfig before the client loads.
        server_key = None if connect or transport else functools.partial(kubeconfig_key, config)
        self.cache = ClusterCache(
            config, self.connection, self.api, self.errors, server_key=server_key
        )
        self.reads = CachedReads(self.cache, self.api)
        self.writer = SessionWriter(
            self.connection, self.errors, self.api, self.cache, config.field_manager
        )
        self.streams = SessionStreams(self.connection.transport, self.errors, config.read_timeout)
        self._locks: dict[str, anyio.Lock] = {}

    def observe_api(self, observer: ApiObserver) -> None:
        """Report every API call, the cache's size and the open watches to ``observer``."""
        bound = observer.bind(cluster=self.name) if self.name else observer
        bound.track(self)
        self.connection.observe(bound)

    def api_state(self) -> ApiState:
        """Objects in the cache and open watches now (by resource), for gauges."""
        return ApiState(
            cached_objects=self.cache.cached_objects(),
            open_watches=self.connection.open_watches,
        )

    def lock(self, ns: str) -> anyio.Lock:
        """The lock of one namespace: one writer of an app at a time in this process."""
        return self._locks.setdefault(ns, anyio.Lock())

    async def close(self) -> None:
        """Stop the watches and close the connection pools. Safe to call twice."""
        await self.cache.stop()
        self.connection.close()
