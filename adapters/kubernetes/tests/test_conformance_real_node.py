"""The Kubernetes adapter passes the conformance kit with its apps on the real node.

The cluster is the ``real_node_cluster`` fixture's: containers really run (containerd, runc,
kubelet), kube-router enforces NetworkPolicy. The adapter's settings are
``real_adapter_config``'s: the restricted identity and no ``trust_*`` setting, so what the
cluster enforces is what the adapter's canary finds out. The hooks drive real containers
(:mod:`_real_harness`).

Two suites, as on kwok (``test_conformance_kube``): the whole kit, through a Toxiproxy proxy
of the adapter's own so its cache can really go stale; it trusts NetworkPolicy, so it runs
no canary and sees restricted egress declared unsupported (and refused). Then the egress
suite, on an adapter whose canary looked (at its first ``capabilities()``): it verified
enforcement, so the adapter declares private networks and restricted egress, and the rules
run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from _real_harness import RealNodeHarness
from pando_runtime_kubernetes import KubernetesAdapter

from pando_runtime import IsolationClass
from pando_runtime.testing.conformance import (
    ConformanceHarness,
    ConformanceSuite,
    EgressConformance,
    EventConformance,
    ExecConformance,
    LogConformance,
    StoppingConformance,
)

# asyncio only: the kit runs on trio against the same adapter on kwok's nodes
# (``test_conformance_kube``), and what trio would add here is the same code's time. (A
# parametrization, not a fixture: the kit's classes define a fixture of their own that would
# shadow a module's.)
pytestmark = [
    pytest.mark.kube,
    pytest.mark.real_node,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),
]


def _harness(real_node_cluster: Any, real_admin_api: Any, proxy: Any = None) -> RealNodeHarness:
    node = real_node_cluster.local.real_node
    return RealNodeHarness(real_admin_api, node.cgroup_root, proxy, node.network.node)


class TestRealNodeConformance(ConformanceSuite):
    @pytest.fixture
    async def adapter(
        self, real_conformance_config: dict[str, Any], real_apiserver_proxy: Any
    ) -> AsyncIterator[KubernetesAdapter]:
        try:
            async with KubernetesAdapter(real_conformance_config) as adapter:
                yield adapter
        finally:  # a test that failed half-way leaves the proxy usable
            real_apiserver_proxy.toxiproxy.reset()

    @pytest.fixture
    def harness(
        self, real_node_cluster: Any, real_admin_api: Any, real_apiserver_proxy: Any
    ) -> ConformanceHarness:
        return _harness(real_node_cluster, real_admin_api, real_apiserver_proxy)


class TestRealNodeEgressConformance(EgressConformance):
    """Restricted egress, CIDR rules and the gateway, where the canary verified enforcement."""

    @pytest.fixture
    async def adapter(
        self, real_adapter_config: dict[str, Any]
    ) -> AsyncIterator[KubernetesAdapter]:
        async with KubernetesAdapter(real_adapter_config) as adapter:
            caps = await adapter.capabilities()  # the canary: kube-router enforces both ways
            assert caps.private_network
            assert caps.egress_restriction
            assert adapter.health_details()["egress_restriction"] == "enforced"
            yield adapter

    @pytest.fixture
    def harness(self, real_node_cluster: Any, real_admin_api: Any) -> ConformanceHarness:
        return _harness(real_node_cluster, real_admin_api)


class TestRealNodeSandboxedConformance(
    ExecConformance, LogConformance, EventConformance, StoppingConformance
):
    """The kit's mixins about running apps, every plan sandboxed: gVisor (the RuntimeClass
    ``gvisor`` the adapter finds) runs them. Not the whole kit: what it adds over these is the
    adapter's own code, which the sandbox does not touch, and a whole run more costs minutes."""

    @pytest.fixture
    async def adapter(
        self, real_adapter_config: dict[str, Any]
    ) -> AsyncIterator[KubernetesAdapter]:
        config = {**real_adapter_config, "trust_network_policy": True}  # no canary run
        async with KubernetesAdapter(config) as adapter:
            assert (await adapter.capabilities()).isolation_class is IsolationClass.SANDBOXED
            yield adapter

    @pytest.fixture
    def anyio_backend(self) -> str:
        """asyncio only, as the module's other suites."""
        return "asyncio"

    @pytest.fixture
    def harness(self, real_node_cluster: Any, real_admin_api: Any) -> ConformanceHarness:
        # No OOM hook: a sandboxed container over its limit is not killed (docs/kubernetes.md,
        # "Sandboxed apps"), so the kit's OOM test says the harness cannot make one.
        node = real_node_cluster.local.real_node
        harness = RealNodeHarness(real_admin_api, None, None, node.network.node)
        harness.plan_isolation = IsolationClass.SANDBOXED
        return harness


class TestRealNodeSandboxedEgressConformance(TestRealNodeEgressConformance):
    """Restricted egress with every plan sandboxed: the sandbox's packets leave through the
    pod's interface, where kube-router's rules hold them as any pod's."""

    @pytest.fixture
    def harness(self, real_node_cluster: Any, real_admin_api: Any) -> ConformanceHarness:
        harness = _harness(real_node_cluster, real_admin_api)
        harness.plan_isolation = IsolationClass.SANDBOXED
        return harness
