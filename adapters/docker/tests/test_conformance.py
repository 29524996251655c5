"""The Docker adapter passes the conformance kit on a real Docker Engine, asyncio and trio.

The harness's hooks act on real containers (see ``_docker_harness``); every capability the
adapter declares is tested, and the kit checks that the rest raise ``CapabilityUnsupported``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from _docker_harness import DockerHarness
from conftest import adapter_config
from pando_runtime_docker import DockerAdapter

from pando_runtime.testing.conformance import ConformanceHarness, ConformanceSuite


class TestDockerConformance(ConformanceSuite):
    @pytest.fixture
    async def adapter(self, docker_host: str, owner: str) -> AsyncIterator[DockerAdapter]:
        async with DockerAdapter(adapter_config(docker_host, owner)) as adapter:
            try:
                yield adapter
            finally:
                await DockerHarness(docker_host).remove_owned(owner)

    @pytest.fixture
    def harness(self, docker_host: str) -> ConformanceHarness:
        return DockerHarness(docker_host)
