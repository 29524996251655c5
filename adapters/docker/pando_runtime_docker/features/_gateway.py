"""Restricted egress over the bundle lifecycle: the internal network, the gateway, the env.

:class:`EgressBundles` wraps :class:`~._bundles.Bundles`. Before an apply it makes sure the
bundle network is of the plan's kind (``internal`` when egress is restricted: a network's kind
cannot change, so a switch removes the bundle's containers and network, and the apply makes
them again); it adds the proxy variables to the workloads; after the workloads it converges
the gateway (see ``manifests._gateway``). What it learns (a network's kind, the gateway's
instance) it remembers, so re-applying the same plan makes no call.
"""

from __future__ import annotations

import anyio
import attrs

from pando_runtime import (
    AdapterFailed,
    BundleHandle,
    BundlePlan,
    BundleRef,
    DestroyOptions,
)

from .._log import logger
from ..api import EngineError, EngineTransport, write_failed
from ..cache import ContainerCache
from ..manifests import (
    GATEWAY_ALIAS,
    UNROUTED_RESOLVER,
    GatewayNames,
    Naming,
    config_digest,
    files_tar,
    free_subnet,
    gateway_files,
    gateway_request,
    outbound_network_request,
    proxy_env,
    squid_config,
)
from ._bundles import Bundles

__all__ = ["EgressBundles"]

_LOG = logger("egress")


@attrs.define
class _Gateway:
    container_id: str
    digest: str


