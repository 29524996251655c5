"""The compatibility tests run on asyncio only: what they show is the core's, not a backend's."""

from __future__ import annotations

import pytest

PLUGINS = {"compat-1.0": "1.0", "compat-1.2": "1.2", "compat-1.3": "1.3"}
"""Each frozen plugin's entry point and the adapter API version it was written for."""


@pytest.fixture(params=["asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
