"""Private networks in effect: each bundle's chain (see ``manifests._private``) kept current.

A bundle network is sealed as soon as it is made (its chain rejects everything from outside
before any workload starts); after each apply, once the view holds the exposed workloads'
addresses, the chain is written again with them when they differ from what this adapter
installed last (a re-apply of the same plan makes no call). Every write is one run of the
egress guard's helper in the daemon's namespace.
"""

from __future__ import annotations

import anyio

from pando_runtime import AdapterFailed, BundlePlan

from .._log import logger
from ..api import EngineTransport
from ..cache import ContainerCache
from ..manifests import (
    Allowed,
    Naming,
    edge_bridge,
    private_chain,
    private_script,
    release_script,
)
from ._egress_guard import EgressGuard

__all__ = ["PrivateNetworks"]

_LOG = logger("private")


class PrivateNetworks:
    """Keeps every bundle's exposed ports, and only those, open to the host and the edges."""

    def __init__(
        self,
        transport: EngineTransport,
        cache: ContainerCache,
        naming: Naming,
        guard: EgressGuard,
        *,
        wait: float,
    ) -> None:
        self._api = transport
        self._cache = cache
        self._naming = naming
        self._guard = guard
        self._wait = wait
        self._installed: dict[str, tuple[str, tuple[Allowed, ...]]] = {}  # bundle -> rules

    async def _install(self, bundle_id: str, subnet: str, allowed: tuple[Allowed, ...]) -> None:
        if self._installed.get(bundle_id) == (subnet, allowed):
            return
        chain = private_chain(self._naming.owner, bundle_id)
        started = anyio.current_time()
        await self._guard.run(
            private_script(chain, subnet, edge_bridge(self._naming.owner), allowed)
        )
        self._installed[bundle_id] = (subnet, allowed)
        _LOG.info(
            "bundle %s: %d exposed ports open (rules written in %.2f s)",
            bundle_id,
            len(allowed),
            anyio.current_time() - started,
        )

    async def seal(self, bundle_id: str, subnet: str) -> None:
        """Reject everything from outside a new bundle network (before its workloads run)."""
        await self._install(bundle_id, subnet, ())

    async def sync(self, plan: BundlePlan) -> None:
        """Open the plan's exposed ports on its workloads' addresses, and nothing else."""
        exposed = [w for w in plan.workloads if w.exposed and w.ports]
        bundle_id = plan.bundle_id

        def settled() -> bool:
            newest = self._cache.bundle(bundle_id).newest()
            for workload in exposed:
                view = newest.get(workload.name)
                if view is not None and not (view.address or view.exit_code is not None):
                    return False
            return True

        if not await self._cache.wait_until(settled, self._wait):
            raise AdapterFailed(
                f"the exposed workloads of {bundle_id!r} got no address in time",
                remedy="Apply the plan again; its ports stay closed until then.",
                details={"bundle_id": bundle_id},
            )
        newest = self._cache.bundle(bundle_id).newest()
        allowed = tuple(
            sorted(
                Allowed(view.address, port.number, port.protocol.value)
                for workload in exposed
                if (view := newest.get(workload.name)) is not None and view.address
                for port in workload.ports
            )
        )
        await self._install(bundle_id, await self._subnet(bundle_id), allowed)

    async def _subnet(self, bundle_id: str) -> str:
        known = self._installed.get(bundle_id)
        if known is not None:
            return known[0]
        network_id = self._cache.bundle(bundle_id).network_id
        if network_id is None:
            raise AdapterFailed(
                f"bundle {bundle_id!r} has no network", details={"bundle": bundle_id}
            )
        data = await self._api.get_json("/networks/{id}", args={"id": network_id})
        return str(((data.get("IPAM") or {}).get("Config") or [{}])[0].get("Subnet"))

    async def release(self, bundle_id: str) -> None:
        """The bundle is destroyed: its chain and jumps go (its next network is sealed anew)."""
        self._installed.pop(bundle_id, None)
        await self._guard.run(release_script(private_chain(self._naming.owner, bundle_id)))
