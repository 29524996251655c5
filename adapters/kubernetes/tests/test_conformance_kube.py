"""The Kubernetes adapter passes the conformance kit on the local control plane (kwok)."""

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

pytestmark = pytest.mark.kube


def _harness(kube_cluster: Any, admin_api: Any) -> ConformanceHarness:
    if kube_cluster.logs_file is None:
        pytest.skip("the backend cannot script pods")
    return KubeHarness({None: ClusterHooks(admin_api, kube_cluster.logs_file)})


class TestKubernetesConformance(ConformanceSuite):
    @pytest.fixture
    async def adapter(self, adapter_config: dict[str, Any]) -> AsyncIterator[KubernetesAdapter]:
        async with KubernetesAdapter(adapter_config) as adapter:
            yield adapter

    @pytest.fixture
    def harness(self, kube_cluster: Any, admin_api: Any) -> ConformanceHarness:
        return _harness(kube_cluster, admin_api)


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
