"""Fixtures of the Consul backend's tests: both anyio backends, a node of each test's own."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def node() -> str:
    """A synthetic node name no other test uses (the agent lives for the session)."""
    return f"test-{uuid.uuid4().hex[:10]}"
