"""The Consul catalog backend: three catalog endpoints and transactions over httpx.

Only the catalog API is used, never the agent API: a service registered through an agent
belongs to that agent, and an agent's anti-entropy removes what it does not run. A
synthetic node (``CatalogRegistration.node``) holds the registrations instead, with
``external-source`` in its node metadata, as Consul's own external syncers do.

Batches (:meth:`ConsulCatalog.write_batch`) go through ``PUT /v1/txn``, at most
``TXN_MAX_OPS`` operations per transaction. A transaction Consul rolls back (409) names
its failed operations: those are answered with ``CatalogRefused`` and the rest is sent
again, so one invalid registration never holds the others back.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import anyio
import httpx

from pando_runtime import PandoRuntimeError, structure_config
from pando_runtime.catalog import (
    CatalogRefused,
    CatalogRegistration,
    CatalogUnavailable,
    CatalogWrite,
)
from pando_runtime.plugin import tls_failure_message

from ._http import TLS_REMEDY, consul_client, datacenter_params
from ._info import ConsulConfig
from ._txn import (
    EXTERNAL_SOURCE,
    MISSING_NODE,
    TXN_MAX_OPS,
    node_get_op,
    node_set_op,
    service_body,
    service_op,
    txn_errors,
)

__all__ = ["EXTERNAL_SOURCE", "ConsulCatalog", "consul_catalog"]

log = logging.getLogger("pando_runtime_consul")
log.addHandler(logging.NullHandler())

Key = tuple[str, str]

_SPLIT = (HTTPStatus.CONFLICT, HTTPStatus.BAD_REQUEST, HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
"""Answers to a transaction that one of its operations may cause: split it to find which."""


class ConsulCatalog:
    """A :class:`~pando_runtime.catalog.CatalogBackend` over Consul's catalog HTTP API.

    Also a :class:`~pando_runtime.catalog.BatchCatalogBackend`: :meth:`write_batch` writes
    up to ``batch_limit`` registrations per transaction. ``requests`` counts the HTTP calls
    made, by endpoint (``txn`` for transactions). Raises
    :class:`~pando_runtime.InvalidConfig` for settings that cannot work, naming each one.
    """

    batch_limit: int = TXN_MAX_OPS

    def __init__(self, config: ConsulConfig | None = None) -> None:
        self.config = structure_config(
            ConsulConfig, config or ConsulConfig(), what="consul catalog config"
        )
        self._client = consul_client(self.config)
        self._params = datacenter_params(self.config)
        self.requests: Counter[str] = Counter()
        self._present_nodes: set[str] = set()
        self._absent_nodes: set[str] = set()
        self._nodes_lock: anyio.Lock | None = None  # made on first use, inside the event loop

    async def _call(
        self, method: str, path: str, endpoint: str, *, json: Any = None
    ) -> httpx.Response:
        self.requests[endpoint] += 1
        try:
            response = await self._client.request(method, path, params=self._params, json=json)
        except httpx.HTTPError as error:
            said = tls_failure_message(error)
            if said is not None:
                raise CatalogUnavailable(
                    f"TLS with consul at {self.config.address} failed: {said}",
                    remedy=TLS_REMEDY,
                    details={"setting": "tls_ca", "address": self.config.address, "call": endpoint},
                ) from error
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
            self._absent_nodes.add(node)
            self._present_nodes.discard(node)
            return []
        if response.status_code != HTTPStatus.OK:
            raise self._refused(response, endpoint)
        body = response.json() or {}
        if body.get("Node"):  # an unknown node: 404 from older agents, a null Node from v1.14
            self._present_nodes.add(node)
            self._absent_nodes.discard(node)
        else:
            self._absent_nodes.add(node)
            self._present_nodes.discard(node)
        return [_registration(node, s) for s in body.get("Services") or ()]

    async def register(self, registration: CatalogRegistration) -> None:
        """Create or replace one service on its node (the node is made when missing)."""
        body = {
            "Node": registration.node,
            "Address": self.config.node_address,
            "NodeMeta": {"external-source": EXTERNAL_SOURCE},
            "SkipNodeUpdate": True,
            "Service": service_body(registration),
        }
        await self._write("/v1/catalog/register", "catalog/register", body)

    async def deregister(self, node: str, service_id: str) -> None:
        """Remove one service from ``node`` (Consul answers true when it is already gone)."""
        body = {"Node": node, "ServiceID": service_id}
        await self._write("/v1/catalog/deregister", "catalog/deregister", body)

    async def write_batch(self, writes: Sequence[CatalogWrite]) -> dict[Key, PandoRuntimeError]:
        """Apply ``writes`` in transactions of up to ``TXN_MAX_OPS``; the writes not applied.

        A missing node is made first (one ``Node`` transaction for every new node of the
        batch, as ``SkipNodeUpdate`` makes it: an existing node is left as it is). An
        operation Consul names in a rolled-back transaction is answered with
        :class:`~pando_runtime.catalog.CatalogRefused` and the others are sent again; a
        transaction refused without naming one (too large, say) is split in halves. When
        Consul cannot be reached, the writes not yet known applied are answered with
        :class:`~pando_runtime.catalog.CatalogUnavailable` (a later pass writes them again:
        every write is idempotent).
        """
        failed: dict[Key, PandoRuntimeError] = {}
        pending = list(writes)
        try:
            await self._ensure_nodes(w.registration.node for w in pending if not w.remove)
        except CatalogUnavailable as error:
            return {w.key: error for w in pending}
        for start in range(0, len(pending), TXN_MAX_OPS):
            try:
                await self._commit(pending[start : start + TXN_MAX_OPS], failed)
            except CatalogUnavailable as error:
                for write in pending[start:]:
                    failed.setdefault(write.key, error)
                break
        return failed

    async def _commit(
        self, writes: list[CatalogWrite], failed: dict[Key, PandoRuntimeError]
    ) -> None:
        """One transaction of ``writes``, again without each operation Consul refuses."""
        todo, nodes_made = writes, False
        while todo:
            response = await self._txn([service_op(w) for w in todo])
            status = response.status_code
            if status == HTTPStatus.OK:
                return
            named = txn_errors(_json(response), len(todo)) if status == HTTPStatus.CONFLICT else {}
            if named:
                missing = {
                    todo[i].registration.node
                    for i, what in named.items()
                    if MISSING_NODE in what and not todo[i].remove
                }
                if missing and not nodes_made:  # removed behind our back: make it, once
                    self._present_nodes -= missing
                    self._absent_nodes |= missing
                    await self._ensure_nodes(missing)
                    nodes_made = True
                    continue
                for index, what in named.items():
                    failed[todo[index].key] = _refused_write(todo[index], what, status)
                todo = [w for i, w in enumerate(todo) if i not in named]
            elif status in _SPLIT and len(todo) > 1:
                half = len(todo) // 2
                await self._commit(todo[:half], failed)
                await self._commit(todo[half:], failed)
                return
            elif status in _SPLIT:
                failed[todo[0].key] = _refused_write(todo[0], response.text.strip()[:300], status)
                return
            else:
                raise self._refused(response, "txn")

    async def _ensure_nodes(self, nodes: Iterable[str]) -> None:
        """Make each of ``nodes`` that does not exist; a node already there is left alone."""
        wanted = set(nodes) - self._present_nodes
        if not wanted:
            return
        if self._nodes_lock is None:
            self._nodes_lock = anyio.Lock()
        async with self._nodes_lock:  # one check per node, even with batches in flight
            unknown = sorted(wanted - self._present_nodes - self._absent_nodes)
            for start in range(0, len(unknown), TXN_MAX_OPS):
                chunk = unknown[start : start + TXN_MAX_OPS]
                response = await self._txn([node_get_op(node) for node in chunk])
                named = txn_errors(_json(response), len(chunk))
                if response.status_code not in (HTTPStatus.OK, HTTPStatus.CONFLICT):
                    raise self._refused(response, "txn")
                self._absent_nodes.update(chunk[i] for i in named)
                self._present_nodes.update(n for i, n in enumerate(chunk) if i not in named)
            absent = sorted(wanted - self._present_nodes)
            for start in range(0, len(absent), TXN_MAX_OPS):
                chunk = absent[start : start + TXN_MAX_OPS]
                address = self.config.node_address
                response = await self._txn([node_set_op(node, address) for node in chunk])
                if response.status_code != HTTPStatus.OK:
                    raise self._refused(response, "txn")
                self._present_nodes.update(chunk)
                self._absent_nodes.difference_update(chunk)

    async def _txn(self, ops: list[dict[str, Any]]) -> httpx.Response:
        return await self._call("PUT", "/v1/txn", "txn", json=ops)

    async def _write(self, path: str, endpoint: str, body: Mapping[str, Any]) -> None:
        response = await self._call("PUT", path, endpoint, json=body)
        if response.status_code != HTTPStatus.OK:
            raise self._refused(response, endpoint)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _refused_write(write: CatalogWrite, what: str, status: int) -> CatalogRefused:
    registration = write.registration
    verb = "removing" if write.remove else "registering"
    where = f"{registration.node}/{registration.service_id}"
    log.warning("consul refused %s %s: %s", verb, where, what)
    return CatalogRefused(
        f"consul refused {verb} {where} ({status}): {what}",
        details={
            "node": registration.node,
            "service_id": registration.service_id,
            "status": status,
            "call": "txn",
            "consul": what,
        },
    )


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
