"""Each frozen plugin passes today's conformance kit at the version it declares (issue 43).

No ``conformance_version`` is set: the kit takes the plugin's declared version, so a test added
after that version is skipped, and every test of that version or before runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest
from compat_harness import ShellHarness

import pando_runtime as pr
from pando_runtime.testing.conformance import ConformanceHarness, ConformanceSuite


class _FrozenPluginKit(ConformanceSuite):
    plugin: ClassVar[str]

    @pytest.fixture(params=["asyncio"])
    def anyio_backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    async def adapter(self, tmp_path: Path) -> AsyncIterator[pr.RuntimeAdapter]:
        async with pr.load_adapter(self.plugin, {"root": str(tmp_path)}) as adapter:
            yield adapter

    @pytest.fixture
    def harness(self, tmp_path: Path) -> ConformanceHarness:
        return ShellHarness(tmp_path)


class TestCompat10Kit(_FrozenPluginKit):
    plugin = "compat-1.0"


class TestCompat12Kit(_FrozenPluginKit):
    plugin = "compat-1.2"


class TestCompat13Kit(_FrozenPluginKit):
    plugin = "compat-1.3"
