"""The Kubernetes adapter passes the conformance kit on the local control plane (kwok).

The kit's adapter reaches the API server through a Toxiproxy proxy of its own, with a cache
bound of 2 s (``CONFORMANCE_CACHE``): the stale-cache hooks disable that proxy, so the adapter's
watches and probes really fail while the shared API server serves every other client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from _kube_harness import ClusterHooks, KubeHarness
from pando_runtime_kubernetes import KubernetesAdapter

from pando_runtime.testing.conformance import (
    ConformanceHarness,
    ConformanceSuite,
    EgressConformance,
)

pytestmark = [pytest.mark.kube, pytest.mark.every_minor]


def _harness(kube_cluster: Any, admin_api: Any, proxy: Any = None) -> ConformanceHarness:
    if kube_cluster.logs_file is None:
        pytest.skip("the backend cannot script pods")
    return KubeHarness({None: ClusterHooks(admin_api, kube_cluster.logs_file, proxy)})


class TestKubernetesConformance(ConformanceSuite):
    @pytest.fixture
    async def adapter(
        self, conformance_config: dict[str, Any], apiserver_proxy: Any
    ) -> AsyncIterator[KubernetesAdapter]:
        try:
            async with KubernetesAdapter(conformance_config) as adapter:
                yield adapter
        finally:
            if apiserver_proxy is not None:  # a test that failed half-way leaves it usable
                apiserver_proxy.toxiproxy.reset()

    @pytest.fixture
    def harness(
        self, kube_cluster: Any, admin_api: Any, apiserver_proxy: Any
    ) -> ConformanceHarness:
        return _harness(kube_cluster, admin_api, apiserver_proxy)


class TestKubernetesEgressConformance(EgressConformance):
    """Restricted egress, CIDR rules and the gateway, where enforcement is vouched for.

    kwok runs no network plugin, so the canary never verifies egress here (the suite above
    sees it declared unsupported): these settings declare it, as an operator would.
    """

    @pytest.fixture
    async def adapter(self, adapter_config: dict[str, Any]) -> AsyncIterator[KubernetesAdapter]:
        config = {
            **adapter_config,
            "trust_egress_policy": True,
            "egress_gateway_image": "registry.example/conformance/squid:5",
        }
        async with KubernetesAdapter(config) as adapter:
            yield adapter

    @pytest.fixture
    def harness(self, kube_cluster: Any, admin_api: Any) -> ConformanceHarness:
        return _harness(kube_cluster, admin_api)
