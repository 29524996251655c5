"""The compat-1.0 plugin passes the conformance kit of API 1.0, run in a core of that era.

Not collected by today's suite (no ``test_`` prefix): ``era/verify.sh 1.0`` runs it against the
core as it stood at API 1.0. What a plugin author of that era ran.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from compat_harness import ShellHarness

import pando_runtime as pr
from pando_runtime.testing.conformance import ConformanceHarness, ConformanceSuite


class TestCompat10Conformance(ConformanceSuite):
    @pytest.fixture
    async def adapter(self, tmp_path: Path) -> AsyncIterator[pr.RuntimeAdapter]:
        async with pr.load_adapter("compat-1.0", {"root": str(tmp_path)}) as adapter:
            yield adapter

    @pytest.fixture
    def harness(self, tmp_path: Path) -> ConformanceHarness:
        return ShellHarness(tmp_path)
