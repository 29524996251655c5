"""The edge: the one container that publishes host ports, joined to every bundle network.

Apply writes nothing when the container's spec hash is the plan's and it runs (it only joins
bundle networks it is not on yet). A changed plan removes the container and creates it again:
one engine binds a host port once, so there is no rolling over. The edges' volumes are
named volumes like an app's, kept when the edge is removed (they are data). The adapter keeps
the names of its edge containers in memory (listed when it opens) so that a bundle network
it creates is joined by every edge without a call to list them.
"""

from __future__ import annotations

from typing import Any

import anyio

from pando_runtime import EdgePlan, EdgeState, VolumeHandle
from pando_runtime.plugin import raise_problems, validate_edge

from .._log import logger
from ..api import EngineError, EngineTransport, write_failed
from ..cache import ContainerCache
from ..manifests import EdgeNames, LogCap, edge_network_request, edge_request, files_tar
from ._images import create_pulling
from ._volumes import Volumes

__all__ = ["Edges"]

_LOG = logger("edge")


def _why_not(name: str, state: dict[str, Any]) -> str:
    status = state.get("Status") or "unknown"
    if state.get("Restarting"):
        return f"edge {name} is restarting (it exited with {state.get('ExitCode')})"
    detail = f"edge {name} is {status}"
    if state.get("Error"):
        detail += f": {state['Error']}"
    elif status == "exited":
        detail += f" with {state.get('ExitCode')}"
    return detail


