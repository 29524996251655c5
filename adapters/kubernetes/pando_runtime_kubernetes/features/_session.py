"""One cluster's session: its transport, its lean cache, and the reads and writes features share.

A :class:`ClusterSession` is what every feature of the adapter (bundles, volumes, logs, trial
runs, the edge, usage, capacity, events) is given: the one place that talks to one cluster. It
holds the :class:`~pando_runtime_kubernetes.KubeTransport` (made lazily from the
settings, so constructing an adapter does no I/O), the watch-fed :class:`Informer` while it runs,
and the per-namespace locks. Its reads answer from the cache when it is synced and from the API
otherwise; its writes retry a 403 that RBAC propagation can cause just after a RoleBinding is
written; every API error becomes the contract's error here, so features never see HTTP.

A session of a named cluster (``name``, as a multi-cluster adapter makes them) names that
cluster in the message and the details of every error it raises.

The session is what an :class:`~pando_runtime.plugin.ApiObserver` observes (``observe_api``):
it hands the observer, naming its cluster, to its transport (every call) and reports its
cache's size and open watches (``api_state``). It logs on ``pando_runtime.kubernetes.session``:
INFO when it connects, WARNING when it retries a write; and it counts the writes of a block
(:meth:`counting_writes`), which an apply reports.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from datetime import datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from pando_runtime import (
    AdapterFailed,
    AdapterUnavailable,
    ExecRequest,
    ExecSession,
    RateLimited,
)
from pando_runtime.plugin import NO_API_OBSERVER, ApiObserver, ApiState

from .._info import KubernetesConfig
from .._log import logger
from ..api._errors import ApiError
from ..api._paths import api_path, object_path
from ..api._transport import KubeTransport
from ..cache._informer import Informer
from ..cache._projections import (
    ClaimFacts,
    GatewayFacts,
    NamespaceFacts,
    PodFacts,
)
from ..cache._warm import DiskCache, open_warm
from ..cache._write_through import remember
from ._connect import build_transport, server_address
from ._fence_token import FenceToken, current_token, stamp_of, with_token
from ._session_errors import ClusterErrors, WriteConflict, is_conflict, named_namespaces
from ._session_reads import CachedReads
from ._session_streams import ChunkStream, SessionStreams
from ._session_writes import SessionWriter, counting_writes, wrote

__all__ = ["ClusterSession"]

T = TypeVar("T")

_LOG = logger("session")

_SAVED_OK: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "pando_kube_saved_ok", default=False
)
"""True inside :meth:`ClusterSession.answering_from_saved`: reads may use a warm start's saved
cache before the watches caught up (observe only; writes never decide from it)."""


class ClusterSession:
    """One cluster: its transport, cache and locks, and the operations every feature needs.

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
        # The session's parts, each a module of its own; the methods below delegate to them.
        self.errors = ClusterErrors(name, named_namespaces(config))
        self.reads = CachedReads(self)
        self.writer = SessionWriter(self.transport, self.errors, lambda: self.log_name)
        """Writes: the session's methods, and ``write_if`` (conditional) for features."""
        self.streams = SessionStreams(self.transport, self.errors, config.read_timeout)
        self._transport = transport
        self._connect = connect or (lambda: build_transport(config))
        self._transport_lock = anyio.Lock()
        self._informer: Informer | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._locks: dict[str, anyio.Lock] = {}
        self._observer: ApiObserver = NO_API_OBSERVER
        if transport is not None:
            self._adopt(transport)

    # -- observation --------------------------------------------------------------------------

    def observe_api(self, observer: ApiObserver) -> None:
        """Report every API call, the cache's size and the open watches to ``observer``."""
        self._observer = observer.bind(cluster=self.name) if self.name else observer
        self._observer.track(self)
        if self._transport is not None:
            self._transport.observer = self._observer

    def api_state(self) -> ApiState:
        """Objects in the cache and open watches now (by resource), for gauges."""
        informer, transport = self._informer, self._transport
        return ApiState(
            cached_objects=informer.cached_objects() if informer is not None else {},
            open_watches=dict(transport.open_watches) if transport is not None else {},
        )

    def _adopt(self, transport: KubeTransport) -> None:
        transport.observer = self._observer
        if self.name:
            transport.cluster = self.name

    @property
    def log_name(self) -> str | None:
        """The cluster's name in log records (``None`` when not known yet)."""
        return self.name or (self._transport.cluster if self._transport is not None else None)

    @staticmethod
    def counting_writes() -> contextlib.AbstractContextManager[list[int]]:
        """Count the writes made in this block (by this task): ``tally[0]`` at its end."""
        return counting_writes()

    # -- the connection -----------------------------------------------------------------------

    @property
    def api_calls(self) -> int:
        """API calls made so far (every request and every opened stream)."""
        return self._transport.calls if self._transport is not None else 0

    @property
    def api_retries(self) -> int:
        """Requests sent again after a 429 so far (as the server's ``Retry-After`` said)."""
        return self._transport.retries if self._transport is not None else 0

    @property
    def calls_by_kind(self) -> Mapping[str, int]:
        """API calls so far by method and kind (``"PATCH pods"``), for tests and benchmarks."""
        return dict(self._transport.calls_by_kind) if self._transport is not None else {}

    @property
    def cache(self) -> Informer | None:
        """The lean cache, while :meth:`start` has it running."""
        return self._informer

    def down(
        self,
        message: str,
        *,
        remedy: str | None = None,
        status: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> AdapterUnavailable:
        """:class:`AdapterUnavailable` with ``message``, naming this cluster when it has a name."""
        return self.errors.down(message, remedy=remedy, status=status, details=details)

    def unavailable(self, error: ApiError, what: str) -> AdapterUnavailable | RateLimited:
        """A read failed: the cluster cannot be read (never mistaken for an absent object)."""
        return self.errors.unavailable(error, what)

    def failed(self, error: ApiError, what: str) -> AdapterFailed | RateLimited:
        """A write failed (or was throttled: :class:`RateLimited` with the server's delay)."""
        return self.errors.failed(error, what)

    @contextlib.asynccontextmanager
    async def coordinating(self) -> AsyncIterator[None]:
        """The block's calls (a replica's Leases) never wait behind the apps' calls.

        See :meth:`KubeTransport.coordinating`.
        """
        api = await self.transport()
        with api.coordinating():
            yield

    async def transport(self) -> KubeTransport:
        """The transport, made on first use (a kubeconfig may run an exec plugin)."""
        if self._transport is None:
            async with self._transport_lock:
                if self._transport is None:
                    try:
                        transport = await anyio.to_thread.run_sync(self._connect)
                    except AdapterUnavailable as error:
                        if not self.name or error.details.get("cluster") == self.name:
                            raise
                        raise self.down(error.message, remedy=error.remedy) from error
                    except (OSError, ValueError) as error:  # Cluster.load reports the rest
                        raise self.down(
                            f"no usable Kubernetes configuration: {error}",
                            remedy="Set 'kubeconfig'/'context', or run inside a cluster.",
                        ) from error
                    self._adopt(transport)
                    self._transport = transport
                    _LOG.info(
                        "connected to cluster %s at %s",
                        transport.cluster or "(unnamed)",
                        server_address(transport.configuration.host),
                        extra={"cluster": transport.cluster},
                    )
        return self._transport

    async def start(self, collect: Callable[[tuple[str, str]], Awaitable[None]] | None) -> None:
        """Run the cluster-wide watches that feed the cache until :meth:`close`.

        ``collect`` is called (through the cache's work queue) for each ``(namespace,
        workload)`` whose pods changed.
        """
        api = await self.transport()
        stack = contextlib.AsyncExitStack()
        try:
            await self._start(api, stack, collect)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await stack.aclose()
            raise

    async def _start(
        self,
        api: KubeTransport,
        stack: contextlib.AsyncExitStack,
        collect: Callable[[tuple[str, str]], Awaitable[None]] | None,
    ) -> None:
        informer = Informer(
            api,
            watch_timeout=self.config.watch_timeout,
            collect=collect,
            probe=api.probe,
            probe_interval=self.config.cache_probe_interval,
            max_staleness=self.config.cache_max_staleness,
            answers=lambda: api.answers,
        )
        if self.config.cache_dir:
            disk = DiskCache(Path(self.config.cache_dir), self.name or api.cluster)
            await open_warm(stack, informer, disk, self._cluster_uid)
        await stack.enter_async_context(informer.running())
        self._stack, self._informer = stack, informer

    async def _cluster_uid(self) -> str:
        """The cluster's identity: the UID of its ``kube-system`` namespace."""
        body = await self.get(api_path(None, "namespaces", "kube-system"), "identify the cluster")
        return str((body.get("metadata") or {}).get("uid") or "")

    def start_report(self) -> dict[str, Any]:
        """How the cache started (``start``: cold, warm or relisted; events ``replayed``)."""
        informer = self._informer
        if informer is None:
            return {"start": "none", "replayed": 0, "watches": {}}
        return informer.start_report()

    async def stop(self) -> None:
        """Stop the watches (the transport stays open: reads go to the API). Safe to repeat."""
        stack, self._stack, self._informer = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def close(self) -> None:
        """Stop the watches and close the connection pools. Safe to call twice."""
        await self.stop()
        if self._transport is not None:
            self._transport.close()

    @contextlib.contextmanager
    def answering_from_saved(self) -> Iterator[None]:
        """Within the block, reads may answer from a warm start's saved cache at once.

        Only while every watch is caught up or holds a saved state confirmed within
        ``cache_max_staleness`` (see :attr:`Informer.serves_saved`); otherwise reads wait as
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
            informer is not None and informer.serves_saved and informer.confirmed_at() >= not_before
        )

    async def confirmed(self, not_before: datetime) -> Informer | None:
        """The cache once proved current at ``not_before`` or later, else ``None``.

        Proved within ``read_timeout`` (at the call, when ``not_before`` is later); ``None``:
        read the API directly.
        """
        informer = self._informer
        if informer is None:
            return None
        at = informer.monotonic(not_before)
        if await informer.confirm(at, self.config.read_timeout) and informer.fresh:
            return informer
        error = informer.stale_error()
        if error is not None:
            raise self.down(error.message, remedy=error.remedy, details=error.details)
        return None

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
                    await self.transport(),
                    kinds=("pods",),
                    watch_timeout=self.config.watch_timeout,
                )
                await stack.enter_async_context(informer.running())
            if not await informer.wait_synced(self.config.read_timeout):
                cause = informer.loops["pods"].last_error
                if isinstance(cause, ApiError):  # it answered: say what (a refused watch, say)
                    raise self.unavailable(cause, "watch pods") from cause
                raise self.down(f"cannot watch pods: {cause}")
            yield informer

    async def synced(self) -> Informer | None:
        """The cache when it can answer now, else ``None`` (read the API directly).

        A cache unconfirmed past ``cache_max_staleness`` never answers; when the API server
        does not answer its probe either, :class:`AdapterUnavailable` is raised at once.
        Inside :meth:`answering_from_saved`, a warm start's saved cache answers at once.
        """
        informer = self._informer
        if informer is None:
            return None
        if not informer.synced and _SAVED_OK.get() and informer.serves_saved:
            return informer
        if (informer.synced or await informer.wait_synced(self.config.read_timeout)) and (
            informer.fresh
        ):
            return informer
        error = informer.stale_error()
        if error is not None:
            raise self.down(error.message, remedy=error.remedy, details=error.details)
        return None

    def force_relist(self) -> None:
        """Test hook: make the pod watch relist, as after a gap (subscribers see ``MISSED``)."""
        if self._informer is not None:
            self._informer.loops["pods"].request_relist()

    def lock(self, ns: str) -> anyio.Lock:
        """The lock of one namespace: one writer of an app at a time in this process."""
        return self._locks.setdefault(ns, anyio.Lock())

    # -- calls ----------------------------------------------------------------------------------

    async def read(self, what: str, call: Callable[[KubeTransport], Awaitable[T]]) -> T:
        """Run a read; an API error is :class:`AdapterUnavailable` saying ``what`` failed."""
        api = await self.transport()
        try:
            return await call(api)
        except ApiError as error:
            raise self.unavailable(error, what) from error

    async def get(self, path: str, what: str, **query: Any) -> dict[str, Any]:
        """GET ``path``; any error is :class:`AdapterUnavailable`."""
        return await self.read(what, lambda api: api.get(path, **query))

    async def find(
        self, path: str, what: str, *, forbidden_is_absent: bool = False, **query: Any
    ) -> dict[str, Any] | None:
        """GET ``path``; ``None`` when it does not exist, other errors unavailable.

        ``forbidden_is_absent``: a refused read (403, as just after a namespace's RoleBinding
        is written) counts as absent too; the caller's create then settles it.
        """
        api = await self.transport()
        try:
            return await api.get(path, **query)
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND or (
                forbidden_is_absent and error.status == HTTPStatus.FORBIDDEN
            ):
                return None
            raise self.unavailable(error, what) from error

    async def status_of(self, path: str) -> int:
        """The status a GET of ``path`` gets (0: nothing answered, or no cluster to ask).

        For probing what a cluster serves (an API group, say), where the status is the answer.
        """
        try:
            api = await self.transport()
            await api.get(path)
        except ApiError as error:
            return error.status
        except AdapterUnavailable:
            return 0
        return int(HTTPStatus.OK)

    async def write(
        self,
        what: str,
        call: Callable[[KubeTransport], Awaitable[T]],
        *,
        retry_forbidden: bool = True,
    ) -> T:
        """A write; a 403 right after a namespace's RoleBinding is retried (see SessionWriter)."""
        return await self.writer.write(what, call, retry_forbidden=retry_forbidden)

    async def apply(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply ``body``; what the server returns is in the cache at once."""
        what = f"apply {body['kind']} {body['metadata']['name']}"
        path, body = object_path(body), with_token(body, creating=False)
        manager = self.config.field_manager
        result = await self.write(what, lambda api: api.apply(path, body, manager))
        self.remember(result)
        return result

    async def create(self, body: Mapping[str, Any], what: str | None = None) -> dict[str, Any]:
        """POST ``body``; :class:`AdapterFailed` when it fails (see :meth:`create_or_find`)."""
        what = what or f"create {body['kind']} {body['metadata']['name']}"
        path, body = object_path(body, named=False), with_token(body, creating=True)
        return await self.write(what, lambda api: api.request("POST", path, body=body))

    async def create_or_find(
        self, body: Mapping[str, Any], what: str, *, retry_forbidden: bool = True
    ) -> tuple[bool, dict[str, Any] | None]:
        """POST ``body``; when an object of its name exists already, that object instead.

        Returns ``(True, created)``, or ``(False, existing)`` where ``existing`` is ``None``
        when it was deleted between the refused create and the read. What was created is
        remembered; what existed is the caller's to judge (it may belong to something else).
        """
        path, body = object_path(body, named=False), with_token(body, creating=True)
        api = await self.transport()
        try:
            created = await self.write(
                what,
                lambda _: api.request("POST", path, body=body),
                retry_forbidden=retry_forbidden,
            )
        except AdapterFailed as failed:
            if failed.__cause__ is None or not is_conflict(failed.__cause__):
                raise
        else:
            self.remember(created)
            return True, created
        existing = await self.find(
            object_path(body), f"read {body['kind']} {body['metadata']['name']}"
        )
        return False, existing

    async def delete(
        self,
        ns: str | None,
        plural: str,
        name: str,
        group: str = "",
        *,
        grace: int | None = None,
        version: str | None = None,
    ) -> None:
        """Delete one object; one that is gone (or already going) is no error.

        ``version``: only that version of it (:class:`WriteConflict` when it changed). A
        member's delete of its app's namespace is made on the version that carries its
        stamp (:class:`NotOwner` when the stamp moved on): a stalled destroy cannot land.
        """
        what = f"delete {plural}/{name}"
        token = current_token()
        if (
            version is None
            and token is not None
            and (plural, name) == ("namespaces", token.namespace)
        ):
            for _ in range(3):  # the namespace changed otherwise (a label): read its stamp again
                with contextlib.suppress(WriteConflict):
                    version = await self._stamped_version(token, what)
                    await self._delete(ns, plural, name, group, grace, version)
                    return
            raise self.down(f"cannot {what}: it keeps changing", remedy="Destroy again.")
        await self._delete(ns, plural, name, group, grace, version)

    async def _delete(  # noqa: PLR0917 - delete's parts, once
        self,
        ns: str | None,
        plural: str,
        name: str,
        group: str,
        grace: int | None,
        version: str | None,
    ) -> None:
        api = await self.transport()
        query = {"gracePeriodSeconds": grace} if grace is not None else None
        body = {"preconditions": {"resourceVersion": version}} if version is not None else None
        try:
            result = await api.request(
                "DELETE", api_path(ns, plural, name, group), query=query, body=body
            )
        except ApiError as error:
            if version is not None and is_conflict(error):
                raise self.errors.conflict(error, f"delete {plural}/{name}", version) from error
            if error.status in (HTTPStatus.NOT_FOUND, HTTPStatus.CONFLICT):
                return
            raise self.failed(error, f"delete {plural}/{name}") from error
        wrote()
        if result.get("kind") == "Pod":
            self.remember(result)
        elif plural == "services" and ns and self._informer is not None:
            self._informer.services.remove(ns, name)  # write-through: gone from the cache now

    async def _stamped_version(self, token: FenceToken, what: str) -> str | None:
        """The namespace's version now, if it carries ``token``'s stamp (else NotOwner)."""
        body = await self.find(api_path(None, "namespaces", token.namespace), what)
        if body is None:
            return None
        stamp = stamp_of(body)
        if stamp != token.stamp:
            raise self.errors.fenced(stamp or "", what)
        return str((body.get("metadata") or {}).get("resourceVersion") or "") or None

    # -- write-through ----------------------------------------------------------------------------

    def remember(self, body: Mapping[str, Any]) -> None:
        """Write-through: what we just wrote is in the cache before its watch event."""
        if self._informer is not None and body:
            remember(self._informer, body)

    def forget_claim(self, ns: str, volume_id: str) -> None:
        """Write-through of a deleted claim."""
        if self._informer is not None:
            self._informer.claims.remove(ns, volume_id)

    def deleting_namespace(self, facts: NamespaceFacts) -> None:
        """Write-through of a namespace deletion: the cache sees it terminating at once."""
        if self._informer is not None:
            self._informer.namespaces.terminating(facts)

    # -- reads: the cache when synced, else the API (CachedReads) -------------------------------

    async def namespace(self, ns: str) -> NamespaceFacts | None:
        """A namespace's facts; one not made by us has no bundle id."""
        return await self.reads.namespace(ns)

    async def list_managed(self, ns: str, plural: str, what: str) -> list[dict[str, Any]]:
        """Our objects of a kind in ``ns``, read from the API (when the cache cannot answer)."""
        return await self.reads.list_managed(ns, plural, what)

    async def pods(self, ns: str) -> list[PodFacts]:
        """Our pods in ``ns``."""
        return await self.reads.pods(ns)

    async def gateways(self, ns: str) -> list[GatewayFacts]:
        """Our egress gateway pods in ``ns``."""
        return await self.reads.gateways(ns)

    async def services(self, ns: str) -> set[str]:
        """Names of our Services in ``ns``."""
        return await self.reads.services(ns)

    async def claims(self, ns: str) -> list[ClaimFacts]:
        """Our volume claims in ``ns``."""
        return await self.reads.claims(ns)

    async def wait_for(
        self,
        ns: str,
        check: Callable[[list[PodFacts]], T | None],
        timeout: float,  # noqa: ASYNC109 - a bound on polling, not a call timeout
    ) -> T | None:
        """Poll ``check`` on the namespace's pods (woken by the cache) until it answers."""
        return await self.reads.wait_for(ns, check, timeout, pods=self.pods)

    # -- streams: exec and logs (SessionStreams) ------------------------------------------------

    def exec(
        self, ns: str, pod: str, container: str | None, request: ExecRequest
    ) -> contextlib.AbstractAsyncContextManager[ExecSession]:
        """An exec session in a pod; API errors become the contract's errors."""
        return self.streams.exec(ns, pod, container, request)

    async def exec_output(
        self, ns: str, pod: str, container: str, command: tuple[str, ...]
    ) -> tuple[int | None, bytes, bytes]:
        """Run ``command`` to its end: exit code, stdout, stderr."""
        return await self.streams.exec_output(ns, pod, container, command)

    def stream(
        self,
        path: str,
        *,
        query: Mapping[str, Any],
        read_timeout: float,
        what: str,
        cut_is_end: bool = False,
    ) -> contextlib.AbstractAsyncContextManager[ChunkStream]:
        """A streaming GET (a log), failing only with the contract's errors.

        See :meth:`SessionStreams.stream`.
        """
        return self.streams.stream(
            path, query=query, read_timeout=read_timeout, what=what, cut_is_end=cut_is_end
        )

    async def read_log(self, ns: str, pod: str, container: str, limit: int) -> bytes:
        """The first ``limit`` bytes of a container's log (else AdapterUnavailable)."""
        return await self.streams.read_log(ns, pod, container, limit)
