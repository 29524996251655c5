"""The fake adapter passes the whole conformance kit, on asyncio and trio."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from pando_runtime import (
    RuntimeCapabilities,
)
from pando_runtime.testing import FakeAdapter
from pando_runtime.testing.conformance import (
    ConformanceHarness,
    ConformanceSuite,
    FakeHarness,
    scripted_fake,
)


class TestFakeConformance(ConformanceSuite):
    @pytest.fixture
    async def adapter(self) -> AsyncIterator[FakeAdapter]:
        async with scripted_fake() as fake:
            yield fake

    @pytest.fixture
    def harness(self) -> ConformanceHarness:
        return FakeHarness()


class TestNarrowFakeConformance(ConformanceSuite):
    """A fake that claims little: the kit skips what it lacks and checks it raises."""

    @pytest.fixture
    async def adapter(self) -> AsyncIterator[FakeAdapter]:
        narrow = RuntimeCapabilities(multiple_workloads=True, private_network=True)
        async with FakeAdapter(capabilities=narrow) as fake:
            yield fake

    @pytest.fixture
    def harness(self) -> ConformanceHarness:
        return FakeHarness()
