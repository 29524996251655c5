"""pytest plugin: the ``consul`` marker, the session-wide ``consul_agent`` fixture, and
``consul_http``: Consul's HTTP API as someone else uses it (for edits behind a syncer's back).

Load it with ``-p localconsul.pytest_plugin`` (with ``tests/support`` on ``pythonpath``).
A test that needs Consul while none can be built fails at setup, saying why; it is never
skipped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from .agent import ConsulAgent

MARKER = "consul: the test needs a real Consul agent (fixture consul_agent)"


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``consul`` marker."""
    config.addinivalue_line("markers", MARKER)


@pytest.fixture(scope="session")
def consul_agent() -> Iterator[ConsulAgent]:
    """One dev-mode Consul agent for the session, left with ``consul leave``."""
    with ConsulAgent() as agent:
        yield agent


@pytest.fixture
async def consul_http(consul_agent: ConsulAgent) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the agent's HTTP API."""
    async with httpx.AsyncClient(base_url=consul_agent.http_address) as client:
        yield client


async def node_services(client: httpx.AsyncClient, node: str) -> dict[str, dict[str, Any]]:
    """The services of ``node`` by ID, as Consul's catalog lists them."""
    body = (await client.get(f"/v1/catalog/node-services/{node}")).json()
    return {s["ID"]: s for s in body.get("Services") or ()}
