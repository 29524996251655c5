"""The multi-cluster adapter passes the conformance kit over two local control planes at once.

The default cluster is the second control plane: the kit's bundles (none is a first deploy)
live there, while every lookup also asks the first, the merged event stream carries both, and
the event-gap hook breaks the first's stream (a gap in a member that holds none of the test's
bundles is still a gap).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
from _kube_harness import KubeHarness
from pando_runtime_kubernetes._multi import MultiClusterAdapter

from pando_runtime.testing.conformance import ConformanceHarness, ConformanceSuite

pytestmark = pytest.mark.kube


class TestMultiClusterConformance(ConformanceSuite):
    # A bundle never moves: its fit is its own cluster's (test_cluster_multi checks which).
    single_pool: ClassVar[bool] = False

    @pytest.fixture
    async def adapter(self, multi_config: dict[str, Any]) -> AsyncIterator[MultiClusterAdapter]:
        async with MultiClusterAdapter(multi_config) as adapter:
            yield adapter

    @pytest.fixture
    def harness(self, multi_hooks: dict[str | None, Any]) -> ConformanceHarness:
        return KubeHarness(multi_hooks)
