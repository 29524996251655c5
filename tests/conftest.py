"""Shared fixtures of the core tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every async test on asyncio and on trio."""
    return str(request.param)
