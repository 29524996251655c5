"""Apply, observe, stop and destroy: a bundle as labelled containers on its own network.

Every decision reads the cache (no call for what it already knows); every write is one
Engine call, and apply waits until the event stream shows its own writes, so an apply
right after another sees them. Re-applying the same plan makes no call at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import anyio
import attrs

from pando_runtime import (
    AdapterFailed,
    BundleHandle,
    BundlePlan,
    BundleRef,
    DestroyOptions,
    ObservedBundle,
    ObservedWorkload,
    WorkloadPlan,
    WorkloadProblem,
)

from .._log import logger
from ..api import EngineError, EngineTransport, write_failed
from ..cache import BundleView, ContainerCache, ContainerView, Stuck, limits_of
from ..manifests import (
    ContainerRequest,
    LogCap,
    Naming,
    container_request,
    files_tar,
    free_subnet,
    network_request,
)
from ._fencing import Fence, current_fence
from ._images import pull_image
from ._oci_runtimes import OciRuntimes

__all__ = ["BundleSettings", "Bundles"]

_LOG = logger("bundles")

_SUBNET_ATTEMPTS = 5


class BundleSettings:
    """What the bundle feature needs of the adapter's settings."""

    def __init__(
        self,
        *,
        log_cap: LogCap,
        stop_timeout: int,
        pids_limit: int,
        dependency_wait: float,
        read_timeout: float,
        subnet_pool: str,
        subnet_prefix: int,
        proxy_container: str | None,
        trusted_bridges: tuple[str, ...] = (),
    ) -> None:
        self.log_cap = log_cap
        self.stop_timeout = stop_timeout
        self.pids_limit = pids_limit
        self.dependency_wait = dependency_wait
        self.read_timeout = read_timeout
        self.subnet_pool = subnet_pool
        self.subnet_prefix = subnet_prefix
        self.proxy_container = proxy_container
        self.trusted_bridges = trusted_bridges