class EgressBundles:
    """Bundles whose egress the plan may restrict; ``image`` is the gateway's (Squid)."""

    def __init__(
        self,
        transport: EngineTransport,
        cache: ContainerCache,
        naming: Naming,
        bundles: Bundles,
        *,
        image: str | None,
        subnet_pool: str,
        subnet_prefix: int,
        stop_timeout: int,
    ) -> None:
        self._api = transport
        self._cache = cache
        self._naming = naming
        self._bundles = bundles
        self._image = image
        self._pool = subnet_pool
        self._prefix = subnet_prefix
        self._stop_timeout = stop_timeout
        self._internal: dict[str, bool] = {}  # network id -> internal
        self._gateways: dict[str, _Gateway | None] = {}  # bundle id -> gateway (None: none)
        self.last_gateway_start: float | None = None
        """Seconds the last gateway took from create to started (a figure for the docs)."""

    @property
    def enabled(self) -> bool:
        """Whether restricted plans can run (a gateway image is set)."""
        return self._image is not None

    async def apply(self, plan: BundlePlan) -> BundleHandle:
        """Converge the network's kind, the workloads (with proxy env) and the gateway."""
        restricted = plan.network.egress is not None
        network_id = self._cache.bundle(plan.bundle_id).network_id
        if network_id is not None and await self._is_internal(network_id) != restricted:
            _LOG.info("egress of %s changes kind: the bundle is made again", plan.bundle_id)
            await self.destroy(BundleRef(plan.bundle_id), DestroyOptions())
        env = proxy_env(plan.network.egress, [w.name for w in plan.workloads])
        if env:
            workloads = tuple(attrs.evolve(w, env={**env, **w.env}) for w in plan.workloads)
            plan = attrs.evolve(plan, workloads=workloads)
        dns = (UNROUTED_RESOLVER,) if restricted else ()
        handle = await self._bundles.apply(plan, internal=restricted, dns=dns)
        network_id = self._cache.bundle(plan.bundle_id).network_id
        if network_id is not None:
            self._internal[network_id] = restricted
            await self._converge_gateway(plan, network_id)
        return handle

    async def destroy(self, ref: BundleRef, options: DestroyOptions) -> None:
        """Remove the gateway and its network, then the bundle."""
        await self._remove_gateway(ref.bundle_id, forget=True)
        network_id = self._cache.bundle(ref.bundle_id).network_id
        await self._bundles.destroy(ref, options)
        if network_id is not None:
            self._internal.pop(network_id, None)

    # -- the network's kind ------------------------------------------------------------------

    async def _is_internal(self, network_id: str) -> bool:
        known = self._internal.get(network_id)
        if known is None:
            data = await self._api.get_json("/networks/{id}", args={"id": network_id})
            known = self._internal[network_id] = bool(data.get("Internal"))
        return known

    # -- the gateway -------------------------------------------------------------------------

    async def _current(self, bundle_id: str) -> _Gateway | None:
        if bundle_id in self._gateways:
            return self._gateways[bundle_id]
        names = GatewayNames(self._naming, bundle_id)
        filters = {
            "label": [f"{names.owner_key}={self._naming.owner}", f"{names.bundle_key}={bundle_id}"]
        }
        found = await self._api.get_json(
            "/containers/json", params={"all": True, "filters": filters}
        )
        gateway = None
        for item in found:
            digest = (item.get("Labels") or {}).get(names.digest_key, "")
            running = item.get("State") == "running"
            if gateway is None and running:
                gateway = _Gateway(str(item["Id"]), digest)
            else:  # a stopped or second instance: not ours to keep
                await self._delete_container(str(item["Id"]))
        self._gateways[bundle_id] = gateway
        return gateway

    async def _converge_gateway(self, plan: BundlePlan, network_id: str) -> None:
        egress = plan.network.egress
        if egress is None or not egress.allow or self._image is None:
            # An open network never had a gateway (a switch of kind removed it); an internal
            # one may have one this adapter has not seen yet.
            if egress is None:
                known = self._gateways.get(plan.bundle_id)
            else:
                known = await self._current(plan.bundle_id)
            if known is not None:
                await self._remove_gateway(plan.bundle_id, forget=False)
            self._gateways[plan.bundle_id] = None
            return
        config = squid_config(egress.allow)
        digest = config_digest(self._image, config)
        current = await self._current(plan.bundle_id)
        if current is not None and current.digest == digest:
            return
        await self._remove_gateway(plan.bundle_id, forget=False, keep_network=True)
        names = GatewayNames(self._naming, plan.bundle_id)
        await self._ensure_outbound(names)
        started = anyio.current_time()
        body = gateway_request(names, self._image, digest, stop_timeout=self._stop_timeout)
        try:
            answer = await self._api.request(
                "POST", "/containers/create", params={"name": names.container}, body=body
            )
            container_id = str(answer.json()["Id"])
            self._gateways[plan.bundle_id] = _Gateway(container_id, digest)
            await self._api.put_archive(container_id, files_tar(gateway_files(config)))
            await self._api.request(
                "POST",
                "/networks/{id}/connect",
                args={"id": network_id},
                body={
                    "Container": container_id,
                    "EndpointConfig": {"Aliases": [GATEWAY_ALIAS]},
                },
            )
            await self._api.request("POST", "/containers/{id}/start", args={"id": container_id})
        except EngineError as error:
            if error.not_found and "image" in error.message.lower():
                raise AdapterFailed(
                    f"the egress gateway's image {self._image!r} is not on the daemon",
                    remedy="Load an image with squid under that name (or change the "
                    "'egress_gateway_image' setting) and apply again.",
                    details={"bundle_id": plan.bundle_id, "image": self._image},
                ) from None
            raise write_failed(
                error, "starting the egress gateway", bundle_id=plan.bundle_id
            ) from None
        self.last_gateway_start = anyio.current_time() - started
        _LOG.info(
            "egress gateway of %s started in %.2f s",
            plan.bundle_id,
            self.last_gateway_start,
            extra={"bundle_id": plan.bundle_id},
        )

    async def _ensure_outbound(self, names: GatewayNames) -> None:
        tried: list[str] = []
        for _ in range(5):
            networks = await self._api.get_json("/networks")
            if any(n.get("Name") == names.network for n in networks):
                return
            taken = tried + [
                config.get("Subnet", "")
                for network in networks
                for config in ((network.get("IPAM") or {}).get("Config") or [])
            ]
            subnet = free_subnet(self._pool, self._prefix, taken)
            if subnet is None:
                raise AdapterFailed(
                    f"no free /{self._prefix} is left in {self._pool} for the egress gateway",
                    remedy="Widen the 'subnet_pool' setting or destroy unused bundles.",
                    details={"bundle_id": names.bundle_id},
                )
            try:
                await self._api.request(
                    "POST", "/networks/create", body=outbound_network_request(names, subnet)
                )
            except EngineError as error:
                if "overlap" not in error.message:
                    raise write_failed(
                        error, "creating the egress network", bundle_id=names.bundle_id
                    ) from None
                tried.append(subnet)
            else:
                return
        raise AdapterFailed(
            "the egress network's subnet was taken by other writers each time",
            details={"bundle_id": names.bundle_id, "tried": tried},
        )

    async def _remove_gateway(
        self, bundle_id: str, *, forget: bool, keep_network: bool = False
    ) -> None:
        current = await self._current(bundle_id)
        if current is not None:
            await self._delete_container(current.container_id)
        if forget:
            self._gateways.pop(bundle_id, None)
        else:
            self._gateways[bundle_id] = None
        if keep_network:
            return
        names = GatewayNames(self._naming, bundle_id)
        try:
            await self._api.request("DELETE", "/networks/{id}", args={"id": names.network})
        except EngineError as error:
            if not error.not_found:
                raise write_failed(
                    error, "removing the egress network", bundle_id=bundle_id
                ) from None

    async def _delete_container(self, container_id: str) -> None:
        try:
            await self._api.remove_container(container_id)
        except EngineError as error:
            raise write_failed(error, "removing the egress gateway") from None
