"""The Consul catalog backend: three catalog endpoints over httpx.

Only the catalog API is used, never the agent API: a service registered through an agent
belongs to that agent, and an agent's anti-entropy removes what it does not run. A
synthetic node (``CatalogRegistration.node``) holds the registrations instead, with
``external-source`` in its node metadata, as Consul's own external syncers do.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from pando_runtime import structure_config
from pando_runtime.catalog import CatalogRegistration, CatalogUnavailable

from ._info import ConsulConfig

__all__ = ["ConsulCatalog", "consul_catalog"]

log = logging.getLogger("pando_runtime_consul")
log.addHandler(logging.NullHandler())

EXTERNAL_SOURCE = "pando-runtime"
"""Node metadata ``external-source`` of the synthetic nodes (Consul's UI shows it)."""


class ConsulCatalog:
    """A :class:`~pando_runtime.catalog.CatalogBackend` over Consul's catalog HTTP API.

    ``requests`` counts the HTTP calls made, by endpoint. Raises
    :class:`~pando_runtime.InvalidConfig` for settings that cannot work, naming each one.
    """

    def __init__(self, config: ConsulConfig | None = None) -> None:
        self.config = structure_config(
            ConsulConfig, config or ConsulConfig(), what="consul catalog config"
        )
        headers = {"X-Consul-Token": self.config.token} if self.config.token else {}
        self._client = httpx.AsyncClient(
            base_url=self.config.address.rstrip("/"),
            headers=headers,
            timeout=self.config.timeout,
            verify=self.config.verify,
        )
        self._params = {"dc": self.config.datacenter} if self.config.datacenter else {}
        self.requests: Counter[str] = Counter()

    async def _call(
        self, method: str, path: str, endpoint: str, *, json: Any = None
    ) -> httpx.Response:
        self.requests[endpoint] += 1
        try:
            response = await self._client.request(method, path, params=self._params, json=json)
        except httpx.HTTPError as error:
            raise CatalogUnavailable(
                f"consul at {self.config.address} cannot be reached: {type(error).__name__}: "
                f"{error}",
                remedy="Check the 'address' setting and that Consul is up; the syncer retries.",
                details={"setting": "address", "address": self.config.address, "call": endpoint},
            ) from error
        return response

    @staticmethod
    def _refused(response: httpx.Response, endpoint: str) -> CatalogUnavailable:
        body = response.text.strip()[:300]
        status = response.status_code
        remedy = "See Consul's answer in the message; the syncer retries."
        details: dict[str, Any] = {"status": status, "call": endpoint}
        if status in (HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN):
            remedy = "Give the 'token' setting an ACL token with node and service write."
            details["setting"] = "token"
        return CatalogUnavailable(
            f"consul refused {endpoint} ({status}): {body}", remedy=remedy, details=details
        )

    async def check(self) -> str:
        """The cluster leader's address.

        Raises :class:`~pando_runtime.catalog.CatalogUnavailable` if there is none.
        """
        response = await self._call("GET", "/v1/status/leader", "status/leader")
        if response.status_code != HTTPStatus.OK:
            raise self._refused(response, "status/leader")
        leader = response.json()
        if not leader:
            raise CatalogUnavailable(
                f"consul at {self.config.address} has no leader",
                details={"setting": "address", "address": self.config.address},
            )
        return str(leader)

    async def node_services(self, node: str) -> Sequence[CatalogRegistration]:
        """Every registration of ``node`` in one call (empty for an unknown node)."""
        endpoint = "catalog/node-services"
        response = await self._call("GET", f"/v1/catalog/node-services/{quote(node)}", endpoint)
        if response.status_code == HTTPStatus.NOT_FOUND:
            return []
        if response.status_code != HTTPStatus.OK:
            raise self._refused(response, endpoint)
        body = response.json() or {}
        return [_registration(node, s) for s in body.get("Services") or ()]

    async def register(self, registration: CatalogRegistration) -> None:
        """Create or replace one service on its node (the node is made when missing)."""
        body = {
            "Node": registration.node,
            "Address": self.config.node_address,
            "NodeMeta": {"external-source": EXTERNAL_SOURCE},
            "SkipNodeUpdate": True,
            "Service": {
                "ID": registration.service_id,
                "Service": registration.service,
                "Address": registration.address,
                "Port": registration.port,
                "Tags": list(registration.tags),
                "Meta": dict(registration.metadata),
            },
        }
        await self._write("/v1/catalog/register", "catalog/register", body)

    async def deregister(self, node: str, service_id: str) -> None:
        """Remove one service from ``node`` (Consul answers true when it is already gone)."""
        body = {"Node": node, "ServiceID": service_id}
        await self._write("/v1/catalog/deregister", "catalog/deregister", body)

    async def _write(self, path: str, endpoint: str, body: Mapping[str, Any]) -> None:
        response = await self._call("PUT", path, endpoint, json=body)
        if response.status_code != HTTPStatus.OK:
            raise self._refused(response, endpoint)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()


def _registration(node: str, service: Mapping[str, Any]) -> CatalogRegistration:
    return CatalogRegistration(
        service=str(service.get("Service", "")),
        service_id=str(service.get("ID", "")),
        address=str(service.get("Address", "")),
        port=int(service.get("Port") or 0),
        tags=tuple(service.get("Tags") or ()),
        metadata=dict(service.get("Meta") or {}),
        node=node,
    )


def consul_catalog(config: ConsulConfig) -> ConsulCatalog:
    """The factory ``load_catalog("consul")`` calls."""
    return ConsulCatalog(config)
