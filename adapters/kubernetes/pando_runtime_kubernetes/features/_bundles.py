"""Bundles: apply, observe, stop and destroy an app (one namespace, bare pods).

Apply converges the app's namespace onto the plan: namespace-wide objects when their digest
changed, the egress gateway's pod (or its removal), claims of its volumes, the pull secret,
and per workload a headless Service, a Secret for its environment, a ConfigMap for its files
and a bare pod, recreated only when its plan digest changed or it ended. Observe reads the
cache (or the API) and never remediates. Ended pods a newer instance superseded are collected
from the cache's work queue.

What changes is logged on ``pando_runtime.kubernetes.bundles`` at INFO (an apply's writes, a
stop, a destroy, a superseded pod collected); an apply that writes nothing at DEBUG.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
import attrs

from pando_runtime import (
    AdapterFailed,
    BundleHandle,
    BundlePlan,
    BundleRef,
    CapacityExceeded,
    DestroyOptions,
    ObservedBundle,
    ObservedVolume,
    ObservedWorkload,
    PandoRuntimeError,
    StillStopping,
    Upstream,
    WorkloadPlan,
    WorkloadProblem,
    WorkloadRef,
)

from .._info import KubernetesConfig
from .._log import logger
from .._names import PULL_SECRET, configmap_name, env_secret_name, namespace_for, upstream_for
from ..cache._informer import Informer
from ..cache._projections import NamespaceFacts, PodFacts, bundle_workloads, newest, project_pod
from ..manifests import _namespace_objects as ns_objects
from ..manifests import _workload_objects as workload_objects
from ..manifests._gateway import GATEWAY
from ..manifests._network import AppNetwork
from ..session._session import ClusterSession
from ..session._writes import counting_writes
from ._gateways import EgressGateways
from ._namespaces import AppNamespaces
from ._pod_names import create_pod
from ._sandbox import SandboxClasses
from ._volumes import Volumes, volume_handle

__all__ = ["Bundles", "observed_workload"]

_LOG = logger("bundles")


def _problem(pod: PodFacts) -> tuple[WorkloadProblem | None, str]:
    """Why the pod's workload is stuck before running, and the cluster's words for it."""
    if pod.running or pod.ended or pod.deleting:
        return None, ""
    if pod.stuck is not None:
        return WorkloadProblem(pod.stuck[0]), pod.stuck[1]
    if pod.unschedulable is not None:
        return WorkloadProblem.UNSCHEDULABLE, pod.unschedulable
    return None, ""


def _stopping(pod: PodFacts, *, leaving: bool) -> bool:
    """Told to end while its container runs: deleted, or (``leaving``) its app destroyed.

    Never a pod whose node went silent: nothing confirms it runs, and it ends only when its
    node reports again.
    """
    return not pod.node_lost and (pod.stopping or (leaving and bool(pod.running)))


def observed_workload(
    name: str, pod: PodFacts | None, *, leaving: bool = False
) -> ObservedWorkload:
    """What ``observe`` reports of a workload whose newest pod is ``pod``.

    A pod deleted while its container runs (its grace period) is running and stopping;
    ``leaving``: the app was destroyed, so every pod still running is stopping (the namespace
    controller may not have deleted it yet).
    """
    if pod is None:
        return ObservedWorkload(name=name, present=False, running=False)
    problem, detail = _problem(pod)
    # A pod on a node that stopped reporting is lost, neither running nor stopping: nothing
    # confirms either (and a deleted one stays so until its node is back).
    lost = pod.node_lost
    stopping = _stopping(pod, leaving=leaving)
    return ObservedWorkload(
        name=name,
        present=True,
        running=not lost and (bool(pod.running) or stopping),
        stopping=stopping,
        instance_id=pod.uid,
        image_digest=pod.image_id,
        started_at=pod.started(),
        exit_code=pod.exit_code if pod.ended else None,
        restart_count=0,  # restartPolicy Never: a pod is never restarted in place
        healthy=pod.ready if pod.has_probe else None,
        lost=lost,
        oom_killed=bool(pod.oom),
        problem=problem,
        problem_detail=detail,
    )


class Bundles:
    """The apps of one cluster: apply, observe, stop, destroy, upstream."""

    def __init__(
        self,
        session: ClusterSession,
        config: KubernetesConfig,
        namespaces: AppNamespaces,
        volumes: Volumes,
        *,
        network: AppNetwork,
        gateways: EgressGateways,
        sandbox: SandboxClasses,
    ) -> None:
        self._session = session
        self._config = config
        self._namespaces = namespaces
        self._volumes = volumes
        self._network = network
        self._gateways = gateways
        self._sandbox = sandbox

    # -- reading state --------------------------------------------------------------------

    async def observe(
        self, ref: BundleRef, *, not_before: datetime | None = None
    ) -> ObservedBundle:
        """The bundle as the cache (or the API) sees it; never remediates.

        With a synced cache, the answer is kept until a fact of the app's namespace changes.
        After a warm start, the saved cache answers at once while it is within
        ``cache_max_staleness`` (``confirmed_at``: its saved confirmation, moving forward as
        the watches catch up). ``not_before``: wait for a confirmation at or after it (or read).
        """
        ns = namespace_for(ref.bundle_id)
        session = self._session
        if not_before is None or session.cache.saved_confirms(not_before):
            with session.cache.answering_from_saved():
                return await self._answer(ref, ns, await session.cache.synced())
        return await self._answer(ref, ns, await session.cache.confirmed(not_before))

    async def _answer(self, ref: BundleRef, ns: str, informer: Informer | None) -> ObservedBundle:
        if informer is None:
            read_at = datetime.now(UTC)  # read from the API: confirmed as it is read
            return attrs.evolve(await self._observe(ref, ns), confirmed_at=read_at)
        confirmed_at = (
            informer.staleness.confirmed_at()
        )  # before the reads: never later than the truth
        kept = informer.observed.get(ns)
        if kept is None or kept.bundle_id != ref.bundle_id:
            since = informer.observed.changes
            kept = await self._observe(ref, ns)
            informer.observed.keep(ns, kept, since)
        answer: ObservedBundle = attrs.evolve(kept, confirmed_at=confirmed_at)
        return answer

    async def _observe(self, ref: BundleRef, ns: str) -> ObservedBundle:
        session = self._session
        facts = await session.reads.namespace(ns)
        if facts is None or facts.bundle_id != ref.bundle_id:
            return ObservedBundle(bundle_id=ref.bundle_id, exists=False)
        if facts.terminating:
            return await self._leaving(ref, ns, ())
        volumes = tuple(
            ObservedVolume(
                volume_id=c.volume_id,
                present=not c.deleting,
                handle=volume_handle(ns, c.volume_id, ref.bundle_id),
            )
            for c in sorted(await session.reads.claims(ns), key=lambda c: c.volume_id)
        )
        if facts.volumes_only:
            return await self._leaving(ref, ns, volumes)
        pods = await session.reads.pods(ns)
        workloads = tuple(
            observed_workload(name, pod) for name, pod in bundle_workloads(facts, pods)
        )
        return ObservedBundle(
            bundle_id=ref.bundle_id, exists=True, workloads=workloads, volumes=volumes
        )

    async def _leaving(
        self, ref: BundleRef, ns: str, volumes: tuple[ObservedVolume, ...]
    ) -> ObservedBundle:
        """A destroyed app: it exists, with its stopping workloads alone, until none runs."""
        pods = [p for p in await self._session.reads.pods(ns) if p.running or p.stopping]
        workloads = tuple(
            observed_workload(name, newest(pods, name), leaving=True)
            for name in sorted({p.workload for p in pods})
        )
        return ObservedBundle(
            bundle_id=ref.bundle_id, exists=bool(workloads), workloads=workloads, volumes=volumes
        )

    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        """``http://<workload>.<namespace>.svc.<cluster domain>:<port>``, computed."""
        return upstream_for(ref, port, self._config.cluster_domain)

    # -- apply ----------------------------------------------------------------------------

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        """Converge the app's namespace onto ``plan`` (a plan the capabilities allow).

        A satisfied plan writes at most the pull secret.
        """
        ns = namespace_for(plan.bundle_id)
        async with self._session.lock(ns):
            with counting_writes() as writes:
                created = await self._apply_locked(ns, plan)
        _LOG.log(
            logging.INFO if writes[0] else logging.DEBUG,
            "applied %s: objects written: %d, pods created: %d",
            plan.bundle_id,
            writes[0],
            created,
            extra={**self._extra(plan.bundle_id, ns), "writes": writes[0], "pods_created": created},
        )
        return BundleHandle(bundle_id=plan.bundle_id, handle=ns, details={"namespace": ns})

    def _extra(self, bundle_id: str, ns: str) -> dict[str, Any]:
        return {
            "cluster": self._session.connection.log_name,
            "bundle_id": bundle_id,
            "namespace": ns,
        }

    async def _apply_locked(self, ns: str, plan: BundlePlan) -> int:
        """Converge; returns how many pods were created."""
        session = self._session
        await self._wait_stopped(ns, plan.bundle_id)
        known, facts = await self._namespaces.converge(ns, plan)
        await self._gateways.converge(ns, plan.bundle_id, plan.network.egress)
        for volume in plan.volumes:
            await self._volumes.ensure_claim(
                ns,
                volume.volume_id,
                bundle_id=plan.bundle_id,
                name=volume.name,
                size_bytes=volume.size_bytes,
            )
        key = await self._namespaces.plan_key(
            ns, plan.bundle_id, fresh=known is None and not facts.digest
        )
        auths = [w.pull_auth for w in plan.workloads if w.pull_auth is not None]
        if auths:
            # A credential may expire: rewritten on every apply (the one write of a re-apply).
            await session.writer.apply(ns_objects.pull_secret(ns, plan.bundle_id, auths))
        pods = await session.reads.pods(ns)
        services = await self._workload_services(ns)
        await self._remove_dropped(ns, plan, pods, services)
        proxy = self._network.proxy_env(ns, plan.network.egress, [w.name for w in plan.workloads])
        created: list[str] = []
        for w in plan.start_order():
            name = await self._converge_workload(
                ns, plan, w, key, pods=pods, services=services, proxy=proxy
            )
            if name is not None:
                created.append(name)
        if created:
            await self._wait_scheduled(ns, created)
        for volume in plan.volumes:
            # Bound by now unless the class waits for a consumer that is not placed yet.
            await self._volumes.retain(ns, volume.volume_id)
        return len(created)

    async def _wait_stopped(self, ns: str, bundle_id: str) -> None:
        """Wait (up to ``stop_wait``) until no pod of the app is stopping: none beside a new one.

        A namespace being deleted must be gone too, and a pod still running in it is stopping.
        Past the bound: ``StillStopping``, before anything is written.
        """
        reads = self._session.reads
        stopping: list[str] = []
        with anyio.move_on_after(self._config.stop_wait):
            while True:
                facts = await reads.namespace(ns)
                terminating = facts is not None and facts.terminating
                pods = await reads.pods(ns)
                # A lost node's pod is not waited for: it ends only when its node is back,
                # and the host was told it is lost (re-applying is how it is replaced).
                stopping = sorted({p.workload for p in pods if _stopping(p, leaving=terminating)})
                if not stopping and not terminating:
                    return
                informer = self._session.cache.informer
                if informer is not None and informer.synced and stopping:
                    with anyio.move_on_after(1.0):
                        await informer.pods.changed.wait()
                else:  # a namespace's removal, or no cache: poll
                    await anyio.sleep(0.25)
        if stopping:
            raise StillStopping(
                f"workloads of {bundle_id!r} are still stopping: {', '.join(stopping)}",
                details={"bundle_id": bundle_id, "namespace": ns, "workloads": stopping},
            )
        # A namespace being deleted with nothing running left: converge refuses it.

    async def _workload_services(self, ns: str) -> set[str]:
        """Names of the workloads' Services (the gateway's is not one)."""
        return await self._session.reads.services(ns) - {GATEWAY}

    async def _delete_workload_objects(self, ns: str, names: set[str]) -> None:
        """A workload's Service, environment Secret and files ConfigMap."""
        for name in sorted(names):
            await self._session.writer.delete(ns, "services", name)
            await self._session.writer.delete(ns, "secrets", env_secret_name(name))
            await self._session.writer.delete(ns, "configmaps", configmap_name(name))

    async def _remove_dropped(
        self, ns: str, plan: BundlePlan, pods: list[PodFacts], services: set[str]
    ) -> None:
        planned = {w.name for w in plan.workloads}
        dropped = {p.workload for p in pods} - planned
        for pod in pods:
            if pod.workload in dropped and not pod.deleting:
                await self._session.writer.delete(ns, "pods", pod.name)
        await self._delete_workload_objects(ns, dropped | (services - planned))

    async def _converge_workload(
        self,
        ns: str,
        plan: BundlePlan,
        w: WorkloadPlan,
        key: bytes,
        *,
        pods: list[PodFacts],
        services: set[str],
        proxy: Mapping[str, str],
    ) -> str | None:
        """Make ``w`` run its plan; returns the name of a pod it created.

        ``proxy``: the egress gateway's variables (they enter the digest).
        """
        session = self._session
        settings = self._sandbox.pod_settings(plan.isolation)
        digest = workload_objects.workload_digest(w, key, settings, proxy)
        mine = [p for p in pods if p.workload == w.name]
        latest = newest(mine)
        if w.ports and w.name not in services:
            await session.writer.apply(workload_objects.service(ns, plan.bundle_id, w))
        # A pod whose node went silent is replaced: deleted (it stays, terminating, until its
        # node reports again and stops its containers), and a new one placed on another node.
        if latest is not None and latest.live and latest.digest == digest and not latest.node_lost:
            if latest.unschedulable:
                raise CapacityExceeded(
                    f"workload {w.name!r} cannot be scheduled: {latest.unschedulable}"
                )
            for pod in mine:
                # Another live instance (another writer's, an older version's): one stays.
                if pod is not latest and pod.live:
                    await session.writer.delete(ns, "pods", pod.name)
            return None
        await self._wait_dependencies(ns, plan, w)
        await session.writer.apply(workload_objects.env_secret(ns, plan.bundle_id, w))
        if w.files:
            await session.writer.apply(workload_objects.files_configmap(ns, plan.bundle_id, w))
        for pod in mine:
            # The latest ended pod stays until its replacement runs: its log stays readable.
            if not pod.deleting and (pod.live or pod is not latest):
                await session.writer.delete(ns, "pods", pod.name)
        lost_node = latest.node_name if latest is not None and latest.node_lost else None
        return await self._create_pod(
            ns,
            plan,
            w,
            digest,
            latest.uid if latest else None,
            settings=settings,
            proxy=proxy,
            avoid=lost_node,
        )

    async def _create_pod(
        self,
        ns: str,
        plan: BundlePlan,
        w: WorkloadPlan,
        digest: str,
        replaces: str | None,
        *,
        settings: workload_objects.PodSettings,
        proxy: Mapping[str, str],
        avoid: str | None = None,
    ) -> str:
        """Create the instance replacing ``replaces``; its name is derived from both.

        ``settings``: its RuntimeClass and node selector. ``avoid``: a node it must not go
        to (the lost one of the instance it replaces). A pod stored without the RuntimeClass
        it was given is deleted and the apply fails: a sandboxed app never runs unsandboxed.
        """

        def build(replaces: str | None) -> dict[str, Any]:
            return workload_objects.pod(
                ns,
                plan.bundle_id,
                w,
                digest,
                settings,
                pull=w.pull_auth is not None,
                plan_labels=plan.labels,
                replaces=replaces,
                proxy=proxy,
                avoid_node=avoid,
            )

        def twin(existing: Mapping[str, Any]) -> bool:
            found = project_pod(existing)
            return found is not None and found.live and found.digest == digest

        name, body = await create_pod(
            self._session, build, replaces, twin=twin, what=f"create the pod of {w.name}"
        )
        try:
            self._sandbox.admitted(body, settings)
        except AdapterFailed:
            with anyio.CancelScope(shield=True):
                await self._session.writer.delete(ns, "pods", name, grace=0)
            raise
        return name

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

        await self._session.reads.wait_for(ns, ready, self._config.dependency_wait)

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

        await self._session.reads.wait_for(ns, placed, self._config.schedule_wait)

    async def collect_superseded(self, key: tuple[str, str]) -> None:
        """Delete ended pods of a workload once a newer instance runs (from the work queue).

        A live twin of the newest (same plan digest: two writers raced) goes too.
        """
        ns, workload = key
        informer = self._session.cache.informer
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
                try:
                    await self._session.writer.delete(ns, "pods", pod.name)
                except PandoRuntimeError as error:
                    # The work queue retries, then logs its give-up naming the pod.
                    error.details.setdefault("namespace", ns)
                    error.details.setdefault("pod", pod.name)
                    raise
                _LOG.info(
                    "removed pod %s of %s: superseded by %s",
                    pod.name,
                    workload,
                    latest.name,
                    extra={
                        "cluster": self._session.connection.log_name,
                        "namespace": ns,
                        "pod": pod.name,
                    },
                )

    # -- stop, destroy --------------------------------------------------------------------

    async def stop(self, ref: BundleRef) -> None:
        """Delete running pods; keep finished ones (their logs) and everything else.

        Returns once the deletions are written: each pod then ends within its grace period,
        observed running and stopping until it has. The egress gateway's pod goes too (the
        next apply makes it again).
        """
        ns = namespace_for(ref.bundle_id)
        async with self._session.lock(ns):
            stopped = 0
            for pod in await self._session.reads.pods(ns):
                if pod.live:
                    await self._session.writer.delete(ns, "pods", pod.name)
                    stopped += 1
            await self._gateways.stop(ns)
        _LOG.info(
            "stopped %s: pods deleted: %d",
            ref.bundle_id,
            stopped,
            extra={**self._extra(ref.bundle_id, ns), "pods_deleted": stopped},
        )

    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        """Remove the app; its volumes (claims, in a namespace kept for them) stay by default.

        With ``keep_volumes=False`` every volume is destroyed with its data and the
        namespace is deleted.
        """
        options = options or DestroyOptions()
        session = self._session
        ns = namespace_for(ref.bundle_id)
        async with session.lock(ns):
            facts = await session.reads.namespace(ns)
            if facts is None or facts.terminating:
                return
            if facts.bundle_id != ref.bundle_id:
                raise AdapterFailed(
                    f"namespace {ns} does not belong to {ref.bundle_id!r}",
                    details={"namespace": ns},
                )
            claims = [c for c in await session.reads.claims(ns) if not c.deleting]
            extra = {**self._extra(ref.bundle_id, ns), "volumes": len(claims)}
            if options.keep_volumes and claims:
                if not facts.volumes_only:
                    await self._strip_to_volumes(ns, ref.bundle_id, facts)
                    _LOG.info(
                        "destroyed %s: its namespace stays for its volumes (%d)",
                        ref.bundle_id,
                        len(claims),
                        extra=extra,
                    )
                return
            # Its pods first: each gets SIGTERM now, not once the namespace controller reaches
            # it (seconds later), so the app ends, and may be applied again, that much sooner.
            for pod in await session.reads.pods(ns):
                if pod.live:
                    await session.writer.delete(ns, "pods", pod.name)
            for claim in claims:
                await self._volumes.destroy_claim(ns, claim.volume_id)
            await self._namespaces.delete(ns, facts)
        _LOG.info(
            "destroyed %s: namespace %s deleted, volumes deleted: %d",
            ref.bundle_id,
            ns,
            len(claims),
            extra=extra,
        )

    async def _strip_to_volumes(self, ns: str, bundle_id: str, facts: NamespaceFacts) -> None:
        """Delete the app's pods and per-workload objects; keep the namespace for its volumes."""
        session = self._session
        pods = await session.reads.pods(ns)
        workloads = set(facts.workloads) | {p.workload for p in pods}
        # Volumes-only first: from now on observe reports the bundle as gone.
        await self._namespaces.mark_volumes_only(ns, bundle_id, facts)
        for pod in pods:
            if not pod.deleting:
                await session.writer.delete(ns, "pods", pod.name)
        await self._delete_workload_objects(ns, workloads | await self._workload_services(ns))
        await session.writer.delete(ns, "secrets", PULL_SECRET)
        await self._gateways.remove(ns)
