"""The Docker adapter: the contract over one Docker Engine, through its HTTP API.

Used as ``async with DockerAdapter({...}) as runtime``: entering starts the cache (the
daemon's event stream and one relist); observe, events, logs and exec read from it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Self

import anyio
import attrs
from anyio.abc import ByteReceiveStream

from pando_runtime import (
    AdapterFailed,
    BundleEvent,
    BundleEventKind,
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
    InvalidConfig,
    LogOptions,
    LogRetention,
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
    validate_plan,
)
from pando_runtime.fleet import BundleRequests
from pando_runtime.plugin import (
    APP_CAPABILITIES,
    StoreMembership,
    WriteEpochs,
    raise_problems,
    validate_exec_request,
    validate_trial,
)

from ._info import ADAPTER, DESCRIPTION, DockerConfig, UpstreamMode
from ._settings_checks import config_problems
from .api import EngineTransport, TransportStats
from .cache import ContainerCache
from .endpoint import EngineLink
from .features import (
    AgentService,
    AgentSettings,
    Bundles,
    BundleSettings,
    Edges,
    EgressBundles,
    EgressGuard,
    EngineCapacity,
    EngineFirewall,
    EngineUsage,
    Fences,
    HeldBundles,
    ImageImport,
    OciRuntimes,
    PrivateNetworks,
    Trials,
    Volumes,
    default_ca_file,
    docker_problems,
    open_exec,
    open_logs,
    runtime_key,
)
from .manifests import (
    GRANTABLE_CAPABILITIES,
    AgentNames,
    EdgeNames,
    LogCap,
    Naming,
    edge_bridge,
)

__all__ = ["DockerAdapter"]


class DockerAdapter(RuntimeAdapter):
    """Runs each app's workloads as labelled containers on a bridge network of its own."""

    kind = "docker"
    api_version = ADAPTER.api_version
    description = DESCRIPTION
    Config = DockerConfig

    def __init__(self, config: Mapping[str, Any] | DockerConfig | None = None) -> None:
        super().__init__(config)
        cfg: DockerConfig = self.config
        self.replicas = StoreMembership(cfg.lease_store)
        """Host replicas over the lease store the settings name, and the write guard."""
        endpoint, problems = config_problems(cfg)
        problems += self.replicas.problems()
        if problems or endpoint is None:
            raise InvalidConfig(
                "invalid Docker adapter settings",
                problems,
                remedy="Fix each listed setting; docs/docker.md says how to reach a remote "
                "engine (tcp:// with TLS, ssh:// with a pinned host key, a context).",
            )
        self.endpoint = endpoint
        """The engine the settings name: its address, where it was named, TLS or SSH."""
        self.naming = Naming(owner=cfg.owner, prefix=cfg.label_prefix)
        self.transport = EngineTransport(
            EngineLink(endpoint, connect_timeout=cfg.connect_timeout),
            connect_timeout=cfg.connect_timeout,
            read_timeout=cfg.read_timeout,
            answer_timeout=cfg.answer_timeout,
        )
        self.cache = ContainerCache(
            self.transport,
            self.naming,
            max_staleness=cfg.cache_max_staleness,
            probe_interval=cfg.cache_probe_interval,
            read_timeout=cfg.read_timeout,
        )
        self.epochs = WriteEpochs(self.replicas)
        """The epoch each app is written under, as a member of this adapter's own membership."""
        self.fences = Fences(self.cache)
        """Each app's containers labelled with the write's epoch, the stale repaired (whether
        this adapter's membership or a fleet's moved it)."""
        self.runtimes = OciRuntimes(self.transport, cfg.oci_runtime, cfg.sandbox_runtime)
        """The OCI runtime each app runs under, and the checks that it does."""
        share = (self.config.capacity_cpu_millis, self.config.capacity_memory_bytes)
        self._capacity = EngineCapacity(self.transport, self.cache, share)
        self.egress_guard = (
            EgressGuard(self.transport, self.naming, cfg.egress_guard_image, cfg.subnet_pool)
            if cfg.egress_guard_image
            else None
        )
        self.firewall = EngineFirewall(
            self.transport, self.egress_guard, gateway=cfg.egress_gateway_image is not None
        )
        """Which firewall the engine has, as far as the guard and restricted egress need it."""
        # Exposed ports alone are open to the host (its namespace) and the edges: rules the
        # guard's helper writes; a proxy_container on the bundle networks would pass them.
        self.private = (
            PrivateNetworks(
                self.transport,
                self.cache,
                self.naming,
                self.egress_guard,
                wait=cfg.dependency_wait or cfg.read_timeout,
            )
            if self.egress_guard is not None and cfg.upstream_mode == UpstreamMode.ADDRESS
            else None
        )
        self._bundles = Bundles(
            self.transport,
            self.cache,
            self.naming,
            BundleSettings(
                log_cap=LogCap(max_bytes=cfg.log_max_bytes, files=cfg.log_max_files),
                stop_timeout=cfg.stop_timeout,
                pids_limit=cfg.pids_limit,
                dependency_wait=cfg.dependency_wait,
                read_timeout=cfg.read_timeout,
                subnet_pool=cfg.subnet_pool,
                subnet_prefix=cfg.subnet_prefix,
                proxy_container=cfg.proxy_container,
                # Edges are routed to bundles under private networks: Docker 28.2+ would
                # drop them before the bundle's chain is read.
                trusted_bridges=(edge_bridge(self.naming.owner),) if self.private else (),
            ),
            prepare=self.egress_guard.ensure if self.egress_guard else None,
            members=self._network_members,
            sealed=self.private.seal if self.private else None,
            runtimes=self.runtimes,
        )
        self.egress = EgressBundles(
            self.transport,
            self.cache,
            self.naming,
            self._bundles,
            image=cfg.egress_gateway_image,
            subnet_pool=cfg.subnet_pool,
            subnet_prefix=cfg.subnet_prefix,
            stop_timeout=cfg.stop_timeout,
        )
        self._images = ImageImport(self.transport)
        self._usage = EngineUsage(self.transport, self.cache)
        self._trials = Trials(self.transport, self.naming, cfg.helper_image, self.runtimes)
        self._volumes = Volumes(self.transport, self.naming, cfg.helper_image)
        self._held = HeldBundles(self.cache, self._volumes)
        self._edges = Edges(
            self.transport,
            self.cache,
            EdgeNames(self.naming),
            self._volumes,
            log_cap=LogCap(max_bytes=cfg.log_max_bytes, files=cfg.log_max_files),
            stop_timeout=cfg.stop_timeout,
            join_bundles=self.private is None,
        )
        self.agent = (
            AgentService(
                self.transport,
                self.cache,
                AgentNames(self.naming),
                AgentSettings(
                    image=str(cfg.agent_image),
                    address=str(cfg.agent_address),
                    port=cfg.agent_port,
                    pool=cfg.subnet_pool,
                    ca_pem=cfg.agent_ca,
                    ca_file=Path(cfg.agent_ca_file)
                    if cfg.agent_ca_file
                    else default_ca_file(cfg.owner),
                    trusted_pem=cfg.agent_trusted_cas,
                ),
            )
            if cfg.upstream_mode == UpstreamMode.AGENT
            else None
        )
        self._stack: contextlib.AsyncExitStack | None = None
        self._group: anyio.abc.TaskGroup | None = None

    # -- plumbing ------------------------------------------------------------------------------

    def _network_members(self) -> tuple[str, ...]:
        """Containers joined to every bundle network: the host's, the agent, the edges."""
        own = (self.config.proxy_container,) if self.config.proxy_container else ()
        agent = (self.agent.container,) if self.agent is not None else ()
        return own + agent + (self._edges.containers if self._edges.join_bundles else ())

    @property
    def stats(self) -> TransportStats:
        """Engine API calls made so far, by method and route template."""
        return self.transport.stats

    async def __aenter__(self) -> Self:
        stack = contextlib.AsyncExitStack()
        group = await stack.enter_async_context(anyio.create_task_group())
        self._stack, self._group = stack, group
        self.cache.start(group)
        try:
            await self.cache.ready()
            await self._volumes.relist()
            await self._edges.relist()
            if self.agent is not None:
                await self.agent.open()
                group.start_soon(self.agent.keep_renewed)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def aclose(self) -> None:
        """Stop the event stream and close the connections. Safe to call twice."""
        stack, group = self._stack, self._group
        self._stack = self._group = None
        self.cache.hub.close()
        if group is not None:
            group.cancel_scope.cancel()
        if stack is not None:
            await stack.aclose()
        self.cache.stopped()
        await self.transport.aclose()

    async def _ready(self) -> None:
        if self._group is None:
            raise AdapterFailed(
                "the Docker adapter answers from the daemon's event stream, which runs only "
                "while the adapter is open",
                remedy="Use the adapter as 'async with DockerAdapter(...) as runtime:'.",
            )
        await self.cache.ready()

    # -- identity & health ---------------------------------------------------------------------

    async def health_check(self) -> None:
        """The daemon answers, speaks API 1.41 or newer, and has the runtimes named.

        And a firewall the egress guard can write its rules with, when ``egress_guard_image``
        is set (``EngineFirewall.check``).
        """
        await self.transport.version()
        await self.transport.ping()
        await self.runtimes.check_listed()
        await self.firewall.check()

    async def capabilities(self) -> RuntimeCapabilities:
        """What this adapter does today; everything else is declared unsupported.

        The class and the trials' observation follow the runtimes (``OciRuntimes.sandboxes``).
        """
        observes = not self.runtimes.sandboxes
        ruled = not self.firewall.refuses_rules
        return RuntimeCapabilities(
            isolation_class=self.runtimes.isolation_class,
            exec=True,
            multiple_workloads=True,
            carried_files=True,
            resource_limits=True,
            bundle_events=True,
            persistent_volumes=True,
            reports_usage=True,
            trial_run=True,
            port_observation=observes,
            write_observation=observes,
            image_delivery=(ImageDelivery.IMPORT, ImageDelivery.REGISTRY),
            log_retention=LogRetention(supports_size_cap=True, min_bytes=1024),
            egress_restriction=self.egress.enabled and ruled,
            egress_host_names=self.egress.enabled and ruled,
            edge=True,
            private_network=self.private is not None and ruled,
            default_capabilities=APP_CAPABILITIES,
            grantable_capabilities=GRANTABLE_CAPABILITIES,
            membership=self.replicas.named is not None,
        )

    # -- bundles -------------------------------------------------------------------------------

    async def check_plan(self, plan: BundlePlan) -> None:
        """The contract's rules and this adapter's, in one pass; writes nothing."""
        self.firewall.check_plan(plan)
        problems = validate_plan(plan, await self.capabilities()) + docker_problems(plan)
        raise_problems(problems, f"plan for bundle {plan.bundle_id!r}")

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        """Converge the daemon onto ``plan``: re-applying the same plan makes no call.

        As a member (of this adapter's membership, or a fleet's), its containers carry the
        writer's epoch; one an older epoch wrote since this one began is removed
        (``docs/replicas.md``, fencing on Docker).
        """
        await self.check_plan(plan)
        await self._ready()
        async with self.epochs.writing(plan.bundle_id), self.fences.applying(plan.bundle_id):
            await self._capacity.check_fits(plan)
            await self._volumes.ensure_for_plan(plan)
            handle = await self.egress.apply(plan)
            if self.private is not None:
                await self.private.sync(plan)
        return handle

    async def observe(
        self, ref: BundleRef, *, not_before: datetime | None = None
    ) -> ObservedBundle:
        """The bundle from the cache: no call to the daemon (unless ``not_before`` waits)."""
        await self._ready()
        if not_before is None:
            confirmed = self.cache.confirmed_at()
        else:
            confirmed = await self.cache.confirmed_since(not_before)
        observed = self._bundles.observe(ref.bundle_id, confirmed)
        return attrs.evolve(observed, volumes=self._volumes.observed(ref.bundle_id))

    async def stop(self, ref: BundleRef) -> None:
        """Stop every running workload; containers, logs and the network are kept."""
        await self._ready()
        async with self.replicas.writing(ref.bundle_id):
            await self._bundles.stop(ref)

    async def destroy(self, ref: BundleRef, options: DestroyOptions | None = None) -> None:
        """Remove the bundle's containers and network; its volumes only when asked."""
        await self._ready()
        options = options or DestroyOptions()
        async with self.replicas.writing(ref.bundle_id):
            await self.egress.destroy(ref, options)
            if self.private is not None:
                await self.private.release(ref.bundle_id)
            if not options.keep_volumes:
                await self._volumes.destroy_bundle_volumes(ref.bundle_id)

    # -- host replicas -------------------------------------------------------------------------

    def membership(
        self, replica: str, settings: MembershipSettings | None = None
    ) -> contextlib.AbstractAsyncContextManager[Membership]:
        """Join the host's replicas over the ``lease_store`` setting's store (``docs/replicas.md``).

        Every replica's adapter names the same engine, owner and store. A write is refused in
        the replica that does not own the bundle (the engine refuses nothing); a stale write
        that lands anyway is removed by the owner's next apply (``features._fencing``).
        """
        return self.replicas.join(replica, settings, bundles=self.held_bundles)

    # -- where bundles are (what a fleet asks of its members) ---------------------------------

    async def holds(self, bundle_id: str) -> bool:
        """Whether the engine has anything of the bundle: a container, its network, a volume.

        From the view: no call. ``AdapterUnavailable`` when the view is past its bound.
        """
        await self._ready()
        self.cache.confirmed_at()
        return self._held.holds(bundle_id)

    def known_to_hold(self, bundle_id: str) -> bool:
        """:meth:`holds` from what the view holds now, unchecked (``False`` before it opens)."""
        return self._held.holds(bundle_id)

    async def held_bundles(self) -> list[str]:
        """Every bundle the engine has anything of, from the view (no call)."""
        await self._ready()
        self.cache.confirmed_at()
        return self._held.bundle_ids()

    def requests_by_bundle(self) -> Mapping[str, BundleRequests]:
        """The limits each bundle's containers hold of the engine's room (no call)."""
        return self._capacity.requests_by_bundle()

    def runtime_key(self) -> str:
        """The engine's address (``endpoint.host``, normalised) and the owner label (no I/O)."""
        return runtime_key(self.endpoint.host, self.naming)

    def upstream(self, ref: WorkloadRef, port: int) -> Upstream:
        """Where the host dials a workload's port (see ``upstream_mode``); no I/O.

        In ``address`` mode the workload's alias is resolved through the daemon's embedded
        DNS only inside the network, so the URL names the container by its name, which the
        host resolves with :meth:`address_of`; in ``proxy_container`` mode the host's own
        container is on the bundle network and dials the alias. In ``agent`` mode the URL is
        ``address`` mode's and ``dial`` says how to reach it through the engine's agent
        (which resolves the container's name itself); it needs the adapter open.
        """
        name = self.naming.container_name(ref.bundle_id, ref.workload)
        if self.config.upstream_mode == UpstreamMode.PROXY_CONTAINER:
            host = name
        else:
            host = self.address_of(ref) or name
        dial = None
        if self.agent is not None:
            if self._group is None:
                raise AdapterFailed(
                    "the agent's credentials are ready only while the adapter is open",
                    remedy="Use the adapter as 'async with DockerAdapter(...) as runtime:'.",
                )
            dial = self.agent.dial(name, port)
        return Upstream(url=f"http://{host}:{port}", pool_key=f"docker/{name}", dial=dial)

    def address_of(self, ref: WorkloadRef) -> str | None:
        """The newest container's address on its bundle network, as the cache knows it."""
        view = self.cache.bundle(ref.bundle_id).newest().get(ref.workload)
        return view.address if view is not None and view.address else None

    # -- volumes -------------------------------------------------------------------------------

    async def create_volume(self, request: VolumeRequest) -> VolumeHandle:
        """A named volume with this owner's labels (found when it exists)."""
        await self._ready()
        return await self._volumes.create_volume(request)

    async def destroy_volume(self, handle: VolumeHandle) -> None:
        """Remove the volume and its data; refused while a container mounts it."""
        await self._ready()
        await self._volumes.destroy_volume(handle)

    @contextlib.asynccontextmanager
    async def snapshot_volume(self, handle: VolumeHandle) -> AsyncIterator[ByteReceiveStream]:
        """The volume's files as a tar stream, through a throwaway helper container."""
        await self._ready()
        async with self._volumes.snapshot_volume(handle) as stream:
            yield stream

    async def restore_volume(
        self, handle: VolumeHandle, source: ByteReceiveStream | AsyncIterable[bytes]
    ) -> None:
        """Replace the volume's files with a tar stream, in place (created when absent)."""
        await self._ready()
        await self._volumes.restore_volume(handle, source)

    # -- edge --------------------------------------------------------------------------------

    async def apply_edge(self, plan: EdgePlan) -> None:
        """Converge the edge: one container publishing its ports, on every bundle network."""
        await self._ready()
        await self._edges.apply_edge(plan)

    async def observe_edge(self, name: str) -> EdgeState:
        """Whether the edge's container runs, and why not in plain words (one inspect)."""
        await self._ready()
        return await self._edges.observe_edge(name)

    async def remove_edge(self, name: str) -> None:
        """Remove the edge's container; its volumes stay."""
        await self._ready()
        await self._edges.remove_edge(name)

    async def edges(self) -> tuple[str, ...]:
        """Names of this owner's edges."""
        await self._ready()
        return await self._edges.edges()

    async def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        """Volumes the edges mount, for backups."""
        await self._ready()
        return await self._edges.edge_volumes()

    # -- images --------------------------------------------------------------------------------

    async def has_image(self, reference: str) -> bool:
        """Whether the daemon holds ``reference`` or can pull it without credentials."""
        return await self._images.has_image(reference)

    async def import_image(self, source: ByteReceiveStream | AsyncIterable[bytes]) -> str:
        """Load an image archive into the daemon; its ID (``sha256:...``), for plans."""
        return await self._images.import_image(source)

    # -- trial ---------------------------------------------------------------------------------

    async def trial(self, request: TrialRequest) -> TrialResult:
        """Run an image once, alone: its exit code, ports, writes and first 64 KiB of log."""
        caps = await self.capabilities()
        raise_problems(validate_trial(request, caps), f"trial {request.trial_id!r}")
        await self._ready()
        return await self._trials.trial(request)

    # -- capacity ------------------------------------------------------------------------------

    async def capacity(self) -> Capacity:
        """The daemon's CPUs and memory; ``largest_fit``: that less what this owner's apps hold."""
        await self._ready()
        return await self._capacity.capacity()

    async def largest_fit_for(self, bundle_id: str) -> Fit | None:
        """The engine's room for the bundle (its own containers' limits counted free).

        Its machine less the limits this owner's other containers hold (``docs/docker.md``).
        """
        await self._ready()
        return await self._capacity.largest_fit_for(bundle_id)

    async def usage(self, ref: BundleRef) -> BundleUsage:
        """The bundle's workloads and volumes now, from one-shot stats and sizes."""
        await self._ready()
        return await self._usage.usage(ref.bundle_id, self._volumes.names_of(ref.bundle_id))

    async def in_use(self) -> InUse:
        """CPU and memory of every running container of this owner, summed."""
        await self._ready()
        return await self._usage.in_use()

    # -- events --------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watch_bundles(self) -> AsyncIterator[AsyncIterator[BundleEvent]]:
        """The daemon's events as bundle events: WATCHING once the cache is synced."""
        await self._ready()
        confirmed = self.cache.confirmed_at()
        watching = BundleEvent(kind=BundleEventKind.WATCHING, at=confirmed)
        async with self.cache.hub.subscribe(watching) as stream:
            yield stream

    # -- logs and exec -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def logs(
        self, ref: WorkloadRef, options: LogOptions | None = None
    ) -> AsyncIterator[ByteReceiveStream]:
        """The newest container's log, a finished one included."""
        await self._ready()
        async with open_logs(self.transport, self.cache, ref, options or LogOptions()) as stream:
            yield stream

    @contextlib.asynccontextmanager
    async def exec(self, ref: WorkloadRef, request: ExecRequest) -> AsyncIterator[ExecSession]:
        """A command in the running workload, with stdin, stdout and stderr apart."""
        raise_problems(validate_exec_request(request), "exec request")
        await self._ready()
        async with open_exec(self.transport, self.cache, ref, request) as session:
            yield session
