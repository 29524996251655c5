"""A session's cache: the watch-fed informer run while the adapter runs, and when it may answer.

Reads ask :meth:`ClusterCache.synced` (or :meth:`ClusterCache.confirmed`, for an answer
proved current at a time): the informer when it can answer, ``None`` to read the API
directly, or :class:`AdapterUnavailable` at once when the cache is stale past the bound and
the API server does not answer either. What the session just wrote is put in the cache
before its watch event (write-through).

With ``cache_dir``, the cache starts from its saved store before connecting when the
configuration names the server without the client (``server_key``): observe answers from the
store at once while the client loads and the transport is made; once connected, and before any
watch resumes, the store is checked to be the cluster's (its ``kube-system`` UID).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from pando_runtime import AdapterUnavailable

from .._info import KubernetesConfig
from ..api._errors import ApiError
from ..api._paths import api_path
from ..api._server_key import ServerKey, key_from_configuration
from ..cache._informer import Informer
from ..cache._projections import NamespaceFacts
from ..cache._warm import DiskCache, WarmCache, identity_of, open_warm
from ..cache._write_through import remember
from ._api_reads import ApiReads
from ._connection import ClusterConnection
from ._errors import ClusterErrors

__all__ = ["ClusterCache"]

_SAVED_OK: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "pando_kube_saved_ok", default=False
)
"""True inside :meth:`ClusterCache.answering_from_saved`: reads may use a warm start's saved
cache before the watches caught up (observe only; writes never decide from it)."""


class ClusterCache:
    """The lean cache of one cluster while :meth:`start` has it running (else reads go direct).

    ``api``: the session's direct reads (a warm start asks the cluster's identity).
    ``server_key``: what the configuration says of the cluster's server, read without the
    client (blocking; ``None`` when it cannot tell): a warm start then opens its store before
    connecting. Without it, a warm start connects first.
    """

    def __init__(
        self,
        config: KubernetesConfig,
        connection: ClusterConnection,
        api: ApiReads,
        errors: ClusterErrors,
        *,
        server_key: Callable[[], ServerKey | None] | None = None,
    ) -> None:
        self._config = config
        self._connection = connection
        self._api = api
        self._errors = errors
        self._server_key = server_key
        self._informer: Informer | None = None
        self._warm: WarmCache | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._background: anyio.abc.TaskGroup | None = None

    @property
    def informer(self) -> Informer | None:
        """The running informer, while :meth:`start` has it running."""
        return self._informer

    def cached_objects(self) -> dict[str, int]:
        """Objects in the cache now, by resource (none while it does not run)."""
        return self._informer.cached_objects() if self._informer is not None else {}

    async def start(self, collect: Callable[[tuple[str, str]], Awaitable[None]] | None) -> None:
        """Run the cluster-wide watches that feed the cache until :meth:`stop`.

        ``collect`` is called (through the cache's work queue) for each ``(namespace,
        workload)`` whose pods changed. With ``cache_dir`` and a store of the server the
        configuration names, the cache answers from the store before it connects.
        """
        stack = contextlib.AsyncExitStack()
        try:
            await self._start(stack, collect)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await stack.aclose()
            raise

    async def _start(
        self,
        stack: contextlib.AsyncExitStack,
        collect: Callable[[tuple[str, str]], Awaitable[None]] | None,
    ) -> None:
        config = self._config
        key = await self._key() if config.cache_dir else None
        if key is None:  # a cold start, or a store only a connection can name: connect first
            api = await self._connection.transport()
            if config.cache_dir:
                name = self._connection.name or api.cluster or "default"
                key = await anyio.to_thread.run_sync(
                    key_from_configuration, name, api.configuration
                )
        informer = Informer(
            None,
            connect=self._connection.transport,
            cluster=self._connection.log_name or (key.cluster if key is not None else None),
            before_watching=self._verified if key is not None else None,
            watch_timeout=config.watch_timeout,
            collect=collect,
            probe=self._probe,
            probe_interval=config.cache_probe_interval,
            max_staleness=config.cache_max_staleness,
            answers=self._answers,
        )
        if key is not None:
            disk = DiskCache(Path(str(config.cache_dir)), self._connection.name or key.cluster)
            self._warm = await open_warm(stack, informer, disk, identity_of(key))
        await stack.enter_async_context(informer.running())
        background = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(background.cancel_scope.cancel)  # before the group's exit (LIFO)
        self._stack, self._informer, self._background = stack, informer, background

    def in_background(self, work: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """Run ``work`` while the cache runs (it must not raise), ended with the cache."""
        if self._background is not None:
            self._background.start_soon(work)

    async def _key(self) -> ServerKey | None:
        """The server the store is keyed by, known before connecting (``None``: not known)."""
        made, name = self._connection.made, self._connection.name
        if made is not None:
            cluster = name or made.cluster or "default"
            return await anyio.to_thread.run_sync(
                key_from_configuration, cluster, made.configuration
            )
        if self._server_key is None:
            return None
        return await anyio.to_thread.run_sync(self._server_key)

    async def _verified(self) -> None:
        """Before the watches: connected, and the saved store checked to be the cluster's."""
        await self._connection.transport()
        if self._warm is not None:
            await self._warm.verify(await self._cluster_uid())

    async def _probe(self, timeout: float) -> None:  # noqa: ASYNC109 - the probe's own bound
        try:
            api = await self._connection.transport()
        except AdapterUnavailable as error:  # no transport: the probe is not answered
            raise ApiError(0, error.message) from error
        await api.probe(timeout)

    def _answers(self) -> int:
        made = self._connection.made
        return made.answers if made is not None else 0

    async def _cluster_uid(self) -> str:
        """The cluster's identity: the UID of its ``kube-system`` namespace."""
        path = api_path(None, "namespaces", "kube-system")
        body = await self._api.get(path, "identify the cluster")
        return str((body.get("metadata") or {}).get("uid") or "")

    @property
    def connected(self) -> bool:
        """The transport is made (a warm start may answer from its store before)."""
        return self._connection.made is not None

    @property
    def answering_before_connected(self) -> bool:
        """A warm start answering from its saved store while its connection is being made."""
        informer = self._informer
        return not self.connected and informer is not None and informer.staleness.serves_saved

    def start_report(self) -> dict[str, Any]:
        """How the cache started (``start``: cold, warm, relisted, discarded; ``replayed``)."""
        informer = self._informer
        if informer is None:
            return {"start": "none", "replayed": 0, "watches": {}}
        return informer.start_report()

    async def stop(self) -> None:
        """Stop the watches (the transport stays open: reads go to the API). Safe to repeat."""
        stack, self._stack, self._informer, self._warm = self._stack, None, None, None
        self._background = None
        if stack is not None:
            await stack.aclose()

    @contextlib.contextmanager
    def answering_from_saved(self) -> Iterator[None]:
        """Within the block, reads may answer from a warm start's saved cache at once.

        Only while every watch is caught up or holds a saved state confirmed within
        ``cache_max_staleness`` (see :attr:`Staleness.serves_saved`); otherwise reads wait as
        outside the block. Writes never run inside it.
        """
        token = _SAVED_OK.set(True)
        try:
            yield
        finally:
            _SAVED_OK.reset(token)

    def saved_confirms(self, not_before: datetime) -> bool:
        """A warm start's saved cache may answer now, confirmed at or after ``not_before``."""
        informer = self._informer
        return (
            informer is not None
            and informer.staleness.serves_saved
            and informer.staleness.confirmed_at() >= not_before
        )

    async def confirmed(self, not_before: datetime) -> Informer | None:
        """The cache once proved current at ``not_before`` or later, else ``None``.

        Proved within ``read_timeout`` (at the call, when ``not_before`` is later); ``None``:
        read the API directly.
        """
        informer = self._informer
        if informer is None:
            return None
        at = informer.clock.monotonic(not_before)
        staleness = informer.staleness
        if await staleness.confirm(at, self._config.read_timeout) and staleness.fresh:
            return informer
        self._raise_if_stale(informer)
        return None

    async def synced(self) -> Informer | None:
        """The cache when it can answer now, else ``None`` (read the API directly).

        A cache unconfirmed past ``cache_max_staleness`` never answers; when the API server
        does not answer its probe either, :class:`AdapterUnavailable` is raised at once.
        Inside :meth:`answering_from_saved`, a warm start's saved cache answers at once.
        """
        informer = self._informer
        if informer is None:
            return None
        if not informer.synced and _SAVED_OK.get() and informer.staleness.serves_saved:
            return informer
        if (informer.synced or await informer.wait_synced(self._config.read_timeout)) and (
            informer.staleness.fresh
        ):
            return informer
        self._raise_if_stale(informer)
        return None

    def _raise_if_stale(self, informer: Informer) -> None:
        error = informer.staleness.stale_error()
        if error is not None:
            raise self._errors.down(error.message, remedy=error.remedy, details=error.details)

    @contextlib.asynccontextmanager
    async def pod_watch(self) -> AsyncIterator[Informer]:
        """A synced pod watch for the block: the cache's when it runs, else one of its own.

        Raises :class:`AdapterUnavailable` when the pods cannot be listed within
        ``read_timeout`` (the last error of the watch says why).
        """
        informer = self._informer
        async with contextlib.AsyncExitStack() as stack:
            if informer is None:
                informer = Informer(
                    await self._connection.transport(),
                    kinds=("pods",),
                    watch_timeout=self._config.watch_timeout,
                )
                await stack.enter_async_context(informer.running())
            if not await informer.wait_synced(self._config.read_timeout):
                cause = informer.loops["pods"].last_error
                if isinstance(cause, ApiError):  # it answered: say what (a refused watch, say)
                    raise self._errors.unavailable(cause, "watch pods") from cause
                raise self._errors.down(f"cannot watch pods: {cause}")
            yield informer

    def force_relist(self) -> None:
        """Test hook: make the pod watch relist, as after a gap (subscribers see ``MISSED``)."""
        if self._informer is not None:
            self._informer.loops["pods"].request_relist()

    # -- write-through ----------------------------------------------------------------------------

    def remember(self, body: Mapping[str, Any]) -> None:
        """Write-through: what we just wrote is in the cache before its watch event."""
        if self._informer is not None and body:
            remember(self._informer, body)

    def forget_service(self, ns: str, name: str) -> None:
        """Write-through of a deleted Service: gone from the cache now."""
        if self._informer is not None:
            self._informer.services.remove(ns, name)

    def forget_claim(self, ns: str, volume_id: str) -> None:
        """Write-through of a deleted claim."""
        if self._informer is not None:
            self._informer.claims.remove(ns, volume_id)

    def deleting_namespace(self, facts: NamespaceFacts) -> None:
        """Write-through of a namespace deletion: the cache sees it terminating at once."""
        if self._informer is not None:
            self._informer.namespaces.terminating(facts)
