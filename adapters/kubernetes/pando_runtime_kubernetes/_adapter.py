"""The Kubernetes adapter: one namespace per app, bare pods, a watch-fed lean cache.

Use it as ``async with KubernetesAdapter(config) as runtime:``: the block runs
the cluster-wide watches that feed the lean cache (so ``observe`` costs no API
call and a re-apply writes nothing), all in one task group that ends with the
block. Without the block every method still works, reading the API directly.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, ClassVar, Self, TypeVar

import anyio
import anyio.to_thread
from anyio.abc import ByteReceiveStream
from kubernetes.config.config_exception import ConfigException

from pando_runtime import (
    AdapterFailed,
    AdapterUnavailable,
    BundleEvent,
    BundleEventKind,
    BundleHandle,
    BundlePlan,
    BundleRef,
    Capacity,
    CapacityExceeded,
    DestroyOptions,
    ExecRequest,
    ExecSession,
    Fit,
    ImageDelivery,
    IsolationClass,
    IteratorByteStream,
    LogOptions,
    NotFound,
    ObservedBundle,
    ObservedVolume,
    ObservedWorkload,
    RateLimited,
    RuntimeAdapter,
    RuntimeCapabilities,
    Upstream,
    WorkloadPlan,
    WorkloadRef,
    bundle_event_channel,
    check_plan,
    raise_problems,
    scoped_read,
    validate_exec_request,
)

from . import _objects as objects
from ._cache import (
    ClaimFacts,
    Informer,
    NamespaceFacts,
    PodFacts,
    bundle_workloads,
    newest,
    project_claim,
    project_namespace,
    project_pod,
)
from ._canary import CanaryOps
from ._capacity import NodeRoom, node_rooms
from ._client import ApiError, KubeTransport
from ._clusters import ApiRate, Cluster
from ._edge import EdgeOps
from ._info import DESCRIPTION, KubernetesConfig
from ._names import (
    KEY_SECRET,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    MANAGED_SELECTOR,
    PULL_SECRET,
    configmap_name,
    env_secret_name,
    namespace_for,
)
from ._trial import TrialOps
from ._usage import UsageOps
from ._volumes import VolumeOps, volume_handle

__all__ = ["KubernetesAdapter"]

T = TypeVar("T")
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def _path(ns: str | None, plural: str, name: str | None = None, group: str = "") -> str:
    base = f"/apis/{group}" if group else "/api/v1"
    path = f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"
    return f"{path}/{name}" if name else path


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


def _object_path(body: Mapping[str, Any], *, named: bool = True) -> str:
    plural, group = _OBJECT_PATHS[body["kind"]]
    meta = body["metadata"]
    return _path(meta.get("namespace"), plural, meta["name"] if named else None, group)


def _unavailable(error: ApiError, what: str) -> AdapterUnavailable:
    return AdapterUnavailable(f"cannot {what}: {error.message}", details={"status": error.status})


def _failed(error: ApiError, what: str) -> AdapterFailed | RateLimited:
    if error.status == HTTPStatus.TOO_MANY_REQUESTS:
        return RateLimited(
            f"the API server throttled {what}: {error.message}", retry_after=error.retry_after
        )
    return AdapterFailed(f"cannot {what}: {error.message}", details={"status": error.status})


def _observed(name: str, pod: PodFacts | None) -> ObservedWorkload:
    if pod is None:
        return ObservedWorkload(name=name, present=False, running=False)
    return ObservedWorkload(
        name=name,
        present=True,
        running=bool(pod.running),
        instance_id=pod.uid,
        image_digest=pod.image_id,
        started_at=pod.started(),
        exit_code=pod.exit_code if pod.ended else None,
        restart_count=0,  # restartPolicy Never: a pod is never restarted in place
        healthy=pod.ready if pod.has_probe else None,
        oom_killed=bool(pod.oom),
    )


def _timestamp_key(stamp: bytes) -> tuple[bytes, bytes]:
    """An RFC 3339 nano timestamp as a sortable key (the server trims trailing zeros)."""
    head, _, fraction = stamp.rstrip(b"Z").partition(b".")
    return head, fraction.ljust(9, b"0")


class KubernetesAdapter(VolumeOps, TrialOps, EdgeOps, CanaryOps, UsageOps, RuntimeAdapter):
    """Runs each app in its own Kubernetes namespace as bare pods."""

    kind: ClassVar[str] = "kubernetes"
    description: ClassVar[str] = DESCRIPTION
    Config: ClassVar[type[Any]] = KubernetesConfig
    config: KubernetesConfig

    def __init__(
        self,
        config: Mapping[str, Any] | KubernetesConfig | None = None,
        *,
        transport: KubeTransport | None = None,
    ) -> None:
        super().__init__(config)
        self._transport = transport
        self._transport_lock = anyio.Lock()
        self._informer: Informer | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._keys: dict[str, bytes] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._settings = objects.PodSettings(self.config.runtime_class, self.config.node_selector)
        self._retained: set[tuple[str, str]] = set()
        """Volumes (namespace, volume id) already set to Retain by this process."""
        self._edge_keys: dict[str, bytes] = {}
        self._policy_verified = False
        """The NetworkPolicy canary passed in this process."""

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def api_calls(self) -> int:
        """API calls made so far (every request and every opened stream)."""
        return self._transport.calls if self._transport is not None else 0

    @property
    def cache(self) -> Informer | None:
        """The lean cache, while the adapter runs as ``async with``."""
        return self._informer

    def _build_transport(self) -> KubeTransport:
        c = self.config
        rate = ApiRate(qps=c.api_qps, burst=c.api_burst)
        cluster = Cluster.load(c.kubeconfig, c.context, rate=rate)
        return KubeTransport.for_cluster(
            cluster,
            max_threads=c.max_threads,
            max_streams=c.max_streams,
            connect_timeout=c.connect_timeout,
            read_timeout=c.read_timeout,
        )

    async def _api(self) -> KubeTransport:
        if self._transport is None:
            async with self._transport_lock:
                if self._transport is None:
                    try:
                        # Loading a kubeconfig reads files and may run an exec plugin.
                        self._transport = await anyio.to_thread.run_sync(self._build_transport)
                    except (ConfigException, OSError, ValueError) as error:
                        raise AdapterUnavailable(
                            f"no usable Kubernetes configuration: {error}",
                            remedy="Set 'kubeconfig'/'context', or run inside a cluster.",
                        ) from error
        return self._transport

    async def __aenter__(self) -> Self:
        api = await self._api()
        stack = contextlib.AsyncExitStack()
        informer = Informer(
            api, watch_timeout=self.config.watch_timeout, collect=self._collect_superseded
        )
        await stack.enter_async_context(informer.running())
        self._stack, self._informer = stack, informer
        # What the cluster offers is learnt on connecting, not charged to a first apply.
        await self._probe_metrics_api()
        return self

    async def aclose(self) -> None:
        """Stop the watches and close the connection pools. Safe to call twice."""
        stack, self._stack, self._informer = self._stack, None, None
        if stack is not None:
            await stack.aclose()
        if self._transport is not None:
            self._transport.close()

    async def _synced(self) -> Informer | None:
        """The cache when it can answer now, else ``None`` (read the API directly)."""
        informer = self._informer
        if informer is None:
            return None
        if informer.synced or await informer.wait_synced(self.config.read_timeout):
            return informer
        return None

    async def _read(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except ApiError as error:
            raise _unavailable(error, what) from error

    async def _write(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """A write; a 403 right after a namespace's RoleBinding is retried (RBAC caches)."""
        delay = 0.1
        for attempt in range(8):
            try:
                return await call()
            except ApiError as error:
                retry = error.status == HTTPStatus.FORBIDDEN and attempt < 7  # noqa: PLR2004
                if not retry:
                    raise _failed(error, what) from error
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- identity & health ----------------------------------------------------------------

    async def capabilities(self) -> RuntimeCapabilities:
        """What this adapter builds today; the rest is declared unsupported, never faked."""
        return RuntimeCapabilities(
            isolation_class=IsolationClass.CONTAINER,
            persistent_volumes=True,
            exec=True,
            multiple_workloads=True,
            carried_files=True,
            private_network=self.config.trust_network_policy or self._policy_verified,
            resource_limits=True,
            reports_usage=await self._probe_metrics_api(),
            bundle_events=True,
            edge=True,
            egress_restriction=False,
            trial_run=True,
            port_observation=True,
            write_observation=False,  # a trial's writes are not observed
            image_delivery=(ImageDelivery.REGISTRY,),
        )

    async def health_check(self) -> None:
        """The API answers, the RuntimeClass exists, NetworkPolicy is enforced (or trusted).

        Also asks again whether the metrics API is served (``reports_usage``).
        """
        api = await self._api()
        await self._read("reach the API server", lambda: api.get("/version"))
        await self._probe_metrics_api(fresh=True)
        if self.config.runtime_class:
            name = self.config.runtime_class
            try:
                await api.get(_path(None, "runtimeclasses", name, "node.k8s.io/v1"))
            except ApiError as error:
                raise AdapterUnavailable(
                    f"RuntimeClass {name!r} is not usable: {error.message}",
                    remedy="Install the RuntimeClass or unset 'runtime_class'.",
                ) from error
        if not (self.config.trust_network_policy or self._policy_verified):
            problem = await self._network_policy_problem()
            if problem is not None:
                raise AdapterUnavailable(
                    problem,
                    remedy="Run a CNI that enforces NetworkPolicy; on a cluster known to "
                    "enforce it, 'trust_network_policy: true' skips the canary.",
                )
            self._policy_verified = True

    # -- reading state --------------------------------------------------------------------

    async def _namespace(self, ns: str) -> NamespaceFacts | None:
        informer = await self._synced()
        if informer is not None:
            return informer.namespaces.by_name.get(ns)
        api = await self._api()
        try:
            body = await api.get(_path(None, "namespaces", ns))
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return None
            raise _unavailable(error, f"read namespace {ns}") from error
        if (body.get("metadata", {}).get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
            return NamespaceFacts(ns, None, (), digest=None, terminating=False, version=0)
        return project_namespace(body)

    async def _list_managed(self, ns: str, plural: str, what: str) -> list[dict[str, Any]]:
        """Our objects of a kind in ``ns``, read from the API (when the cache cannot answer)."""
        api = await self._api()
        body = await self._read(
            what, lambda: api.get(_path(ns, plural), labelSelector=MANAGED_SELECTOR)
        )
        return list(body.get("items") or ())

    async def _pods(self, ns: str) -> list[PodFacts]:
        informer = await self._synced()
        if informer is not None:
            return informer.pods.pods(ns)
        items = await self._list_managed(ns, "pods", f"list pods of {ns}")
        return [f for f in map(project_pod, items) if f is not None]

    async def _services(self, ns: str) -> set[str]:
        informer = await self._synced()
        if informer is not None:
            return set(informer.services.names(ns))
        items = await self._list_managed(ns, "services", f"list services of {ns}")
        return {(i.get("metadata") or {}).get("name", "") for i in items}

    async def _claims(self, ns: str) -> list[ClaimFacts]:
        informer = await self._synced()
        if informer is not None:
            return informer.claims.claims(ns)
        items = await self._list_managed(ns, "persistentvolumeclaims", f"list the volumes of {ns}")
        return [f for f in map(project_claim, items) if f is not None]

    def _remember_claim(self, body: Mapping[str, Any] | None, ns: str, volume_id: str) -> None:
        """Write-through for claims: ``None`` forgets one."""
        informer = self._informer
        if informer is None:
            return
        if body is None:
            informer.claims.remove(ns, volume_id)
            return
        facts = project_claim(body)
        if facts is not None:
            informer.claims.put(facts)

    def _remember(self, body: Mapping[str, Any]) -> None:
        """Write-through: what we just wrote is in the cache before its watch event."""
        informer = self._informer
        if informer is None or not body:
            return
        kind = body.get("kind")
        if kind == "Pod":
            facts = project_pod(body)
            if facts is not None:
                informer.pods.put(facts)
        elif kind == "Namespace":
            informer.namespaces.put(project_namespace(body))
        elif kind == "Service":
            meta = body.get("metadata") or {}
            informer.services.put(meta.get("namespace", ""), meta.get("name", ""))
        elif kind == "PersistentVolumeClaim":
            claim = project_claim(body)
            if claim is not None:
                informer.claims.put(claim)

    async def observe(self, ref: BundleRef) -> ObservedBundle:
        """The bundle as the cache (or the API) sees it; never remediates."""
        ns = namespace_for(ref.bundle_id)
        informer = await self._synced()
        if informer is None:
            return await self._observe(ref, ns)
        kept = informer.observed.get(ns)
        if kept is not None and kept.bundle_id == ref.bundle_id:
            return kept  # type: ignore[no-any-return]
        since = informer.observed.changes
        observed = await self._observe(ref, ns)
        informer.observed.keep(ns, observed, since)
        return observed

    async def _observe(self, ref: BundleRef, ns: str) -> ObservedBundle:
        facts = await self._namespace(ns)
        if facts is None or facts.terminating or facts.bundle_id != ref.bundle_id:
            return ObservedBundle(bundle_id=ref.bundle_id, exists=False)
        volumes = tuple(
            ObservedVolume(
                volume_id=c.volume_id,
                present=not c.deleting,
                handle=volume_handle(ns, c.volume_id, ref.bundle_id),
            )
            for c in sorted(await self._claims(ns), key=lambda c: c.volume_id)
        )
        if facts.volumes_only:
            return ObservedBundle(bundle_id=ref.bundle_id, exists=False, volumes=volumes)
        pods = await self._pods(ns)
        workloads = tuple(_observed(name, pod) for name, pod in bundle_workloads(facts, pods))
        return ObservedBundle(
            bundle_id=ref.bundle_id, exists=True, workloads=workloads, volumes=volumes
        )

    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        """``http://<workload>.<namespace>.svc.<cluster domain>:<port>``, computed."""
        host = f"{ref.workload}.{namespace_for(ref.bundle_id)}.svc.{self.config.cluster_domain}"
        return Upstream(url=f"http://{host}:{port}", pool_key=f"{host}:{port}")

    # -- apply ----------------------------------------------------------------------------

    def _lock(self, ns: str) -> anyio.Lock:
        return self._locks.setdefault(ns, anyio.Lock())

    async def _ensure_namespace(
        self,
        ns: str,
        plan: BundlePlan,
        facts: NamespaceFacts | None,
        *,
        volumes_only: bool = False,
    ) -> NamespaceFacts:
        if facts is not None:
            self._check_owner(ns, plan.bundle_id, facts)
            return facts
        api = await self._api()
        body = objects.namespace(ns, plan, volumes_only=volumes_only)
        try:
            created = await api.request("POST", _path(None, "namespaces"), body=body)
        except ApiError as error:
            if error.status != HTTPStatus.CONFLICT:
                raise _failed(error, f"create namespace {ns}") from error
            existing = await self._read(
                f"read namespace {ns}", lambda: api.get(_path(None, "namespaces", ns))
            )
            labels = (existing.get("metadata") or {}).get("labels") or {}
            found = project_namespace(existing)
            if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
                found.bundle_id = None
            self._check_owner(ns, plan.bundle_id, found)
            self._remember(existing)
            return found
        self._remember(created)
        self._keys.pop(ns, None)  # a new namespace never has an old key
        return project_namespace(created)

    @staticmethod
    def _check_owner(ns: str, bundle_id: str, facts: NamespaceFacts) -> None:
        if facts.bundle_id != bundle_id:
            raise AdapterFailed(
                f"namespace {ns} exists and belongs to something else",
                remedy="Remove or rename that namespace, or use another bundle id.",
                details={"namespace": ns},
            )
        if facts.terminating:
            raise AdapterFailed(
                f"namespace {ns} is being deleted",
                remedy="Wait until it is gone, then apply again.",
                details={"namespace": ns},
            )

    async def _plan_key(self, ns: str, bundle_id: str, *, fresh: bool) -> bytes:
        """The per-app HMAC key: remembered, read once per process, or made.

        ``fresh``: the namespace was just created, so there is nothing to read.
        """
        if ns in self._keys:
            return self._keys[ns]
        api = await self._api()
        path = _path(ns, "secrets", KEY_SECRET)
        try:
            if fresh:
                raise ApiError(HTTPStatus.NOT_FOUND, "new namespace")  # noqa: TRY301 - same path as a 404
            body = await api.get(path)
        except ApiError as error:
            if error.status not in (HTTPStatus.NOT_FOUND, HTTPStatus.FORBIDDEN):
                raise _unavailable(error, f"read the plan key of {ns}") from error
            key = secrets.token_bytes(32)
            made = objects.key_secret(ns, bundle_id, key)
            try:
                await self._create(made, f"create the plan key of {ns}")
            except AdapterFailed as failed:
                if failed.details.get("status") != HTTPStatus.CONFLICT:
                    raise
                body = await self._read("read the plan key", lambda: api.get(path))
                key = base64.b64decode(body["data"][objects.KEY_FIELD])
        else:
            key = base64.b64decode(body["data"][objects.KEY_FIELD])
        self._keys[ns] = key
        return key

    async def _apply_object(self, body: Mapping[str, Any]) -> dict[str, Any]:
        api = await self._api()
        what = f"apply {body['kind']} {body['metadata']['name']}"
        result = await self._write(
            what, lambda: api.apply(_object_path(body), body, self.config.field_manager)
        )
        self._remember(result)
        return result

    async def _create(self, body: Mapping[str, Any], what: str | None = None) -> dict[str, Any]:
        """POST ``body`` (refused with 409 when it exists)."""
        api = await self._api()
        what = what or f"create {body['kind']} {body['metadata']['name']}"
        path = _object_path(body, named=False)
        return await self._write(what, lambda: api.request("POST", path, body=body))

    async def _delete(
        self, ns: str | None, plural: str, name: str, group: str = "", *, grace: int | None = None
    ) -> None:
        api = await self._api()
        query = {"gracePeriodSeconds": grace} if grace is not None else None
        try:
            result = await api.request("DELETE", _path(ns, plural, name, group), query=query)
        except ApiError as error:
            if error.status in (HTTPStatus.NOT_FOUND, HTTPStatus.CONFLICT):
                return
            raise _failed(error, f"delete {plural}/{name}") from error
        if result.get("kind") == "Pod":
            self._remember(result)

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        """Converge the app's namespace onto ``plan``.

        A satisfied plan writes at most the pull secret.
        """
        check_plan(plan, await self.capabilities())
        ns = namespace_for(plan.bundle_id)
        async with self._lock(ns):
            await self._apply_locked(ns, plan)
        return BundleHandle(bundle_id=plan.bundle_id, handle=ns, details={"namespace": ns})

    async def _converge_namespace(
        self, ns: str, plan: BundlePlan, *, volumes_only: bool = False
    ) -> tuple[NamespaceFacts | None, NamespaceFacts]:
        """The namespace and its namespace-wide objects: (as found, as now)."""
        c = self.config
        known = await self._namespace(ns)
        facts = await self._ensure_namespace(ns, plan, known, volumes_only=volumes_only)
        ns_objects = objects.namespace_objects(
            ns,
            plan,
            server_namespace=c.server_namespace,
            server_labels=c.server_labels,
            subject=c.app_subject,
            role=c.app_role,
        )
        ns_body = objects.namespace(ns, plan, volumes_only=volumes_only)
        ns_digest = objects.namespace_digest(ns_body, ns_objects)
        if facts.digest != ns_digest:
            for body in ns_objects:
                await self._apply_object(body)
            await self._apply_object(
                objects.namespace(ns, plan, ns_digest, volumes_only=volumes_only)
            )
        return known, facts

    async def _volume_namespace(self, ns: str, bundle_id: str | None) -> None:
        """Make sure a volume's namespace exists (a volumes-only one when the app is not there)."""
        if bundle_id is None or ns == self.config.edge_namespace:
            return
        facts = await self._namespace(ns)
        if facts is not None and not facts.terminating and facts.bundle_id == bundle_id:
            return
        await self._converge_namespace(
            ns, BundlePlan(bundle_id=bundle_id, workloads=()), volumes_only=True
        )

    async def _drop_volume_namespace(self, ns: str) -> None:
        """Delete a volumes-only namespace once its last volume is gone."""
        if ns == self.config.edge_namespace:
            return
        facts = await self._namespace(ns)
        if facts is None or facts.terminating or not facts.volumes_only:
            return
        if any(not c.deleting for c in await self._claims(ns)):
            return
        await self._delete(None, "namespaces", ns)
        self._keys.pop(ns, None)
        if self._informer is not None:
            self._informer.namespaces.terminating(facts)

    async def _apply_locked(self, ns: str, plan: BundlePlan) -> None:
        known, facts = await self._converge_namespace(ns, plan)
        for volume in plan.volumes:
            await self._ensure_claim(
                ns,
                volume.volume_id,
                bundle_id=plan.bundle_id,
                name=volume.name,
                size_bytes=volume.size_bytes,
            )
        key = await self._plan_key(ns, plan.bundle_id, fresh=known is None and not facts.digest)
        auths = [w.pull_auth for w in plan.workloads if w.pull_auth is not None]
        if auths:
            # A credential may expire: rewritten on every apply (the one write of a re-apply).
            await self._apply_object(objects.pull_secret(ns, plan.bundle_id, auths))
        pods = await self._pods(ns)
        services = await self._services(ns)
        await self._remove_dropped(ns, plan, pods, services)
        created: list[str] = []
        for w in plan.start_order():
            name = await self._converge_workload(ns, plan, w, key, pods=pods, services=services)
            if name is not None:
                created.append(name)
        if created:
            await self._wait_scheduled(ns, created)
        for volume in plan.volumes:
            # Bound by now unless the class waits for a consumer that is not placed yet.
            await self._retain(ns, volume.volume_id)

    async def _remove_dropped(
        self, ns: str, plan: BundlePlan, pods: list[PodFacts], services: set[str]
    ) -> None:
        planned = {w.name for w in plan.workloads}
        dropped = {p.workload for p in pods} - planned
        for pod in pods:
            if pod.workload in dropped and not pod.deleting:
                await self._delete(ns, "pods", pod.name)
        for name in sorted(dropped | (services - planned)):
            await self._delete(ns, "services", name)
            await self._delete(ns, "secrets", env_secret_name(name))
            await self._delete(ns, "configmaps", configmap_name(name))

    async def _converge_workload(
        self,
        ns: str,
        plan: BundlePlan,
        w: WorkloadPlan,
        key: bytes,
        *,
        pods: list[PodFacts],
        services: set[str],
    ) -> str | None:
        """Make ``w`` run its plan; returns the name of a pod it created."""
        digest = objects.workload_digest(w, key, self._settings)
        mine = [p for p in pods if p.workload == w.name]
        latest = newest(mine)
        if w.ports and w.name not in services:
            await self._apply_object(objects.service(ns, plan.bundle_id, w))
        if latest is not None and latest.live and latest.digest == digest:
            if latest.unschedulable:
                raise CapacityExceeded(
                    f"workload {w.name!r} cannot be scheduled: {latest.unschedulable}"
                )
            for pod in mine:
                # Another live instance (another writer's, an older version's): one stays.
                if pod is not latest and pod.live:
                    await self._delete(ns, "pods", pod.name)
            return None
        await self._wait_dependencies(ns, plan, w)
        await self._apply_object(objects.env_secret(ns, plan.bundle_id, w))
        if w.files:
            await self._apply_object(objects.files_configmap(ns, plan.bundle_id, w))
        for pod in mine:
            # The latest ended pod stays until its replacement runs: its log stays readable.
            if not pod.deleting and (pod.live or pod is not latest):
                await self._delete(ns, "pods", pod.name)
        return await self._create_pod(ns, plan, w, digest, latest.uid if latest else None)

    async def _create_pod(
        self, ns: str, plan: BundlePlan, w: WorkloadPlan, digest: str, replaces: str | None
    ) -> str:
        """Create the instance replacing ``replaces``; its name is derived from both.

        Two writers of one state derive one name: the API server refuses the second
        create (409), and a live pod of that name running this digest is adopted.
        """
        api = await self._api()
        for _ in range(3):
            body = objects.pod(
                ns,
                plan.bundle_id,
                w,
                digest,
                self._settings,
                pull=w.pull_auth is not None,
                plan_labels=plan.labels,
                replaces=replaces,
            )
            name = str(body["metadata"]["name"])
            try:
                self._remember(await self._create(body, f"create the pod of {w.name}"))
            except AdapterFailed as failed:
                if failed.details.get("status") != HTTPStatus.CONFLICT:
                    raise
            else:
                return name
            try:
                existing = await api.get(_path(ns, "pods", name))
            except ApiError as error:
                if error.status == HTTPStatus.NOT_FOUND:
                    continue  # deleted meanwhile: the name is free again
                raise _unavailable(error, f"read pod {name}") from error
            found = project_pod(existing)
            if found is not None and found.live and found.digest == digest:
                self._remember(existing)
                return name
            # An ended or departing instance holds the name: this one replaces it.
            replaces = str((existing.get("metadata") or {}).get("uid") or name)
        raise AdapterFailed(
            f"cannot name a pod for {w.name!r}: its names keep being taken",
            remedy="Apply again.",
            details={"namespace": ns, "workload": w.name},
        )

    async def _wait_for(
        self,
        ns: str,
        check: Callable[[list[PodFacts]], T | None],
        timeout: float,  # noqa: ASYNC109 - a bound on polling, not a call timeout
    ) -> T | None:
        """Poll ``check`` on the namespace's pods (woken by the cache) until it answers."""
        with anyio.move_on_after(timeout):
            while True:
                result = check(await self._pods(ns))
                if result is not None:
                    return result
                informer = self._informer
                if informer is not None and informer.synced:
                    with anyio.move_on_after(1.0):
                        await informer.pods.changed.wait()
                else:
                    await anyio.sleep(0.5)
        return None

    async def _wait_dependencies(self, ns: str, plan: BundlePlan, w: WorkloadPlan) -> None:
        """Wait (bounded) until every dependency runs, and is ready when it has a check."""
        if not w.depends_on:
            return

        def ready(pods: list[PodFacts]) -> bool | None:
            for dep in w.depends_on:
                latest = newest(pods, dep)
                if latest is not None and latest.unschedulable:
                    raise CapacityExceeded(
                        f"dependency {dep!r} of {w.name!r} cannot be "
                        f"scheduled: {latest.unschedulable}"
                    )
                if latest is None or not latest.running or latest.ready is False:
                    return None
            return True

        await self._wait_for(ns, ready, self.config.dependency_wait)

    async def _wait_scheduled(self, ns: str, names: list[str]) -> None:
        """Wait until the new pods are placed; an unschedulable one is ``CapacityExceeded``."""
        wanted = set(names)

        def placed(pods: list[PodFacts]) -> bool | None:
            pending = False
            for pod in pods:
                if pod.name not in wanted:
                    continue
                if pod.unschedulable:
                    raise CapacityExceeded(
                        f"workload {pod.workload!r} cannot be scheduled: {pod.unschedulable}",
                        details={"namespace": ns, "pod": pod.name},
                    )
                if not pod.node_name and not pod.ended:
                    pending = True
            return None if pending else True

        await self._wait_for(ns, placed, self.config.schedule_wait)

    async def _collect_superseded(self, key: tuple[str, str]) -> None:
        """Delete ended pods of a workload once a newer instance runs (from the work queue).

        A live twin of the newest (same plan digest: two writers raced) goes too.
        """
        ns, workload = key
        informer = self._informer
        if informer is None:
            return
        mine = [p for p in informer.pods.pods(ns) if p.workload == workload]
        latest = newest(mine)
        if latest is None or not latest.running:
            return
        for pod in mine:
            if pod is latest or pod.deleting:
                continue
            if pod.ended or pod.digest == latest.digest:
                await self._delete(ns, "pods", pod.name)

    # -- stop, destroy --------------------------------------------------------------------

    async def stop(self, ref: BundleRef) -> None:
        """Delete running pods; keep finished ones (their logs) and everything else."""
        ns = namespace_for(ref.bundle_id)
        async with self._lock(ns):
            for pod in await self._pods(ns):
                if pod.live:
                    await self._delete(ns, "pods", pod.name)

    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        """Remove the app; its volumes (claims, in a namespace kept for them) stay by default.

        With ``keep_volumes=False`` every volume is destroyed with its data and the
        namespace is deleted.
        """
        options = options or DestroyOptions()
        ns = namespace_for(ref.bundle_id)
        async with self._lock(ns):
            facts = await self._namespace(ns)
            if facts is None or facts.terminating:
                return
            if facts.bundle_id != ref.bundle_id:
                raise AdapterFailed(
                    f"namespace {ns} does not belong to {ref.bundle_id!r}",
                    details={"namespace": ns},
                )
            claims = [c for c in await self._claims(ns) if not c.deleting]
            if options.keep_volumes and claims:
                if not facts.volumes_only:
                    await self._strip_to_volumes(ns, ref.bundle_id, facts)
                return
            for claim in claims:
                await self._destroy_claim(ns, claim.volume_id)
            await self._delete(None, "namespaces", ns)
            self._keys.pop(ns, None)
            informer = self._informer
            if informer is not None:
                informer.namespaces.terminating(facts)

    async def _strip_to_volumes(self, ns: str, bundle_id: str, facts: NamespaceFacts) -> None:
        """Delete the app's pods and per-workload objects; keep the namespace for its volumes."""
        pods = await self._pods(ns)
        workloads = set(facts.workloads) | {p.workload for p in pods}
        # Volumes-only first: from now on observe reports the bundle as gone.
        empty = BundlePlan(bundle_id=bundle_id, workloads=())
        await self._apply_object(objects.namespace(ns, empty, volumes_only=True))
        for pod in pods:
            if not pod.deleting:
                await self._delete(ns, "pods", pod.name)
        for name in sorted(workloads | await self._services(ns)):
            await self._delete(ns, "services", name)
            await self._delete(ns, "secrets", env_secret_name(name))
            await self._delete(ns, "configmaps", configmap_name(name))
        await self._delete(ns, "secrets", PULL_SECRET)

    # -- capacity -------------------------------------------------------------------------

    async def _rooms(self) -> list[NodeRoom]:
        async def read() -> list[NodeRoom]:
            api = await self._api()
            nodes = await self._read("list nodes", lambda: api.get("/api/v1/nodes"))
            pods: list[dict[str, Any]] = []
            token: str | None = None
            while True:
                page = await self._read(
                    "list pods",
                    functools.partial(
                        api.get,
                        "/api/v1/pods",
                        limit=500,
                        fieldSelector=LIVE_PODS,
                        **{"continue": token},
                    ),
                )
                pods.extend(page.get("items") or ())
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
            return node_rooms(nodes.get("items") or (), pods, self.config.node_selector)

        return await scoped_read(("pando-runtime-kubernetes.rooms", id(self)), read)

    async def capacity(self) -> Capacity:
        """Eligible nodes' allocatable minus what other pods request; the roomiest node."""
        rooms = await self._rooms()
        fit = self._largest(rooms, None)
        return Capacity(
            total_cpu_millis=sum(r.cpu_millis - r.other_cpu for r in rooms),
            total_memory_bytes=sum(r.memory_bytes - r.other_memory for r in rooms),
            reported_at=datetime.now(UTC),
            largest_fit=fit,
            details={"nodes": str(len(rooms))},
        )

    @staticmethod
    def _largest(rooms: list[NodeRoom], ns: str | None) -> Fit:
        best = (0, 0)
        for room in rooms:
            cpu, mem = room.free(ns)
            best = max(best, (max(mem, 0), max(cpu, 0)))
        return Fit(cpu_millis=best[1], memory_bytes=best[0])

    async def largest_fit_for(self, bundle_id: str) -> Fit | None:
        """The roomiest eligible node for ``bundle_id``, its own pods counted as free."""
        return self._largest(await self._rooms(), namespace_for(bundle_id))

    # -- events ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watch_bundles(self) -> AsyncIterator[Any]:
        """Bundle events from the pod watch: ``WATCHING`` first, ``MISSED`` after a relist."""
        send, stream = bundle_event_channel()
        informer = self._informer
        async with contextlib.AsyncExitStack() as stack:
            if informer is None:
                informer = Informer(
                    await self._api(), kinds=("pods",), watch_timeout=self.config.watch_timeout
                )
                await stack.enter_async_context(informer.running())
            if not await informer.wait_synced(self.config.read_timeout):
                loop = informer.loops["pods"]
                raise AdapterUnavailable(f"cannot watch pods: {loop.last_error}")
            informer.pods.subscribers.append(send)
            send.send_nowait(BundleEvent(kind=BundleEventKind.WATCHING, at=datetime.now(UTC)))
            try:
                yield stream
            finally:
                with contextlib.suppress(ValueError):
                    informer.pods.subscribers.remove(send)
                send.close()
                await stream.aclose()

    def _force_relist(self) -> None:
        """Test hook: make the pod watch relist, as after a gap (subscribers see ``MISSED``)."""
        if self._informer is not None:
            self._informer.loops["pods"].request_relist()

    # -- logs -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> AsyncIterator[ByteReceiveStream]:
        """The latest instance's log; a followed log is reopened while the pod runs."""
        options = options or LogOptions()
        ns = namespace_for(ref.bundle_id)
        latest = newest(await self._pods(ns), ref.workload)
        if latest is None:
            raise NotFound(
                f"workload {ref.workload!r} of {ref.bundle_id!r} has no instance",
                details={"bundle_id": ref.bundle_id, "workload": ref.workload},
            )
        stream = IteratorByteStream(self._log_chunks(ns, latest.name, ref.workload, options))
        try:
            yield stream
        finally:
            await stream.aclose()

    async def _log_chunks(  # noqa: C901, PLR0912 - one loop: read, dedupe, reopen
        self, ns: str, pod: str, container: str, options: LogOptions
    ) -> AsyncIterator[bytes]:
        api = await self._api()
        query: dict[str, Any] = {"container": container, "timestamps": "true"}
        if options.tail is not None:
            query["tailLines"] = options.tail
        if options.since is not None:
            query["sinceTime"] = options.since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if options.follow:
            query["follow"] = "true"
        path = _path(ns, "pods", pod) + "/log"
        last: tuple[bytes, bytes] | None = None
        reopened = False  # lines of a reopened follow up to the last one sent are dropped
        since: tuple[bytes, bytes] | None = None
        if options.since is not None:
            # The API takes whole seconds: lines of that second before ``since`` are dropped here.
            moment = options.since.astimezone(UTC)
            since = _timestamp_key(f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond:06d}Z".encode())
        while True:
            try:
                async with api.stream(
                    path,
                    query=query,
                    read_timeout=300.0 if options.follow else self.config.read_timeout,
                ) as response:
                    pending = b""
                    while chunk := await response.receive():
                        pending += chunk
                        *lines, pending = pending.split(b"\n")
                        out = []
                        for line in lines:
                            stamp, _, text = line.partition(b" ")
                            stamp_key = _timestamp_key(stamp)
                            if reopened and last is not None and stamp_key <= last:
                                continue  # already sent before the reopen
                            last = stamp_key
                            if since is not None and stamp_key < since:
                                continue
                            out.append(text + b"\n")
                        if out:
                            yield b"".join(out)
                    if pending:
                        yield pending.partition(b" ")[2]
            except ApiError as error:
                if error.status == HTTPStatus.NOT_FOUND:
                    raise NotFound(f"pod {pod} is gone") from error
                if error.status != 0 or not options.follow:
                    raise _unavailable(error, f"read the log of {pod}") from error
            if not options.follow:
                return
            # The server ended a followed log (a timeout, a kubelet restart): go on while the
            # pod lives, from the last line we sent.
            current = [p for p in await self._pods(ns) if p.name == pod]
            if not current or not current[0].live:
                return
            await anyio.sleep(1.0)
            reopened = True
            query.pop("tailLines", None)
            if last is not None:
                query["sinceTime"] = last[0].decode() + "Z"

    # -- exec -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _session(
        self, ns: str, pod: str, container: str | None, request: ExecRequest
    ) -> AsyncIterator[ExecSession]:
        """An exec session in a pod; API errors become the contract's errors."""
        api = await self._api()
        try:
            async with api.exec(ns, pod, container, request) as session:
                yield session
        except ApiError as error:
            if error.status == HTTPStatus.NOT_FOUND:
                raise NotFound(f"pod {pod} is gone", details={"pod": pod}) from error
            raise _failed(error, f"exec in pod {pod}") from error

    @contextlib.asynccontextmanager
    async def exec(self, ref: WorkloadRef, request: ExecRequest) -> AsyncIterator[ExecSession]:
        """Run a command in the workload's running instance over the exec stream.

        ``request.env`` reaches the command through an ``env K=V ...`` prefix, never the pod.
        """
        raise_problems(validate_exec_request(request), "exec request")
        ns = namespace_for(ref.bundle_id)
        latest = newest(await self._pods(ns), ref.workload)
        if latest is None or not latest.running:
            raise NotFound(
                f"workload {ref.workload!r} of {ref.bundle_id!r} has no running instance",
                details={"bundle_id": ref.bundle_id, "workload": ref.workload},
            )
        async with self._session(ns, latest.name, ref.workload, request) as session:
            yield session

    async def _exec_output(
        self, ns: str, pod: str, container: str, command: tuple[str, ...]
    ) -> tuple[int | None, bytes, bytes]:
        """Run ``command`` to its end: exit code, stdout, stderr."""
        outputs: dict[str, bytes] = {}
        async with self._session(ns, pod, container, ExecRequest(command=command)) as session:

            async def collect(name: str, stream: ByteReceiveStream) -> None:
                outputs[name] = b"".join([chunk async for chunk in stream])

            async with anyio.create_task_group() as group:
                group.start_soon(collect, "out", session.stdout)
                group.start_soon(collect, "err", session.stderr)
            code = await session.wait()
        return code, outputs["out"], outputs["err"]

    async def _read_log(self, ns: str, pod: str, container: str, limit: int) -> bytes:
        """The first ``limit`` bytes of a container's log."""
        api = await self._api()
        parts: list[bytes] = []
        size = 0
        async with api.stream(
            _path(ns, "pods", pod) + "/log",
            query={"container": container, "limitBytes": limit},
            read_timeout=self.config.read_timeout,
        ) as response:
            while size < limit and (chunk := await response.receive()):
                parts.append(chunk)
                size += len(chunk)
        return b"".join(parts)[:limit]