class Edges:
    """This owner's edges on one daemon."""

    def __init__(
        self,
        transport: EngineTransport,
        cache: ContainerCache,
        names: EdgeNames,
        volumes: Volumes,
        *,
        log_cap: LogCap,
        stop_timeout: int,
        join_bundles: bool = True,
    ) -> None:
        self._api = transport
        self._cache = cache
        self._names = names
        self._volumes = volumes
        self._log_cap = log_cap
        self._stop_timeout = stop_timeout
        # Private networks route edges to bundles through the daemon instead (see _private).
        self.join_bundles = join_bundles
        self._containers: set[str] = set()  # this owner's edge containers, by name
        self._lock = anyio.Lock()

    @property
    def containers(self) -> tuple[str, ...]:
        """Names of the edge containers, as the adapter knows them (no call)."""
        return tuple(sorted(self._containers))

    async def _list(self) -> list[dict[str, Any]]:
        return list(
            await self._api.get_json(
                "/containers/json",
                params={"all": True, "filters": {"label": [self._names.owner_filter]}},
            )
        )

    async def relist(self) -> None:
        """Read which edge containers exist (when the adapter opens)."""
        listed = await self._list()
        self._containers = {str(c["Names"][0]).lstrip("/") for c in listed if c.get("Names")}

    async def _inspect(self, container: str) -> dict[str, Any] | None:
        try:
            return dict(await self._api.get_json("/containers/{id}/json", args={"id": container}))
        except EngineError as error:
            if error.not_found:
                return None
            raise write_failed(error, f"reading edge container {container!r}") from None

    # -- apply ---------------------------------------------------------------------------------

    async def apply_edge(self, plan: EdgePlan) -> None:
        """Converge the edge: nothing is re-created when its spec hash is unchanged."""
        raise_problems(validate_edge(plan), f"edge {plan.name!r}")
        request = edge_request(
            plan, self._names, log_cap=self._log_cap, stop_timeout=self._stop_timeout
        )
        async with self._lock:
            current = await self._inspect(request.name)
            labels = ((current or {}).get("Config") or {}).get("Labels") or {}
            state = (current or {}).get("State") or {}
            if current is not None and labels.get(self._names.naming.spec_key) == request.spec:
                if not state.get("Running"):
                    await self._start(request.name)
                await self._join_bundle_networks(current)
                return
            if current is not None:
                await self._remove(request.name)
            for mount in plan.mounts:
                await self._volumes.ensure_edge_volume(mount.volume_id)
            await self._ensure_network()
            container_id = await create_pulling(self._api, request.name, request.body, "edge")
            self._containers.add(request.name)
            if request.files:
                await self._api.put_archive(container_id, files_tar(request.files))
            await self._join_bundle_networks(await self._inspect(container_id) or {})
            await self._start(container_id)
            _LOG.info("edge %s applied", plan.name)

    async def _start(self, container: str) -> None:
        try:
            await self._api.request("POST", "/containers/{id}/start", args={"id": container})
        except EngineError as error:
            raise write_failed(error, f"starting edge container {container!r}") from None

    async def _ensure_network(self) -> None:
        try:
            await self._api.request(
                "POST", "/networks/create", body=edge_network_request(self._names)
            )
        except EngineError as error:
            if not error.conflict:  # it exists already
                raise write_failed(error, "creating the edge network") from None

    async def _join_bundle_networks(self, container: dict[str, Any]) -> None:
        """Join every bundle network the container is not on yet."""
        if not self.join_bundles:
            return
        joined = {
            str(n.get("NetworkID"))
            for n in ((container.get("NetworkSettings") or {}).get("Networks") or {}).values()
        }
        for network_id in self._cache.network_ids():
            if network_id not in joined:
                await self.join(network_id, str(container.get("Id")))

    async def join(self, network_id: str, container: str) -> None:
        """Connect an edge container to a bundle network (one it is on already is fine)."""
        try:
            await self._api.request(
                "POST",
                "/networks/{id}/connect",
                args={"id": network_id},
                body={"Container": container},
            )
        except EngineError as error:
            if error.status != 403 and not error.not_found:  # noqa: PLR2004 - on it already
                raise write_failed(error, "joining an edge to a bundle network") from None

    async def join_all(self, network_id: str) -> None:
        """Join every edge to a new bundle network (the bundle feature calls it)."""
        for container in self.containers:
            await self.join(network_id, container)

    # -- observe and remove --------------------------------------------------------------------

    async def observe_edge(self, name: str) -> EdgeState:
        """Whether the edge's container runs; when not, why, in plain words."""
        current = await self._inspect(self._names.container(name))
        if current is None:
            return EdgeState(
                name=name,
                present=False,
                running=False,
                detail=f"no edge named {name!r} is installed",
            )
        state = current.get("State") or {}
        if state.get("Running") and not state.get("Restarting"):
            ports = ", ".join(sorted((current.get("HostConfig") or {}).get("PortBindings") or {}))
            return EdgeState(
                name=name,
                present=True,
                running=True,
                detail=f"1 container serving (one engine: one replica), ports {ports or 'none'}",
            )
        return EdgeState(name=name, present=True, running=False, detail=_why_not(name, state))

    async def _remove(self, container: str) -> None:
        try:
            await self._api.request(
                "DELETE", "/containers/{id}", args={"id": container}, params={"force": True}
            )
        except EngineError as error:
            if not error.not_found:
                raise write_failed(error, f"removing edge container {container!r}") from None

    async def remove_edge(self, name: str) -> None:
        """Remove the edge's container (its volumes stay: they are data); idempotent."""
        container = self._names.container(name)
        async with self._lock:
            await self._remove(container)
            self._containers.discard(container)

    async def edges(self) -> tuple[str, ...]:
        """Names of the installed edges (one list call)."""
        labels = [c.get("Labels") or {} for c in await self._list()]
        return tuple(sorted({str(lb[self._names.name_key]) for lb in labels if lb}))

    async def edge_volumes(self) -> tuple[VolumeHandle, ...]:
        """Handles of the volumes the edges mount, for backups."""
        ids: set[str] = set()
        for listed in await self._list():
            value = (listed.get("Labels") or {}).get(self._names.volumes_key) or ""
            ids.update(v for v in value.split(",") if v)
        return tuple(self._volumes.handle(v, None) for v in sorted(ids))
