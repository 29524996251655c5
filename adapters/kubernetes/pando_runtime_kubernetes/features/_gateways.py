"""Egress gateways on one cluster: each app's gateway pod added, replaced and removed by apply.

The gateway's Service, ConfigMap and policy are namespace-wide objects (written with the
others when the namespace's digest changes, see ``_namespaces``); its pod is converged here
as an app pod is: kept while it is live and runs the plan's configuration, else replaced.
A plan without host-name rules removes all of it. What exists is read from the lean cache,
so an unchanged plan costs no call here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pando_runtime import EgressPolicy

from ..cache._projections import GatewayFacts, project_gateway
from ..manifests import _objects as objects
from ..manifests._egress import GATEWAY_POLICY
from ..manifests._gateway import GATEWAY, config_digest
from ..manifests._network import AppNetwork
from ..session._session import ClusterSession
from ._pod_names import create_pod

__all__ = ["EgressGateways"]


class EgressGateways:
    """The egress gateways of one cluster's app namespaces."""

    def __init__(self, session: ClusterSession, network: AppNetwork) -> None:
        self._session = session
        self._network = network

    async def converge(self, ns: str, bundle_id: str, egress: EgressPolicy | None) -> None:
        """Make the namespace's gateway pod run ``egress``'s host rules, or remove it all."""
        session = self._session
        config = self._network.config_of(egress)
        pods = await session.reads.gateways(ns)
        if config is None:
            if any(not p.deleting for p in pods) or GATEWAY in await session.reads.services(ns):
                await self.remove(ns, pods)
            return
        digest = config_digest(config)
        current = [p for p in pods if p.live and p.digest == digest]
        keep = max(current, key=lambda p: (p.created, p.name)) if current else None
        for pod in pods:
            if pod is not keep and not pod.deleting:
                await session.writer.delete(ns, "pods", pod.name)
        if keep is not None:
            return
        latest = max(pods, key=lambda p: (p.created, p.name)) if pods else None
        labels = objects.labels_for(bundle_id)

        def build(replaces: str | None) -> dict[str, Any]:
            return self._network.gateway_pod(ns, digest, labels, replaces)

        def twin(existing: Mapping[str, Any]) -> bool:
            found = project_gateway(existing)
            return found is not None and found.live and found.digest == digest

        await create_pod(
            session,
            build,
            latest.uid if latest else None,
            twin=twin,
            what=f"create the egress gateway of {ns}",
        )

    async def stop(self, ns: str) -> None:
        """Delete the namespace's live gateway pods (its other objects stay)."""
        for pod in await self._session.reads.gateways(ns):
            if pod.live:
                await self._session.writer.delete(ns, "pods", pod.name)

    async def remove(self, ns: str, pods: list[GatewayFacts] | None = None) -> None:
        """Delete the namespace's gateway: its pods, Service, ConfigMap and policy."""
        session = self._session
        for pod in pods if pods is not None else await session.reads.gateways(ns):
            if not pod.deleting:
                await session.writer.delete(ns, "pods", pod.name)
        await session.writer.delete(ns, "services", GATEWAY)
        await session.writer.delete(ns, "configmaps", GATEWAY)
        await session.writer.delete(ns, "networkpolicies", GATEWAY_POLICY, "networking.k8s.io/v1")
