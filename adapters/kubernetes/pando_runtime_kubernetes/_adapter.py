"""The Kubernetes adapter: one namespace per app, bare pods, a watch-fed lean cache.

Use it as ``async with KubernetesAdapter(config) as runtime:``: the block runs
the cluster-wide watches that feed the lean cache (so ``observe`` costs no API
call and a re-apply writes nothing), all in one task group that ends with the
block. Without the block every method still works, reading the API directly.

The adapter is a composition: a :class:`ClusterSession` (the cluster's transport, cache and
shared reads and writes) and one feature component per part of the contract, each given the
session and the settings. Every method delegates to one of them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from datetime import datetime
from typing import Any, ClassVar, Self

from anyio.abc import ByteReceiveStream

from pando_runtime import (
    BundleEvent,
    BundleHandle,
    BundlePlan,
    BundleRef,
    BundleUsage,
    Capacity,
    DestroyOptions,
    EdgePlan,
    EdgeState,
    ExecRequest,
    ExecSession,
    Fit,
    ImageDelivery,
    InUse,
    IsolationClass,
    LogOptions,
    Membership,
    MembershipSettings,
    ObservedBundle,
    RuntimeAdapter,
    RuntimeCapabilities,
    TrialRequest,
    TrialResult,
    Upstream,
    VolumeHandle,
    VolumeRequest,
    WorkloadRef,
)
from pando_runtime.fleet import BundleRequests
from pando_runtime.plugin import ApiObserver, LeaseStore, MembershipSlot

from ._info import ADAPTER, DESCRIPTION, KubernetesConfig
from ._log import logger
from ._names import namespace_for
from .api._paths import api_path
from .api._transport import KubeTransport
from .cache._informer import Informer
from .features._bundle_events import BundleEvents
from .features._bundles import Bundles
from .features._canary import NetworkPolicyCanary
from .features._capacity import ClusterCapacity
from .features._edge import Edges
from .features._gateways import EgressGateways
from .features._images import RegistryImages
from .features._membership import KubeMembership
from .features._namespaces import AppNamespaces
from .features._plan_rules import PlanRules
from .features._sandbox import SandboxClasses
from .features._trial import Trials
from .features._usage import Usage
from .features._volumes import Volumes
from .features._workload_io import WorkloadIO
from .manifests._network import AppNetwork
from .manifests._security import DEFAULT_CAPABILITIES, GRANTABLE_CAPABILITIES
from .session._session import ClusterSession

__all__ = ["KubernetesAdapter"]

log = logger("health")


class KubernetesAdapter(RuntimeAdapter):
    """Runs each app in its own Kubernetes namespace as bare pods."""

    kind: ClassVar[str] = "kubernetes"
    api_version: ClassVar[str] = ADAPTER.api_version
    description: ClassVar[str] = DESCRIPTION
    Config: ClassVar[type[Any]] = KubernetesConfig
    config: KubernetesConfig

    def __init__(
        self,
        config: Mapping[str, Any] | KubernetesConfig | None = None,
        *,
        transport: KubeTransport | None = None,
        session: ClusterSession | None = None,
        membership_slot: MembershipSlot | None = None,
    ) -> None:
        """One cluster; ``transport`` or ``session`` made by the caller (else from ``config``).

        ``membership_slot``: a write guard shared with other adapters (the multi-cluster
        adapter's members: one membership guards every cluster's writes).
        """
        super().__init__(config)
        c = self.config
        self.session = session or ClusterSession(c, transport=transport)
        """The cluster session: transport, cache, the reads and writes features share."""
        s = self.session
        self._network = AppNetwork(c)
        self._sandbox = SandboxClasses(s, c)
        namespaces = AppNamespaces(s, c, self._network)
        self._volumes = Volumes(s, c, namespaces)
        gateways = EgressGateways(s, self._network)
        self._bundles = Bundles(
            s,
            c,
            namespaces,
            self._volumes,
            network=self._network,
            gateways=gateways,
            sandbox=self._sandbox,
        )
        self._io = WorkloadIO(s, c)
        self._trials = Trials(s, c, self._network, self._sandbox)
        self._canary = NetworkPolicyCanary(s, c)
        self._rules = PlanRules(self._network, self._canary.egress_refusal)
        self._edges = Edges(s, c, self._volumes)
        self._usage = Usage(s)
        self._capacity = ClusterCapacity(s, c)
        self._events = BundleEvents(s)
        self._images = RegistryImages(c)
        self._members = KubeMembership(s, c, membership_slot)

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def api_calls(self) -> int:
        """API calls made so far (every request and every opened stream)."""
        return self.session.connection.api_calls

    @property
    def canary_runs(self) -> int:
        """NetworkPolicy canary runs begun (each writes a namespace of its own, then deletes it)."""
        return self._canary.runs

    @property
    def fence_stamps(self) -> int:
        """Stamps this replica wrote on app namespaces (one per bundle gained and written)."""
        return self._members.fences.stamps

    @property
    def fence_refusals(self) -> int:
        """This replica's writes the API server refused because another replica's stamp held."""
        return self._members.fences.refusals

    @property
    def images(self) -> RegistryImages:
        """The image registry component: its settings, and its client's call counters."""
        return self._images

    @property
    def cache(self) -> Informer | None:
        """The lean cache, while the adapter runs as ``async with``."""
        return self.session.cache.informer

    def observe_api(self, observer: ApiObserver) -> None:
        """Report every API call, the cache's size and the open watches to ``observer``.

        :func:`pando_runtime.instrument` calls it with one that records OpenTelemetry metrics.
        """
        self.session.observe_api(observer)

    async def __aenter__(self) -> Self:
        cache = self.session.cache
        await cache.start(collect=self._bundles.collect_superseded)
        try:
            # What the cluster offers is learnt on connecting, not charged to a first apply;
            # a warm start answering from its store before it connected learns it meanwhile.
            if cache.answering_before_connected:
                cache.in_background(self._usage.served)
            else:
                await self._usage.served()
                await self._sandbox.look()
        except BaseException:
            # Whatever ends the start (an error, a cancellation), no watch outlives it. Not
            # shielded: the watches' task group must close in the scope it was opened in.
            await self.session.cache.stop()
            raise
        return self

    async def aclose(self) -> None:
        """Stop the watches and close the connection pools. Safe to call twice."""
        self._images.close()
        await self.session.close()

    # -- identity & health ----------------------------------------------------------------

    async def capabilities(self) -> RuntimeCapabilities:
        """What this adapter builds today; the rest is declared unsupported, never faked.

        Restricted egress only where egress rules are enforced (the canary saw it, or the
        settings trust it); host-name rules also need the gateway's image. Image import only
        where an image registry is configured (``image_registry``). The first call runs the
        NetworkPolicy canary (once; unless ``trust_network_policy`` skips it), so what the
        cluster enforces is never declared missing before the canary looked.
        ``isolation_class`` is ``sandboxed`` where a RuntimeClass runs gVisor or Kata
        (:mod:`.features._sandbox`; the cluster's classes are read on the first call).
        """
        return await self._capabilities(look=True)

    async def _capabilities(self, *, look: bool) -> RuntimeCapabilities:
        """:meth:`capabilities`; ``look``: run the canary first if it has not looked yet."""
        if look:
            await self._canary.look_once()
        await self._sandbox.look()
        egress = self.config.trust_egress_policy or self._canary.egress_verified
        return RuntimeCapabilities(
            isolation_class=self._sandbox.isolation(),
            persistent_volumes=True,
            exec=True,
            multiple_workloads=True,
            carried_files=True,
            private_network=self.config.trust_network_policy or self._canary.verified,
            resource_limits=True,
            reports_usage=await self._usage.served(),
            bundle_events=True,
            edge=True,
            egress_restriction=egress,
            egress_host_names=egress and self._network.gateway_image is not None,
            trial_run=True,
            # Not when every pod is sandboxed: a sandbox's sockets are out of the node's sight.
            port_observation=self._sandbox.name is None
            or self._sandbox.name != self.config.runtime_class,
            write_observation=False,  # a trial's writes are not observed
            membership=True,
            image_delivery=(ImageDelivery.REGISTRY, ImageDelivery.IMPORT)
            if self._images.configured
            else (ImageDelivery.REGISTRY,),
            default_capabilities=DEFAULT_CAPABILITIES,
            grantable_capabilities=GRANTABLE_CAPABILITIES,
        )

    def health_details(self) -> dict[str, str]:
        """What the health check reports beyond pass or fail, computed (no I/O).

        ``egress_excluded``: the ranges app pods never reach outside their namespace;
        ``egress_excluded_from``: whether the cluster's ranges came from the settings or
        every private, shared and link-local range stands in for them;
        ``egress_restriction``: ``enforced`` (verified by the canary), ``trusted``, or
        ``not verified``; ``cache_start``: how the cache started (``cold``: listed,
        ``warm``: resumed from ``cache_dir``, ``relisted``: its saved version had expired,
        ``discarded``: its store proved another cluster's once connected)
        and ``cache_replayed``: the events a warm start caught up with.
        """
        if self.config.trust_egress_policy:
            egress = "trusted"
        elif self._canary.egress_verified:
            egress = "enforced"
        else:
            egress = "not verified"
        start = self.session.cache.start_report()
        return {
            **self._network.details(),
            "egress_restriction": egress,
            "cache_start": str(start["start"]),
            "cache_replayed": str(start["replayed"]),
        }

    async def health_check(self) -> None:
        """The API answers, the RuntimeClasses exist, NetworkPolicy is enforced (or trusted).

        The cluster's RuntimeClasses are read again: ``sandbox_runtime_class`` (when set) must
        exist; unset, whether one runs gVisor or Kata decides ``isolation_class`` anew.

        Also asks again whether the metrics API is served (``reports_usage``), and logs
        :meth:`health_details` (a warning while the cluster's ranges are not configured or
        egress enforcement is not known).
        """
        session = self.session
        await session.api.get("/version", "reach the API server")
        await self._usage.served(fresh=True)
        if self.config.runtime_class:
            name = self.config.runtime_class
            # Other failures are the session's own (unavailable, throttled), naming the read.
            found = await session.api.find(
                api_path(None, "runtimeclasses", name, "node.k8s.io/v1"),
                f"read RuntimeClass {name!r}",
            )
            if found is None:
                raise session.errors.down(
                    f"RuntimeClass {name!r} is not usable: it does not exist",
                    remedy="Install the RuntimeClass or unset 'runtime_class'.",
                    status=404,
                )
        if self.config.sandbox_runtime_class:
            await self._sandbox.require()
        else:
            await self._sandbox.look(strict=True, fresh=True)
        if not self.config.trust_network_policy:
            problem = await self._canary.problem()
            if problem is not None:
                raise session.errors.down(
                    problem,
                    remedy="Run a CNI that enforces NetworkPolicy; on a cluster known to "
                    "enforce it, 'trust_network_policy: true' skips the canary.",
                )
        details = self.health_details()
        degraded = not self._network.ranges.configured or details["egress_restriction"] == (
            "not verified"
        )
        log.log(
            logging.WARNING if degraded else logging.INFO,
            "egress: excluded %s (from %s); restriction %s",
            details["egress_excluded"],
            details["egress_excluded_from"],
            details["egress_restriction"],
            extra={"adapter": self.kind, **details},
        )

    # -- bundles --------------------------------------------------------------------------

    async def check_plan(self, plan: BundlePlan) -> None:
        """Refuse ``plan`` as :meth:`apply` would, every problem at once; writes nothing."""
        await self._checked(plan)

    async def _checked(self, plan: BundlePlan) -> BundlePlan:
        """``plan`` with the registry's pull account where it applies, once every rule holds.

        The account is added first: a workload giving the same registry other credentials
        is a problem only then.
        """
        with_auth = await self._images.with_pull_auth(plan)
        if plan.isolation >= IsolationClass.SANDBOXED:  # the answer is needed: a failure says so
            await self._sandbox.look(strict=True)
        # The canary runs first when the plan restricts egress (only then can it matter).
        restricted = plan.network.egress is not None
        self._rules.check_bundle(with_auth, await self._capabilities(look=restricted))
        return with_auth

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        """Converge the app's namespace onto ``plan``.

        A satisfied plan writes at most the pull secret. A workload whose image is in the
        configured image registry pulls with its credentials unless its plan gives its own.
        """
        if plan.network.egress is not None:  # the canary's run is no write in flight
            await self._canary.look_once()
        async with self._members.guarding(plan.bundle_id):
            return await self._bundles.apply(await self._checked(plan))

    async def observe(
        self, ref: BundleRef, *, not_before: datetime | None = None
    ) -> ObservedBundle:
        """The bundle as the cache (or the API) sees it; never remediates."""
        return await self._bundles.observe(ref, not_before=not_before)

    async def stop(self, ref: BundleRef) -> None:
        """Delete running pods; keep finished ones (their logs) and everything else."""
        async with self._members.guarding(ref.bundle_id):
            await self._bundles.stop(ref)

    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        """Remove the app; its volumes (claims, in a namespace kept for them) stay by default."""
        async with self._members.guarding(ref.bundle_id):
            await self._bundles.destroy(ref, options)

    def membership(
        self, replica: str, settings: MembershipSettings | None = None
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        """Join the host's replicas on Leases in ``server_namespace`` (``docs/replicas.md``)."""
        return self._members.join(replica, settings)

    @property
    def leases(self) -> LeaseStore:
        """The Leases in ``server_namespace`` a membership joined here keeps (no call)."""
        return self._members.leases

    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        """``http://<workload>.<namespace>.svc.<cluster domain>:<port>``, computed."""
        return self._bundles.upstream(ref, port)

    # -- where bundles are: what a fleet asks of its members (pando_runtime.fleet) ----------

    async def holds(self, bundle_id: str) -> bool:
        """Whether this cluster has the bundle's namespace (its volumes alone included).

        From the cache when it is synced, else one read; ``AdapterUnavailable`` when neither.
        """
        facts = await self.session.reads.namespace(namespace_for(bundle_id))
        return facts is not None and not facts.terminating and facts.bundle_id == bundle_id

    def known_to_hold(self, bundle_id: str) -> bool:
        """Whether the running cache has the bundle's namespace now (no call).

        ``False`` also while there is no cache (before the adapter is entered).
        """
        cache = self.session.cache.informer
        facts = cache.namespaces.by_name.get(namespace_for(bundle_id)) if cache else None
        return facts is not None and facts.bundle_id == bundle_id

    async def held_bundles(self) -> list[str]:
        """Every bundle this cluster holds (one list of the apps' namespaces)."""
        return await self._members.bundle_ids()

    def requests_by_bundle(self) -> dict[str, BundleRequests]:
        """What each bundle's live pods request, on a node or waiting for one (no call).

        From the running cache (empty without one): what this cluster's own view counts of
        placements made here, by this process or any other.
        """
        cache = self.session.cache.informer
        return cache.pods.requests_by_bundle() if cache else {}

    # -- capacity and usage ------------------------------------------------------------------

    async def capacity(self) -> Capacity:
        """Eligible nodes' allocatable minus what other pods request; the roomiest node."""
        return await self._capacity.capacity()

    async def largest_fit_for(self, bundle_id: str) -> Fit | None:
        """The roomiest eligible node for ``bundle_id``, its own pods counted as free."""
        return await self._capacity.largest_fit_for(bundle_id)

    async def usage(self, ref: BundleRef) -> BundleUsage:
        """Each workload's CPU and memory now, with its limits; volumes' bytes are unknown."""
        return await self._usage.usage(ref)

    async def in_use(self) -> InUse:
        """CPU and memory used now by every app's pods, summed (unsampled pods not counted)."""
        return await self._usage.in_use()

    # -- events, logs, exec --------------------------------------------------------------------

    def watch_bundles(self) -> contextlib.AbstractAsyncContextManager[AsyncIterator[BundleEvent]]:
        """Bundle events from the pod watch: ``WATCHING`` first, ``MISSED`` after a relist."""
        return self._events.watch()

    def logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> contextlib.AbstractAsyncContextManager[ByteReceiveStream]:
        """The latest instance's log; a followed log is reopened while the pod runs."""
        return self._io.logs(ref, options)

    def exec(
        self, ref: WorkloadRef, request: ExecRequest
    ) -> contextlib.AbstractAsyncContextManager[ExecSession]:
        """Run a command in the workload's running instance over the exec stream."""
        return self._io.exec(ref, request)

    # -- volumes --------------------------------------------------------------------------

    async def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        """A claim in the bundle's namespace (made when absent); its volume is set to Retain."""
        return await self._volumes.create_volume(request)

    async def destroy_volume(self, handle: VolumeHandle) -> None:
        """Delete the volume and its data; its namespace goes too when nothing else is left."""
        await self._volumes.destroy_volume(handle)

    def snapshot_volume(
        self, handle: VolumeHandle
    ) -> contextlib.AbstractAsyncContextManager[ByteReceiveStream]:
        """The volume's files as a tar stream, read by a helper that mounts it read-only."""
        return self._volumes.snapshot_volume(handle)

    async def restore_volume(
        self, handle: VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        """Replace the volume's files with a tar stream, in place; creates the volume if absent."""
        await self._volumes.restore_volume(handle, source)

    # -- images ---------------------------------------------------------------------------

    async def has_image(self, reference: str) -> bool:
        """Whether the configured registry has ``reference`` (a manifest ``HEAD``).

        True for an image of any other registry: the kubelet pulls it on start.
        """
        return await self._images.has_image(reference)

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        """Push an OCI image layout or docker archive into the configured registry.

        Returns ``<registry>/<repository>@sha256:<digest>`` (gate: ``image_import``).
        """
        return await self._images.import_image(source)

    # -- trial and edge -------------------------------------------------------------------

    async def trial(self, request: TrialRequest) -> TrialResult:
        """Run the image once, alone; report its ports, exit code and first 64 KiB of log."""
        restricted = request.egress is not None
        if request.isolation_floor >= IsolationClass.SANDBOXED:
            await self._sandbox.look(strict=True)
        self._rules.check_trial(request, await self._capabilities(look=restricted))
        return await self._trials.trial(await self._images.with_trial_pull_auth(request))

    async def apply_edge(self, plan: EdgePlan) -> None:
        """Converge the edge; nothing is written when its digest is unchanged."""
        await self._edges.apply_edge(plan)

    async def observe_edge(self, name: str) -> EdgeState:
        """Whether the edge serves; when not, why, in plain words."""
        return await self._edges.observe_edge(name)

    async def remove_edge(self, name: str) -> None:
        """Delete everything the edge made (its volumes stay: they are data)."""
        await self._edges.remove_edge(name)

    async def edges(self) -> tuple[str, ...]:
        """Names of the installed edges."""
        return await self._edges.edges()

    async def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        """Handles of the volumes the edges mount, for backups."""
        return await self._edges.edge_volumes()