class Bundles:
    """The bundle lifecycle over one daemon."""

    def __init__(
        self,
        transport: EngineTransport,
        cache: ContainerCache,
        naming: Naming,
        settings: BundleSettings,
        *,
        prepare: Callable[[], Awaitable[None]] | None = None,
        members: Callable[[], tuple[str, ...]] | None = None,
        sealed: Callable[[str, str], Awaitable[None]] | None = None,
        runtimes: OciRuntimes | None = None,
    ) -> None:
        self._api = transport
        self._runtimes = runtimes or OciRuntimes(transport, None, None)
        # Containers joined to every bundle network: the host's own one, then the edges.
        own = (settings.proxy_container,) if settings.proxy_container else ()
        self._members = members or (lambda: own)
        self._sealed = sealed  # closes a new network to its outside (private networks)
        self._prepare = prepare  # runs before an apply's first write (the egress guard)
        self._cache = cache
        self._naming = naming
        self._settings = settings
        self._subnets_in_flight: set[str] = set()
        # Containers a stop told to end and still running: observed stopping meanwhile.
        self._stopping: set[str] = set()

    # -- observe -------------------------------------------------------------------------------

    def observe(self, bundle_id: str, confirmed_at: datetime) -> ObservedBundle:
        """The bundle as the cache holds it: no call to the daemon."""
        view = self._cache.bundle(bundle_id)
        if not view.exists:
            return ObservedBundle(bundle_id=bundle_id, exists=False, confirmed_at=confirmed_at)
        newest = view.newest()
        workloads: dict[str, ObservedWorkload] = {
            name: container.observed(stopping=container.id in self._stopping)
            for name, container in newest.items()
        }
        for name, stuck in view.stuck.items():
            current = newest.get(name)
            if current is None or current.spec != stuck.spec:
                workloads[name] = ObservedWorkload(
                    name=name,
                    present=True,
                    running=False,
                    problem=stuck.problem,
                    problem_detail=stuck.detail,
                )
        return ObservedBundle(
            bundle_id=bundle_id,
            exists=True,
            workloads=tuple(workloads[name] for name in sorted(workloads)),
            confirmed_at=confirmed_at,
        )

    # -- apply ---------------------------------------------------------------------------------

    def requests(self, plan: BundlePlan, dns: tuple[str, ...] = ()) -> dict[str, ContainerRequest]:
        """The create request of every workload of ``plan`` (``dns``: their resolvers)."""
        return {
            w.name: container_request(
                plan,
                w,
                self._naming,
                log_cap=self._settings.log_cap,
                stop_timeout=self._settings.stop_timeout,
                pids_limit=self._settings.pids_limit,
                dns=dns,
                runtime=self._runtimes.for_isolation(plan.isolation),
            )
            for w in plan.workloads
        }

    async def apply(
        self, plan: BundlePlan, *, internal: bool = False, dns: tuple[str, ...] = ()
    ) -> BundleHandle:
        """Converge the daemon onto ``plan`` (checked already) with the fewest calls.

        ``internal``: a network made now has no route out; ``dns``: the workloads' resolvers
        (both for restricted egress).
        """
        # Compared with a view past its bound (or of a daemon found silent), "nothing to
        # write" would be a guess: refuse instead.
        self._cache.check_answers()
        requests = self.requests(plan, dns)
        view, stale = _fenced_out(self._cache.bundle(plan.bundle_id))
        current = view.newest()
        stale += [c for c in view.containers if c.workload not in requests]
        stale += [c for c in view.containers if c.workload in requests and current[c.workload] != c]
        changing = [
            w for w in plan.start_order() if not _keeps(current.get(w.name), requests[w.name])
        ]
        handle = BundleHandle(
            bundle_id=plan.bundle_id, handle=self._naming.network_name(plan.bundle_id)
        )
        if not changing and not stale and view.network_id:
            return handle
        _LOG.info(
            "applying %s: %d workloads to (re)create",
            plan.bundle_id,
            len(changing),
            extra={"bundle_id": plan.bundle_id},
        )
        if self._prepare is not None:
            await self._prepare()
        await self._remove(stale)
        created_network = False
        if not view.network_id:
            await self._create_network(plan.bundle_id, internal=internal)
            created_network = True
        made: dict[str, str] = {}
        try:
            for workload in changing:
                old = current.get(workload.name)
                if old is not None:
                    await self._remove([old])
                container_id = await self._create(plan.bundle_id, workload, requests[workload.name])
                if container_id is not None:
                    made[workload.name] = container_id
        except _Undone as undone:  # nothing of this apply is kept
            await self._roll_back(plan.bundle_id, made.values(), created_network)
            raise undone.error from None
        for workload in changing:
            if workload.name in made:
                await self._wait_for_dependencies(plan, workload)
                await self._start(
                    plan.bundle_id, workload, requests[workload.name], made[workload.name]
                )
        return handle

    async def _create_network(self, bundle_id: str, *, internal: bool = False) -> None:
        tried: list[str] = []
        listed = False
        for _ in range(_SUBNET_ATTEMPTS):
            taken = [*tried, *self._cache.taken_subnets, *self._subnets_in_flight]
            subnet = free_subnet(self._settings.subnet_pool, self._settings.subnet_prefix, taken)
            if subnet is None and not listed:  # removed networks free theirs: list them now
                self._cache.note_networks(await self._api.get_json("/networks"))
                listed = True
                continue
            if subnet is None:
                raise AdapterFailed(
                    f"no free /{self._settings.subnet_prefix} is left in "
                    f"{self._settings.subnet_pool}",
                    remedy="Widen the 'subnet_pool' setting or destroy unused bundles.",
                    details={"bundle_id": bundle_id},
                )
            body = network_request(
                self._naming,
                bundle_id,
                subnet,
                internal=internal,
                trusted_bridges=self._settings.trusted_bridges,
            )
            # Held until the network exists (or its create failed): the other first applies of
            # this adapter, running meanwhile, carve around it instead of racing for it.
            self._subnets_in_flight.add(subnet)
            try:
                answer = await self._api.request("POST", "/networks/create", body=body)
                break
            except EngineError as error:
                if error.conflict and await self._adopted(bundle_id):
                    return
                if error.conflict:
                    raise AdapterFailed(
                        f"a network named {self._naming.network_name(bundle_id)!r} exists and "
                        "is not this adapter's",
                        remedy="Remove or rename the other network, or give this adapter "
                        "another 'owner'; nothing was written.",
                        details={**error.details, "bundle_id": bundle_id},
                    ) from None
                if "overlap" not in error.message:
                    raise write_failed(
                        error, "creating the bundle network", bundle_id=bundle_id
                    ) from None
                tried.append(subnet)  # another writer took it meanwhile: see what is taken
                self._cache.note_networks(await self._api.get_json("/networks"))
                listed = True
            finally:
                self._subnets_in_flight.discard(subnet)
        else:
            raise AdapterFailed(
                "the bundle network's subnet was taken by other writers each time",
                details={"bundle_id": bundle_id, "tried": tried},
            )
        network_id = str(answer.json()["Id"])
        self._cache.set_network(bundle_id, network_id)
        self._cache.taken_subnets.add(subnet)
        if self._sealed is not None:
            await self._sealed(bundle_id, subnet)
        for member in self._members():  # the host's own container, the edges
            await self._api.request(
                "POST",
                "/networks/{id}/connect",
                args={"id": network_id},
                body={"Container": member},
            )

    async def _adopted(self, bundle_id: str) -> bool:
        """Whether the network that took the bundle network's name is this owner's own.

        Made by a process of this owner that the view has not heard of yet (a host killed while
        the daemon still made its network): listed now, it is the bundle's, sealed and joined
        by the host's own container and the edges as a new one would be.
        """
        networks = await self._api.get_json("/networks")
        self._cache.note_networks(networks)
        network_id = self._cache.bundle(bundle_id).network_id
        if network_id is None:
            return False
        _LOG.warning(
            "bundle %s: its network, made by another process of this owner, is kept",
            bundle_id,
            extra={"bundle_id": bundle_id},
        )
        if self._sealed is not None:
            found = next(n for n in networks if str(n["Id"]) == network_id)
            for config in (found.get("IPAM") or {}).get("Config") or []:
                await self._sealed(bundle_id, str(config["Subnet"]))
        for member in self._members():
            with contextlib.suppress(EngineError):  # joined already by the process that made it
                await self._api.request(
                    "POST",
                    "/networks/{id}/connect",
                    args={"id": network_id},
                    body={"Container": member},
                )
        return True

    async def _create(
        self, bundle_id: str, workload: WorkloadPlan, request: ContainerRequest
    ) -> str | None:
        """Create the container (pulling its image if absent); ``None`` when it cannot be."""
        fence = current_fence()
        for attempt in range(2):
            try:
                answer = await self._api.request(
                    "POST",
                    "/containers/create",
                    params={"name": request.name},
                    body=self._under_epoch(request.body, fence),
                )
            except EngineError as error:
                if error.conflict:
                    raise _Undone(_clash(request.name, bundle_id, error)) from None
                if error.not_found and attempt == 0:
                    problem = await pull_image(self._api, workload.image, workload.pull_auth)
                    if problem is None:
                        continue
                    self._cache.set_stuck(
                        bundle_id,
                        workload.name,
                        Stuck(
                            spec=request.spec, problem=WorkloadProblem.IMAGE_PULL, detail=problem
                        ),
                    )
                    return None
                raise write_failed(error, f"creating workload {workload.name!r}") from None
            container_id = str(answer.json()["Id"])
            try:
                await self._runtimes.verify(
                    container_id,
                    request.body["HostConfig"].get("Runtime"),
                    f"workload {workload.name!r} of bundle {bundle_id!r}",
                )
            except AdapterFailed as error:
                raise _Undone(error) from None
            self._cache.created(
                ContainerView(
                    id=container_id,
                    bundle_id=bundle_id,
                    workload=workload.name,
                    spec=request.spec,
                    created=datetime.now(UTC),
                    limits=limits_of(request.body["HostConfig"]),
                    epoch=fence.epoch if fence is not None else None,
                )
            )
            if request.files:
                await self._api.put_archive(container_id, files_tar(request.files))
            return container_id
        return None

    def _under_epoch(self, body: dict[str, Any], fence: Fence | None) -> dict[str, Any]:
        """``body`` with the epoch label of ``fence``.

        Outside the spec hash: a new epoch alone recreates nothing.
        """
        if fence is None:
            return body
        return {**body, "Labels": {**body["Labels"], self._naming.epoch_key: str(fence.epoch)}}

    async def _start(
        self, bundle_id: str, workload: WorkloadPlan, request: ContainerRequest, container_id: str
    ) -> None:
        try:
            await self._api.request("POST", "/containers/{id}/start", args={"id": container_id})
        except EngineError as error:
            if error.not_found or error.status >= 500 or error.status == 400:  # noqa: PLR2004
                self._cache.set_stuck(
                    bundle_id,
                    workload.name,
                    Stuck(
                        spec=request.spec,
                        problem=WorkloadProblem.CANNOT_START,
                        detail=error.message,
                    ),
                )
                return
            raise write_failed(error, f"starting workload {workload.name!r}") from None
        self._cache.set_stuck(bundle_id, workload.name, None)
        # Read our own write: the next apply must see this instance.
        await self._cache.wait_until(
            lambda: _seen_started(self._cache.container(container_id)),
            self._settings.read_timeout,
        )

    async def _wait_for_dependencies(self, plan: BundlePlan, workload: WorkloadPlan) -> None:
        if not workload.depends_on or self._settings.dependency_wait <= 0:
            return
        checked = {w.name: w.health is not None for w in plan.workloads}

        def ready() -> bool:
            newest = self._cache.bundle(plan.bundle_id).newest()
            for name in workload.depends_on:
                view = newest.get(name)
                if view is None or not view.running:
                    return False
                if checked.get(name) and view.healthy is not True:
                    return False
            return True

        await self._cache.wait_until(ready, self._settings.dependency_wait)

    async def _remove(self, containers: Iterable[ContainerView]) -> None:
        for container in containers:
            try:
                await self._api.remove_container(container.id)
            except EngineError as error:
                raise write_failed(error, f"removing workload {container.workload!r}") from None
            await self._cache.wait_until(
                _gone(self._cache, container.id), self._settings.read_timeout
            )

    async def _roll_back(self, bundle_id: str, made: Iterable[str], network: bool) -> None:
        """Undo what an apply that hit a name clash wrote: its new containers and network."""
        with anyio.CancelScope(shield=True):
            for container_id in made:
                try:
                    await self._api.remove_container(container_id)
                except EngineError:
                    _LOG.warning("could not roll back a container of %s", bundle_id)
            if network:
                await self._remove_network(bundle_id)

    async def _remove_network(self, bundle_id: str) -> None:
        network_id = self._cache.bundle(bundle_id).network_id
        if network_id is None:
            return
        for member in self._members():  # a network with an endpoint cannot be removed
            try:
                await self._api.request(
                    "POST",
                    "/networks/{id}/disconnect",
                    args={"id": network_id},
                    body={"Container": member, "Force": True},
                )
            except EngineError as error:
                if not error.not_found and error.status != 403:  # noqa: PLR2004 - not on it
                    raise write_failed(error, "leaving the bundle network") from None
        try:
            await self._api.request("DELETE", "/networks/{id}", args={"id": network_id})
        except EngineError as error:
            if not error.not_found:
                raise write_failed(
                    error, "removing the bundle network", bundle_id=bundle_id
                ) from None
        self._cache.set_network(bundle_id, None)

    # -- stop and destroy ----------------------------------------------------------------------

    async def stop(self, ref: BundleRef) -> None:
        """Stop every running container; keep them, their logs and the network.

        Returns once each has ended: the engine's stop waits up to ``stop_timeout`` after
        SIGTERM, then kills. Meanwhile ``observe`` reports them stopping.
        """
        running = [c for c in self._cache.bundle(ref.bundle_id).containers if c.running]
        self._stopping.update(c.id for c in running)
        try:
            for container in running:
                await self._stop_one(container)
        finally:
            self._stopping.difference_update(c.id for c in running)

    async def _stop_one(self, container: ContainerView) -> None:
        try:
            await self._api.request(
                "POST",
                "/containers/{id}/stop",
                args={"id": container.id},
                params={"t": self._settings.stop_timeout},
            )
        except EngineError as error:
            if not error.not_found:
                raise write_failed(error, f"stopping workload {container.workload!r}") from None
        await self._cache.wait_until(
            _stopped(self._cache, container.id),
            self._settings.read_timeout + self._settings.stop_timeout,
        )

    async def destroy(self, ref: BundleRef, options: DestroyOptions) -> None:
        """Remove every container (and its anonymous volumes) and the network.

        A running container is killed (no grace period); each removal returns once the
        container is gone, so nothing of the bundle runs when destroy returns.
        """
        view = self._cache.bundle(ref.bundle_id)
        await self._remove(view.containers)
        await self._remove_network(ref.bundle_id)
        self._cache.forget_bundle(ref.bundle_id)


