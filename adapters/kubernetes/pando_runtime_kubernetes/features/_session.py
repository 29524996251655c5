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
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from datetime import datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
from anyio.abc import ByteReceiveStream
from kubernetes.config.config_exception import ConfigException

from pando_runtime import (
    AdapterFailed,
    AdapterUnavailable,
    ExecRequest,
    ExecSession,
    NotFound,
    RateLimited,
)
from pando_runtime.plugin import NO_API_OBSERVER, ApiObserver, ApiState

from .._info import KubernetesConfig
from .._log import logger
from .._names import LABEL_MANAGED_BY, LABEL_ROLE, MANAGED_BY, MANAGED_SELECTOR, ROLE_EGRESS_GATEWAY
from ..api._clusters import ApiRate, Cluster
from ..api._errors import ApiError
from ..api._transport import KubeTransport
from ..cache._informer import Informer
from ..cache._projections import (
    ClaimFacts,
    GatewayFacts,
    NamespaceFacts,
    PodFacts,
    project_claim,
    project_gateway,
    project_namespace,
    project_pod,
)
from ..cache._warm import SCHEMA, DiskCache, WarmCache, adapter_version

__all__ = ["ClusterSession", "api_path", "build_transport", "transport_to"]

T = TypeVar("T")

_LOG = logger("session")

_SAVED_OK: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "pando_kube_saved_ok", default=False
)
"""True inside :meth:`ClusterSession.answering_from_saved`: reads may use a warm start's saved
cache before the watches caught up (observe only; writes never decide from it)."""

_WRITES: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "pando_kubernetes_writes", default=None
)
"""The write tally of the current :meth:`ClusterSession.counting_writes` block, if any."""


def _server(host: str) -> str:
    """The API server's address as a log may say it: scheme, host and port, nothing else."""
    url = urllib.parse.urlsplit(host)
    return f"{url.scheme}://{url.hostname}{f':{url.port}' if url.port else ''}"


_OBJECT_PATHS = {
    "Namespace": ("namespaces", ""),
    "Secret": ("secrets", ""),
    "ServiceAccount": ("serviceaccounts", ""),
    "ConfigMap": ("configmaps", ""),
    "Service": ("services", ""),
    "ResourceQuota": ("resourcequotas", ""),
    "Pod": ("pods", ""),
    "NetworkPolicy": ("networkpolicies", "networking.k8s.io/v1"),
    "RoleBinding": ("rolebindings", "rbac.authorization.k8s.io/v1"),
    "PersistentVolumeClaim": ("persistentvolumeclaims", ""),
    "Deployment": ("deployments", "apps/v1"),
    "PodDisruptionBudget": ("poddisruptionbudgets", "policy/v1"),
}


def api_path(ns: str | None, plural: str, name: str | None = None, group: str = "") -> str:
    """The API path of a collection (``name`` unset) or of one object."""
    base = f"/apis/{group}" if group else "/api/v1"
    path = f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"
    return f"{path}/{name}" if name else path


def _object_path(body: Mapping[str, Any], *, named: bool = True) -> str:
    plural, group = _OBJECT_PATHS[body["kind"]]
    meta = body["metadata"]
    return api_path(meta.get("namespace"), plural, meta["name"] if named else None, group)


def transport_to(cluster: Cluster, config: KubernetesConfig) -> KubeTransport:
    """A transport to ``cluster`` (at its own API rate) with the settings' threads and timeouts."""
    return KubeTransport.for_cluster(
        cluster,
        max_threads=config.max_threads,
        max_streams=config.max_streams,
        connect_timeout=config.connect_timeout,
        read_timeout=config.read_timeout,
        rate_limit_wait=config.rate_limit_wait,
    )


