"""The multi-cluster adapter passes the conformance kit over two local control planes at once.

The default cluster is the second control plane: the kit's bundles (none is a first deploy)
live there, while every lookup also asks the first, the merged event stream carries both, and
the event-gap hook breaks the first's stream (a gap in a member that holds none of the test's
bundles is still a gap). Each member reaches its API server through a Toxiproxy proxy of its
own, with a cache bound of 2 s: the stale-cache hooks disable both proxies, so every member's
cache really goes unconfirmed (the kit's bundle lives on one; a cluster that cannot be read
makes a question about an app on it unanswerable, whichever it is).

The membership kit runs on two multi-cluster adapters over the same two clusters: one
membership, its Leases on the default cluster, guarding the writes on both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
from _kube_harness import KubeHarness, ReplicaHarness
from pando_runtime_kubernetes._multi import MultiClusterAdapter

from pando_runtime.testing.conformance import (
    ConformanceHarness,
    ConformanceSuite,
    MembershipConformance,
)

# asyncio only: the Kubernetes adapter runs the kit on trio over kwok's nodes
# (``test_conformance_kube``), the fleet code above it over fakes (``test_fleet_conformance``).
pytestmark = [pytest.mark.kube, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


class TestMultiClusterConformance(ConformanceSuite):
    # A bundle never moves: its fit is its own cluster's (test_cluster_multi checks which).
    single_pool: ClassVar[bool] = False

    @pytest.fixture
    async def adapter(
        self, multi_conformance_config: dict[str, Any], multi_conformance_hooks: dict[Any, Any]
    ) -> AsyncIterator[MultiClusterAdapter]:
        try:
            async with MultiClusterAdapter(multi_conformance_config) as adapter:
                yield adapter
        finally:  # a test that failed half-way leaves the proxies usable
            for hooks in multi_conformance_hooks.values():
                if hooks.proxy is not None:
                    hooks.proxy.toxiproxy.reset()

    @pytest.fixture
    def harness(self, multi_conformance_hooks: dict[str | None, Any]) -> ConformanceHarness:
        return KubeHarness(multi_conformance_hooks)


class TestMultiClusterMembershipConformance(MembershipConformance):
    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"  # trio runs them on the fake; here the lease waits dominate

    @pytest.fixture
    async def adapter(self, multi_config: dict[str, Any]) -> AsyncIterator[MultiClusterAdapter]:
        async with MultiClusterAdapter(multi_config) as adapter:
            yield adapter

    @pytest.fixture
    def harness(
        self, multi_config: dict[str, Any], multi_hooks: dict[str | None, Any]
    ) -> ConformanceHarness:
        return ReplicaHarness(multi_hooks, lambda: MultiClusterAdapter(multi_config))