def _fenced_out(view: BundleView) -> tuple[BundleView, list[ContainerView]]:
    """The view less what an older epoch wrote since the apply's epoch began, and that.

    Those are removed whatever they hold (``features._fencing``); outside a membership, none.
    """
    fence = current_fence()
    fenced = fence.stale(view.containers) if fence is not None else frozenset()
    if not fenced:
        return view, []
    _LOG.warning(
        "bundle %s: %d containers written under an older epoch are removed",
        view.bundle_id,
        len(fenced),
        extra={"bundle_id": view.bundle_id},
    )
    kept = tuple(c for c in view.containers if c.id not in fenced)
    return attrs.evolve(view, containers=kept), [c for c in view.containers if c.id in fenced]


class _Undone(Exception):
    """An apply that must keep nothing it wrote (a name clash, a runtime ignored)."""

    def __init__(self, error: AdapterFailed) -> None:
        self.error = error


def _clash(name: str, bundle_id: str, error: EngineError) -> AdapterFailed:
    return AdapterFailed(
        f"a container named {name!r} exists and is not this adapter's",
        remedy="Remove or rename the other container, or give this adapter another 'owner'; "
        "nothing of the other container was touched and nothing of this apply was kept.",
        details={**error.details, "bundle_id": bundle_id, "container": name},
    )


def _keeps(current: ContainerView | None, request: ContainerRequest) -> bool:
    """Whether the workload's current instance stays: same spec and running."""
    if current is None:  # absent, or stuck before it had a container: try again
        return False
    return current.spec == request.spec and current.running


def _seen_started(view: ContainerView | None) -> bool:
    return view is not None and view.started_at is not None


def _gone(cache: ContainerCache, container_id: str) -> Callable[[], bool]:
    return lambda: cache.container(container_id) is None


def _stopped(cache: ContainerCache, container_id: str) -> Callable[[], bool]:
    def stopped() -> bool:
        view = cache.container(container_id)
        return view is None or not view.running

    return stopped