def build_transport(config: KubernetesConfig) -> KubeTransport:
    """A transport to the cluster the settings name (reads the kubeconfig: blocking)."""
    rate = ApiRate(qps=config.api_qps, burst=config.api_burst)
    return transport_to(Cluster.load(config.kubeconfig, config.context, rate=rate), config)


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

    @contextlib.contextmanager
    def counting_writes(self) -> Iterator[list[int]]:
        """Count the writes made in this block (by this task): ``tally[0]`` at its end."""
        tally = [0]
        token = _WRITES.set(tally)
        try:
            yield tally
        finally:
            _WRITES.reset(token)

    @staticmethod
    def _wrote() -> None:
        tally = _WRITES.get()
        if tally is not None:
            tally[0] += 1

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

    def _where(self) -> str:
        return f"cluster {self.name}: " if self.name else ""

    def down(
        self,
        message: str,
        *,
        remedy: str | None = None,
        status: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> AdapterUnavailable:
        """:class:`AdapterUnavailable` with ``message``, naming this cluster when it has a name."""
        details = dict(details or {})
        if status is not None:
            details["status"] = status
        if self.name:
            details["cluster"] = self.name
        return AdapterUnavailable(f"{self._where()}{message}", remedy=remedy, details=details)

    def unavailable(self, error: ApiError, what: str) -> AdapterUnavailable | RateLimited:
        """A read failed: the cluster cannot be read (never mistaken for an absent object).

        Throttled past ``rate_limit_wait``: :class:`RateLimited` with the server's delay.
        """
        if error.status == HTTPStatus.TOO_MANY_REQUESTS:
            return self._throttled(error, what)
        return self.down(f"cannot {what}: {error.message}", status=error.status)

    def _throttled(self, error: ApiError, what: str) -> RateLimited:
        return RateLimited(
            f"{self._where()}the API server throttled {what}: {error.message}",
            retry_after=error.retry_after,
            details=self._details(error),
        )

    def failed(self, error: ApiError, what: str) -> AdapterFailed | RateLimited:
        """A write failed (or was throttled: :class:`RateLimited` with the server's delay)."""
        if error.status == HTTPStatus.TOO_MANY_REQUESTS:
            return self._throttled(error, what)
        return AdapterFailed(
            f"{self._where()}cannot {what}: {error.message}", details=self._details(error)
        )

    def _details(self, error: ApiError) -> dict[str, Any]:
        details: dict[str, Any] = {"status": error.status}
        if self.name:
            details["cluster"] = self.name
        return details

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
                    except (ConfigException, OSError, ValueError) as error:
                        raise self.down(
                            f"no usable Kubernetes configuration: {error}",
                            remedy="Set 'kubeconfig'/'context', or run inside a cluster.",
                        ) from error
                    self._adopt(transport)
                    self._transport = transport
                    _LOG.info(
                        "connected to cluster %s at %s",
                        transport.cluster or "(unnamed)",
                        _server(transport.configuration.host),
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
        )
        if self.config.cache_dir:
            disk = DiskCache(Path(self.config.cache_dir), self.name or api.cluster)
            await anyio.to_thread.run_sync(disk.open)
            stack.callback(disk.close)
            identity = {
                "schema": SCHEMA,
                "adapter": adapter_version(),
                "cluster_uid": await self._cluster_uid(),
            }
            state = await anyio.to_thread.run_sync(lambda: disk.load(identity))
            if state is not None and set(state.versions) >= set(informer.loops):
                informer.resume(state)
            await stack.enter_async_context(WarmCache(disk, informer).running())
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
                raise self.down(f"cannot watch pods: {informer.loops['pods'].last_error}")
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
        """A write; a 403 right after a namespace's RoleBinding is retried (RBAC caches).

        ``retry_forbidden=False``: a 403 is final (a cluster-wide write no RoleBinding grants).
        """
        api = await self.transport()
        delay = 0.1
        for attempt in range(8):
            try:
                result = await call(api)
            except ApiError as error:
                retry = retry_forbidden and error.status == HTTPStatus.FORBIDDEN and attempt < 7  # noqa: PLR2004
                if not retry:
                    raise self.failed(error, what) from error
            else:
                self._wrote()
                return result
            _LOG.warning(
                "%s was refused (403), as just after a RoleBinding is written; retry %d in %.1f s",
                what,
                attempt + 1,
                delay,
                extra={"cluster": self.log_name, "status": 403, "attempt": attempt + 1},
            )
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")  # pragma: no cover

    async def apply(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply ``body``; what the server returns is in the cache at once."""
        what = f"apply {body['kind']} {body['metadata']['name']}"
        path = _object_path(body)
        manager = self.config.field_manager
        result = await self.write(what, lambda api: api.apply(path, body, manager))
        self.remember(result)
        return result

    async def create(self, body: Mapping[str, Any], what: str | None = None) -> dict[str, Any]:
        """POST ``body``; :class:`AdapterFailed` when it fails (see :meth:`create_or_find`)."""
        what = what or f"create {body['kind']} {body['metadata']['name']}"
        path = _object_path(body, named=False)
        return await self.write(what, lambda api: api.request("POST", path, body=body))

    async def create_or_find(
        self, body: Mapping[str, Any], what: str, *, retry_forbidden: bool = True
    ) -> tuple[bool, dict[str, Any] | None]:
        """POST ``body``; when an object of its name exists already, that object instead.

        Returns ``(True, created)``, or ``(False, existing)`` where ``existing`` is ``None``
        when it was deleted between the refused create and the read. What was created is
        remembered; what existed is the caller's to judge (it may belong to something else).
        """
        path = _object_path(body, named=False)
        api = await self.transport()
        try:
            created = await self.write(
                what,
                lambda _: api.request("POST", path, body=body),
                retry_forbidden=retry_forbidden,
            )
        except AdapterFailed as failed:
            if failed.__cause__ is None or not _conflict(failed.__cause__):
                raise
        else:
            self.remember(created)
            return True, created
        existing = await self.find(
            _object_path(body), f"read {body['kind']} {body['metadata']['name']}"
        )
        return False, existing

    async def create_pod(
        self,
        build: Callable[[str | None], dict[str, Any]],
        replaces: str | None,
        *,
        twin: Callable[[Mapping[str, Any]], bool],
        what: str,
    ) -> str:
        """Create the pod ``build(replaces)`` makes (its name derives from ``replaces``).

        Two writers of one state derive one name: the API server refuses the second
        create (409), and an existing pod of that name is adopted when ``twin`` says it
        runs what this one would. One that ended or is leaving holds the name: the next
        pod replaces it. Returns the pod's name.
        """
        for _ in range(3):
            body = build(replaces)
            name = str(body["metadata"]["name"])
            created, existing = await self.create_or_find(body, what)
            if created:
                return name
            if existing is None:
                continue  # deleted meanwhile: the name is free again
            if twin(existing):
                self.remember(existing)
                return name
            replaces = str((existing.get("metadata") or {}).get("uid") or name)
        raise AdapterFailed(
            f"cannot name a pod to {what}: its names keep being taken",
            remedy="Apply again.",
            details={"pod": name},
        )

    async def delete(
        self, ns: str | None, plural: str, name: str, group: str = "", *, grace: int | None = None
    ) -> None:
        """Delete one object; one that is gone (or already going) is no error."""
        api = await self.transport()
        query = {"gracePeriodSeconds": grace} if grace is not None else None
        try:
            result = await api.request("DELETE", api_path(ns, plural, name, group), query=query)
        except ApiError as error:
            if error.status in (HTTPStatus.NOT_FOUND, HTTPStatus.CONFLICT):
                return
            raise self.failed(error, f"delete {plural}/{name}") from error
        self._wrote()
        if result.get("kind") == "Pod":
            self.remember(result)
        elif plural == "services" and ns and self._informer is not None:
            self._informer.services.remove(ns, name)  # write-through: gone from the cache now

    # -- write-through ----------------------------------------------------------------------------

    def remember(self, body: Mapping[str, Any]) -> None:
        """Write-through: what we just wrote is in the cache before its watch event."""
        informer = self._informer
        if informer is None or not body:
            return
        kind = body.get("kind")
        if kind == "Pod":
            facts = project_pod(body)
            if facts is not None:
                informer.pods.put(facts)
            else:
                gateway = project_gateway(body)
                if gateway is not None:
                    informer.gateways.put(gateway)
        elif kind == "Namespace":
            informer.namespaces.put(project_namespace(body))
        elif kind == "Service":
            meta = body.get("metadata") or {}
            informer.services.put(meta.get("namespace", ""), meta.get("name", ""))
        elif kind == "PersistentVolumeClaim":
            claim = project_claim(body)
            if claim is not None:
                informer.claims.put(claim)

    def forget_claim(self, ns: str, volume_id: str) -> None:
        """Write-through of a deleted claim."""
        if self._informer is not None:
            self._informer.claims.remove(ns, volume_id)

    def deleting_namespace(self, facts: NamespaceFacts) -> None:
        """Write-through of a namespace deletion: the cache sees it terminating at once."""
        if self._informer is not None:
            self._informer.namespaces.terminating(facts)

    # -- reads: the cache when synced, else the API -------------------------------------------

    async def namespace(self, ns: str) -> NamespaceFacts | None:
        """A namespace's facts; one not made by us has no bundle id."""
        informer = await self.synced()
        if informer is not None:
            return informer.namespaces.by_name.get(ns)
        body = await self.find(api_path(None, "namespaces", ns), f"read namespace {ns}")
        if body is None:
            return None
        if (body.get("metadata", {}).get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
            return NamespaceFacts(ns, None, (), digest=None, terminating=False, version=0)
        return project_namespace(body)

    async def list_managed(self, ns: str, plural: str, what: str) -> list[dict[str, Any]]:
        """Our objects of a kind in ``ns``, read from the API (when the cache cannot answer)."""
        body = await self.get(api_path(ns, plural), what, labelSelector=MANAGED_SELECTOR)
        return list(body.get("items") or ())

    async def pods(self, ns: str) -> list[PodFacts]:
        """Our pods in ``ns``."""
        informer = await self.synced()
        if informer is not None:
            return informer.pods.pods(ns)
        items = await self.list_managed(ns, "pods", f"list pods of {ns}")
        return [f for f in map(project_pod, items) if f is not None]

    async def gateways(self, ns: str) -> list[GatewayFacts]:
        """Our egress gateway pods in ``ns``."""
        informer = await self.synced()
        if informer is not None:
            return informer.gateways.gateways(ns)
        body = await self.get(
            api_path(ns, "pods"),
            f"list the egress gateway of {ns}",
            labelSelector=f"{MANAGED_SELECTOR},{LABEL_ROLE}={ROLE_EGRESS_GATEWAY}",
        )
        return [f for f in map(project_gateway, body.get("items") or ()) if f is not None]

    async def services(self, ns: str) -> set[str]:
        """Names of our Services in ``ns``."""
        informer = await self.synced()
        if informer is not None:
            return set(informer.services.names(ns))
        items = await self.list_managed(ns, "services", f"list services of {ns}")
        return {(i.get("metadata") or {}).get("name", "") for i in items}

    async def claims(self, ns: str) -> list[ClaimFacts]:
        """Our volume claims in ``ns``."""
        informer = await self.synced()
        if informer is not None:
            return informer.claims.claims(ns)
        items = await self.list_managed(ns, "persistentvolumeclaims", f"list the volumes of {ns}")
        return [f for f in map(project_claim, items) if f is not None]

    async def wait_for(
        self,
        ns: str,
        check: Callable[[list[PodFacts]], T | None],
        timeout: float,  # noqa: ASYNC109 - a bound on polling, not a call timeout
    ) -> T | None:
        """Poll ``check`` on the namespace's pods (woken by the cache) until it answers."""
        with anyio.move_on_after(timeout):
            while True:
                result = check(await self.pods(ns))
                if result is not None:
                    return result
                informer = self._informer
                if informer is not None and informer.synced:
                    with anyio.move_on_after(1.0):
                        await informer.pods.changed.wait()
                else:
                    await anyio.sleep(0.5)
        return None

    # -- streams: exec and logs ------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def exec(
        self, ns: str, pod: str, container: str | None, request: ExecRequest
    ) -> AsyncIterator[ExecSession]:
        """An exec session in a pod; API errors become the contract's errors."""
        api = await self.transport()
        try:
            async with api.exec(ns, pod, container, request) as session:
                yield session
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND:
                raise NotFound(f"pod {pod} is gone", details={"pod": pod}) from error
            raise self.failed(error, f"exec in pod {pod}") from error

    async def exec_output(
        self, ns: str, pod: str, container: str, command: tuple[str, ...]
    ) -> tuple[int | None, bytes, bytes]:
        """Run ``command`` to its end: exit code, stdout, stderr."""
        outputs: dict[str, bytes] = {}
        async with self.exec(ns, pod, container, ExecRequest(command=command)) as session:

            async def collect(name: str, stream: ByteReceiveStream) -> None:
                outputs[name] = b"".join([chunk async for chunk in stream])

            async with anyio.create_task_group() as group:
                group.start_soon(collect, "out", session.stdout)
                group.start_soon(collect, "err", session.stderr)
            code = await session.wait()
        return code, outputs["out"], outputs["err"]

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        query: Mapping[str, Any],
        read_timeout: float,
        what: str,
        cut_is_end: bool = False,
    ) -> AsyncIterator[ChunkStream]:
        """A streaming GET (a log), failing only with the contract's errors.

        :class:`NotFound` when the object is gone; :class:`AdapterUnavailable` (or
        :class:`RateLimited`) for any other failure. ``cut_is_end``: a connection that ends
        with no answer (a timeout, a kubelet restart), while open or while opening, ends the
        stream quietly, as the server's own end would; the caller decides whether to reopen.
        """
        api = await self.transport()
        async with contextlib.AsyncExitStack() as stack:
            response: ChunkStream
            try:
                response = await stack.enter_async_context(
                    api.stream(path, query=query, read_timeout=read_timeout)
                )
            except ApiError as error:
                self._stream_failed(error, path, what, cut_is_end=cut_is_end)
                response = _ENDED  # opened with no answer: ended before its first byte
            try:
                yield response
            except ApiError as error:  # from the stream's receive, in the caller's block
                self._stream_failed(error, path, what, cut_is_end=cut_is_end)

    def _stream_failed(self, error: ApiError, path: str, what: str, *, cut_is_end: bool) -> None:
        """Raise the contract's error for a failed stream, unless a cut is its end."""
        if error.status == HTTPStatus.NOT_FOUND:
            raise NotFound(f"cannot {what}: it is gone", details={"path": path}) from error
        if not (cut_is_end and error.status == 0):
            raise self.unavailable(error, what) from error

    async def read_log(self, ns: str, pod: str, container: str, limit: int) -> bytes:
        """The first ``limit`` bytes of a container's log.

        Raises :class:`AdapterUnavailable` (or :class:`RateLimited`) when it cannot be read,
        the pod gone included (its log is unknown, not empty).
        """
        parts: list[bytes] = []
        size = 0
        what = f"read the log of {pod}"
        try:
            async with self.stream(
                api_path(ns, "pods", pod) + "/log",
                query={"container": container, "limitBytes": limit},
                read_timeout=self.config.read_timeout,
                what=what,
            ) as response:
                while size < limit and (chunk := await response.receive()):
                    parts.append(chunk)
                    size += len(chunk)
        except NotFound as gone:
            raise self.down(f"cannot {what}: it is gone", status=HTTPStatus.NOT_FOUND) from gone
        return b"".join(parts)[:limit]


class ChunkStream(Protocol):
    """What :meth:`ClusterSession.stream` yields: chunks, ``b""`` at the end."""

    async def receive(self) -> bytes:
        """The next chunk; ``b""`` at the end of the stream."""
        ...


class _Ended:
    """A stream that has ended before its first byte."""

    async def receive(self) -> bytes:
        return b""


_ENDED = _Ended()


def _conflict(error: BaseException) -> bool:
    """The API refused a create because the object exists (409)."""
    return isinstance(error, ApiError) and error.status == HTTPStatus.CONFLICT
