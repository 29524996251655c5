"""A fleet passes the conformance kit: two fakes as members, on asyncio and trio.

The kit's apps are placed over both members by room; each hook goes to the harness of the
member that holds the app (:class:`FleetHarness`). The same suite runs over real engines and
clusters in the adapters' suites.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import ClassVar

import pytest

from pando_runtime.fleet import FleetAdapter, FleetMembers
from pando_runtime.testing.conformance import (
    ConformanceHarness,
    ConformanceSuite,
    FakeHarness,
    FleetHarness,
    scripted_fake,
)


class TestFleetOfFakesConformance(ConformanceSuite):
    single_pool: ClassVar[bool] = False  # an app stays on its member: its fit is that member's

    @pytest.fixture
    async def adapter(self) -> AsyncIterator[FleetAdapter]:
        members = FleetMembers(adapters={"a": scripted_fake(), "b": scripted_fake()}, control="a")
        async with FleetAdapter(source=members) as fleet:
            yield fleet

    @pytest.fixture
    def harness(self) -> ConformanceHarness:
        return FleetHarness({"a": FakeHarness(), "b": FakeHarness()}, primary="a")
